"""The layout of a test cluster: which ports each node gets, and the ``server.properties``
keys that place it (node id, quorum, listeners, directories).

Package-internal: :func:`port_count`, :func:`place_nodes` and :func:`node_config` are for
the cluster model (``_cluster``). ``_broker_config.MANAGED_KEYS`` keeps users from
overriding the keys written here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ._broker_config import Listener
from ._host import node_dir
from ._node import Node

__all__ = ["node_config", "place_nodes", "port_count"]


def port_count(nodes: int, listeners: Sequence[Listener]) -> int:
    """How many ports a cluster of ``nodes`` with extra ``listeners`` uses."""
    return (2 + len(listeners)) * nodes


def place_nodes(
    size: int, ports: Sequence[int], work_dir: Path, host: str, listeners: Sequence[Listener]
) -> dict[int, Node]:
    """The nodes ``1 .. size``, given their :func:`port_count` ``ports``.

    Brokers first, then controllers, then each extra listener: a fixed ``port_base`` gives
    the same addresses as before for the first two.
    """
    return {
        node_id: Node(
            node_id=node_id,
            broker_port=ports[node_id - 1],
            controller_port=ports[size + node_id - 1],
            directory=node_dir(work_dir, node_id),
            host=host,
            listener_ports={
                listener.name: ports[(2 + index) * size + node_id - 1]
                for index, listener in enumerate(listeners)
            },
        )
        for node_id in range(1, size + 1)
    }


def node_config(
    node: Node,
    nodes: Sequence[Node],
    host: str,
    listeners: Sequence[Listener],
    settings: Mapping[str, str],
) -> dict[str, str]:
    """The ``server.properties`` of ``node`` in a cluster of ``nodes``: its place, then
    ``settings`` (the security settings of the extra listeners and the broker settings)."""
    voters = ",".join(f"{other.node_id}@{host}:{other.controller_port}" for other in nodes)
    addresses = [f"PLAINTEXT://{host}:{node.broker_port}"]
    addresses += [f"{n}://{host}:{p}" for n, p in node.listener_ports.items()]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    protocols += [f"{item.name}:{item.security_protocol}" for item in listeners]
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        # A static quorum: the voter set lives in the configuration, not in the formatted
        # storage, so ports may change between runs on the same work dir.
        "controller.quorum.voters": voters,
        "listeners": ",".join([*addresses, f"CONTROLLER://{host}:{node.controller_port}"]),
        "advertised.listeners": ",".join(addresses),
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(node.data_dir),
        **settings,
    }
