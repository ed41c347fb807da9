"""Record batches keyed by topic-partition and the linger rule.

All state here belongs to the event loop that runs the producer: nothing locks, and every
method runs to completion without awaiting. The sender (see ``sender.py``) asks which
batches are ready and drains them; the intake (``intake.py``) appends. Batches charge and
release their bytes in the :class:`~aioproducer.budget.MemoryBudget` (``budget.py``); the
results that point into batches are in ``results.py``, which builds on this module (never
the other way round): :class:`RecordHandle` is the core of its pure-Python
:class:`~aioproducer.DeliveryHandle`. A batch never references a handle, except through a
callback added to it, which it drops once run (handles may be of a type the cyclic
garbage collector cannot see: ``_handle.pyx``).
"""

from __future__ import annotations

import collections
import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import anyio

from ._mypyc import mypyc_attr
from .budget import MemoryBudget
from .protocol.compression import Codec
from .protocol.record_encoder import BatchState, append_stamped
from .protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder

__all__ = [
    "HANDLE_FACTORY",
    "UNTRACK",
    "Accumulator",
    "MemoryBudget",
    "ProducerBatch",
    "RecordHandle",
    "TopicPartition",
    "new_handle",
]

TopicPartition = tuple[str, int]
HeaderList = Sequence[tuple[str, "bytes | None"]]

# Java's CompressionRatioEstimator steps: an estimate worsens at once, improves slowly.
_RATIO_WORSE_STEP: Final = 0.05
_RATIO_BETTER_STEP: Final = 0.005


