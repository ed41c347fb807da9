"""When a lingering batch leaves, and how an acknowledgement reaches its record.

A batch that is not full leaves once its linger has passed, or up to the event loop's
timer granularity (1 ms, at most half the linger) before: loops wake timers on whole
milliseconds, so the sender takes a batch whose linger ends within that much of now
rather than sleeping past it. The bounds are checked on the producer's own clock (the
batch's creation time against the time it was drained); the upper bound is generous,
as a busy machine may delay any wake-up.
"""

from __future__ import annotations

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
