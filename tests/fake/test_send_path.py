"""``await producer.send()``'s common case (``sending.py``): what it promises, compiled or not.

A record admitted at once is appended before ``send()`` first suspends, bad input raises
at ``send()`` and buffers nothing, the sender runs between batches even if the caller
never yields, and, compiled, an admitted record runs no Python frame.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import pytest

import aioproducer
from aioproducer import DeliveryHandle, Producer, SerializationError, speedups, sync
from aioproducer.errors import InvalidArgumentError
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

_PACKAGE = str(Path(aioproducer.__file__).parent)


def _queued(producer: Producer) -> int:
    """Records still queued in the producer's batches (not yet drained)."""
    return sum(batch.record_count for dq in producer._acc.batches.values() for batch in dq)


@contextlib.contextmanager
def _package_calls() -> Iterator[list[str]]:
    """The package's Python functions called inside the block, as ``file.py:name``."""
    frames: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(_PACKAGE):
            frames.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        yield frames
    finally:
        sys.setprofile(None)


async def _warm(producer: Producer) -> None:
    # The topic's metadata loaded and a first record delivered, without its linger.
    await producer.send("t", b"warm")
    await producer.flush()


async def test_send_returns_a_handle_that_resolves(fake: FakeCluster) -> None:
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        handles = [await producer.send("t", b"v%d" % i) for i in range(5)]
        assert all(type(h) is DeliveryHandle for h in handles)
        offsets = [(await h).offset for h in handles]
        # Through the class too, as the API reference documents it.
        late = await Producer.send(producer, "t", b"late")
        assert (await late).offset == offsets[-1] + 1
    assert offsets == list(range(5))


async def test_bad_input_raises_at_send_and_buffers_nothing(fake: FakeCluster) -> None:
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"first")
        used = producer.metrics()["buffer_bytes_in_use"]
        with pytest.raises(SerializationError, match="value must be bytes"):
            await producer.send("t", 12345)
        assert producer.metrics()["buffer_bytes_in_use"] == used
        assert _queued(producer) == 0
        metadata = await producer.send_and_wait("t", b"second")
    assert metadata.offset == 1


async def test_the_sender_runs_between_batches_when_the_caller_never_yields(
    fake: FakeCluster,
) -> None:
    # Batches of about 9 records that would linger 30 s: only a full batch leaves, and
    # only if the sender gets to run while the loop below never awaits anything else.
    async with Producer(fake.bootstrap_servers, linger_ms=30_000, batch_size=1200) as producer:
        await _warm(producer)
        sent = 200
        for _ in range(sent):
            await producer.send("t", b"x" * 100)
        # Without a checkpoint per new batch all 200 would still be queued here.
        assert _queued(producer) < sent - 20
        await producer.flush()


async def test_a_cancelled_caller_leaves_the_record_fully_buffered_or_out(
    fake: FakeCluster,
) -> None:
    # Every record here opens a batch (batch_size fits one), so every send reaches the
    # checkpoint that lets the sender run; the caller's scope is cancelled throughout.
    async with Producer(fake.bootstrap_servers, linger_ms=30_000, batch_size=150) as producer:
        await _warm(producer)
        handles: list[DeliveryHandle] = []
        for i in range(20):
            before = producer.metrics()["buffer_bytes_in_use"]
            with anyio.CancelScope() as scope:
                scope.cancel()
                handles.append(await producer.send("t", b"r%03d" % i + b"x" * 90))
            if scope.cancelled_caught:
                handles.pop()
                assert producer.metrics()["buffer_bytes_in_use"] == before
        await producer.flush()
        results = [h.result() for h in handles]
    # Whatever was buffered was delivered, once and in order.
    assert [m.offset for m in results] == list(range(1, len(handles) + 1))
    assert [r.value[:4] for r in fake.records("t", 0)[1:]] == [b"r%03d" % i for i in range(20)][
        : len(handles)
    ]


async def test_an_admitted_record_runs_no_python_frame_when_compiled(fake: FakeCluster) -> None:
    if speedups.ACTIVE != "compiled":
        pytest.skip(f"the hot path is not compiled here ({speedups.REASON})")
    async with Producer(fake.bootstrap_servers, linger_ms=30_000) as producer:
        await _warm(producer)
        await producer.send("t", b"opens a batch")
        with _package_calls() as frames:
            for _ in range(10):  # into the open batch: no batch starts, nothing to wake
                await producer.send("t", b"x" * 100)
        assert frames == []
        await producer.flush()


def test_sync_send_runs_no_python_frame_and_a_settled_future_its_own_alone_when_compiled(
    fake: FakeCluster,
) -> None:
    # SyncProducer.send of an admitted record runs no Python frame: the send itself, the
    # checks, the hand-off and the DeliveryFuture are compiled; a settled future's done()
    # and exception() run no frame at all (the future is compiled with Cython,
    # ``_future.pyx``) or, with the pure-Python future, their own alone.
    if speedups.ACTIVE != "compiled":
        pytest.skip(f"the hot path is not compiled here ({speedups.REASON})")
    with aioproducer.SyncProducer(fake.bootstrap_servers, linger_ms=5) as producer:
        producer.send("t", b"warm").result(30)
        with _package_calls() as frames:
            futures = [producer.send("t", b"r%02d" % i) for i in range(10)]
        # Besides, waking the loop once a chunk starts (not once per record).
        wake = {"handoff.py:_wake", "runner.py:call_soon", "runner.py:loop"}
        assert set(frames) <= wake
        producer.flush()
        with _package_calls() as frames:
            errors = [(f.done(), f.exception()) for f in futures]
        own = [] if sync.FUTURE_ACTIVE == "compiled" else ["sync.py:done", "sync.py:exception"]
        assert frames == own * 10
        assert errors == [(True, None)] * 10
        assert [f.result().offset for f in futures] == list(range(1, 11))
    assert [r.value for r in fake.records("t", 0)[1:]] == [b"r%02d" % i for i in range(10)]