class ProducerBatch:
    """One record batch of one partition: the unit of sending, retrying and completion.

    A record's :class:`DeliveryHandle` points here with its index; the batch completes
    once for all of its records (one event per batch, not one future per record).
    """

    __slots__ = (
        "_callbacks",
        "_children",
        "_event",
        "attempts",
        "base_offset",
        "builder",
        "built",
        "bulk",
        "created",
        "deadline",
        "done",
        "exception",
        "full",
        "in_flight",
        "last_error",
        "limit",
        "log_append_time",
        "partition",
        "producer_epoch",
        "producer_id",
        "reserved",
        "retry_at",
        "sequence",
        "topic",
        "unsettled",
    )

    def __init__(
        self, topic: str, partition: int, builder: RecordBatchBuilder, now: float, deadline: float
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.created = now
        self.deadline = deadline
        #: Bytes this batch holds in the memory budget for its records; the accumulator
        #: keeps it equal to ``builder.size_in_bytes`` while the batch is open, and reads
        #: it as such.
        self.reserved = 0
        #: What the records' size estimates reserved beyond their encoded size, also held
        #: in the budget: given back in one go when the batch stops taking records (full,
        #: drained or finished) instead of once per record.
        self.unsettled = 0
        self.full = False
        #: Bytes (header and uncompressed records) at which the batch is full: the
        #: accumulator's fill limit for its topic when it opened (see
        #: :meth:`Accumulator.fill_limit`).
        self.limit = 0
        self.done = False
        self.in_flight = False
        self.attempts = 0
        self.retry_at = 0.0
        self.sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.built: bytes | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.exception: BaseException | None = None
        #: Why the latest attempt failed (set by the sender on a retry), for the error
        #: that names it if the batch then expires.
        self.last_error: BaseException | None = None
        self._event: anyio.Event | None = None
        self._callbacks: list[Callable[[ProducerBatch], None]] | None = None
        # Set when MESSAGE_TOO_LARGE split this batch: (child, index of its first record).
        self._children: list[tuple[ProducerBatch, int]] | None = None
        #: The bulk send (a :class:`~aioproducer.BulkDelivery`) told when this batch
        #: completes, set by its ``track()``: one field instead of a callback per batch and
        #: bulk (a batch shared by two bulk sends tells the second through a callback).
        self.bulk: Any = None

    @property
    def record_count(self) -> int:
        """Number of records in the batch."""
        return self.builder.record_count

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={self.record_count} "
            f"seq={self.sequence} attempts={self.attempts} done={self.done}>"
        )

    # -- completion ----------------------------------------------------------------------

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """Mark every record delivered, ``base_offset`` being the first record's offset."""
        if self.done:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def fail(self, exc: BaseException) -> None:
        """Mark every record of the batch failed with ``exc``."""
        if self.done:
            return
        self.exception = exc
        self._finish()

    def split_into(self, children: list[tuple[ProducerBatch, int]]) -> None:
        """Hand this batch's records over to ``children``; it completes when they all have."""
        self._children = children
        remaining = [len(children)]

        def child_done(_: ProducerBatch) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                self._finish()

        for child, _start in children:
            child.add_done_callback(child_done)

    def _finish(self) -> None:
        self.done = True
        # Handles keep their batch alive; the record bytes need not outlive delivery.
        self.built = None
        self.builder.release()
        # Nothing waits on it any more: a wait() from now on returns at once.
        event, self._event = self._event, None
        if event is not None:
            event.set()
        # Dropped once run: a handle's callback references the handle, which references
        # this batch, and the compiled handle is a type the cyclic collector cannot see
        # (``_handle.pyx``): kept, that cycle would never be freed.
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                callback(self)
        # After the callbacks (the hand-off's failure count among them), so that a bulk
        # send's waiters never see it done before its failures are counted.
        bulk, self.bulk = self.bulk, None
        if bulk is not None:
            bulk.batch_done()
        if self.exception is None and self._children is None and UNTRACK:
            self._untrack(UNTRACK[0])

    def _untrack(self, untrack: Callable[[object], None]) -> None:
        # A delivered batch now references only strings, numbers and its released builder
        # (no records, no callbacks, no error): nothing that could lead back to it, so no
        # cycle needs the collector to free it. Its handles, which callers often hold by
        # the thousand, keep it alive: left tracked, every collection would move the batch
        # and its builder to an older generation, and enough of them set off a full
        # collection, whose pause lands in the latency of every record queued meanwhile.
        # A failed batch keeps its error (whose traceback may lead back here) and a split
        # one its children: both stay tracked.
        self.last_error = None
        untrack(self.builder)
        untrack(self)

    def add_done_callback(self, callback: Callable[[ProducerBatch], None]) -> None:
        """Call ``callback(batch)`` on the loop when the batch completes (at once if done)."""
        if self.done:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def abandon(self) -> None:
        """The batch will never complete (its producer is gone): drop its callbacks unrun.

        They may reference handles, which reference the batch and which the cyclic
        collector may not see (``_handle.pyx``): kept, they would keep the batch (and its
        records' bytes) alive for good.
        """
        self._callbacks = None

    async def wait(self) -> None:
        """Wait until the batch has completed (cancelling the wait does not affect delivery)."""
        if self.done:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def failures(self, first: int = 0, count: int = -1) -> tuple[int, BaseException | None]:
        """Of records ``first:first + count`` (all from ``first`` if ``count`` < 0) of a
        completed batch: how many failed, and the first error."""
        if count < 0:
            count = self.record_count - first
        if self._children is None:
            if self.exception is not None:
                return count, self.exception
            return 0, None
        failed, error = 0, None
        for i in range(first, first + count):
            exc = self.outcome(i)[2]
            if exc is not None:
                failed += 1
                error = error or exc
        return failed, error

    def outcome(self, index: int) -> tuple[int, int, BaseException | None]:
        """``(offset, log_append_time, exception)`` of record ``index`` once done."""
        if self._children is not None:
            for child, start in reversed(self._children):
                if index >= start:
                    return child.outcome(index - start)
        if self.exception is not None:
            return -1, -1, self.exception
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        return offset, self.log_append_time, None


