"""Accumulator, linger and memory budget, driven with a fake clock (no broker)."""

from __future__ import annotations

import anyio
import pytest

from aioproducer.accumulator import Accumulator, MemoryBudget, new_handle
from aioproducer.errors import BufferFullError, ProducerClosedError
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD, decode_batches, record_size_bound
from aioproducer.results import DeliveryHandle
from aioproducer.run_append import append_run


def make_acc(
    batch_size: int = 1000,
    linger: float = 0.005,
    memory: int = 1 << 20,
    codec: Codec = Codec.NONE,
    max_batch_bytes: int = 0,
) -> Accumulator:
    return Accumulator(
        batch_size=batch_size,
        linger=linger,
        delivery_timeout=120.0,
        codec=codec,
        compression_level=None,
        budget=MemoryBudget(memory),
        max_batch_bytes=max_batch_bytes,
    )


def append(
    acc: Accumulator, tp: tuple[str, int], value: bytes, now: float, key: bytes | None = None
):
    need = record_size_bound(len(key or b""), len(value), None)
    assert acc.budget.try_reserve(need)
    batch, index, wake = acc.append(tp[0], tp[1], 1000, key, value, None, need, now)
    handle = new_handle(DeliveryHandle, batch, index, 1000, len(key) if key else -1, len(value))
    return handle, wake


def always(_tp, _batch) -> bool:
    return True


def test_records_fill_a_batch_then_start_a_new_one() -> None:
    acc = make_acc(batch_size=300)
    tp = ("t", 0)
    handles = [append(acc, tp, b"x" * 50, now=0.0)[0] for _ in range(10)]
    queue = acc.batches[tp]
    assert len(queue) > 1
    assert all(b.builder.size_in_bytes <= 300 for b in queue)
    assert sum(b.record_count for b in queue) == 10
    # Handles point at consecutive indexes of their batch.
    first = queue[0]
    assert [h.position()[1] for h in handles[: first.record_count]] == list(
        range(first.record_count)
    )


def test_new_batch_and_full_batch_wake_the_sender() -> None:
    acc = make_acc(batch_size=200)
    tp = ("t", 0)
    _, wake_first = append(acc, tp, b"a" * 10, 0.0)
    _, wake_second = append(acc, tp, b"b" * 10, 0.0)
    assert wake_first is True  # a new batch moves the earliest linger deadline
    assert wake_second is False
    _, wake_fill = append(acc, tp, b"c" * 150, 0.0)
    assert wake_fill is True


def test_linger_makes_a_batch_ready_only_after_it_waited() -> None:
    acc = make_acc(linger=0.010)
    tp = ("t", 3)
    append(acc, tp, b"v", now=100.0)
    ready, delay = acc.ready(100.004, always)
    assert ready == []
    assert delay == pytest.approx(0.006)
    ready, delay = acc.ready(100.010, always)
    assert ready == [tp]


def test_full_flushing_and_closing_batches_are_ready_at_once() -> None:
    acc = make_acc(batch_size=100, linger=10.0)
    full_tp, lazy_tp = ("t", 0), ("t", 1)
    append(acc, full_tp, b"x" * 90, now=0.0)  # alone it exceeds what fits with overhead
    append(acc, lazy_tp, b"y", now=0.0)
    ready, _ = acc.ready(0.0, always)
    assert ready == [full_tp]
    acc.flushing += 1
    ready, _ = acc.ready(0.0, always)
    assert sorted(ready) == [full_tp, lazy_tp]
    acc.flushing -= 1
    acc.closing = True
    ready, _ = acc.ready(0.0, always)
    assert sorted(ready) == [full_tp, lazy_tp]


def test_sender_veto_is_respected() -> None:
    acc = make_acc(linger=0.0)
    append(acc, ("t", 0), b"v", now=0.0)
    append(acc, ("t", 1), b"v", now=0.0)
    ready, _ = acc.ready(1.0, lambda tp, _b: tp[1] == 1)
    assert ready == [("t", 1)]