def test_sync_send_falls_back_to_the_method_wherever_the_common_case_ends(
    fake: FakeCluster,
) -> None:
    # The compiled send hands over to SyncProducer.send itself: before the engine runs
    # (it starts it), for a topic without metadata, through the class, and once closed.
    producer = aioproducer.SyncProducer(fake.bootstrap_servers, linger_ms=1)
    fake.create_topic("other", partitions=1)
    try:
        first = producer.send("t", b"starts the engine")
        assert first.result(30).offset == 0
        assert producer.send("other", b"waits for metadata").result(30).offset == 0
        assert aioproducer.SyncProducer.send(producer, "t", b"via the class").result(30).offset == 1
        assert producer.send("t", b"common case").result(30).offset == 2
    finally:
        producer.close()
    with pytest.raises(aioproducer.ProducerClosedError):
        producer.send("t", b"too late")
    assert [r.value for r in fake.records("t", 0)] == [
        b"starts the engine",
        b"via the class",
        b"common case",
    ]


def test_a_dropped_sync_producer_is_freed_though_its_send_is_kept(fake: FakeCluster) -> None:
    # The compiled send holds its producer weakly: dropping the producer frees it at once
    # (so its abandonment is noticed), and the kept send then refuses records.
    import gc
    import weakref

    producer = aioproducer.SyncProducer(fake.bootstrap_servers, linger_ms=1)
    send = producer.send
    alive = weakref.ref(producer)
    del producer
    assert alive() is None
    gc.collect()
    with pytest.raises(aioproducer.ProducerClosedError, match="garbage-collected"):
        send("t", b"orphan")


def test_a_sync_record_keeps_its_future_alone_alive_and_its_metadata_whole(
    fake: FakeCluster,
) -> None:
    # Until it settles, a record sent with SyncProducer.send keeps one object alive, its
    # DeliveryFuture: where the record went is read from its batch (no DeliveryHandle per
    # record). Its metadata still reports the record's own timestamp and sizes.
    import gc

    def handles() -> int:
        return sum(type(o) is DeliveryHandle for o in gc.get_objects())

    with aioproducer.SyncProducer(fake.bootstrap_servers, linger_ms=60_000) as producer:
        warm = producer.send("t", b"warm")
        producer.flush()
        assert warm.result(30).offset == 0
        engine = producer._engine
        assert engine is not None

        async def drain() -> None:
            engine.handoff.drain()

        before = handles()
        futures = [producer.send("t", b"v%03d" % i, timestamp_ms=1000 + i) for i in range(200)]
        keyed = producer.send("t", b"value", key=b"key", partition=0, timestamp_ms=7)
        tomb = producer.send("t", None, key=b"gone", timestamp_ms=8)
        engine.runner.call(drain)  # every record taken by the loop, none sent yet
        assert not any(f.done() for f in futures)
        assert handles() == before
        producer.flush()
        metas = [f.result() for f in futures]
        keyed_meta, tomb_meta = keyed.result(), tomb.result()
    assert [(m.timestamp_ms, m.serialized_key_size, m.serialized_value_size) for m in metas] == [
        (1000 + i, -1, 4) for i in range(200)
    ]
    assert [m.offset for m in metas] == list(range(1, 201))
    k, t = keyed_meta, tomb_meta
    assert (k.topic, k.partition, k.offset, k.timestamp_ms) == ("t", 0, 201, 7)
    assert (k.serialized_key_size, k.serialized_value_size) == (3, 5)
    assert (t.offset, t.timestamp_ms, t.serialized_key_size, t.serialized_value_size) == (
        202,
        8,
        4,
        -1,
    )
    stored = fake.records("t", 0)[1:]
    assert [(r.value, r.timestamp_ms) for r in stored[:200]] == [
        (b"v%03d" % i, 1000 + i) for i in range(200)
    ]


def test_a_sync_send_to_a_topic_that_is_not_a_str_raises_a_clear_error(fake: FakeCluster) -> None:
    # The compiled send hands a record over as a plain tuple; its topic is not type-checked
    # on the way, so the general path's topic check names what was wrong.
    with aioproducer.SyncProducer(fake.bootstrap_servers, linger_ms=1) as producer:
        assert producer.send("t", b"ok").result(30).offset == 0
        for topic in (123, None, b"t"):
            with pytest.raises(InvalidArgumentError, match="topic must be a non-empty"):
                producer.send(topic, b"v")  # type: ignore[arg-type]
        assert producer.send("t", b"after").result(30).offset == 1