@mypyc_attr(allow_interpreted_subclasses=True)
class RecordHandle:
    """Package-internal: where one appended record is (its batch and its index there) and
    what its metadata reports of it; the fields of the pure-Python
    :class:`~aioproducer.DeliveryHandle`, which subclasses it (``results.py``). Where the
    hot path is compiled, handles are of the compiled twin of that class instead
    (``_handle.pyx``), built by :data:`HANDLE_FACTORY`.

    Built by :func:`new_handle`, not by a constructor with arguments: compiled
    (``speedups.py``), creating the public subclass's instance then parses no arguments
    and boxes no integers, and setting the fields runs no Python code.
    """

    __slots__ = ("_batch", "_index", "key_size", "timestamp_ms", "value_size")

    _batch: ProducerBatch
    _index: int
    timestamp_ms: int
    key_size: int
    value_size: int

    def position(self) -> tuple[ProducerBatch, int]:
        """Package-internal (instrumentation): the batch holding the record, and the
        record's index in it."""
        return self._batch, self._index

    def settled(self) -> bool:
        """Package-internal: whether the record's batch is done (compiled, unlike the
        public ``done()``)."""
        return self._batch.done

    def failure(self) -> BaseException | None:
        """Package-internal: the error of a record whose batch is done, None if it was
        delivered."""
        return self._batch.outcome(self._index)[2]


#: Package-internal: ``[factory]`` once ``results.py`` made the compiled handle
#: (``_handle.pyx``) the public :class:`~aioproducer.DeliveryHandle`, empty while that is
#: the pure-Python class. :func:`new_handle` then builds every handle with one call of it.
HANDLE_FACTORY: Final[list[Callable[[ProducerBatch, int, int, int, int], Any]]] = []


#: Package-internal: ``[untrack]`` once ``results.py`` made the compiled handle the public
#: :class:`~aioproducer.DeliveryHandle`: the function (``_handle.untrack``) that takes a
#: delivered :class:`ProducerBatch` and its builder off the cyclic collector's lists.
UNTRACK: Final[list[Callable[[object], None]]] = []


def new_handle(
    cls: type[RecordHandle],
    batch: ProducerBatch,
    index: int,
    timestamp_ms: int,
    key_size: int,
    value_size: int,
) -> Any:
    """The :class:`~aioproducer.DeliveryHandle` of record ``index`` of ``batch``, its
    timestamp and its serialized key and value sizes (-1 for None): built by the compiled
    handle's factory if there is one (:data:`HANDLE_FACTORY`), else an instance of ``cls``
    (the pure-Python class)."""
    if HANDLE_FACTORY:
        return HANDLE_FACTORY[0](batch, index, timestamp_ms, key_size, value_size)
    handle = cls()
    handle._batch = batch
    handle._index = index
    handle.timestamp_ms = timestamp_ms
    handle.key_size = key_size
    handle.value_size = value_size
    return handle


