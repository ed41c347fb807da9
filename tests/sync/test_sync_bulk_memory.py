"""SyncProducer.send_bulk keeps at most about one large bulk send's columns handed over and
not yet appended, so a thread sending faster than the producer appends holds memory
bounded by ``buffer_memory`` plus a constant, not a multiple of it.

The producer's loop is stalled on purpose (a callback that blocks it), so nothing handed
over is appended until the test lets it go.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from aioproducer import BufferFullError, LoopRunner, SyncProducer
from aioproducer.handoff import BULK_AHEAD
from aioproducer.testing import FakeCluster

TOPIC = "bulk-memory"


@pytest.fixture
def stalled() -> Iterator[tuple[FakeCluster, LoopRunner, threading.Event]]:
    """A fake cluster, a loop runner of the test's own and a gate: until the gate is set,
    ``stall()`` keeps the loop blocked."""
    gate = threading.Event()
    runner = LoopRunner(name="bulk-memory-loop")
    with FakeCluster(brokers=1) as cluster:
        cluster.create_topic(TOPIC, 2)
        try:
            yield cluster, runner, gate
        finally:
            gate.set()
            runner.close()


def _values(prefix: str, count: int, size: int) -> list[bytes]:
    return [f"{prefix}-{i:06d}-".encode().ljust(size, b".") for i in range(count)]


def _send_in_thread(producer: SyncProducer, values: list[bytes]) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(producer.send_bulk(TOPIC, values, partitions=[0] * len(values)))
        except BaseException as exc:  # handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_bulk_send_waits_while_a_large_earlier_one_is_not_appended(
    stalled: tuple[FakeCluster, LoopRunner, threading.Event],
) -> None:
    cluster, runner, gate = stalled
    big = (BULK_AHEAD // 1000) + 500  # records of 1,000 bytes: more than BULK_AHEAD
    first_values, second_values = _values("a", big, 1000), _values("b", big, 1000)
    with SyncProducer(cluster.bootstrap_servers, runner=runner, buffer_memory=64 << 20) as p:
        p.partitions_for(TOPIC)
        runner.call_soon(gate.wait, 30)
        # Nothing is ahead of the first: it is handed over at once, though not appended.
        first = p.send_bulk(TOPIC, first_values, partitions=[0] * big)
        thread, out = _send_in_thread(p, second_values)
        thread.join(0.5)
        # There is room in buffer_memory for both, yet the second waits for the first.
        assert thread.is_alive() and not out
        gate.set()
        thread.join(10)
        assert not thread.is_alive()
        second = out[0]
        assert first.result(timeout=30).delivered == big
        assert second.result(timeout=30).delivered == big
    values = [r.value for r in cluster.records(TOPIC, 0)]
    assert values == first_values + second_values


def test_small_bulk_sends_are_handed_over_together(
    stalled: tuple[FakeCluster, LoopRunner, threading.Event],
) -> None:
    cluster, runner, gate = stalled
    chunks = [_values(f"c{n}", 50, 100) for n in range(10)]  # 10 x ~5 KB
    with SyncProducer(cluster.bootstrap_servers, runner=runner) as p:
        p.partitions_for(TOPIC)
        runner.call_soon(gate.wait, 30)
        thread = threading.Thread(
            target=lambda: [p.send_bulk(TOPIC, c, partitions=[1] * len(c)) for c in chunks]
        )
        thread.start()
        # All ten go in while the loop is stalled: together they are far below BULK_AHEAD.
        thread.join(5)
        assert not thread.is_alive()
        gate.set()
        p.flush(30)
    assert [r.value for r in cluster.records(TOPIC, 1)] == [v for c in chunks for v in c]


def test_waiting_for_earlier_bulk_sends_is_bounded_by_max_block_ms(
    stalled: tuple[FakeCluster, LoopRunner, threading.Event],
) -> None:
    cluster, runner, gate = stalled
    big = (BULK_AHEAD // 1000) + 500
    with SyncProducer(cluster.bootstrap_servers, runner=runner, max_block_ms=300) as p:
        p.partitions_for(TOPIC)
        runner.call_soon(gate.wait, 30)
        first = p.send_bulk(TOPIC, _values("a", big, 1000), partitions=[0] * big)
        with pytest.raises(BufferFullError, match="earlier bulk sends"):
            p.send_bulk(TOPIC, _values("b", big, 1000), partitions=[0] * big)
        gate.set()
        assert first.result(timeout=30).delivered == big
    assert len(cluster.records(TOPIC, 0)) == big
