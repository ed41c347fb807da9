"""Record batches keyed by topic-partition, the linger rule and the buffer-memory budget.

All state here belongs to the event loop that runs the producer: nothing locks, and every
method except :meth:`MemoryBudget.reserve` runs to completion without awaiting. The sender
(see ``sender.py``) asks which batches are ready and drains them; ``send()`` appends.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import math
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import anyio

from .errors import BufferFullError, ProducerClosedError
from .protocol.compression import Codec
from .protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder

__all__ = [
    "Accumulator",
    "BulkDelivery",
    "DeliveryHandle",
    "MemoryBudget",
    "ProducerBatch",
    "RecordMetadata",
    "TopicPartition",
]

TopicPartition = tuple[str, int]
HeaderList = Sequence[tuple[str, "bytes | None"]]

# Upper bound of a record's framing beyond key, value and headers: length, attributes,
# timestamp delta, offset delta, key length, value length and header count varints.
_RECORD_FRAMING_MAX = 5 + 1 + 10 + 5 + 5 + 5 + 5


@dataclasses.dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a delivered record landed.

    ``offset`` is -1 with ``acks=0`` (the broker does not answer) and ``timestamp_ms`` is the
    broker's log-append time when the topic uses LogAppendTime, else the record's own.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    serialized_key_size: int
    serialized_value_size: int


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
        "created",
        "deadline",
        "done",
        "exception",
        "full",
        "in_flight",
        "log_append_time",
        "partition",
        "producer_epoch",
        "producer_id",
        "reserved",
        "retry_at",
        "sequence",
        "topic",
    )

    def __init__(
        self, topic: str, partition: int, builder: RecordBatchBuilder, now: float, deadline: float
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.created = now
        self.deadline = deadline
        self.reserved = 0
        self.full = False
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
        self._event: anyio.Event | None = None
        self._callbacks: list[Callable[[ProducerBatch], None]] | None = None
        # Set when MESSAGE_TOO_LARGE split this batch: (child, index of its first record).
        self._children: list[tuple[ProducerBatch, int]] | None = None

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
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                callback(self)

    def add_done_callback(self, callback: Callable[[ProducerBatch], None]) -> None:
        """Call ``callback(batch)`` on the loop when the batch completes (at once if done)."""
        if self.done:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    async def wait(self) -> None:
        """Wait until the batch has completed (cancelling the wait does not affect delivery)."""
        if self.done:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

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


class DeliveryHandle:
    """The pending delivery of one record: ``await handle`` gives its :class:`RecordMetadata`.

    Awaiting is optional and may be repeated; cancelling an ``await handle`` never cancels
    the delivery. A failed delivery raises a :class:`~aioproducer.errors.KafkaError`.
    """

    __slots__ = ("_batch", "_index", "key_size", "timestamp_ms", "value_size")

    def __init__(
        self, batch: ProducerBatch, index: int, timestamp_ms: int, key_size: int, value_size: int
    ) -> None:
        self._batch = batch
        self._index = index
        self.timestamp_ms = timestamp_ms
        self.key_size = key_size
        self.value_size = value_size

    @property
    def topic(self) -> str:
        """The record's topic."""
        return self._batch.topic

    @property
    def partition(self) -> int:
        """The partition chosen for the record."""
        return self._batch.partition

    def done(self) -> bool:
        """Whether the record has been delivered or has failed."""
        return self._batch.done

    def result(self) -> RecordMetadata:
        """The metadata of a delivered record; raises its error if it failed.

        Raises ``RuntimeError`` if the delivery is still pending.
        """
        if not self._batch.done:
            raise RuntimeError("the record's delivery is still pending; await the handle")
        offset, log_append_time, exc = self._batch.outcome(self._index)
        if exc is not None:
            raise exc
        return RecordMetadata(
            self._batch.topic,
            self._batch.partition,
            offset,
            log_append_time if log_append_time >= 0 else self.timestamp_ms,
            self.key_size,
            self.value_size,
        )

    def exception(self) -> BaseException | None:
        """The error of a failed delivery, ``None`` if delivered (``RuntimeError`` if pending)."""
        if not self._batch.done:
            raise RuntimeError("the record's delivery is still pending; await the handle")
        return self._batch.outcome(self._index)[2]

    def add_done_callback(self, callback: Callable[[DeliveryHandle], Any]) -> None:
        """Call ``callback(handle)`` on the producer's loop once the record is done."""
        self._batch.add_done_callback(lambda _batch: callback(self))

    async def wait(self) -> RecordMetadata:
        """Wait for the delivery and return its metadata (same as ``await handle``)."""
        batch = self._batch
        if not batch.done:
            await batch.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        state = "done" if self._batch.done else "pending"
        return f"<DeliveryHandle {self.topic}-{self.partition} #{self._index} {state}>"


