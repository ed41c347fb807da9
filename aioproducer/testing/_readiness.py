"""Waiting for a test cluster to be ready: every broker listed in Metadata by every other,
a controller known, each partition of a new topic led; and telling a broker that died while
starting (with the tail of its log) from one that is merely slow.

Package-internal: the cluster model (``_cluster``) calls :func:`wait_visible` and
:func:`wait_for_leaders`; :class:`PortInUse` asks it to retry on other ports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from ..errors import KafkaError
from ..protocol.error_codes import ErrorCode
from . import _admin
from ._install import KafkaSetupError
from ._node import Node, log_excerpt

__all__ = ["POLL_INTERVAL", "PortInUse", "check_alive", "wait_for_leaders", "wait_visible"]

#: Seconds between two looks at the brokers.
POLL_INTERVAL = 0.1


class PortInUse(Exception):
    """A broker could not bind one of the ports picked for it."""


def check_alive(nodes: Iterable[Node], *, ports_picked: bool, log_kept: bool) -> None:
    """Raise if one of ``nodes`` exited: :class:`PortInUse` if it lost a port it was given
    by ``free_ports`` (``ports_picked``), else :class:`KafkaSetupError` with its log's tail
    (and the log's path if the work dir is the caller's: ``log_kept``)."""
    for node in nodes:
        if node.proc is None or node.proc.poll() is None:
            continue
        output = node.recent_log()
        if "Address already in use" in output and ports_picked:
            raise PortInUse(node.node_id)
        where = f" (full log: {node.log_path})" if log_kept else ""
        raise KafkaSetupError(
            f"Kafka broker {node.node_id} exited with code {node.proc.returncode} while "
            f"starting{where}.\n{log_excerpt(output)}"
        )


def wait_visible(
    host: str,
    targets: Sequence[Node],
    reachable: Callable[[], list[Node]],
    deadline: float,
    *,
    ports_picked: bool,
    log_kept: bool,
) -> None:
    """Wait until every ``reachable()`` broker lists every target broker in Metadata."""
    wanted = {node.node_id for node in targets}
    waiting_for = "the brokers to start"
    while True:
        check_alive(targets, ports_picked=ports_picked, log_kept=log_kept)
        observers = reachable()
        pending: list[str] = []
        for node in observers:
            view = _admin.cluster_view(host, node.broker_port, timeout=2.0)
            if view is None:
                pending.append(f"broker {node.node_id} does not answer yet")
                continue
            brokers, controller_id = view
            missing = wanted - brokers
            if missing:
                pending.append(f"broker {node.node_id} does not list {sorted(missing)} yet")
            elif controller_id < 0:
                pending.append(f"broker {node.node_id} knows no controller yet")
        if not pending:
            return
        waiting_for = "; ".join(pending)
        if time.monotonic() > deadline:
            tails = "\n".join(
                f"--- broker {node.node_id} ({node.log_path.name}) ---\n"
                + log_excerpt(node.recent_log(), tail=20)
                for node in targets
            )
            raise KafkaSetupError(f"Kafka did not become ready in time ({waiting_for})\n{tails}")
        time.sleep(POLL_INTERVAL)


def wait_for_leaders(
    host: str,
    reachable: Callable[[], list[Node]],
    topic: str,
    partitions: int,
    deadline: float,
) -> None:
    """Wait until every ``reachable()`` broker knows ``topic`` with (at least)
    ``partitions`` partitions, each with a leader, and each leader answers ListOffsets for
    its partitions.

    Metadata is not enough: a broker lists itself as a new partition's leader before it
    has created the partition's log (KRaft updates the metadata cache first), and for
    that moment a produce request gets ``NOT_LEADER_OR_FOLLOWER``. ListOffsets is served
    by the partition itself, so it answers without error only once the leader can take
    records.
    """
    while True:
        problems: list[str] = []
        leaders: dict[int, int] = {}
        for node in reachable():
            try:
                response = _admin.fetch_metadata(host, node.broker_port, [topic], timeout=5.0)
            except KafkaError as exc:
                problems.append(f"broker {node.node_id}: {exc}")
                continue
            entry = next((t for t in response.topics if t.name == topic), None)
            if entry is None or entry.error_code != ErrorCode.NONE:
                problems.append(f"broker {node.node_id} does not know the topic yet")
            elif len(entry.partitions) < partitions or any(
                p.leader_id < 0 for p in entry.partitions
            ):
                problems.append(f"broker {node.node_id} lacks leaders")
            else:
                leaders = {p.partition: p.leader_id for p in entry.partitions}
        if not problems:
            problems = _unserved_partitions(host, reachable(), topic, leaders)
        if not problems:
            return
        if time.monotonic() > deadline:
            raise KafkaSetupError(
                f"topic {topic!r} has no leader for every partition in time: " + "; ".join(problems)
            )
        time.sleep(POLL_INTERVAL)


def _unserved_partitions(
    host: str, nodes: list[Node], topic: str, leaders: dict[int, int]
) -> list[str]:
    """What keeps ``topic``'s partitions (``leaders``: partition to leader) from being
    served by their leaders (empty once ListOffsets succeeds for every one)."""
    ports = {node.node_id: node.broker_port for node in nodes}
    by_leader: dict[int, list[int]] = {}
    for partition, leader in leaders.items():
        by_leader.setdefault(leader, []).append(partition)
    problems: list[str] = []
    for leader, owned in sorted(by_leader.items()):
        port = ports.get(leader)
        if port is None:
            problems.append(f"leader {leader} of {topic!r} is not reachable")
            continue
        try:
            errors = _admin.list_offsets_errors(host, port, topic, owned, timeout=5.0)
        except KafkaError as exc:
            problems.append(f"broker {leader}: {exc}")
            continue
        waiting = sorted(p for p, code in errors.items() if code != ErrorCode.NONE)
        if waiting:
            problems.append(f"broker {leader} does not serve partitions {waiting} yet")
    return problems