def test_built_batch_holds_exactly_the_appended_records() -> None:
    acc = make_acc()
    tp = ("t", 0)
    append(acc, tp, b"one", 0.0, key=b"k1")
    append(acc, tp, b"two", 0.0)
    batch = acc.pop_head(tp)
    (decoded,) = decode_batches(batch.builder.build())
    assert [(r.key, r.value) for r in decoded.records] == [(b"k1", b"one"), (None, b"two")]


def test_memory_is_charged_per_record_and_released_on_completion() -> None:
    acc = make_acc(memory=10_000)
    tp = ("t", 0)
    need = record_size_bound(None, 100, None)
    append(acc, tp, b"x" * 100, 0.0)
    append(acc, tp, b"x" * 100, 0.0)
    batch = acc.batches[tp][0]
    # While the batch takes records, the records' estimates stay reserved ...
    assert batch.reserved == batch.builder.size_in_bytes
    assert acc.budget.used == RECORD_BATCH_OVERHEAD + 2 * need
    # ... and once it is drained, exactly its size is.
    acc.pop_head(tp)
    assert acc.budget.used == batch.builder.size_in_bytes
    acc.complete_batch(batch, base_offset=41, log_append_time=-1)
    assert acc.budget.used == 0
    assert batch.done and batch.outcome(0) == (41, -1, None)


def test_a_full_batch_gives_back_what_the_estimates_over_reserved() -> None:
    acc = make_acc(batch_size=300, memory=10_000)
    tp = ("t", 0)
    for _ in range(4):
        append(acc, tp, b"x" * 50, 0.0)
    full, open_batch = acc.batches[tp]
    assert full.full and not open_batch.full
    # The full batch holds its exact size, the open one its records' estimates.
    need = record_size_bound(None, 50, None)
    open_count = open_batch.record_count
    assert acc.budget.used == (
        full.builder.size_in_bytes + RECORD_BATCH_OVERHEAD + open_count * need
    )
    # Failing the open batch while queued gives back its estimates too.
    acc.fail_batch(open_batch, RuntimeError("gone"))
    assert acc.budget.used == full.builder.size_in_bytes
    acc.fail_batch(acc.pop_head(tp), RuntimeError("gone"))
    assert acc.budget.used == 0


def test_retries_go_back_in_sequence_order_ahead_of_new_batches() -> None:
    acc = make_acc(batch_size=100, linger=0.0)
    tp = ("t", 0)
    for _ in range(4):
        append(acc, tp, b"x" * 60, 0.0)
    b0, b1, b2 = acc.pop_head(tp), acc.pop_head(tp), acc.pop_head(tp)
    for seq, b in enumerate((b0, b1, b2)):
        b.sequence = seq
        b.attempts = 1
    # Responses can come back in any order; the queue must come out sorted.
    acc.reenqueue(b2, 0.0)
    acc.reenqueue(b0, 0.0)
    acc.reenqueue(b1, 0.0)
    assert [b.sequence for b in acc.batches[tp]] == [0, 1, 2, -1]


def test_a_queue_head_has_the_earliest_deadline_through_retries_and_splits() -> None:
    # The sender scans the queues for expired batches only once a head is past its
    # deadline: that is sound only if no batch behind a head expires before it.
    acc = make_acc(batch_size=400, linger=0.0)
    tp = ("t", 0)
    for i in range(8):
        append(acc, tp, bytes([i]) * 300, float(i))
    popped = [acc.pop_head(tp) for _ in range(4)]
    for seq, b in enumerate(popped):
        b.sequence = seq
        b.attempts = 1
    # Answers come back in any order; one retried batch is split as too large.
    acc.reenqueue(popped[2], 0.0)
    acc.reenqueue(popped[0], 0.0)
    acc.reenqueue(popped[3], 0.0)
    first = acc.pop_head(tp)
    assert first is popped[0]
    acc.split(first, 200, now=50.0)
    acc.reenqueue(popped[1], 0.0)
    queued = list(acc.batches[tp])
    deadlines = [b.deadline for b in queued]
    assert deadlines == sorted(deadlines)
    assert acc.next_deadline() == min(deadlines) == queued[0].deadline
    assert acc.expired(acc.next_deadline() - 1e-6) == []
    assert acc.expired(acc.next_deadline()) == [b for b in queued if b.deadline == deadlines[0]]


