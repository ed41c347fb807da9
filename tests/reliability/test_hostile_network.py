"""A slow, lossy network between the producer and real brokers (user-space proxy).

:class:`~aioproducer.testing.faulty_network.FaultyNetwork` sits between the producer and
every broker: latency and jitter on every frame, random connection resets (what packet
loss becomes once TCP gives up), and a blackhole that silences one broker for seconds
without closing anything. A keyed, idempotent stream goes through it; an independent
consumer reads every partition back directly from the brokers. Nothing acknowledged may
be lost, nothing written twice, each partition in send order, and every record settled,
one way or the other, within ``delivery_timeout_ms``. Throughput and p99 are printed.

The kernel-level twin (``tc netem`` in a network namespace) is ``test_netem.py``.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.to_thread
import pytest

from aioproducer import Producer
from aioproducer.partitioner import partition_for_key
from aioproducer.testing import KafkaCluster
from aioproducer.testing.faulty_network import FaultyNetwork
from aioproducer.testing.verify import consume_all

from ._ledger import Ledger

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def keys_for(partitions: int) -> list[bytes]:
    """One key per partition that the default partitioner maps there."""
    keys: list[bytes] = [b""] * partitions
    i = 0
    while not all(keys):
        key = b"user-%d" % i
        p = partition_for_key(key, partitions)
        keys[p] = keys[p] or key
        i += 1
    return keys


def timing(ledger: Ledger, delivery_timeout: float) -> tuple[float, float, float]:
    """(records per second, p99 seconds, slowest seconds) from send to outcome; asserts
    every record has one outcome within ``delivery_timeout`` (plus scheduling slack)."""
    latencies = sorted(
        done - sent
        for p in range(ledger.partitions)
        for sent, done in zip(ledger.sent_at[p], ledger.done_at[p], strict=True)
    )
    assert all(lat >= 0 for lat in latencies), "a record has no outcome"
    assert latencies[-1] <= delivery_timeout + 1.0, f"settled after {latencies[-1]:.1f} s"
    first = min(min(a) for a in ledger.sent_at if a)
    last = max(max(a) for a in ledger.done_at if a)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return len(latencies) / (last - first), p99, latencies[-1]


async def _read_back(kafka: KafkaCluster, topic: str, expected: int) -> list[Any]:
    return await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=expected, timeout=120)
    )


async def test_latency_jitter_and_random_resets_lose_and_duplicate_nothing(
    kafka: KafkaCluster,
) -> None:
    partitions, total, delivery_timeout = 6, 6000, 20.0
    topic = f"net-lossy-{time.monotonic_ns()}"
    kafka.create_topic(topic, partitions)
    keys = keys_for(partitions)
    ledger = Ledger(partitions)
    with FaultyNetwork(
        kafka.bootstrap_servers, latency_ms=10, jitter_ms=8, reset_probability=0.03, seed=7
    ) as net:
        async with Producer(
            net.bootstrap_servers,
            linger_ms=5,
            request_timeout_ms=3000,
            delivery_timeout_ms=int(delivery_timeout * 1000),
        ) as producer:
            for i in range(total):
                p = i % partitions
                ledger.track(p, await producer.send(topic, ledger.value(p), key=keys[p]))
                if i % 30 == 29:
                    await anyio.sleep(0.01)  # a stream of small requests, not one burst
            with anyio.fail_after(delivery_timeout + 10):
                await producer.flush()
            metrics = producer.metrics()
        stats = net.stats
    throughput, p99, worst = timing(ledger, delivery_timeout)
    outcome = ledger.check(await _read_back(kafka, topic, total))
    print()
    print(outcome.line("10±8 ms, 3% of frames reset"))
    print(
        f"  {throughput:.0f} records/s, p99 {p99 * 1000:.0f} ms, slowest {worst * 1000:.0f} ms; "
        f"{stats.resets} resets over {stats.connections} connections, {stats.frames} frames; "
        f"retried={metrics['records_retried']:.0f}"
    )
    assert stats.resets >= 3, "the network reset too few connections to mean anything"
    assert outcome.failed == 0, outcome.failures
    assert outcome.acked == total
    outcome.assert_exact()


async def test_a_blackholed_broker_holds_its_partitions_and_loses_nothing(
    kafka3: KafkaCluster,
) -> None:
    partitions, delivery_timeout, hole = 6, 25.0, 5.0
    topic = f"net-blackhole-{time.monotonic_ns()}"
    kafka3.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
    keys = keys_for(partitions)
    ledger = Ledger(partitions)
    with FaultyNetwork(kafka3.bootstrap_servers, latency_ms=2, jitter_ms=2, seed=11) as net:
        async with Producer(
            net.bootstrap_servers,
            linger_ms=5,
            request_timeout_ms=2000,
            delivery_timeout_ms=int(delivery_timeout * 1000),
        ) as producer:
            await producer.partitions_for(topic)
            leaders = kafka3.partition_leaders(topic)
            victim = leaders[0]
            led = [p for p, n in leaders.items() if n == victim]
            stop = anyio.Event()

            async def stream() -> None:
                i = 0
                while not stop.is_set():
                    p = i % partitions
                    ledger.track(p, await producer.send(topic, ledger.value(p), key=keys[p]))
                    i += 1
                    if i % 100 == 0:
                        await anyio.sleep(0.05)  # about 2,000 records/s at most

            async with anyio.create_task_group() as tg:
                tg.start_soon(stream)
                await anyio.sleep(1.5)
                # The broker stays in the cluster (its own links are direct): only the
                # producer cannot reach it, so its partitions must wait, not move.
                await anyio.to_thread.run_sync(net.blackhole, victim, hole)
                holed_at = time.monotonic()
                await anyio.sleep(hole + 2.0)
                stop.set()
            healed_at = holed_at + hole
            with anyio.fail_after(delivery_timeout + 10):
                await producer.flush()
            metrics = producer.metrics()
        held = net.stats.blackhole_waits
    throughput, p99, worst = timing(ledger, delivery_timeout)
    outcome = ledger.check(await _read_back(kafka3, topic, ledger.sent))
    recovery = ledger.recovery(healed_at, led)
    print()
    print(outcome.line(f"blackhole {hole:.0f} s", [recovery]))
    print(
        f"  {throughput:.0f} records/s, p99 {p99 * 1000:.0f} ms, slowest {worst * 1000:.0f} ms; "
        f"{held} waits on the blackhole; retried={metrics['records_retried']:.0f}"
    )
    assert held > 0, "nothing was in the blackhole"
    assert outcome.failed == 0, outcome.failures
    outcome.assert_exact()
    # Its partitions move again soon after the hole closes: a reconnect backoff and a
    # request timeout at most.
    assert recovery < 6.0, f"partitions of the blackholed broker recovered after {recovery:.1f} s"