class Accumulator:
    """Per-partition queues of batches, and the rules that make a batch ready to send."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger: float,
        delivery_timeout: float,
        codec: Codec,
        compression_level: int | None,
        budget: MemoryBudget,
        transactional: bool = False,
        max_batch_bytes: int = 0,
    ) -> None:
        self.batch_size = batch_size
        #: The most uncompressed bytes a compressed batch may take when its data
        #: compresses well (``max_request_size``); never below ``batch_size``.
        self.max_batch_bytes = max(batch_size, max_batch_bytes)
        #: Per topic: the estimated compressed/uncompressed size ratio of its batches,
        #: as Java's producer keeps it (see :meth:`observe_compression`).
        self.ratios: dict[str, float] = {}
        #: Whether batches are marked transactional (a producer with a transactional id).
        self.transactional = transactional
        self.linger = linger
        self.delivery_timeout = delivery_timeout
        self.codec = codec
        self.compression_level = compression_level
        self.budget = budget
        #: Only partitions that hold at least one batch; empty deques are removed.
        self.batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        self.flushing = 0
        self.closing = False
        #: Every batch not yet completed, in creation order (for flush and close).
        self.incomplete: dict[ProducerBatch, None] = {}
        #: Whether the batch the latest :meth:`append` went into is full (set by it).
        self.last_batch_full = False
        #: That batch's :attr:`ProducerBatch.limit` (set by :meth:`append` too).
        self.last_batch_limit = batch_size
        #: Called with every batch :meth:`append` and ``run_append.append_run`` open; the intake
        #: sets it to settle other threads' records a batch at a time.
        self.on_new_batch: Callable[[ProducerBatch], None] | None = None
        # The latest batch :meth:`append` opened, and its partition: records in a row for
        # one partition (the sticky partitioner's) find it without a queue lookup. Valid
        # while it takes records: a batch stops taking them (``full``) before it leaves
        # its queue (drained, failed or completed).
        self._open_topic = ""
        self._open_partition = -1
        self._open_batch: ProducerBatch | None = None

    def append(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        key: bytes | bytearray | None,
        value: bytes | bytearray | None,
        headers: HeaderList | None,
        reserved: int,
        now: float | None = None,
    ) -> tuple[ProducerBatch, int, bool]:
        """Append a record whose ``reserved`` bytes (its estimate) are already reserved.

        Returns the batch it went into, its index there, and whether the sender should be
        woken (a batch became full or a new batch started, which moves the earliest linger
        deadline). ``now`` (the monotonic clock if None) dates a batch the record opens.
        """
        # Per record, this is the hottest method: an open batch's ``reserved`` is its
        # builder's ``size_in_bytes`` (the header plus every record's exact size, see
        # below and run_append.py), read here without a property call per record.
        batch = self._open_batch
        if (
            batch is None
            or batch.full
            or partition != self._open_partition
            or topic != self._open_topic
        ):
            dq = self.batches.get((topic, partition))
            batch = dq[-1] if dq else None
        if (
            batch is None
            or batch.full
            or (batch.reserved + reserved > batch.limit and batch.reserved > RECORD_BATCH_OVERHEAD)
        ):
            if batch is not None:
                batch.full = True
                self.settle(batch)
            batch = self.new_batch(topic, partition, time.monotonic() if now is None else now)
            tp = (topic, partition)
            dq = self.batches.get(tp)
            if dq is None:
                dq = self.batches[tp] = collections.deque()
            dq.append(batch)
            wake = True
            # The header is charged to the batch, outside the record's own estimate.
            self.budget.charge(RECORD_BATCH_OVERHEAD)
            batch.reserved = RECORD_BATCH_OVERHEAD
        else:
            wake = False
        self._open_batch = batch
        self._open_topic = topic
        self._open_partition = partition
        # The builder's count read directly, and its append called as the function it
        # delegates to (both compiled): its property and method are Python calls, which
        # compiled code pays for in full, once per record. Typed as its compiled base,
        # the builder's fields are read in place.
        state: BatchState = batch.builder
        index = state.count
        added = append_stamped(state, timestamp_ms, key, value, headers or ())
        # What the estimate over-reserved is given back when the batch is settled.
        batch.unsettled += reserved - added
        size = batch.reserved + added
        batch.reserved = size
        if size >= batch.limit:
            batch.full = True
            self.settle(batch)
            wake = True
        self.last_batch_full = batch.full
        self.last_batch_limit = batch.limit
        return batch, index, wake

    def fill_limit(self, topic: str) -> int:
        """The uncompressed bytes at which a new batch of ``topic`` is full.

        ``batch_size`` counts bytes as sent, as in Java's producer: with compression, a
        batch takes records until their estimated compressed size reaches it (the topic's
        observed ratio), up to ``max_batch_bytes`` of uncompressed records.
        """
        ratio = self.ratios.get(topic, 1.0)
        if ratio >= 1.0:
            return self.batch_size
        return min(self.max_batch_bytes, max(self.batch_size, int(self.batch_size / ratio)))

    def observe_compression(self, topic: str, uncompressed: int, compressed: int) -> None:
        """Update ``topic``'s compression ratio estimate from one built batch's record
        bytes: up at once (by at least 0.05) when it compressed worse than estimated,
        down by at most 0.005 per batch when better, as Java's estimator does, so one
        well-compressed batch does not make the next ones too large."""
        if uncompressed <= 0 or self.codec is Codec.NONE:
            return
        observed = compressed / uncompressed
        current = self.ratios.get(topic, 1.0)
        if observed > current:
            self.ratios[topic] = max(current + _RATIO_WORSE_STEP, observed)
        elif observed < current:
            self.ratios[topic] = max(current - _RATIO_BETTER_STEP, observed)

    def forget_topics(self, topics: Iterable[str]) -> None:
        """Drop the compression ratio estimates of ``topics``, which left the metadata (a
        producer writing to ever new topics keeps no estimate per topic it stopped using)."""
        for topic in topics:
            self.ratios.pop(topic, None)

    def compressed_estimate(self, topic: str, size: int) -> int:
        """``size`` bytes of ``topic``'s uncompressed batch as their estimated bytes on
        the wire (the header is not compressed)."""
        ratio = self.ratios.get(topic, 1.0)
        if ratio >= 1.0 or size <= RECORD_BATCH_OVERHEAD:
            return size
        return RECORD_BATCH_OVERHEAD + int((size - RECORD_BATCH_OVERHEAD) * ratio) + 1

    def new_batch(self, topic: str, partition: int, now: float) -> ProducerBatch:
        """Package-internal (the accumulator's and ``run_append.py``'s): a new empty batch
        of ``topic``'s ``partition``, counted incomplete, not queued (the caller appends it
        to the partition's queue)."""
        builder = RecordBatchBuilder(
            self.codec, self.compression_level, transactional=self.transactional
        )
        batch = ProducerBatch(topic, partition, builder, now, now + self.delivery_timeout)
        batch.limit = self.fill_limit(topic)
        self.incomplete[batch] = None
        if self.on_new_batch is not None:
            self.on_new_batch(batch)
        return batch

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that must be retried back at the head of its partition's queue.

        Batches with sequence numbers stay sorted by sequence, so a retry never overtakes
        an earlier batch of the same partition.
        """
        batch.in_flight = False
        batch.retry_at = retry_at
        tp = (batch.topic, batch.partition)
        dq = self.batches.get(tp)
        if dq is None:
            self.batches[tp] = collections.deque([batch])
            return
        if batch.sequence < 0:
            dq.appendleft(batch)
            return
        pos = 0
        for queued in dq:
            if queued.sequence < 0 or queued.attempts == 0 or queued.sequence > batch.sequence:
                break
            pos += 1
        dq.insert(pos, batch)

    def complete_batch(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        """Deliver ``batch`` and give its memory back."""
        self._forget(batch)
        batch.complete(base_offset, log_append_time)

    def fail_batch(self, batch: ProducerBatch, exc: BaseException) -> None:
        """Fail ``batch`` (and remove it from its queue if it is still queued)."""
        if not batch.in_flight:
            dq = self.batches.get((batch.topic, batch.partition))
            if dq is not None:
                with contextlib.suppress(ValueError):
                    dq.remove(batch)
                if not dq:
                    del self.batches[(batch.topic, batch.partition)]
        self._forget(batch)
        batch.fail(exc)

    def settle(self, batch: ProducerBatch) -> None:
        """Package-internal (the accumulator's and ``run_append.py``'s): give back what the
        estimates of a batch that takes no more records over-reserved."""
        if batch.unsettled:
            self.budget.release(batch.unsettled)
            batch.unsettled = 0

    def _forget(self, batch: ProducerBatch) -> None:
        # A batch that completes or fails takes no more records (queued ones may fail).
        batch.full = True
        if batch in self.incomplete:
            del self.incomplete[batch]
            self.budget.release(batch.reserved + batch.unsettled)
            batch.reserved = 0
            batch.unsettled = 0

    def split(self, batch: ProducerBatch, max_bytes: int, now: float) -> list[ProducerBatch]:
        """Split an oversized batch into smaller ones that replace it at its queue's head.

        The topic's compression ratio estimate starts over (at 1.0): the batch was
        filled on an estimate the broker has just refused."""
        self.ratios.pop(batch.topic, None)
        children: list[tuple[ProducerBatch, int]] = []
        start = 0
        for builder in batch.builder.split(max_bytes):
            child = ProducerBatch(batch.topic, batch.partition, builder, now, batch.deadline)
            child.full = True
            # The children take the parent's place in its partition's sequence: a later
            # batch that comes back for a retry (say, out of order because the parent was
            # never written) must queue behind them, not overtake them. They count as
            # retries, so each goes alone until acknowledged.
            child.attempts = max(batch.attempts, 1)
            if batch.sequence >= 0:
                child.sequence = batch.sequence + start
            children.append((child, start))
            start += builder.record_count
            self.incomplete[child] = None
        # The children inherit the parent's memory reservation.
        if children:
            children[0][0].reserved = batch.reserved + batch.unsettled
        batch.reserved = 0
        batch.unsettled = 0
        self.incomplete.pop(batch, None)
        batch.split_into(children)
        dq = self.batches.setdefault((batch.topic, batch.partition), collections.deque())
        for child, _ in reversed(children):
            dq.appendleft(child)
        return [child for child, _ in children]

    # -- readiness -------------------------------------------------------------------------

    def ready(
        self, now: float, sendable: Callable[[TopicPartition, ProducerBatch], bool]
    ) -> tuple[list[TopicPartition], float]:
        """Partitions whose head batch may be sent now, and seconds until the next may be.

        A head batch is ready when it is full, has lingered ``linger`` seconds, a flush or
        close is in progress, or senders are waiting for memory; a retried batch when its
        backoff is over. ``sendable`` is the sender's veto (leader known, not muted, ...).
        """
        urgent = self.flushing > 0 or self.closing or self.budget.waiters > 0
        linger = self.linger
        ready: list[TopicPartition] = []
        next_delay = math.inf
        for tp, dq in self.batches.items():
            batch = dq[0]
            if batch.attempts:
                due = batch.retry_at
            elif batch.full or urgent or len(dq) > 1:
                due = now
            else:
                due = batch.created + linger
            if due <= now:
                if sendable(tp, batch):
                    ready.append(tp)
            elif due - now < next_delay:
                next_delay = due - now
        return ready, next_delay

    def pop_head(self, tp: TopicPartition) -> ProducerBatch:
        """Remove and return the head batch of ``tp`` (which must exist)."""
        dq = self.batches[tp]
        batch = dq.popleft()
        if not dq:
            del self.batches[tp]
        batch.full = True
        self.settle(batch)
        return batch

    def head(self, tp: TopicPartition) -> ProducerBatch | None:
        """The head batch of ``tp`` if any."""
        dq = self.batches.get(tp)
        return dq[0] if dq else None

    def expired(self, now: float) -> list[ProducerBatch]:
        """Queued (not in-flight) batches past their delivery deadline."""
        out: list[ProducerBatch] = []
        for dq in self.batches.values():
            for batch in dq:
                if batch.deadline <= now:
                    out.append(batch)
        return out

    def next_deadline(self) -> float:
        """The earliest delivery deadline of a queued batch (``inf`` if none)."""
        return min((dq[0].deadline for dq in self.batches.values()), default=math.inf)

    def busy_topics(self) -> set[str]:
        """Topics with a batch not yet completed (queued or in flight)."""
        return {batch.topic for batch in self.incomplete}

    def queued_batches(self) -> Iterable[ProducerBatch]:
        """Every batch still in a queue."""
        for dq in self.batches.values():
            yield from dq
