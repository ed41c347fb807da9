"""A :class:`~aioproducer.DeliveryHandle` costs the cyclic garbage collector nothing, compiled,
and never keeps its batch alive once the batch is done (``_handle.pyx``).

Callers keep one handle per record (``handles.append(await send(...))``). Instances of a
type with garbage-collector support count towards the collector's thresholds as they are
created, so a few hundred thousand held handles used to set off collections of every
generation, a full one among them, each a pause in the latency of every queued record.
Compiled, the handle's type has no such support; as it is then invisible to the
collector, no reference cycle through a handle may exist that only the collector could
break: these tests check both.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import DeliveryHandle, KafkaError, Producer, ProducerClosedError, results, speedups
from aioproducer.accumulator import ProducerBatch
from aioproducer.protocol.records import RecordBatchBuilder
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    # The collector's accounting does not depend on the event loop: asyncio alone.
    return ("asyncio", {})


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=1)
        yield fc


def _require_compiled() -> None:
    if results.HANDLE_ACTIVE != "compiled":
        pytest.skip(f"the compiled handle does not run here ({results.HANDLE_REASON})")


def test_the_compiled_handle_runs_wherever_the_hot_path_is_compiled() -> None:
    # Cython is a build requirement: a compiled hot path without the compiled handle
    # would be a build that silently lost it.
    if speedups.ACTIVE != "compiled":
        pytest.skip(f"the hot path is not compiled here ({speedups.REASON})")
    assert results.HANDLE_ACTIVE == "compiled", results.HANDLE_REASON


async def test_a_compiled_handle_is_not_tracked_by_the_collector(fake: FakeCluster) -> None:
    _require_compiled()
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        handle = await producer.send("t", b"v", key=b"k")
        # Untracked because its type has no collector support at all (an object of a
        # type with it is tracked from creation and counts towards the thresholds).
        assert not gc.is_tracked(handle)
        assert isinstance(handle, DeliveryHandle)
        assert type(handle) is DeliveryHandle
        meta = await handle
        assert (meta.topic, meta.partition, meta.serialized_key_size) == ("t", 0, 1)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_held_handles_do_not_advance_the_collector(fake: FakeCluster) -> None:
    # On trio too: nothing a send allocates per record outlives it there either (the
    # checkpoint between batches, the compiled coroutine and its awaitable are freed).
    _require_compiled()
    records = 5000
    async with Producer(fake.bootstrap_servers, linger_ms=1000, batch_size=1 << 20) as producer:
        await producer.send_and_wait("t", b"warm")
        send = producer.send
        value = b"x" * 100
        held: list[DeliveryHandle] = []
        held.append(await send("t", value))  # the topic's batch is open: no new one below
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            for _ in range(records - 1):
                held.append(await send("t", value))
            grown = gc.get_count()[0] - before
        finally:
            gc.enable()
        # A type with collector support would add one per held handle (5,000); what
        # else a send allocates is freed again before the next (a net count of 0).
        assert grown < records // 10, grown
        await producer.flush()
        assert [(await h).offset for h in held[-3:]] == [records - 2, records - 1, records]


async def test_a_delivered_batch_and_its_builder_leave_the_collector(fake: FakeCluster) -> None:
    _require_compiled()
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        fake.hold("Produce")
        handle = await producer.send("t", b"v", key=b"k")
        batch = handle.position()[0]
        waiter = asyncio.ensure_future(handle.wait())
        await asyncio.sleep(0.05)
        # Pending, it references its records, its waiters' event, maybe callbacks.
        assert gc.is_tracked(batch) and gc.is_tracked(batch.builder)
        fake.release()
        meta = await waiter
        await producer.flush()
    assert not gc.is_tracked(batch) and not gc.is_tracked(batch.builder)
    assert batch.last_error is None
    # All a handle reads of it stays: the same metadata, again and again.
    assert (meta.offset, meta.serialized_key_size, meta.serialized_value_size) == (1, 1, 1)
    assert await handle == meta
    assert handle.exception() is None
    assert batch.record_count == 1


async def test_a_failed_batch_stays_with_the_collector(fake: FakeCluster) -> None:
    # Its error's traceback may lead back to the batch: only the collector can free that.
    _require_compiled()
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        fake.hold("Produce")
        handle = await producer.send("t", b"v")
        await producer.close(timeout=0)
    assert isinstance(handle.exception(), ProducerClosedError)
    assert gc.is_tracked(handle.position()[0])


async def test_held_handles_of_delivered_batches_leave_no_batch_tracked(
    fake: FakeCluster,
) -> None:
    # At a few thousand records a second and a short linger, a batch holds a few records:
    # held handles keep one batch and one builder alive per few records. Tracked, each
    # collection would move them to an older generation until a full collection runs.
    _require_compiled()
    ours = (ProducerBatch, RecordBatchBuilder)
    async with Producer(fake.bootstrap_servers, linger_ms=0, batch_size=1024) as producer:
        await producer.send_and_wait("t", b"warm")
        gc.collect()
        before = sum(1 for o in gc.get_objects() if type(o) in ours)
        held = [await producer.send("t", b"x" * 100) for _ in range(1000)]
        await producer.flush()
        gc.collect()
        after = sum(1 for o in gc.get_objects() if type(o) in ours)
    batches = {id(h.position()[0]) for h in held}
    assert len(batches) >= 100, len(batches)
    assert after <= before, (before, after, len(batches))
    assert [(await h).offset for h in held[:2]] == [1, 2]


def _watch(handle: DeliveryHandle, seen: list[tuple[bool, bool]]) -> None:
    # The callback captures the handle: while the batch is pending, batch -> callback ->
    # handle -> batch is a cycle, which the batch must break once done.
    handle.add_done_callback(lambda done: seen.append((done is handle, done.done())))


async def _batch_freed_after(fake: FakeCluster, deliver: bool) -> None:
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        if not deliver:
            fake.hold("Produce")
        handle = await producer.send("t", b"v")
        seen: list[tuple[bool, bool]] = []
        _watch(handle, seen)
        batch = handle.position()[0]
        if deliver:
            await producer.flush()
        else:
            await producer.close(timeout=0)
    assert seen == [(True, True)]
    if deliver:
        assert (await handle).offset == 1
    else:
        assert isinstance(handle.exception(), ProducerClosedError)
    # Dropping the handle frees it, by reference counting alone (compiled, no collection
    # could): its batch loses that reference. Had the batch kept the callback, the
    # callback would keep the handle, and the handle the batch, for good.
    gc.disable()
    try:
        before = sys.getrefcount(batch)
        del handle
        assert sys.getrefcount(batch) == before - 1
    finally:
        gc.enable()


async def test_a_handle_with_a_callback_frees_its_batch_after_delivery(
    fake: FakeCluster,
) -> None:
    await _batch_freed_after(fake, deliver=True)


async def test_a_handle_with_a_callback_frees_its_batch_after_close_without_delivery(
    fake: FakeCluster,
) -> None:
    await _batch_freed_after(fake, deliver=False)


async def test_the_handle_keeps_its_public_api(fake: FakeCluster) -> None:
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        handle = await producer.send("t", b"value", key=b"key", timestamp_ms=1234)
        assert isinstance(handle, DeliveryHandle)
        assert (handle.topic, handle.partition) == ("t", 0)
        assert (handle.timestamp_ms, handle.key_size, handle.value_size) == (1234, 3, 5)
        assert not handle.done() and not handle.settled()
        assert "pending" in repr(handle) and repr(handle).startswith("<DeliveryHandle t-0 #0")
        with pytest.raises(RuntimeError, match="still pending"):
            handle.result()
        with pytest.raises(RuntimeError, match="still pending"):
            handle.exception()
        meta = await handle.wait()
        assert meta == await handle == handle.result()
        assert (meta.offset, meta.timestamp_ms, meta.serialized_value_size) == (0, 1234, 5)
        assert handle.done() and handle.settled() and "done" in repr(handle)
        assert handle.exception() is None and handle.failure() is None
        batch, index = handle.position()
        assert (batch.topic, index) == ("t", 0)
        # A callback added once done runs at once.
        seen: list[DeliveryHandle] = []
        handle.add_done_callback(seen.append)
        assert seen == [handle]


class _Sentinel:
    """Lives as long as the callback holding it (weakly referenceable, unlike a batch)."""


def test_a_dropped_unclosed_producer_frees_its_pending_batches_callbacks(
    fake: FakeCluster,
) -> None:
    # The application forgets close(): its record waits out a long linger, asyncio.run()
    # ends, and the producer is collected. Its batch never completes, so it never runs
    # (and drops) the handle's callback: the producer's finalizer must drop it, or the
    # batch -> callback -> handle -> batch cycle (invisible to the collector, compiled)
    # keeps the batch and the callback alive for good.
    alive: list[weakref.ref[_Sentinel]] = []

    async def forget_close() -> None:
        producer = Producer(fake.bootstrap_servers, linger_ms=60_000)
        await producer.start()
        handle = await producer.send("t", b"a")
        sentinel = _Sentinel()
        alive.append(weakref.ref(sentinel))

        def keep(_done: DeliveryHandle, kept: _Sentinel = sentinel) -> _Sentinel:
            return kept

        handle.add_done_callback(keep)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        asyncio.run(forget_close())
        gc.collect()
    assert alive[0]() is None


async def _await_in_a_frame_holding(handle: DeliveryHandle, kept: list[weakref.ref[Any]]) -> None:
    sentinel = _Sentinel()  # lives as long as this frame
    kept.append(weakref.ref(sentinel))
    with pytest.raises(KafkaError):
        await handle


async def test_a_failed_record_awaited_in_a_frame_holding_its_handle_frees_that_frame(
    fake: FakeCluster,
) -> None:
    # The raised error's traceback references the awaiting frame, which references the
    # handle. Had the batch's own error object been raised, the batch would reference
    # that frame: batch -> error -> frame -> handle -> batch, kept for good compiled.
    kept: list[weakref.ref[Any]] = []
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        fake.inject_error("Produce", "TOPIC_AUTHORIZATION_FAILED", count=100)
        handle = await producer.send("t", b"v")
        await _await_in_a_frame_holding(handle, kept)
        error = handle.exception()
        assert isinstance(error, KafkaError)
        # What is raised is a copy of the stored error, alike in type, text and attributes.
        with pytest.raises(type(error), match="TOPIC_AUTHORIZATION_FAILED") as raised:
            handle.result()
        assert raised.value is not error and vars(raised.value) == vars(error)
        del raised, handle, error
    gc.collect()
    assert kept[0]() is None


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_the_compiled_handle_gives_the_metadata_the_class_would(fake: FakeCluster) -> None:
    # The compiled handle fills RecordMetadata's slots itself, without its constructor:
    # what it returns must be the very thing the constructor makes (equal, hashed alike,
    # still frozen), whether the handle was awaited pending or done.
    _require_compiled()
    async with Producer(fake.bootstrap_servers, linger_ms=50) as producer:
        pending = await producer.send("t", b"value", key=b"key", timestamp_ms=1234)
        assert not pending.done()
        meta = await pending  # awaited while its batch is still open
        done = await producer.send("t", b"v2", key=None, timestamp_ms=99)
        await producer.flush()
        assert done.done()
        later = await done
    expected = results.RecordMetadata("t", 0, meta.offset, 1234, 3, 5)
    assert type(meta) is results.RecordMetadata
    assert meta == expected and hash(meta) == hash(expected) and repr(meta) == repr(expected)
    assert meta.offset >= 0
    assert later == results.RecordMetadata("t", 0, meta.offset + 1, 99, -1, 2)
    assert pending.result() == meta
    with pytest.raises(AttributeError):
        meta.offset = 7  # type: ignore[misc]


def test_the_pure_handles_metadata_helper_builds_what_the_class_would() -> None:
    # The pure-Python handle (and BulkDelivery) fill RecordMetadata's slots through their
    # setters, not the frozen constructor: the result must be indistinguishable.
    made = results._metadata("t", 3, 42, 1234, -1, 100)
    expected = results.RecordMetadata("t", 3, 42, 1234, -1, 100)
    assert type(made) is results.RecordMetadata
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    with pytest.raises(AttributeError):
        made.partition = 1  # type: ignore[misc]
