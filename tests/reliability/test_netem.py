"""A real broker behind a slow, lossy kernel network: ``tc netem`` in a network namespace.

The test makes a network namespace of its own, a veth pair into it and, on both ends,
``netem`` with 20 ms of latency, 10 ms of jitter and 2% packet loss; a one-node Kafka
runs inside the namespace on the veth's address. A keyed, idempotent stream goes to it,
then every packet is dropped for 10 s (a blackhole of the broker's traffic: netem loss
100%), then it flows again. An independent consumer reads everything back: nothing lost,
nothing duplicated, order kept, every record settled within ``delivery_timeout_ms``;
throughput and p99 are printed.

It needs root, ``ip``, ``tc`` and the kernel's ``sch_netem``; without them it skips and
says which is missing (``tests/reliability/test_hostile_network.py`` runs the same faults
in user space everywhere). The only addresses used are the two ends of the veth pair,
taken from the benchmarking range 198.18.0.0/15 and living only in the namespace and the
link this test creates; both are removed when it ends, whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

from aioproducer import Producer
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

from ._ledger import Ledger
from .test_hostile_network import keys_for, timing

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

_NETEM = ("delay", "20ms", "10ms", "loss", "2%")
_BLACKHOLE = ("loss", "100%")


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def _must(*args: str) -> None:
    done = _run(*args)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


def netem_missing() -> str | None:
    """Why ``tc netem`` in a network namespace cannot be used here, or None if it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs the '{tool}' command (iproute2)"
    probe = f"aiop-probe-{os.getpid()}"
    made = _run("ip", "netns", "add", probe)
    if made.returncode:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    try:
        _run("ip", "-n", probe, "link", "set", "lo", "up")
        tried = _run(
            "tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"
        )
        if tried.returncode:
            return f"'tc qdisc add ... netem' failed: {tried.stderr.strip()} (no sch_netem module?)"
    finally:
        _run("ip", "netns", "del", probe)
    return None


class NetemLab:
    """A namespace joined to this one by a veth pair, with netem on both ends."""

    def __init__(self) -> None:
        tag = os.getpid() % 100_000
        self.namespace = f"aiop-lab-{tag}"
        self.outside = f"aiopo{tag}"  # interface names: at most 15 characters
        self.inside = f"aiopi{tag}"
        # A /30 of the benchmarking range, different per process.
        base = 4 * (tag % 16_000)
        self.outside_address = f"198.18.{base // 256}.{base % 256 + 1}"
        self.inside_address = f"198.18.{base // 256}.{base % 256 + 2}"

    def create(self) -> None:
        ns = self.namespace
        _must("ip", "netns", "add", ns)
        _must("ip", "link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _must("ip", "link", "set", self.inside, "netns", ns)
        _must("ip", "addr", "add", f"{self.outside_address}/30", "dev", self.outside)
        _must("ip", "-n", ns, "addr", "add", f"{self.inside_address}/30", "dev", self.inside)
        _must("ip", "link", "set", self.outside, "up")
        _must("ip", "-n", ns, "link", "set", self.inside, "up")
        _must("ip", "-n", ns, "link", "set", "lo", "up")
        self.shape(_NETEM, add=True)

    def shape(self, netem: tuple[str, ...], *, add: bool = False) -> None:
        """Apply ``netem`` settings to both directions."""
        verb = "add" if add else "change"
        _must("tc", "qdisc", verb, "dev", self.outside, "root", "netem", *netem)
        _must(
            "tc", "-n", self.namespace, "qdisc", verb, "dev", self.inside, "root", "netem", *netem
        )

    def remove(self) -> None:
        """Delete the namespace and the link; raise if either is still there."""
        # Deleting the namespace deletes its end of the pair, and with it the other end.
        _run("ip", "netns", "del", self.namespace)
        _run("ip", "link", "del", self.outside)
        if self.namespace in _run("ip", "netns", "list").stdout.split():
            raise RuntimeError(f"network namespace {self.namespace} is still there")
        if _run("ip", "link", "show", self.outside).returncode == 0:
            raise RuntimeError(f"link {self.outside} is still there")


@pytest.fixture
def netem_kafka() -> Iterator[tuple[KafkaCluster, NetemLab]]:
    """A one-node Kafka inside a namespace behind netem (skips where that is impossible)."""
    reason = netem_missing()
    if reason is not None:
        pytest.skip(f"tc netem unavailable: {reason}")
    lab = NetemLab()
    try:
        lab.create()
        cluster = KafkaCluster(
            host=lab.inside_address, launch_prefix=["ip", "netns", "exec", lab.namespace]
        )
        with cluster:
            yield cluster, lab
    finally:
        lab.remove()


async def test_netem_latency_loss_and_a_ten_second_blackhole_lose_nothing(
    netem_kafka: tuple[KafkaCluster, NetemLab],
) -> None:
    kafka, lab = netem_kafka
    partitions, delivery_timeout, hole = 6, 45.0, 10.0
    topic = f"netem-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions)
    keys = keys_for(partitions)
    ledger = Ledger(partitions)
    async with Producer(
        kafka.bootstrap_servers,
        linger_ms=5,
        request_timeout_ms=5000,
        delivery_timeout_ms=int(delivery_timeout * 1000),
    ) as producer:
        await producer.partitions_for(topic)
        stop = anyio.Event()

        async def stream() -> None:
            i = 0
            while not stop.is_set():
                p = i % partitions
                ledger.track(p, await producer.send(topic, ledger.value(p), key=keys[p]))
                i += 1
                if i % 100 == 0:
                    await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream)
            await anyio.sleep(4)
            await anyio.to_thread.run_sync(lab.shape, _BLACKHOLE)
            holed_at = time.monotonic()
            try:
                await anyio.sleep(hole)
            finally:
                await anyio.to_thread.run_sync(lab.shape, _NETEM)
            await anyio.sleep(4)
            stop.set()
        with anyio.fail_after(delivery_timeout + 15):
            await producer.flush()
        metrics = producer.metrics()
    throughput, p99, worst = timing(ledger, delivery_timeout)
    records = await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=ledger.sent, timeout=180)
    )
    outcome = ledger.check(records)
    recovery = ledger.recovery(holed_at + hole, range(partitions))
    print()
    print(outcome.line(f"netem 20±10 ms 2% loss, {hole:.0f} s blackhole", [recovery]))
    print(
        f"  {throughput:.0f} records/s, p99 {p99 * 1000:.0f} ms, slowest {worst * 1000:.0f} ms; "
        f"retried={metrics['records_retried']:.0f}"
    )
    assert outcome.failed == 0, outcome.failures
    outcome.assert_exact()
