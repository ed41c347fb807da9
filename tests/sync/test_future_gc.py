"""A :class:`~aioproducer.DeliveryFuture` costs the cyclic garbage collector nothing,
compiled, and no cycle through one outlives its record (``_future.pyx``).

Callers keep one future per record. Compiled, the future's type has no collector support,
so creating one counts towards no collection; as it is then invisible to the collector,
no reference cycle through a future may exist that only the collector could break. A
callback references its future until it has run, and a raised error references the
frames it passed through: these tests check that each such reference goes.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import DeliveryFuture, KafkaError, ProducerClosedError, SyncProducer, sync
from aioproducer.testing import FakeCluster


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=1)
        yield fc


def _require_compiled() -> None:
    if sync.FUTURE_ACTIVE != "compiled":
        pytest.skip(f"the compiled future does not run here ({sync.FUTURE_REASON})")


def test_a_compiled_future_is_not_tracked_and_held_futures_do_not_advance_the_collector(
    fake: FakeCluster,
) -> None:
    _require_compiled()
    records = 5000
    with SyncProducer(fake.bootstrap_servers, linger_ms=60_000, batch_size=1 << 20) as producer:
        warm = producer.send("t", b"warm")
        producer.flush()
        assert warm.result(30).offset == 0
        send = producer.send
        value = b"x" * 100
        held: list[DeliveryFuture] = [send("t", value)]
        assert type(held[0]) is DeliveryFuture and isinstance(held[0], sync.DeliveryFuture)
        assert not gc.is_tracked(held[0])
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            for _ in range(records - 1):
                held.append(send("t", value))
            # Until the loop takes them, the records' checked fields (tuples) are alive.
            producer._engine.runner.call(_drain, producer)  # type: ignore[union-attr]
            grown = gc.get_count()[0] - before
        finally:
            gc.enable()
        # A type with collector support adds one per held future (5,000); the open
        # batch keeps some objects per record until it is encoded (about 2,000 here).
        assert grown < records // 2, grown
        producer.flush()
        assert [f.result().offset for f in held[-3:]] == [records - 2, records - 1, records]


def _settled_then_freed(future: DeliveryFuture, settle: Any) -> BaseException | None:
    # A callback capturing its future (future -> chunk or batch -> callback -> future
    # while pending). Once the record settles and the caller drops the future, reference
    # counting alone must free it: compiled, no collection could. Returns its error.
    seen: list[tuple[bool, BaseException | None]] = []

    def note(done: DeliveryFuture, mine: DeliveryFuture = future) -> None:
        seen.append((done is mine, done.exception()))

    future.add_done_callback(note)
    del note  # it would keep the future alive
    alive = weakref.ref(future)
    settle()
    assert [same for same, _error in seen] == [True]
    gc.disable()
    try:
        del future
        assert alive() is None
    finally:
        gc.enable()
    return seen[0][1]


def test_a_future_with_a_callback_is_freed_after_delivery(fake: FakeCluster) -> None:
    with SyncProducer(fake.bootstrap_servers, linger_ms=1) as producer:
        producer.send("t", b"warm").result(30)
        # The callback waits in the chunk or in the batch. (No call inside an assert:
        # pytest would keep its arguments, the future among them.)
        error = _settled_then_freed(producer.send("t", b"v"), producer.flush)
        assert error is None


def test_a_future_with_a_callback_is_freed_after_close_without_delivery(
    fake: FakeCluster,
) -> None:
    producer = SyncProducer(fake.bootstrap_servers, linger_ms=1)
    producer.send("t", b"warm").result(30)
    fake.hold("Produce")
    error = _settled_then_freed(producer.send("t", b"v"), lambda: producer.close(timeout=0))
    assert isinstance(error, ProducerClosedError)


def test_a_future_with_a_callback_is_freed_after_its_batch_failed(fake: FakeCluster) -> None:
    with SyncProducer(fake.bootstrap_servers, linger_ms=1) as producer:
        producer.send("t", b"warm").result(30)
        fake.inject_error("Produce", "TOPIC_AUTHORIZATION_FAILED", count=100)
        error = _settled_then_freed(producer.send("t", b"v"), producer.flush)
        assert isinstance(error, KafkaError)


def _raise_in_a_frame_holding(future: DeliveryFuture, kept: list[weakref.ref[Any]]) -> None:
    class Sentinel:
        pass

    sentinel = Sentinel()  # lives as long as this frame
    kept.append(weakref.ref(sentinel))
    with pytest.raises(KafkaError):
        future.result(30)


def test_a_failed_record_raised_in_a_frame_holding_its_future_frees_that_frame(
    fake: FakeCluster,
) -> None:
    # The raised error references this frame through its traceback; had it been the
    # batch's own error object, the batch would reference the frame, the frame the
    # future and the future the batch: a cycle through a future, kept for good compiled.
    kept: list[weakref.ref[Any]] = []
    with SyncProducer(fake.bootstrap_servers, linger_ms=1) as producer:
        producer.send("t", b"warm").result(30)
        fake.inject_error("Produce", "TOPIC_AUTHORIZATION_FAILED", count=100)
        future = producer.send("t", b"v")
        _raise_in_a_frame_holding(future, kept)
        error = future.exception()
        assert isinstance(error, KafkaError)
        # A copy of the stored error is raised, equal in type, text and attributes.
        with pytest.raises(type(error), match="TOPIC_AUTHORIZATION_FAILED") as raised:
            future.result()
        assert raised.value is not error and vars(raised.value) == vars(error)
        del raised, future, error
    gc.collect()
    assert kept[0]() is None


def test_a_forked_child_drops_the_callbacks_the_parents_loop_would_have_run(
    fake: FakeCluster,
) -> None:
    # In a forked child nothing completes the parent's records: the fork hook drops
    # their callbacks (called directly here, on a producer whose records linger), so a
    # future dropped with one is freed by reference counting.
    with SyncProducer(fake.bootstrap_servers, linger_ms=60_000) as producer:
        producer.send("t", b"warm")
        taken = producer.send("t", b"in a batch")
        producer._engine.runner.call(_drain, producer)  # type: ignore[union-attr]
        futures = [taken, producer.send("t", b"maybe still in the chunk")]
        alive = [weakref.ref(f) for f in futures]
        for future in futures:

            def keep(_done: DeliveryFuture, kept: DeliveryFuture = future) -> DeliveryFuture:
                return kept

            future.add_done_callback(keep)
        del future, taken, keep
        # A taken record's callback goes to its batch on the loop: let it get there.
        producer._engine.runner.call(_drain, producer)  # type: ignore[union-attr]
        producer._engine.forget_callbacks()  # type: ignore[union-attr]
        gc.disable()
        try:
            futures.clear()
            assert [ref() for ref in alive] == [None, None]
        finally:
            gc.enable()


async def _drain(producer: SyncProducer) -> None:
    producer._engine.handoff.drain()  # type: ignore[union-attr]


def test_a_taken_chunk_of_delivered_records_leaves_the_collector(fake: FakeCluster) -> None:
    # At a few thousand records a second, each wake-up of the loop takes a chunk of a few
    # records; held futures keep their chunk (and its lists) alive. Tracked, each
    # collection would move them to an older generation until a full collection ran.
    _require_compiled()
    with SyncProducer(fake.bootstrap_servers, linger_ms=1) as producer:
        handoff = producer._engine.handoff  # type: ignore[union-attr]
        held: list[DeliveryFuture] = []
        chunks: list[Any] = []
        for _ in range(60):
            chunks.append(handoff.pending)
            held += [producer.send("t", b"v"), producer.send("t", b"w")]
            while handoff.pending is chunks[-1]:
                time.sleep(0.0005)  # the loop takes the chunk and opens another
        producer.flush()
        taken = chunks[:-1]
        assert len({id(c) for c in chunks}) == len(chunks)
        assert all(not c.entries and len(c.outcomes) == 2 for c in taken)
        tracked = [
            c
            for c in taken
            if gc.is_tracked(c) or gc.is_tracked(c.outcomes) or gc.is_tracked(c.indexes)
        ]
        assert tracked == [], len(tracked)
        assert [f.result().offset for f in held] == list(range(len(held)))


def test_a_chunk_with_a_record_that_failed_on_the_way_stays_tracked(fake: FakeCluster) -> None:
    # Its error (in the chunk's outcomes) has a traceback whose frames may lead back to
    # the chunk: only the collector can free that cycle.
    _require_compiled()

    def partitioner(topic: str, key: bytes | None, every: list[int], up: list[int]) -> int:
        if key == b"bad":
            raise ValueError("no partition for this key")
        return 0

    with SyncProducer(fake.bootstrap_servers, linger_ms=1, partitioner=partitioner) as producer:
        handoff = producer._engine.handoff  # type: ignore[union-attr]
        chunk = handoff.pending
        good, bad = producer.send("t", b"v", key=b"ok"), producer.send("t", b"w", key=b"bad")
        while handoff.pending is chunk:
            time.sleep(0.0005)
        producer.flush()
        assert good.result().partition == 0
        assert isinstance(bad.exception(), KafkaError)
        assert gc.is_tracked(chunk) and gc.is_tracked(chunk.outcomes)