def test_split_replaces_a_batch_and_resolves_every_record() -> None:
    acc = make_acc(batch_size=10_000)
    tp = ("t", 0)
    handles = [append(acc, tp, bytes([i]) * 300, 0.0)[0] for i in range(10)]
    batch = acc.pop_head(tp)
    children = acc.split(batch, 1000, now=0.0)
    assert len(children) > 1
    offset = 500
    for child in children:
        acc.pop_head(tp)
        acc.complete_batch(child, offset, -1)
        offset += child.record_count
    assert [h.result().offset for h in handles] == list(range(500, 510))
    assert acc.budget.used == 0


async def _waiter(budget: MemoryBudget, n: int, order: list[int], tag: int, timeout: float = 5.0):
    await budget.reserve(n, timeout)
    order.append(tag)


@pytest.mark.anyio
async def test_memory_waiters_are_served_first_come_first_served() -> None:
    budget = MemoryBudget(1000)
    assert budget.try_reserve(1000)
    order: list[int] = []
    async with anyio.create_task_group() as tg:
        for tag, size in enumerate([600, 100, 300]):
            tg.start_soon(_waiter, budget, size, order, tag)
            await anyio.wait_all_tasks_blocked()
        # A newcomer may not overtake the line even if it would fit.
        assert budget.try_reserve(1) is False
        budget.release(500)  # 600 does not fit yet: nobody may pass it
        await anyio.wait_all_tasks_blocked()
        assert order == []
        budget.release(500)  # now 600 and 100 and 300 fit in order
        await anyio.wait_all_tasks_blocked()
    # Grants are FIFO; the order woken tasks resume in is the scheduler's (trio shuffles).
    assert sorted(order) == [0, 1, 2]
    assert budget.used == 1000


@pytest.mark.anyio
async def test_a_release_wakes_only_the_waiters_that_fit() -> None:
    budget = MemoryBudget(1000)
    assert budget.try_reserve(1000)
    order: list[int] = []
    async with anyio.create_task_group() as tg:
        for tag in range(20):
            tg.start_soon(_waiter, budget, 100, order, tag)
            await anyio.wait_all_tasks_blocked()  # arrival order = tag order, on every backend
        budget.release(300)
        await anyio.wait_all_tasks_blocked()
        assert sorted(order) == [0, 1, 2]
        assert budget.waiters == 17
        budget.release(500)
        await anyio.wait_all_tasks_blocked()
        assert sorted(order) == list(range(8))
        budget.release(1200)
    assert sorted(order) == list(range(20))


@pytest.mark.anyio
async def test_waiting_for_memory_times_out_with_buffer_full_error() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(100)
    with pytest.raises(BufferFullError, match="buffer_memory"):
        await budget.reserve(50, 0.05)
    assert budget.waiters == 0
    assert budget.used == 100


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_no_reservation_behind() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_waiter, budget, 60, [], 0)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert budget.waiters == 0
    budget.release(100)
    assert budget.used == 0


@pytest.mark.anyio
async def test_a_grant_racing_a_cancellation_is_either_kept_or_returned() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(100)
    outcome: list[str] = []

    async def waiter() -> None:
        try:
            await budget.reserve(60, 5.0)
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        outcome.append("reserved")

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        budget.release(100)  # grants the 60 bytes to the waiter ...
        tg.cancel_scope.cancel()  # ... which is cancelled before it runs again
    # Whoever returned from reserve() owns the bytes; whoever raised owns nothing.
    assert outcome in (["reserved"], ["cancelled"])
    assert budget.used == (60 if outcome == ["reserved"] else 0)
    assert budget.waiters == 0


@pytest.mark.anyio
async def test_closing_the_budget_releases_waiters_with_producer_closed() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(100)
    errors: list[BaseException] = []

    async def wait() -> None:
        try:
            await budget.reserve(10, 5.0)
        except ProducerClosedError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        budget.close()
    assert len(errors) == 1


