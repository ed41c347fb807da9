"""Records from other threads into a producer running on its loop: the engine side of
:class:`~aioproducer.SyncProducer`.

Calling threads check records themselves (``Intake.record``/``Intake.columns``), so bad
input raises in the caller, then hand them to a :class:`Handoff`. It admits them against
the producer's memory budget under its own lock (waiting for space up to ``max_block_ms``)
and adds them to a pending chunk; the loop is woken once when that chunk goes from empty
to non-empty and appends the whole chunk in one go, so crossing threads costs one wake-up
per chunk, not one per record. Outcomes are settled a batch at a time: one callback per
batch wakes the threads that wait and counts failures. An :class:`Engine` runs the
producer on a :class:`~aioproducer.LoopRunner` with its hand-off, from start to close.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, cast

from .accumulator import UNTRACK, ProducerBatch
from .cluster import TopicInfo
from .config import ProducerConfig
from .errors import (
    BufferFullError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
)
from .intake import ColumnRun, Intake, PreparedRecord, RecordFields
from .producer import Producer
from .results import BulkDelivery
from .runner import LoopRunner
from .sending import FutureCallback, HandoffCore, Pending, PromiseCore, Tally, new_promise

__all__ = [
    "CLOSED",
    "CLOSING",
    "NEW",
    "RUNNING",
    "BulkEnd",
    "Engine",
    "Handoff",
    "Pending",
    "Tally",
]

P = TypeVar("P", bound=PromiseCore)

#: An :class:`Engine`'s states.
NEW, RUNNING, CLOSING, CLOSED = range(4)

# Entries moved from the pending chunk into the accumulator per loop callback: between two
# slices the sender gets to run, so full batches leave while a large chunk is appended.
_SLICE = 4096

#: Bytes (by their estimates) of bulk sends handed over and not yet wholly appended that
#: may be joined by another one. A bulk send's columns (an Arrow batch and its copy grouped
#: by partition) stay alive until its last run is encoded, outside ``buffer_memory``'s
#: count of encoded bytes: without a bound, a thread sending Arrow batches faster than the
#: broker takes them would hold columns in proportion to ``buffer_memory`` as well.
BULK_AHEAD = 1 << 20


class BulkEnd(NamedTuple):
    """Follows a bulk send's last :class:`~aioproducer.intake.ColumnRun`: from here on
    its :class:`~aioproducer.BulkDelivery` waits for its batches."""

    bulk: BulkDelivery
    #: Each appended record's position in the input, when grouping reordered them.
    order: Sequence[int] | None
    #: The bulk's bytes counted in :attr:`Handoff.bulks_ahead`.
    ahead: int = 0


Entry = PreparedRecord | RecordFields | ColumnRun | BulkEnd


def _untrack_chunk(pending: Pending, untrack: Callable[[object], None]) -> None:
    """Take a chunk the loop has wholly taken, none of whose records failed on the way,
    off the cyclic collector's lists, with its lists (see ``accumulator.ProducerBatch``).

    Its promises keep it alive until they are dropped, often long after delivery, and at
    a few thousand records a second a chunk holds a few records: tracked, its five
    objects would be moved to an older generation by each collection until a full one
    ran. Nothing is added to it any more, and it references only batches (which never
    reference a promise but through a callback they drop once run) and integers: no
    cycle can lead back to it. A chunk with an error among its outcomes (whose
    traceback may) or with callbacks still waiting for their record stays tracked.
    """
    if pending.callbacks:
        return
    for part in (pending.entries, pending.outcomes, pending.indexes, pending.callbacks):
        untrack(part)
    untrack(pending)


class Handoff(HandoffCore, Generic[P]):
    """A producer's intake for other threads (package-internal: used by SyncProducer).

    Thread side (any thread): :meth:`put`, :meth:`put_many`, :meth:`put_runs`,
    :meth:`topic_info`, :meth:`wait_for`, :meth:`when_done`, :meth:`tally`, :meth:`close`.
    ``cond`` guards the pending chunk, the counters and ``open``. Loop side: :meth:`pump`
    and the batch callbacks. ``promise`` is the class of what :meth:`put` returns for a
    record (:func:`~aioproducer.sending.new_promise` builds it). The common cases per record (a record admitted at once, a record appended) are
    :class:`~aioproducer.sending.HandoffCore`'s, compiled.
    """

    def __init__(
        self,
        intake: Intake,
        runner: LoopRunner,
        max_block: float,
        promise: type[P],
    ) -> None:
        super().__init__(intake, promise, self._wake)
        self.runner = runner
        self.max_block = max_block
        # The hot paths take ``lock`` itself: entering the Condition costs a Python-level
        # call per record; waits and notifications go through ``cond`` on the same lock.
        self.cond = threading.Condition(self.lock)
        self.waiting = 0
        self.space_waiters = 0
        self.urgent = False
        # Loop side: chunks being moved into the accumulator, [chunk, next index].
        self.backlog: collections.deque[list[Any]] = collections.deque()
        self.pump_scheduled = False
        #: Whether this is a forked child of the loop's process (Engine.forget_callbacks):
        #: then nothing will complete the records handed over, nor run their callbacks.
        self.orphaned = False
        #: Estimated bytes of the bulk sends handed over whose end the loop has not
        #: reached (guarded by ``cond``; see :data:`BULK_AHEAD`).
        self.bulks_ahead = 0
        intake.watch_batches(self._watch)

    # -- threads -------------------------------------------------------------------------------

    def topic_info(self, topic: str) -> TopicInfo:
        """The topic's metadata, waiting for it up to ``max_block_ms`` if not loaded."""
        info = self.cluster.snapshot.topics.get(topic)
        if info is None:
            info = self.runner.call(self.intake.wait_for_topic, topic, self.max_block)
        return info

    def put(self, record: RecordFields) -> P:
        """Hand one checked record over, waiting for buffer space as needed (the general
        case of :meth:`~aioproducer.sending.HandoffCore.send`)."""
        self.topic_info(record[0])  # waits for the topic's metadata if it is not loaded
        return self.put_many([record])[0]

    def put_many(self, records: Sequence[RecordFields]) -> list[P]:
        """Hand checked records (of topics with loaded metadata) over, in order, waiting
        for buffer space as needed."""
        for record in records:
            if record[5] is not None:
                self.intake.check_partition(record[0], record[5], self.topic_info(record[0]))
        out: list[P] = []
        promise = self.promise
        cond = self.cond
        total = sum(record[6] for record in records)
        with cond:
            self._check_open()
            pending = self.pending
            entries = pending.entries
            if pending.nbytes + self.budget.used + total <= self.limit:
                # Room for all of them: one extend, and the promises are made after the
                # lock is released (holding it longer would stall the loop's next take).
                first = len(entries)
                entries.extend(records)
                pending.nbytes += total
                self.counts.records += len(records)
                self._schedule_pump()
                fast = True
            else:
                fast = False
        if fast:
            return [
                cast(P, new_promise(promise, self, pending, first + i, record))
                for i, record in enumerate(records)
            ]
        with cond:
            self._check_open()
            added = 0
            try:
                for record in records:
                    need = record[6]
                    if self.pending.nbytes + self.budget.used + need > self.limit:
                        self._wait_for_space(need)
                    pending = self.pending
                    pending.entries.append(record)
                    pending.nbytes += need
                    added += 1
                    pos = len(pending.entries) - 1
                    out.append(cast(P, new_promise(promise, self, pending, pos, record)))
            finally:
                self.counts.records += added
                if self.pending.entries:
                    self._schedule_pump()
        return out

    def put_runs(
        self, runs: list[ColumnRun], bulk: BulkDelivery, order: Sequence[int] | None
    ) -> None:
        """Hand a prepared bulk send over, run by run, waiting for space as needed.

        It waits first, if earlier bulk sends are still being appended and together with
        this one would exceed :data:`BULK_AHEAD`: the columns of a bulk send handed over
        live until its last run is encoded, so at most about one large bulk's columns are
        alive beyond ``buffer_memory`` (plus the caller's own). ``order``: as
        :attr:`BulkEnd.order`. Each run is encoded ahead first, outside the lock, where
        that spares the loop (:meth:`Intake.encode_ahead`): one run's bytes at a time.
        """
        total = sum(run.size for run in runs)
        ahead = 0
        try:
            with self.cond:
                self._check_open()
                if self.bulks_ahead and self.bulks_ahead + total > BULK_AHEAD:
                    self._wait_for_bulks(total)
                self.bulks_ahead += total
                ahead = total
            for run in runs:
                self.intake.encode_ahead(run)
                with self.cond:
                    self._check_open()
                    if self.pending.nbytes + self.budget.used + run.size > self.limit:
                        self._wait_for_space(run.size)
                    pending = self.pending
                    pending.entries.append(run)
                    pending.nbytes += run.size
                    self.counts.records += run.stop - run.start
        finally:
            # The end needs no space, so it goes in even when waiting for space failed:
            # the bulk then completes with what went in.
            with self.cond:
                self.pending.entries.append(BulkEnd(bulk, order, ahead))
                self._schedule_pump()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``predicate()`` (re-checked whenever a batch completes), at most
        ``timeout`` seconds; returns its last value."""
        with self.cond:
            self.waiting += 1
            try:
                return self.cond.wait_for(predicate, timeout)
            finally:
                self.waiting -= 1

    def outcome(self, pending: Pending, pos: int) -> ProducerBatch | BaseException | None:
        """Where entry ``pos`` of ``pending`` went: the batch holding the record, or the
        error that kept it out; None until the loop has taken it."""
        outcomes = pending.outcomes
        return outcomes[pos] if pos < len(outcomes) else None

    def when_done(self, pending: Pending, pos: int, callback: FutureCallback) -> bool:
        """Call ``callback`` on the loop once record ``pos`` of ``pending`` is done;
        ``False`` if it already is (the caller runs it)."""
        if self.orphaned:
            return True  # nothing completes the record in this process: never runs
        with self.cond:
            out = self.outcome(pending, pos)
            if out is None:
                pending.callbacks.append((pos, callback))
                return True
        if isinstance(out, ProducerBatch) and not out.done:
            # On the batch itself, which calls it with the batch: no closure per record.
            self.runner.call_soon(out.add_done_callback, callback)
            return True
        return False

    def tally(self) -> Tally:
        """Records taken and failed so far."""
        with self.cond:
            t = self.counts
            return Tally(t.records, t.failed, t.first_error)

    def pending_count(self) -> int:
        """Entries handed over but not yet taken by the loop."""
        with self.cond:
            return len(self.pending.entries)

    def close(self) -> None:
        """Refuse further records and wake every waiting thread (idempotent)."""
        with self.cond:
            self.open = False
            self.cond.notify_all()

    def _check_open(self) -> None:
        if not self.open:
            raise ProducerClosedError("the producer is closed")

    def _schedule_pump(self) -> None:
        # Called with cond held.
        if not self.wake_scheduled:
            self.wake_scheduled = True
            self._wake()

    def _wake(self) -> None:
        # Called with cond held, once per chunk: the loop takes the chunk soon.
        self.runner.call_soon(self._pump_soon)

    def _wait_for_bulks(self, total: int) -> None:
        # Called with cond held. The earlier bulks' runs are admitted already: they only
        # need the loop to append them, which ends them (_pump_bulk notifies).
        if self.pending.entries:
            self._schedule_pump()
        self._wait_while(
            lambda: bool(self.bulks_ahead) and self.bulks_ahead + total > BULK_AHEAD,
            "earlier bulk sends were not appended",
        )

    def _wait_for_space(self, need: int) -> None:
        # Called with cond held. What is pending must move on, and batches must leave
        # without lingering while someone waits (as the async producer does for waiters).
        self.space_waiters += 1
        try:
            if self.pending.entries:
                self._schedule_pump()
            self.runner.call_soon(self._make_urgent)
            self._wait_while(
                lambda: self.pending.nbytes + self.budget.used + need > self.limit,
                f"no room in buffer_memory ({self.limit} bytes) for a {need}-byte record",
            )
            self._check_open()
        finally:
            self.space_waiters -= 1

    def _wait_while(self, blocked: Callable[[], bool], what: str) -> None:
        # Called with cond held: wait until not blocked(), at most max_block_ms (then
        # BufferFullError: "<what> within max_block_ms"). Woken by every completed batch
        # and appended bulk send; the timeout also covers bytes that free up without one
        # (records that fail while being taken).
        deadline = time.monotonic() + self.max_block
        while blocked():
            self._check_open()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"{what} within max_block_ms ({self.max_block * 1000:.0f} ms)"
                )
            self.waiting += 1
            try:
                self.cond.wait(min(remaining, 0.05))
            finally:
                self.waiting -= 1

    # -- the loop ------------------------------------------------------------------------------

    def _make_urgent(self) -> None:
        if self.urgent or not self.intake.accepting:
            return
        self.urgent = True
        self.intake.hurry(True)

    def _pump_soon(self) -> None:
        self.pump_scheduled = False
        self.pump(_SLICE)

    def _take_pending(self) -> None:
        with self.lock:
            pending = self.pending
            self.wake_scheduled = False
            if not pending.entries:
                return
            self.pending = Pending()
            # The entries were admitted against the budget by the threads; they are
            # charged to it here, and each append then trims its estimate to size.
            self.budget.charge(pending.nbytes)
        # [chunk, entries taken so far, records of it that failed before reaching a batch]
        self.backlog.append([pending, 0, 0])

    def pump(self, limit: float) -> None:
        """Move up to ``limit`` entries (oldest chunk first) into the accumulator (loop)."""
        self._take_pending()
        topics = self.cluster.snapshot.topics
        moved = 0
        failed_early = 0
        first_error: BaseException | None = None
        while self.backlog and moved < limit:
            entry = self.backlog[0]
            pending: Pending = entry[0]
            start = entry[1]
            entries = pending.entries
            stop = int(min(len(entries), start + limit - moved))
            failed, error = self.take(pending, start, stop, topics, self._pump_bulk)
            if failed:
                failed_early += failed
                first_error = first_error or error
                entry[2] += failed
            moved += stop - start
            # Entries are dropped from the chunk as they go (promises keep only outcomes).
            taken = stop >= len(entries)
            if taken:
                self.backlog.popleft()
                pending.entries = []
            else:
                entry[1] = stop
            if pending.callbacks:
                self._settle_early(pending)
            if taken and not entry[2] and UNTRACK:
                _untrack_chunk(pending, UNTRACK[0])
            topics = self.cluster.snapshot.topics
        if failed_early:
            with self.cond:
                self.counts.failed += failed_early
                if self.counts.first_error is None:
                    self.counts.first_error = first_error
                self.cond.notify_all()
        if self.urgent and not self.space_waiters and self.intake.accepting:
            # Nobody waits for space any more: batches may linger again.
            self.urgent = False
            self.intake.hurry(False)
        if self.backlog and not self.pump_scheduled:
            self.pump_scheduled = True
            self.runner.loop.call_soon(self._pump_soon)

    def _pump_bulk(
        self, entry: Entry, topics: dict[str, TopicInfo]
    ) -> tuple[int, BaseException | None]:
        """Append one run or end a bulk send; returns (records that failed, the error)."""
        if type(entry) is BulkEnd:
            if entry.ahead:
                with self.cond:
                    self.bulks_ahead -= entry.ahead
                    self.cond.notify_all()
            entry.bulk.track(entry.order)
            entry.bulk.add_done_callback(self._on_bulk_done)
            return 0, None
        assert type(entry) is ColumnRun
        info = topics.get(entry.bulk.topic) or self.cluster.recall(entry.bulk.topic)
        try:
            if info is None:
                self.budget.release(entry.size)
                raise UnknownTopicOrPartitionError(
                    f"topic {entry.bulk.topic!r} is no longer in the cluster's metadata"
                )
            self.intake.append_run(entry, info)
        except Exception as exc:
            # The reservation of what was not appended is back; those records fail.
            return entry.stop - entry.start - entry.appended, exc
        return 0, None

    def _on_bulk_done(self, _bulk: BulkDelivery) -> None:
        with self.cond:
            if self.waiting:
                self.cond.notify_all()

    def _settle_early(self, pending: Pending) -> None:
        now: list[FutureCallback] = []
        with self.cond:
            keep = []
            for pos, callback in pending.callbacks:
                out = self.outcome(pending, pos)
                if out is None:
                    keep.append((pos, callback))
                elif isinstance(out, ProducerBatch) and not out.done:
                    out.add_done_callback(callback)
                else:
                    now.append(callback)
            pending.callbacks = keep
        for callback in now:
            callback()

    def _watch(self, batch: ProducerBatch) -> None:
        batch.add_done_callback(self._on_batch_done)

    def _on_batch_done(self, batch: ProducerBatch) -> None:
        failed, first = batch.failures()
        with self.cond:
            if failed:
                self.counts.failed += failed
                if self.counts.first_error is None:
                    self.counts.first_error = first
            if self.waiting:
                self.cond.notify_all()
            if self.urgent and not self.space_waiters:
                self.urgent = False
                self.intake.hurry(False)

    def drain(self) -> None:
        """Move everything pending into the accumulator now (loop; before closing)."""
        self.pump(math.inf)


class Engine(Generic[P]):
    """A :class:`~aioproducer.Producer` running on a :class:`~aioproducer.LoopRunner` and
    fed through a :class:`Handoff` (package-internal: one per SyncProducer and process).

    ``state`` is written under ``lock``; ``producer``, ``intake`` and ``handoff`` are set
    on the loop before ``state`` becomes ``RUNNING`` and never change after.
    """

    intake: Intake
    handoff: Handoff[P]

    def __init__(
        self,
        kwargs: dict[str, Any],
        config: ProducerConfig,
        runner: LoopRunner,
        promise: type[P],
    ):
        self.kwargs = kwargs
        self.config = config
        self.runner = runner
        self.promise = promise
        self.lock = threading.Lock()
        self.state = NEW
        self.producer: Producer | None = None
        self.stop_requested: Any = None
        self.close_timeout: float | None = None
        self.main_future: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.main_future = self.runner.submit(self._main, started)
        started.result()

    async def _main(self, started: concurrent.futures.Future[None]) -> None:
        try:
            producer = Producer(**self.kwargs)
            await producer.start()
        except BaseException as exc:
            with self.lock:
                self.state = CLOSED
            started.set_exception(exc)
            return
        self.producer = producer
        self.intake = producer.intake
        max_block = self.config.max_block_ms / 1000
        self.handoff = Handoff(producer.intake, self.runner, max_block, self.promise)
        self.stop_requested = asyncio.Event()
        with self.lock:
            self.state = RUNNING
        started.set_result(None)
        try:
            await self.stop_requested.wait()
        finally:
            try:
                # Whatever the threads handed over before close() goes out (or fails) too.
                self.handoff.drain()
            finally:
                await producer.close(self.close_timeout)
                with self.lock:
                    self.state = CLOSED
                self.handoff.close()

    def forget_callbacks(self) -> None:
        """In a process forked from this engine's: its loop thread does not exist here, so
        nothing will complete the records it holds. Drop every callback still waiting
        for one (in the hand-off's chunks and in the batches): each references its
        :class:`~aioproducer.DeliveryFuture`, which references the hand-off and,
        compiled, is invisible to the cyclic collector (``_future.pyx``): kept, they
        would keep the parent's producer alive in the child for good."""
        handoff: Handoff[P] | None = getattr(self, "handoff", None)
        if handoff is not None:
            handoff.orphaned = True
            for pending in (handoff.pending, *(entry[0] for entry in handoff.backlog)):
                pending.callbacks = []
        if self.producer is not None:
            self.producer.abandon_batches()

    def check_running(self) -> None:
        if self.state != RUNNING:
            raise ProducerClosedError("the producer is closed")

    def request_close(self, timeout: float | None) -> concurrent.futures.Future[None] | None:
        with self.lock:
            if self.state == NEW or self.main_future is None:
                self.state = CLOSED
                return None
            first = self.state == RUNNING
            if first:
                self.state = CLOSING
                self.close_timeout = timeout
        if first:
            # Threads waiting for space give up now.
            self.handoff.close()
            self.runner.call_soon(self._on_stop)
        return self.main_future

    def _on_stop(self) -> None:
        if self.stop_requested is not None:
            self.stop_requested.set()

    async def flush(self, timeout: float | None) -> None:
        self.handoff.drain()
        assert self.producer is not None
        await self.producer.flush(timeout)

    async def metrics(self) -> dict[str, float]:
        assert self.producer is not None
        return self.producer.metrics()

    async def transact(self, step: Callable[[Producer], Awaitable[None]]) -> None:
        """Run a transaction step (begin, commit, abort, offsets) on the loop."""
        # Records threads handed over before the call belong to the transaction it ends.
        self.handoff.drain()
        assert self.producer is not None
        await step(self.producer)

    async def partitions_for(self, topic: str) -> list[int]:
        assert self.producer is not None
        return await self.producer.partitions_for(topic)
