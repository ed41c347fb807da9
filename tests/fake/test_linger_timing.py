"""When a lingering batch leaves, and how an acknowledgement reaches its record.

A batch that is not full leaves once its linger has passed, or up to the event loop's
timer granularity (1 ms, at most half the linger) before: loops wake timers on whole
milliseconds, so the sender takes a batch whose linger ends within that much of now
rather than sleeping past it. The bounds are checked on the producer's own clock (the
batch's creation time against the time it was drained); the upper bound is generous,
as a busy machine may delay any wake-up.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.accumulator import ProducerBatch
from aioproducer.sender import Sender, _lookahead
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

# A scheduler hiccup on a loaded machine may delay a wake-up by this much; a batch that
# left later than its linger plus this would mean the sender did not wake for it.
_LATE_BOUND = 0.25


def _record_drain_ages(sender: Sender) -> list[float]:
    """Patch ``sender`` to note the age (seconds since its creation) of each batch it
    drains; returns the list it fills."""
    ages: list[float] = []
    drain = sender._drain_node

    def noting(node_id: int, conn: Any, tps: list[tuple[str, int]], now: float) -> bool:
        for tp in tps:
            head = sender.acc.head(tp)
            if head is not None:
                ages.append(time.monotonic() - head.created)
        return drain(node_id, conn, tps, now)

    sender._drain_node = noting  # type: ignore[method-assign]
    return ages


def _in_flight(batch: ProducerBatch) -> bool:
    return batch.in_flight


def test_the_lookahead_is_the_timer_granularity_at_most_half_the_linger() -> None:
    assert _lookahead(0.005) == 0.001
    assert _lookahead(30.0) == 0.001
    assert _lookahead(0.001) == 0.0005
    assert _lookahead(0.0) == 0.0


@pytest.mark.parametrize("linger_ms", [20, 3])
async def test_a_lone_record_leaves_when_its_linger_ends_give_or_take_the_granularity(
    fake: FakeCluster, linger_ms: int
) -> None:
    linger = linger_ms / 1000
    async with Producer(fake.bootstrap_servers, linger_ms=linger_ms) as producer:
        await producer.send_and_wait("t", b"warm")  # metadata and connection ready
        ages = _record_drain_ages(producer._sender)
        for i in range(5):
            await (await producer.send("t", b"lone %d" % i))
        assert len(ages) == 5
        for age in ages:
            assert age >= linger - min(0.001, linger / 2) - 1e-6, ages
            assert age <= linger + _LATE_BOUND, ages


async def test_the_sender_takes_a_batch_within_the_lookahead_and_no_sooner(
    fake: FakeCluster,
) -> None:
    # The rule itself, on explicit times: no sleeping involved.
    async with Producer(fake.bootstrap_servers, linger_ms=30_000) as producer:
        await producer.send("t", b"warm")
        await producer.flush()
        sender = producer._sender
        # Far enough from the real clock that the sender's own pass cannot take it.
        handle = await producer.send("t", b"lingering")
        batch, _ = handle.position()
        due = batch.created + 30.0
        early = sender.lookahead
        assert early == 0.001
        delay = sender._send_ready(due - early - 0.0005)
        assert not _in_flight(batch)
        assert delay == pytest.approx(0.0005, abs=1e-6)
        sender._send_ready(due - early + 0.0001)
        assert _in_flight(batch)
        assert (await handle).offset == 1


async def test_an_ack_settles_its_record_in_the_pass_that_read_it(fake: FakeCluster) -> None:
    # With the sender asleep, the response completes the batch in the connection's
    # reader, not one loop pass later in the sender's task.
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        seen: list[list[str]] = []

        def on_done(_handle: object) -> None:
            frames: list[str] = []
            frame: FrameType | None = sys._getframe(1)
            while frame is not None:
                code = frame.f_code
                frames.append(f"{Path(code.co_filename).name}:{code.co_name}")
                frame = frame.f_back
            seen.append(frames)

        for _ in range(3):
            handle = await producer.send("t", b"v")
            handle.add_done_callback(on_done)
            await handle
            await anyio.sleep(0.01)  # the sender back asleep before the next one
        assert len(seen) == 3
        for frames in seen:
            # Named with their file: a test runner's own frames further out may be called run.
            assert "connection.py:_dispatch" in frames, frames[:12]
            assert "sender.py:run" not in frames, frames[:12]


async def test_an_error_while_settling_in_the_reader_is_kept_for_the_sender(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Settling in the reader's pass must not swallow what the sender's loop would raise:
    # the loop raises it when it wakes (as it would have raised it itself).
    async with Producer(fake.bootstrap_servers, linger_ms=1) as producer:
        await producer.send_and_wait("t", b"warm")
        sender = producer._sender
        boom = RuntimeError("settling failed")

        def failing(_now: float) -> None:
            raise boom

        monkeypatch.setattr(sender, "_process_inbox", failing)
        monkeypatch.setattr(sender, "_idle", True)
        monkeypatch.setattr(sender, "_wakeup", anyio.Event())
        call = SimpleNamespace(answered=False, node_id=1)
        sender._on_response(call, None, None)  # type: ignore[arg-type]
        assert sender._inline_error is boom
        assert sender._wakeup.is_set()
        # Taken out before the loop sees it: this producer goes on working.
        monkeypatch.undo()
        sender._inline_error = None
        sender._inbox.clear()
        sender._in_flight_calls += 0
        assert (await producer.send_and_wait("t", b"after")).offset == 1


def _count_passes(sender: Sender) -> list[float]:
    """Patch ``sender`` to note the time of each loop pass (each looks for ready batches)."""
    passes: list[float] = []
    send_ready = sender._send_ready

    def noting(now: float) -> float:
        passes.append(now)
        return send_ready(now)

    sender._send_ready = noting  # type: ignore[method-assign]
    return passes


async def test_a_batch_due_after_the_senders_timer_does_not_wake_it() -> None:
    # Partition 0's batch sets the sleeping sender's timer; partition 1's, opened later
    # with the same linger, is due after that timer, so the loop has no pass to make
    # for it: it finds it when the timer fires.
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t2", partitions=2)
        async with Producer(fc.bootstrap_servers, linger_ms=300) as producer:
            await producer.send_and_wait("t2", b"warm", partition=0)
            await anyio.sleep(0.05)  # the sender asleep, with nothing queued
            passes = _count_passes(producer._sender)
            first = await producer.send("t2", b"a", partition=0)
            await anyio.sleep(0.05)
            # The first batch woke it: it had no timer.
            assert len(passes) == 1, passes
            second = await producer.send("t2", b"b", partition=1)
            await anyio.sleep(0.05)
            assert len(passes) == 1, passes
            await first
            await second


@pytest.mark.parametrize("fill", ["exactly", "overflowing"])
async def test_a_batch_that_fills_wakes_a_sender_asleep_on_its_timer(fill: str) -> None:
    # The sender sleeps until partition 0's batch is due in 30 s; partition 1's batch
    # fills (to its limit, or by a record that does not fit and opens the next batch),
    # which makes it due now: it must leave at once, not after that timer.
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t2", partitions=2)
        async with Producer(fc.bootstrap_servers, linger_ms=30_000, batch_size=1000) as producer:
            await producer.send("t2", b"warm", partition=1)
            await producer.flush()
            lingering = await producer.send("t2", b"a", partition=0)
            await anyio.sleep(0.02)  # the sender asleep on that batch's timer
            handles = []
            with anyio.fail_after(5):
                while not handles or not handles[0].done():
                    handles.append(await producer.send("t2", b"x" * 100, partition=1))
                    if fill == "exactly" and handles[0].position()[0].full:
                        break
                await handles[0]
            assert not lingering.done()
            await producer.flush()


async def test_a_drain_that_leaves_its_partitions_empty_asks_for_no_second_pass(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One batch per partition goes in a request: a partition with another batch queued
    # is ready again at once (delay 0, another pass), one left empty is not.
    async with Producer(fake.bootstrap_servers, linger_ms=30_000, batch_size=1000) as producer:
        await producer.send("t", b"warm")
        await producer.flush()
        sender = producer._sender
        send_ready = sender._send_ready
        # The loop's own passes drain nothing meanwhile: the calls below do.
        monkeypatch.setattr(sender, "_send_ready", lambda _now: math.inf)
        handle = await producer.send("t", b"lingering")
        batch, _ = handle.position()
        assert send_ready(batch.created + 30.0) == math.inf
        assert batch.in_flight
        await handle
        # Two full batches and an open one queued: the first leaves, the rest wait.
        handles = [await producer.send("t", b"x" * 100) for _ in range(20)]
        assert len({id(h.position()[0]) for h in handles}) >= 3
        assert send_ready(time.monotonic()) == 0.0
        assert handles[0].position()[0].in_flight
        assert not handles[-1].position()[0].in_flight
        monkeypatch.undo()
        await producer.flush()


async def test_an_ack_settled_in_the_reader_leaves_the_sleeping_sender_asleep(
    fake: FakeCluster,
) -> None:
    # The reader settles the answer; with nothing held back for a request slot, the
    # sender's loop has nothing to do for it and makes no pass.
    async with Producer(fake.bootstrap_servers, linger_ms=5) as producer:
        await producer.send_and_wait("t", b"warm")
        await anyio.sleep(0.05)
        passes = _count_passes(producer._sender)
        acked: list[float] = []
        for _ in range(3):
            handle = await producer.send("t", b"v")
            handle.add_done_callback(lambda _h: acked.append(time.monotonic()))
            await handle
            await anyio.sleep(0.05)
        assert len(acked) == 3
        for at in acked:
            assert not [p for p in passes if at <= p < at + 0.04], (acked, passes)


async def test_an_ack_wakes_the_sender_for_a_batch_held_back_by_the_request_limit(
    fake: FakeCluster,
) -> None:
    # One request in flight at a time, a batch per record: each batch after the first
    # waits for the previous answer, which must wake the sleeping loop to send it.
    async with Producer(
        fake.bootstrap_servers,
        linger_ms=1,
        batch_size=1,
        max_in_flight_requests_per_connection=1,
    ) as producer:
        await producer.send_and_wait("t", b"warm")
        fake.delay("produce", count=3, seconds=0.05)
        handles = [await producer.send("t", b"r%d" % i) for i in range(4)]
        with anyio.fail_after(5):
            offsets = [(await h).offset for h in handles]
    assert offsets == [1, 2, 3, 4]