def test_a_settled_batch_no_longer_holds_its_records() -> None:
    acc = make_acc()
    tp = ("t", 0)
    handle, _ = append(acc, tp, b"x" * 500, 0.0)
    batch = acc.pop_head(tp)
    acc.complete_batch(batch, base_offset=7, log_append_time=-1)
    assert batch.builder.size_in_bytes == RECORD_BATCH_OVERHEAD
    assert handle.result().offset == 7


def _lz4_acc(batch_size: int = 1000, max_batch_bytes: int = 100_000) -> Accumulator:
    return make_acc(batch_size, memory=1 << 24, codec=Codec.LZ4, max_batch_bytes=max_batch_bytes)


def test_batch_size_counts_estimated_compressed_bytes_as_java_does() -> None:
    acc = _lz4_acc()
    assert acc.fill_limit("t") == 1000  # no estimate yet: 1.0
    acc.observe_compression("t", 10_000, 100)
    # Better than estimated: down by one small step only.
    assert acc.ratios["t"] == pytest.approx(0.995)
    for _ in range(400):
        acc.observe_compression("t", 10_000, 100)
    assert acc.ratios["t"] == pytest.approx(0.01)
    assert acc.fill_limit("t") == 100_000  # 1000 / 0.01, and the cap
    assert acc.fill_limit("other") == 1000  # per topic
    assert (
        acc.compressed_estimate("t", RECORD_BATCH_OVERHEAD + 10_000) < RECORD_BATCH_OVERHEAD + 102
    )
    # Worse than estimated: up at once, to at least what was seen.
    acc.observe_compression("t", 10_000, 5_000)
    assert acc.ratios["t"] == pytest.approx(0.5)
    assert acc.fill_limit("t") == 2000
    acc.observe_compression("t", 10_000, 5_100)
    assert acc.ratios["t"] == pytest.approx(0.55)  # by the step when it is larger


def test_a_batch_opened_on_a_good_ratio_takes_records_beyond_batch_size() -> None:
    acc = _lz4_acc(batch_size=1000, max_batch_bytes=20_000)
    value = b"x" * 100
    need = record_size_bound(None, len(value), None)
    acc.ratios["t"] = 0.1
    for _ in range(150):
        acc.append("t", 0, 0, None, value, None, need)
    sizes = [b.builder.size_in_bytes for b in acc.batches[("t", 0)]]
    # 10,000 uncompressed bytes fill a batch whose records compress to about 1,000.
    assert all(9_000 < s <= 10_000 for s in sizes[:-1]) and len(sizes) == 2
    # Columns and sequences fill to the same limit.
    acc2 = _lz4_acc(batch_size=1000, max_batch_bytes=20_000)
    acc2.ratios["t"] = 0.1
    spans: list = []
    append_run(acc2, "t", 0, 0, None, [value] * 150, None, 0, 150, need * 150, 0.0, spans)
    assert [b.builder.size_in_bytes for b, _, _ in spans] == sizes


def test_split_and_no_compression_keep_batch_size_as_is() -> None:
    acc = _lz4_acc()
    for _ in range(400):
        acc.observe_compression("t", 10_000, 100)
    value = b"y" * 100
    need = record_size_bound(None, len(value), None)
    acc.append("t", 0, 0, None, value, None, need)
    batch = acc.batches[("t", 0)][0]
    acc.split(batch, 1024, 0.0)
    assert acc.fill_limit("t") == 1000  # the broker refused a batch: start over
    plain = make_acc()
    plain.observe_compression("t", 10_000, 100)
    assert plain.fill_limit("t") == 1000 and plain.ratios == {}


def test_forgotten_topics_drop_their_compression_estimates() -> None:
    acc = _lz4_acc()
    for topic in ("a", "b"):
        acc.observe_compression(topic, 10_000, 100)
    acc.forget_topics(["a", "never-seen"])
    assert set(acc.ratios) == {"b"}
    assert acc.fill_limit("a") == 1000
