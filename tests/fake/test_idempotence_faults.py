"""Idempotent delivery under faults a real broker will not produce on demand.

Each test drives the producer against a :class:`FakeCluster`, injects one fault and then
checks three things exactly: what the fake stored (every record once, in send order, at
consecutive offsets), what each handle reported, and what went over the wire (the request
log shows the fault really happened where intended).
"""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer import Producer, RecordMetadata
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import ErrorCode, RequestRecord

pytestmark = pytest.mark.anyio

OOOSN = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER

# batch_size=1 puts every record in a batch of its own, so n sends give n produce requests
# (one batch per partition per request) and pipelining is deterministic.
ONE_RECORD_PER_BATCH: dict[str, Any] = {
    "linger_ms": 0,
    "batch_size": 1,
    "retry_backoff_ms": 10,
    "retry_backoff_max_ms": 50,
}


def stored(fc: FakeCluster, topic: str = "t", partition: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record the fake wrote, in log order."""
    return [(r.offset, r.value) for r in fc.records(topic, partition)]


def produce_attempts(fc: FakeCluster) -> list[tuple[int, int, int, int]]:
    """(broker, producer id, base sequence, error code) of each produce request, in order."""
    out = []
    for req in fc.requests("produce"):
        (batch,) = req.batches
        out.append((req.broker, batch.producer_id, batch.base_sequence, _error(req)))
    return out


def _error(req: RequestRecord) -> int:
    # -1: the request was never answered (dropped or still being handled).
    return next(iter(req.errors.values())) if req.errors else -1


async def warm_up(p: Producer) -> RecordMetadata:
    """Deliver one record first: until a partition's first batch under a producer id is
    acknowledged, the producer keeps one request in flight for it (a broker with no state
    for the id would accept a later sequence ahead of a failed first batch)."""
    return await p.send_and_wait("t", b"warm")


async def test_genuine_out_of_order_sequence_bumps_the_epoch(fake: FakeCluster) -> None:
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        first = await p.send_and_wait("t", b"r0")
        # The broker claims the next batch is out of order although nothing was lost: the
        # producer cannot reconcile that, so it bumps its epoch and renumbers from 0.
        fake.inject_error("produce", OOOSN, count=1)
        handles = [await p.send("t", v) for v in (b"r1", b"r2")]
        metas = [await h for h in handles]

    assert stored(fake) == [(0, b"r0"), (1, b"r1"), (2, b"r2")]
    assert [(m.partition, m.offset) for m in [first, *metas]] == [(0, 0), (0, 1), (0, 2)]
    batches = fake.batches("t", 0)
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in batches] == [
        (1000, 0, 0),
        (1000, 1, 0),
        (1000, 1, 1),
    ]
    # The same producer id throughout: the bump needs no request to the broker.
    assert len(fake.requests("init_producer_id")) == 1
    assert p.metrics()["producer_epoch_bumps"] == 1
    assert p.metrics()["producer_id_resets"] == 0
    attempts = produce_attempts(fake)
    assert attempts[:2] == [(1, 1000, 0, 0), (1, 1000, 1, OOOSN)]
    assert (1, 1000, 0, 0) in attempts[2:]


async def test_not_leader_on_third_of_five_pipelined_requests(fake: FakeCluster) -> None:
    # Hold the first answer so that all five requests are on the wire together; the
    # third is refused, so the fourth and fifth arrive with a sequence gap.
    values = [f"v{i}".encode() for i in range(5)]
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        await warm_up(p)
        fake.delay("produce", 0.4, count=1)
        fake.inject_error("produce", NOT_LEADER, count=1, skip=2)
        handles = [await p.send("t", v) for v in values]
        metas: list[RecordMetadata] = [await h for h in handles]

    assert fake.max_in_flight("produce") == 5
    assert stored(fake) == list(enumerate([b"warm", *values]))
    assert [m.offset for m in metas] == [1, 2, 3, 4, 5]
    attempts = produce_attempts(fake)
    assert attempts[:6] == [
        (1, 1000, 0, 0),
        (1, 1000, 1, 0),
        (1, 1000, 2, 0),
        (1, 1000, 3, NOT_LEADER),
        (1, 1000, 4, OOOSN),
        (1, 1000, 5, OOOSN),
    ]
    # Retries keep the producer id (the gap was explained by the refused batch) and go in
    # sequence order.
    assert attempts[6:] == [(1, 1000, 3, 0), (1, 1000, 4, 0), (1, 1000, 5, 0)]
    assert len(fake.requests("init_producer_id")) == 1


async def test_connection_dropped_after_write_does_not_duplicate(fake: FakeCluster) -> None:
    # The broker writes the first batch, then the connection dies before the answer; the
    # two batches behind it on that connection are lost unread.
    values = [b"a", b"b", b"c"]
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        await warm_up(p)
        fake.delay("produce", 0.2, count=1)
        fake.drop_connection_on("produce", count=1, after_handling=True)
        handles = [await p.send("t", v) for v in values]
        metas = [await h for h in handles]

    assert stored(fake) == [(0, b"warm"), (1, b"a"), (2, b"b"), (3, b"c")]
    assert [m.offset for m in metas] == [1, 2, 3]
    attempts = produce_attempts(fake)
    # The first attempt after the warm-up was written but never answered.
    assert attempts[1] == (1, 1000, 1, -1)
    assert not fake.requests("produce")[1].answered
    # Its retry carries the same producer id and sequence; the fake recognises it as a
    # duplicate and answers with the original offset (1) and no error.
    answered = [a for a in attempts[1:] if a[3] != -1]
    assert answered == [(1, 1000, 1, 0), (1, 1000, 2, 0), (1, 1000, 3, 0)]
    assert len(fake.batches("t", 0)) == 4


async def test_producer_waits_out_throttle_time(fake: FakeCluster) -> None:
    fake.throttle("produce", 600, count=1)
    async with Producer(bootstrap_servers=fake.bootstrap_servers, linger_ms=0) as p:
        first = await p.send_and_wait("t", b"x")
        second = await p.send_and_wait("t", b"y")
        assert p.metrics()["throttle_time_ms"] == 600

    assert (first.offset, second.offset) == (0, 1)
    assert stored(fake) == [(0, b"x"), (1, b"y")]
    throttled, after = fake.requests("produce")
    assert throttled.answered_at is not None
    # The next request to that broker only left once the throttle time had passed.
    assert after.received_at - throttled.answered_at >= 0.6 - 0.02


async def test_leadership_moves_while_requests_are_in_flight(fake2: FakeCluster) -> None:
    fc = fake2
    values = [f"m{i}".encode() for i in range(5)]
    async with Producer(bootstrap_servers=fc.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        await warm_up(p)
        fc.delay("produce", 0.5, count=1, broker=1)
        handles = [await p.send("t", v) for v in values]
        # Broker 1 has written the first batch and holds its answer: move the partition.
        await fc.requests_received("produce", 2)
        fc.move_leader("t", 0, 2)
        metas = [await h for h in handles]
        more = await p.send_and_wait("t", b"after")

    assert stored(fc) == [*enumerate([b"warm", *values]), (6, b"after")]
    assert [m.offset for m in metas] == [1, 2, 3, 4, 5]
    assert more.offset == 6
    attempts = produce_attempts(fc)
    assert attempts[:2] == [(1, 1000, 0, 0), (1, 1000, 1, 0)]
    # Everything after the move reached broker 2 in sequence order, once each.
    on_new_leader = [(seq, err) for broker, _, seq, err in attempts if broker == 2]
    assert on_new_leader == [(2, 0), (3, 0), (4, 0), (5, 0), (6, 0)]
    refused = [(seq, err) for broker, _, seq, err in attempts[2:] if broker == 1]
    assert refused and all(err == NOT_LEADER for _, err in refused)
    assert [b.partition_leader_epoch for b in fc.batches("t", 0)] == [0, 0, 1, 1, 1, 1, 1]


async def test_backlog_of_one_partition_is_pipelined(fake: FakeCluster) -> None:
    # Regression: a request carries one batch per partition, and the sender used to sleep
    # after each drain, so a queued backlog went out one request per round trip.
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        await warm_up(p)
        fake.delay("produce", 0.3, count=1)
        handles = [await p.send("t", b"%d" % i) for i in range(5)]
        metas = [await h for h in handles]
    _, first, *rest = fake.requests("produce")
    assert first.answered_at is not None
    assert [r.in_flight for r in [first, *rest]] == [1, 2, 3, 4, 5]
    assert all(r.received_at < first.answered_at for r in rest)
    assert [m.offset for m in metas] == [1, 2, 3, 4, 5]
    assert stored(fake) == [(0, b"warm"), *((i + 1, b"%d" % i) for i in range(5))]


async def test_first_batch_under_a_producer_id_goes_alone(fake: FakeCluster) -> None:
    # A broker without state for a producer id accepts any first sequence, so if the
    # first batch failed (here: too large) a pipelined second one would be written ahead
    # of it. Until the first is acknowledged, nothing else of the partition is in flight.
    fake.delay("produce", 0.3, count=1)
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **ONE_RECORD_PER_BATCH) as p:
        handles = [await p.send("t", b"%d" % i) for i in range(4)]
        metas = [await h for h in handles]
    first, second, *_ = fake.requests("produce")
    assert first.answered_at is not None
    assert second.received_at >= first.answered_at
    assert [r.in_flight for r in [first, second]] == [1, 1]
    assert [m.offset for m in metas] == [0, 1, 2, 3]
    assert stored(fake) == [(i, b"%d" % i) for i in range(4)]


async def test_split_batch_keeps_its_place_ahead_of_later_batches(fake: FakeCluster) -> None:
    # After the first acknowledgement, three batches of three records are pipelined; the
    # broker refuses the first as too large, so the producer splits it. The later batches
    # come back out of order and must be written after the split parts, in send order.
    values = [b"%03d" % i for i in range(9)]
    async with Producer(
        bootstrap_servers=fake.bootstrap_servers,
        linger_ms=50,
        retry_backoff_ms=10,
        retry_backoff_max_ms=50,
    ) as p:
        await warm_up(p)
        fake.delay("produce", 0.3, count=1)
        fake.inject_error("produce", ErrorCode.MESSAGE_TOO_LARGE, count=1)
        handles = []
        for n, group in enumerate((values[0:3], values[3:6], values[6:9])):
            handles += [await p.send("t", v) for v in group]
            # Each group goes out in a request of its own before the next is sent.
            await fake.requests_received("produce", 2 + n)
        metas = [await h for h in handles]
        assert p.metrics()["batches_split"] >= 1

    refused, *_ = fake.requests("produce")[1:]
    assert [b.record_count for b in refused.batches] == [3]
    assert fake.max_in_flight("produce") >= 2
    assert stored(fake) == list(enumerate([b"warm", *values]))
    assert [m.offset for m in metas] == list(range(1, 10))
