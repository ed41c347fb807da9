"""A timed-out batch a frozen broker still holds cannot land after a later record.

The fake holds every produce request, as a broker stopped with SIGSTOP would: the
producer's requests time out, its connections close, and its records fail with
``DeliveryTimeoutError``. The held requests are still there, and a broker that wakes
handles them. Then the application sends again. The producer has bumped its epoch, so the
held requests, which carry the old one, are refused once the new epoch has written to
the partition; if the broker handles them first, they are written before the new record.
Either way no timed-out record follows a record sent after the failure was reported.
"""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer import DeliveryTimeoutError, Producer
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import ErrorCode

pytestmark = pytest.mark.anyio

FAST_TIMEOUTS: dict[str, Any] = {
    "linger_ms": 0,
    "request_timeout_ms": 200,
    "delivery_timeout_ms": 700,
    "retry_backoff_ms": 20,
    "retry_backoff_max_ms": 50,
}
LATE = [b"late-%d" % i for i in range(10)]


async def _time_out_late_records(fake: FakeCluster, p: Producer) -> None:
    """Send LATE while every produce request is held; all of them must time out."""
    fake.hold("produce", count=10_000)
    handles = [await p.send("t", v) for v in LATE]
    for handle in handles:
        with pytest.raises(DeliveryTimeoutError):
            await handle
    # Stop holding new requests; what is held stays held until released.
    fake.clear_faults()
    assert fake.held(), "the frozen broker should still hold the timed-out requests"


def _epochs(fake: FakeCluster) -> list[tuple[bytes | None, int, int]]:
    """(first value, producer id, epoch) of every stored batch, in log order."""
    out = []
    for batch in fake.batches("t", 0):
        out.append((batch.records[0].value, batch.producer_id, batch.producer_epoch))
    return out


async def test_held_requests_released_after_the_next_record_are_fenced(
    fake: FakeCluster,
) -> None:
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **FAST_TIMEOUTS) as p:
        await p.send_and_wait("t", b"warm")
        await _time_out_late_records(fake, p)
        after = await p.send_and_wait("t", b"after")
        # The broker wakes and handles what it held: every one carries the old epoch.
        released = fake.release()
        metrics = p.metrics()

    assert released >= 1
    assert [r.value for r in fake.records("t", 0)] == [b"warm", b"after"]
    assert after.offset == 1
    assert metrics["producer_epoch_bumps"] >= 1
    assert metrics["producer_id_resets"] == 0
    # Same producer id, a later epoch: the bump is what fences. (A late batch still within
    # its delivery timeout at the first bump is renumbered, held and timed out again, which
    # bumps once more.)
    (_, pid, epoch), (_, after_pid, after_epoch) = _epochs(fake)
    assert after_pid == pid and epoch < after_epoch == epoch + metrics["producer_epoch_bumps"]
    # Every old-epoch request handled after the bump was refused for its epoch. (Those
    # queued behind a held one on a connection the producer closed are never handled.)
    handled_late = [
        req.errors[("t", 0)]
        for req in fake.requests("produce")
        if req.batches[0].producer_epoch == epoch and req.batches[0].base_sequence and req.errors
    ]
    assert handled_late
    assert set(handled_late) == {ErrorCode.INVALID_PRODUCER_EPOCH}


async def test_held_requests_released_before_the_next_record_are_written_first(
    fake: FakeCluster,
) -> None:
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **FAST_TIMEOUTS) as p:
        await p.send_and_wait("t", b"warm")
        await _time_out_late_records(fake, p)
        # The broker handles what it held before the application sends again: a timed-out
        # record is "not confirmed", not "not written".
        fake.release()
        after = await p.send_and_wait("t", b"after")

    values = [r.value for r in fake.records("t", 0)]
    assert values[0] == b"warm" and values[-1] == b"after"
    late = values[1:-1]
    assert late and set(late) <= set(LATE)
    assert late == sorted(late, key=LATE.index), "held batches are written in send order"
    assert after.offset == len(values) - 1


async def test_epoch_bump_restarts_every_partition_at_sequence_zero(
    fake: FakeCluster,
) -> None:
    fake.create_topic("u", partitions=2)
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **FAST_TIMEOUTS) as p:
        for partition in (0, 1):
            await p.send_and_wait("u", b"a", partition=partition)
            await p.send_and_wait("u", b"b", partition=partition)
        fake.inject_error("produce", ErrorCode.UNKNOWN_PRODUCER_ID, count=1)
        await p.send_and_wait("u", b"c", partition=0)
        await p.send_and_wait("u", b"c", partition=1)

    for partition in (0, 1):
        batches = fake.batches("u", partition)
        assert [b.records[0].value for b in batches] == [b"a", b"b", b"c"]
        assert [(b.producer_epoch, b.base_sequence) for b in batches] == [(0, 0), (0, 1), (1, 0)]
    assert len(fake.requests("init_producer_id")) == 1


async def test_exhausted_epoch_takes_a_fresh_producer_id(fake: FakeCluster) -> None:
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **FAST_TIMEOUTS) as p:
        await p.send_and_wait("t", b"a")
        # Drive the epoch to its int16 limit as a long-lived producer eventually would.
        p._sender.producer_epoch = 32767  # white-box: 32,767 real bumps would take long
        fake.inject_error("produce", ErrorCode.UNKNOWN_PRODUCER_ID, count=1)
        await p.send_and_wait("t", b"b")
        assert p.metrics()["producer_id_resets"] == 1

    pids = [(b.producer_id, b.producer_epoch) for b in fake.batches("t", 0)]
    assert pids == [(1000, 0), (1001, 0)]
    assert len(fake.requests("init_producer_id")) == 2


async def test_broker_refusing_the_current_epoch_gets_a_fresh_producer_id(
    fake: FakeCluster,
) -> None:
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **FAST_TIMEOUTS) as p:
        await p.send_and_wait("t", b"a")
        # The broker says it knows a later epoch of our id: bumping cannot help.
        fake.inject_error("produce", ErrorCode.INVALID_PRODUCER_EPOCH, count=1)
        meta = await p.send_and_wait("t", b"b")
        metrics = p.metrics()

    assert meta.offset == 1
    assert [(b.producer_id, b.producer_epoch) for b in fake.batches("t", 0)] == [
        (1000, 0),
        (1001, 0),
    ]
    assert metrics["producer_id_resets"] == 1 and metrics["producer_epoch_bumps"] == 0