class BulkDelivery:
    """The pending delivery of the records of one bulk send, as a whole.

    ``await bulk`` (or :meth:`wait`) returns it once every record has an outcome; nothing
    is tracked per record: it completes when the batches holding its records have (one
    callback per batch). Then :attr:`delivered`, :attr:`failed` and :attr:`first_error`
    summarise the outcome and :meth:`metadata` gives one record's, computed on demand.
    Cancelling a wait never cancels the delivery.
    """

    __slots__ = (
        "_callbacks",
        "_ends",
        "_event",
        "_inverse",
        "_order",
        "_pending",
        "_spans",
        "records",
        "timestamp_ms",
        "topic",
    )

    def __init__(self, topic: str, timestamp_ms: int) -> None:
        self.topic = topic
        self.timestamp_ms = timestamp_ms
        #: How many records the bulk send buffered.
        self.records = 0
        self._spans: list[tuple[ProducerBatch, int, int]] = []
        # Cumulative record counts of the spans, for finding a record's span.
        self._ends: list[int] = []
        # Position at which each record was appended, when grouping reordered them.
        self._order: Sequence[int] | None = None
        self._inverse: list[int] | None = None
        # Batches still to complete, plus one until _track() has seen every span.
        self._pending = 1
        self._event: anyio.Event | None = None
        self._callbacks: list[Callable[[BulkDelivery], Any]] | None = None

    def _add_spans(self, spans: list[tuple[ProducerBatch, int, int]]) -> None:
        ends = self._ends
        total = self.records
        for span in spans:
            total += span[2]
            ends.append(total)
        self._spans += spans
        self.records = total

    def _track(self) -> None:
        """Start waiting for the batches (call once, after the last span was added)."""
        seen: set[int] = set()
        batches = []
        for batch, _first, _count in self._spans:
            if id(batch) not in seen and not batch.done:
                seen.add(id(batch))
                batches.append(batch)
        self._pending += len(batches)
        for batch in batches:
            batch.add_done_callback(self._batch_done)
        self._batch_done(None)

    def _batch_done(self, _batch: ProducerBatch | None) -> None:
        self._pending -= 1
        if self._pending:
            return
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                callback(self)

    def done(self) -> bool:
        """Whether every record has been delivered or has failed."""
        return self._pending == 0

    def add_done_callback(self, callback: Callable[[BulkDelivery], Any]) -> None:
        """Call ``callback(bulk)`` on the producer's loop once every record is done."""
        if self._pending == 0:
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    async def wait(self) -> BulkDelivery:
        """Wait until every record has an outcome; returns ``self``."""
        if self._pending:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        return self

    def __await__(self) -> Generator[Any, None, BulkDelivery]:
        return self.wait().__await__()

    def _check_done(self) -> None:
        if self._pending:
            raise RuntimeError("the bulk delivery is still pending; await it")

    @property
    def failed(self) -> int:
        """How many records failed (``RuntimeError`` while pending)."""
        self._check_done()
        failed = 0
        for batch, first, count in self._spans:
            if batch._children is None:
                if batch.exception is not None:
                    failed += count
            else:
                failed += sum(
                    1 for i in range(first, first + count) if batch.outcome(i)[2] is not None
                )
        return failed

    @property
    def delivered(self) -> int:
        """How many records were acknowledged (``RuntimeError`` while pending)."""
        return self.records - self.failed

    @property
    def first_error(self) -> BaseException | None:
        """The error of the first failed record in append order, ``None`` if none failed."""
        self._check_done()
        for batch, first, count in self._spans:
            if batch._children is None:
                if batch.exception is not None:
                    return batch.exception
            else:
                for i in range(first, first + count):
                    exc = batch.outcome(i)[2]
                    if exc is not None:
                        return exc
        return None

    def _locate(self, index: int) -> tuple[ProducerBatch, int]:
        if not 0 <= index < self.records:
            raise IndexError(f"record {index} is not in this bulk of {self.records}")
        if self._order is not None:
            if self._inverse is None:
                inverse = [0] * len(self._order)
                for pos, original in enumerate(self._order):
                    inverse[original] = pos
                self._inverse = inverse
            index = self._inverse[index]
        span = bisect.bisect_right(self._ends, index)
        batch, first, count = self._spans[span]
        return batch, first + index - (self._ends[span] - count)

    def partition(self, index: int) -> int:
        """The partition record ``index`` (in the order given) went to."""
        return self._locate(index)[0].partition

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index``'s metadata once done; raises its error if it failed.

        Its serialized key and value sizes are -1: a bulk send does not keep them.
        """
        self._check_done()
        batch, pos = self._locate(index)
        offset, log_append_time, exc = batch.outcome(pos)
        if exc is not None:
            raise exc
        return RecordMetadata(
            batch.topic,
            batch.partition,
            offset,
            log_append_time if log_append_time >= 0 else self.timestamp_ms,
            -1,
            -1,
        )

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<BulkDelivery {self.topic} records={self.records} {state}>"


class MemoryBudget:
    """The ``buffer_memory`` byte budget shared by all partitions.

    Waiters are served strictly first come, first served, and a release wakes only the
    waiters whose request now fits, with the bytes already handed to them, so a freed batch
    never wakes every blocked sender at once to fight over it.
    """

    __slots__ = ("_waiters", "closed", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.closed = False
        # [bytes wanted, event, granted]
        self._waiters: collections.deque[list[Any]] = collections.deque()

    @property
    def available(self) -> int:
        """Bytes not reserved by anyone."""
        return self.limit - self.used

    @property
    def waiters(self) -> int:
        """Number of senders waiting for space."""
        return len(self._waiters)

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` now if that is possible without overtaking a waiter."""
        if self._waiters or self.used + nbytes > self.limit:
            return False
        self.used += nbytes
        return True

    async def reserve(self, nbytes: int, timeout: float) -> None:
        """Reserve ``nbytes``, waiting in line up to ``timeout`` seconds (BufferFullError)."""
        if self.closed:
            raise ProducerClosedError("the producer is closed")
        if self.try_reserve(nbytes):
            return
        waiter: list[Any] = [nbytes, anyio.Event(), False]
        self._waiters.append(waiter)
        try:
            with anyio.move_on_after(timeout):
                await waiter[1].wait()
        except BaseException:
            # Cancelled: give back what may already have been handed to us, so a cancelled
            # send() leaves nothing behind.
            self._leave(waiter)
            raise
        if not waiter[2]:
            self._leave(waiter)
            if self.closed:
                raise ProducerClosedError("the producer was closed while waiting for buffer space")
            raise BufferFullError(
                f"no room in buffer_memory ({self.limit} bytes) for {nbytes} bytes "
                f"within max_block_ms ({timeout * 1000:.0f} ms)"
            )

    def _leave(self, waiter: list[Any]) -> None:
        if waiter[2]:
            waiter[2] = False
            self.release(waiter[0])
            return
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        # We may have been the one holding up the line.
        self._serve()

    def close(self) -> None:
        """Refuse further waits and wake every waiter empty-handed."""
        self.closed = True
        waiters, self._waiters = self._waiters, collections.deque()
        for waiter in waiters:
            waiter[1].set()

    def release(self, nbytes: int) -> None:
        """Return ``nbytes`` to the budget and serve waiters that now fit."""
        self.used -= nbytes
        if self._waiters:
            self._serve()

    def _serve(self) -> None:
        waiters = self._waiters
        while waiters and self.used + waiters[0][0] <= self.limit:
            waiter = waiters.popleft()
            self.used += waiter[0]
            waiter[2] = True
            waiter[1].set()


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
    ) -> None:
        self.batch_size = batch_size
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

    @staticmethod
    def estimate_size(key_len: int, value_len: int, headers: HeaderList | None) -> int:
        """An upper bound of the bytes a record adds to a batch (before compression)."""
        size = key_len + value_len + _RECORD_FRAMING_MAX
        if headers:
            for hkey, hvalue in headers:
                # A str of n code points is at most 4n bytes of UTF-8.
                size += 10 + 4 * len(hkey) + (len(hvalue) if hvalue is not None else 0)
        return size

    def append(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: HeaderList | None,
        reserved: int,
        now: float,
    ) -> tuple[DeliveryHandle, bool]:
        """Append a record whose ``reserved`` bytes (its estimate) are already reserved.

        Returns the record's handle and whether the sender should be woken (a batch became
        full or a new batch started, which moves the earliest linger deadline).
        """
        tp = (topic, partition)
        dq = self.batches.get(tp)
        wake = False
        batch = dq[-1] if dq else None
        if (
            batch is None
            or batch.full
            or (batch.builder.size_in_bytes + reserved > self.batch_size and batch.record_count)
        ):
            if batch is not None:
                batch.full = True
            batch = self._new_batch(topic, partition, now)
            if dq is None:
                dq = self.batches[tp] = collections.deque()
            dq.append(batch)
            wake = True
            # The header is charged to the batch, outside the record's own estimate.
            self.budget.used += RECORD_BATCH_OVERHEAD
            batch.reserved += RECORD_BATCH_OVERHEAD
        index = batch.builder.record_count
        added = batch.builder.append(timestamp_ms, key, value, headers or ())
        # Give back what the estimate over-reserved.
        self.budget.used -= reserved - added
        batch.reserved += added
        if batch.builder.size_in_bytes >= self.batch_size:
            batch.full = True
            wake = True
        handle = DeliveryHandle(
            batch,
            index,
            timestamp_ms,
            len(key) if key is not None else -1,
            len(value) if value is not None else -1,
        )
        return handle, wake

    def append_run(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        keys: Sequence[Any] | None,
        values: Sequence[Any],
        headers: Sequence[HeaderList | None] | None,
        start: int,
        stop: int,
        reserved: int,
        now: float,
        spans: list[tuple[ProducerBatch, int, int]],
    ) -> tuple[int, int, bool]:
        """Append ``values[start:stop]`` to ``partition``'s batches, whose ``reserved``
        bytes (an upper bound of their size) are already reserved.

        Adds one ``(batch, index of the first record in it, record count)`` per batch
        touched to ``spans``, and gives back what the reservation over-estimated in one
        go. Returns ``(records appended, bytes they added, wake the sender)``. If a record is invalid, the
        ones before it stay appended (their spans are in ``spans``), the reservation of the
        rest is given back and its error is raised.
        """
        tp = (topic, partition)
        dq = self.batches.get(tp)
        batch = dq[-1] if dq else None
        batch_size = self.batch_size
        budget = self.budget
        wake = False
        pos = start
        added_total = 0
        try:
            while pos < stop:
                if batch is None or batch.full:
                    batch = self._new_batch(topic, partition, now)
                    if dq is None:
                        dq = self.batches[tp] = collections.deque()
                    dq.append(batch)
                    wake = True
                    # The header is charged to the batch, outside the records' estimates.
                    budget.used += RECORD_BATCH_OVERHEAD
                    batch.reserved += RECORD_BATCH_OVERHEAD
                builder = batch.builder
                first = builder.record_count
                before = builder.size_in_bytes
                try:
                    count, added = builder.append_many(
                        timestamp_ms, keys, values, headers, pos, stop, batch_size
                    )
                except BaseException:
                    count = builder.record_count - first
                    if not builder.record_count:
                        # A batch opened for the bad record alone must not reach the
                        # sender empty.
                        assert dq is not None
                        dq.pop()
                        if not dq:
                            del self.batches[tp]
                        del self.incomplete[batch]
                        budget.release(batch.reserved)
                        batch.reserved = 0
                    elif count:
                        # The builder kept the records before the bad one: account for
                        # them exactly as for a normal run.
                        added = builder.size_in_bytes - before
                        batch.reserved += added
                        added_total += added
                        spans.append((batch, first, count))
                    pos += count
                    raise
                if count:
                    batch.reserved += added
                    added_total += added
                    spans.append((batch, first, count))
                    pos += count
                if pos < stop or builder.size_in_bytes >= batch_size:
                    # The next record did not fit (or nothing more can): the batch is done.
                    batch.full = True
                    wake = True
        finally:
            # Give back what the estimates over-reserved, for appended and unappended
            # records alike, so the budget stays exact whichever way this ends.
            budget.release(reserved - added_total)
        return pos - start, added_total, wake

    def _new_batch(self, topic: str, partition: int, now: float) -> ProducerBatch:
        builder = RecordBatchBuilder(self.codec, self.compression_level)
        batch = ProducerBatch(topic, partition, builder, now, now + self.delivery_timeout)
        self.incomplete[batch] = None
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

    def _forget(self, batch: ProducerBatch) -> None:
        if batch in self.incomplete:
            del self.incomplete[batch]
            self.budget.release(batch.reserved)
            batch.reserved = 0

    def split(self, batch: ProducerBatch, max_bytes: int, now: float) -> list[ProducerBatch]:
        """Split an oversized batch into smaller ones that replace it at its queue's head."""
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
            children[0][0].reserved = batch.reserved
        batch.reserved = 0
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

    def queued_batches(self) -> Iterable[ProducerBatch]:
        """Every batch still in a queue."""
        for dq in self.batches.values():
            yield from dq
