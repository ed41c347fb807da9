"""A blocking, thread-safe facade over :class:`~aioproducer.Producer`.

:class:`SyncProducer` runs an ordinary async producer on a :class:`~aioproducer.LoopRunner`
(a loop in a daemon thread, shared by every sync producer of the process by default).
Calling threads do the per-record work that can fail on bad input (serializing, sizing,
checking the partition) themselves, so a bad record raises from ``send()`` in the caller's
thread and nothing else is harmed. Good records go into a shared pending chunk; the loop
is woken once when that chunk goes from empty to non-empty and moves the whole chunk into
the accumulator in one go, so crossing threads costs one wake-up per chunk, not one per
record. Outcomes come from the batches: one callback per batch settles every
:class:`DeliveryFuture` in it.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from .accumulator import Accumulator, BulkDelivery, DeliveryHandle, ProducerBatch, RecordMetadata
from .cluster import TopicInfo
from .config import ProducerConfig
from .errors import (
    BufferFullError,
    InvalidArgumentError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
)
from .producer import _RUNNING as _PRODUCER_RUNNING
from .producer import (
    Headers,
    Producer,
    _aligned,
    _BulkColumns,
    _check_topic,
    _coerce,
    _invalid_partition,
    _prepare_bulk,
    _record_timestamp,
)
from .protocol.records import RECORD_BATCH_OVERHEAD
from .runner import LoopRunner, default_runner

__all__ = ["BulkFuture", "DeliveryFuture", "SyncProducer"]

log = logging.getLogger("aioproducer.sync")

_NEW, _RUNNING, _CLOSING, _CLOSED = range(4)
_BytesLike = (bytes, bytearray)
# Records moved from the pending chunk into the accumulator per loop callback: between two
# slices the sender gets to run, so full batches leave while a large chunk is appended.
_SLICE = 4096
# Records a bulk call prepares (outside the lock) before it buffers them (under it).
_BULK_STEP = 1024

_FRAMING = Accumulator.estimate_size(0, 0, None)

# (topic, key, value, headers, timestamp_ms, explicit partition, reserved bytes)
_Record = tuple[str, Any, Any, Any, int, "int | None", int]
# In the partition field, marks a slice of a bulk send: the key field then holds its
# _BulkSlice and the reserved bytes are the whole slice's.
_BULK: Any = object()


class _BulkSlice:
    """Records ``start:stop`` of a bulk send, bound for ``partition`` (None: sticky)."""

    __slots__ = ("bulk", "cols", "last", "partition", "start", "stop")

    def __init__(
        self,
        cols: _BulkColumns,
        partition: int | None,
        start: int,
        stop: int,
        bulk: BulkDelivery,
        last: bool,
    ) -> None:
        self.cols = cols
        self.partition = partition
        self.start = start
        self.stop = stop
        self.bulk = bulk
        self.last = last


class _WaitTimeout(KafkaTimeoutError, concurrent.futures.TimeoutError):
    """``DeliveryFuture.result(timeout)`` ran out of time (the delivery goes on)."""


class _Chunk:
    """Records buffered by calling threads between two wake-ups of the loop."""

    __slots__ = ("early_callbacks", "nbytes", "outcomes", "records")

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self.nbytes = 0
        #: Per record, once the loop has taken it: its DeliveryHandle, or the exception
        #: that kept it out of the accumulator.
        #: A bulk slice's position holds None: no future refers to it.
        self.outcomes: list[DeliveryHandle | BaseException | None] = []
        #: Callbacks added to futures of this chunk before the loop took their records.
        self.early_callbacks: list[tuple[DeliveryFuture, Callable[[DeliveryFuture], Any]]] = []


class DeliveryFuture:
    """The pending delivery of one record sent with :meth:`SyncProducer.send`.

    It behaves like a :class:`concurrent.futures.Future` of a
    :class:`~aioproducer.RecordMetadata`: :meth:`result` and :meth:`exception` block (with
    an optional timeout), :meth:`done` and :meth:`add_done_callback` work as there, and a
    delivery cannot be cancelled. Callbacks run on the producer's loop thread (or at once in
    the caller's thread if the record is already done), so they must be quick and must not
    block. It is deliberately light: one small object per record, settled by its batch.
    For ``concurrent.futures.wait()`` or ``as_completed()`` use :meth:`as_future`.
    """

    __slots__ = ("__weakref__", "_chunk", "_engine", "_pos")

    def __init__(self, engine: _Engine, chunk: _Chunk, pos: int) -> None:
        self._engine = engine
        self._chunk = chunk
        self._pos = pos

    def _outcome(self) -> DeliveryHandle | BaseException | None:
        outcomes = self._chunk.outcomes
        return outcomes[self._pos] if self._pos < len(outcomes) else None

    def done(self) -> bool:
        """Whether the record has been delivered or has failed."""
        out = self._outcome()
        if out is None:
            return False
        if type(out) is DeliveryHandle:
            return out._batch.done
        return True

    def running(self) -> bool:
        """Whether the delivery is still pending (it is never cancellable)."""
        return not self.done()

    def cancel(self) -> bool:
        """Deliveries cannot be cancelled: always ``False``."""
        return False

    def cancelled(self) -> bool:
        """Always ``False`` (see :meth:`cancel`)."""
        return False

    def _wait(self, timeout: float | None) -> DeliveryHandle | BaseException:
        if not self.done() and not self._engine.wait_for(self.done, timeout):
            raise _WaitTimeout(f"the record was not delivered within {timeout} s (still pending)")
        out = self._outcome()
        assert out is not None
        return out

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds for the record's metadata; raise its error if any.

        A timeout raises :class:`~aioproducer.errors.KafkaTimeoutError` (also a
        ``concurrent.futures.TimeoutError``) and does not affect the delivery.
        """
        out = self._wait(timeout)
        if isinstance(out, DeliveryHandle):
            return out.result()
        raise out

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like :meth:`result`; the delivery's error, or ``None`` if it succeeded."""
        out = self._wait(timeout)
        if isinstance(out, DeliveryHandle):
            return out.exception()
        return out

    def add_done_callback(self, fn: Callable[[DeliveryFuture], Any]) -> None:
        """Call ``fn(future)`` once the record is done (at once if it already is)."""
        if not self._engine.add_callback(self, fn):
            _run_callback(fn, self)

    def as_future(self) -> concurrent.futures.Future[RecordMetadata]:
        """A real :class:`concurrent.futures.Future` that completes with this record."""
        future: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()

        def settle(done: DeliveryFuture) -> None:
            out = done._outcome()
            try:
                if isinstance(out, DeliveryHandle):
                    future.set_result(out.result())
                else:
                    assert out is not None
                    future.set_exception(out)
            except BaseException as exc:
                future.set_exception(exc)

        self.add_done_callback(settle)
        return future

    def __repr__(self) -> str:
        out = self._outcome()
        if out is None:
            return "<DeliveryFuture pending (not yet handed to the loop)>"
        if isinstance(out, DeliveryHandle):
            state = "done" if out._batch.done else "pending"
            return f"<DeliveryFuture {out.topic}-{out.partition} {state}>"
        return f"<DeliveryFuture failed {type(out).__name__}>"


def _run_callback(fn: Callable[[DeliveryFuture], Any], future: DeliveryFuture) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("a DeliveryFuture callback raised")


def _failures(batch: ProducerBatch) -> tuple[int, BaseException | None]:
    """How many records of a completed batch failed, and the first error."""
    children = batch._children
    if children is None:
        if batch.exception is not None:
            return batch.record_count, batch.exception
        return 0, None
    total, first = 0, None
    for child, _start in children:
        count, exc = _failures(child)
        total += count
        if first is None:
            first = exc
    return total, first


class BulkFuture:
    """The pending delivery of one :meth:`SyncProducer.send_bulk`, as a whole.

    :meth:`result` blocks until every record has an outcome and returns the
    :class:`~aioproducer.accumulator.BulkDelivery` (``delivered``, ``failed``,
    ``first_error``, per-record ``metadata(i)``). Deliveries cannot be cancelled.
    """

    __slots__ = ("_bulk", "_engine")

    def __init__(self, engine: _Engine, bulk: BulkDelivery) -> None:
        self._engine = engine
        self._bulk = bulk

    @property
    def records(self) -> int:
        """How many records the bulk send buffered (final once it is done)."""
        return self._bulk.records

    def done(self) -> bool:
        """Whether every record has been delivered or has failed."""
        return self._bulk.done()

    def result(self, timeout: float | None = None) -> BulkDelivery:
        """Wait up to ``timeout`` seconds for every outcome and return them.

        A timeout raises :class:`~aioproducer.errors.KafkaTimeoutError` (also a
        ``concurrent.futures.TimeoutError``) and does not affect the delivery.
        """
        bulk = self._bulk
        if not bulk.done() and not self._engine.wait_for(bulk.done, timeout):
            raise _WaitTimeout(f"the bulk send was not done within {timeout} s (still pending)")
        return bulk

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<BulkFuture {self._bulk.topic} {state}>"


class Tally:
    """Counts of records a producer has taken and how many of them failed."""

    __slots__ = ("failed", "first_error", "records")

    def __init__(self, records: int = 0, failed: int = 0, first_error: BaseException | None = None):
        self.records = records
        self.failed = failed
        self.first_error = first_error


class _Engine:
    """One process's running producer behind a :class:`SyncProducer`.

    Thread side: ``cond`` guards the pending chunk, the state and the counters. Loop side:
    the producer, the accumulator and the backlog of chunks being moved into it.
    """

    def __init__(self, kwargs: dict[str, Any], config: ProducerConfig, runner: LoopRunner):
        self.kwargs = kwargs
        self.runner = runner
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.state = _NEW
        self.producer: Producer | None = None
        self.acc: Accumulator | None = None
        self.limit = config.buffer_memory
        self.max_block = config.max_block_ms / 1000
        self.key_serializer = config.key_serializer
        self.value_serializer = config.value_serializer
        self.max_record = min(config.max_request_size, config.buffer_memory)
        self.max_need = self.max_record - RECORD_BATCH_OVERHEAD
        self.chunk = _Chunk()
        self.wake_scheduled = False
        self.waiting = 0
        self.space_waiters = 0
        self.urgent = False
        self.watchers: dict[ProducerBatch, list[tuple[DeliveryFuture, Callable[..., Any]]]] = {}
        self.tally = Tally()
        # Loop side.
        self.backlog: collections.deque[list[Any]] = collections.deque()  # [chunk, next index]
        self.pump_scheduled = False
        self.stop_requested: Any = None
        self.close_timeout: float | None = None
        self.main_future: concurrent.futures.Future[None] | None = None

    # -- lifecycle (called from threads) --------------------------------------------------

    def start(self) -> None:
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.main_future = self.runner.submit(self._main, started)
        started.result()

    async def _main(self, started: concurrent.futures.Future[None]) -> None:
        import asyncio

        try:
            producer = Producer(**self.kwargs)
            await producer.start()
        except BaseException as exc:
            with self.cond:
                self.state = _CLOSED
            started.set_exception(exc)
            return
        self.producer = producer
        self.acc = producer._acc
        self.stop_requested = asyncio.Event()
        with self.cond:
            self.state = _RUNNING
        started.set_result(None)
        try:
            await self.stop_requested.wait()
        finally:
            try:
                # Whatever the threads buffered before close() goes out (or fails) too.
                self._pump(math.inf)
            finally:
                await producer.close(self.close_timeout)
                with self.cond:
                    self.state = _CLOSED
                    self.cond.notify_all()

    def request_close(self, timeout: float | None) -> concurrent.futures.Future[None] | None:
        with self.cond:
            if self.state == _NEW or self.main_future is None:
                self.state = _CLOSED
                return None
            first = self.state == _RUNNING
            if first:
                self.state = _CLOSING
                self.close_timeout = timeout
                # Senders waiting for space must give up now.
                self.cond.notify_all()
        if first:
            self.runner.call_soon(self._on_stop)
        return self.main_future

    def _on_stop(self) -> None:
        if self.stop_requested is not None:
            self.stop_requested.set()

    # -- waiting (threads) ----------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        with self.cond:
            self.waiting += 1
            try:
                return self.cond.wait_for(predicate, timeout)
            finally:
                self.waiting -= 1

    def add_callback(self, future: DeliveryFuture, fn: Callable[[DeliveryFuture], Any]) -> bool:
        """Register ``fn`` for ``future``; ``False`` if it is done and ``fn`` must run now."""
        with self.cond:
            out = future._outcome()
            if out is None:
                future._chunk.early_callbacks.append((future, fn))
                return True
            if type(out) is DeliveryHandle and not out._batch.done:
                self.watchers.setdefault(out._batch, []).append((future, fn))
                return True
            return False

    # -- buffering (threads) --------------------------------------------------------------

    def buffer(self, records: list[_Record], nbytes: list[int], futures: bool) -> list[Any]:
        """Add prepared records to the pending chunk, waiting for space as needed."""
        out: list[Any] = []
        cond = self.cond
        total = sum(nbytes)
        with cond:
            self._check_running()
            assert self.producer is not None
            budget = self.producer._budget
            limit = self.limit
            chunk = self.chunk
            recs = chunk.records
            if chunk.nbytes + budget.used + total <= limit:
                # Room for all of them: one extend, and the futures are made after the lock
                # is released (holding it longer would stall the loop's next take).
                first = len(recs)
                recs.extend(records)
                chunk.nbytes += total
                self.tally.records += len(records)
                if not self.wake_scheduled:
                    self.wake_scheduled = True
                    self.runner.call_soon(self._pump_soon)
                fast = True
            else:
                fast = False
        if fast:
            if not futures:
                return out
            return [DeliveryFuture(self, chunk, i) for i in range(first, first + len(records))]
        with cond:
            self._check_running()
            chunk = self.chunk
            recs = chunk.records
            added = 0
            try:
                for i, record in enumerate(records):
                    need = nbytes[i]
                    if chunk.nbytes + budget.used + need > limit:
                        self._wait_for_space(need)
                        chunk = self.chunk
                        recs = chunk.records
                    recs.append(record)
                    chunk.nbytes += need
                    added += 1
                    if futures:
                        out.append(DeliveryFuture(self, chunk, len(recs) - 1))
            finally:
                self.tally.records += added
                wake = not self.wake_scheduled and bool(recs)
                if wake:
                    self.wake_scheduled = True
                    self.runner.call_soon(self._pump_soon)
        return out

    def _check_running(self) -> None:
        if self.state != _RUNNING:
            raise ProducerClosedError("the producer is closed")

    def _wait_for_space(self, need: int) -> None:
        # Called with cond held. What is pending must move on, and batches must leave
        # without lingering while someone waits (as the async producer does for waiters).
        assert self.producer is not None
        budget = self.producer._budget
        deadline = time.monotonic() + self.max_block
        self.space_waiters += 1
        try:
            if not self.wake_scheduled and self.chunk.records:
                self.wake_scheduled = True
                self.runner.call_soon(self._pump_soon)
            self.runner.call_soon(self._make_urgent)
            while self.chunk.nbytes + budget.used + need > self.limit:
                self._check_running()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferFullError(
                        f"no room in buffer_memory ({self.limit} bytes) for a {need}-byte "
                        f"record within max_block_ms ({self.max_block * 1000:.0f} ms)"
                    )
                self.waiting += 1
                try:
                    # Woken by every completed batch; the timeout also covers bytes that
                    # free up without one (records that fail while being taken).
                    self.cond.wait(min(remaining, 0.05))
                finally:
                    self.waiting -= 1
            self._check_running()
        finally:
            self.space_waiters -= 1

    # -- the loop side ----------------------------------------------------------------------

    def _make_urgent(self) -> None:
        acc = self.acc
        if acc is None or self.urgent or self.producer is None or self.producer.closed:
            return
        self.urgent = True
        acc.flushing += 1
        self.producer._sender.wakeup()

    def _unurgent(self) -> None:
        if self.acc is not None:
            self.acc.flushing -= 1

    def _pump_soon(self) -> None:
        self.pump_scheduled = False
        self._pump(_SLICE)

    def _take_pending(self) -> None:
        with self.cond:
            chunk = self.chunk
            self.wake_scheduled = False
            if not chunk.records:
                return
            self.chunk = _Chunk()
            assert self.producer is not None
            # The chunk's bytes were admitted against the budget by the threads; they are
            # charged to it here, and the accumulator then trims each estimate to size.
            self.producer._budget.used += chunk.nbytes
        self.backlog.append([chunk, 0])

    def _pump(self, limit: float) -> None:
        """Move up to ``limit`` records (oldest chunk first) into the accumulator."""
        self._take_pending()
        producer = self.producer
        assert producer is not None
        topics = producer._cluster.snapshot.topics
        partition_of = producer._partition
        append = producer._append
        budget = producer._budget
        on_batch_done = self._on_batch_done
        moved = 0
        wake = False
        failed_early = 0
        first_error: BaseException | None = None
        last_topic: str | None = None
        info: TopicInfo | None = None
        while self.backlog and moved < limit:
            entry = self.backlog[0]
            chunk: _Chunk = entry[0]
            start = entry[1]
            records = chunk.records
            stop = int(min(len(records), start + limit - moved))
            outcomes = chunk.outcomes
            for i in range(start, stop):
                topic, key, value, hdrs, ts, partition, need = records[i]
                try:
                    if topic is not last_topic:
                        info = topics.get(topic)
                        last_topic = topic
                    if info is None:
                        raise UnknownTopicOrPartitionError(
                            f"topic {topic!r} is no longer in the cluster's metadata"
                        )
                    if producer._state != _PRODUCER_RUNNING:
                        raise ProducerClosedError("the producer was closed before the record")
                    if partition is None:
                        part = partition_of(topic, info, key, None)
                    elif partition is _BULK:
                        outcomes.append(None)
                        failed, error, woke = self._pump_bulk(topic, info, key, ts, need)
                        if failed:
                            failed_early += failed
                            first_error = first_error or error
                        wake = wake or woke
                        continue
                    else:
                        part = partition
                    handle, woke = append(topic, info, part, ts, key, value, hdrs, need, partition)
                except KafkaError as exc:
                    budget.release(need)
                    if partition is _BULK:
                        # The slice never reached the accumulator: all of it fails.
                        outcomes.append(None)
                        failed_early += key.stop - key.start
                        first_error = first_error or exc
                        if key.last:
                            self._track_bulk(key.bulk)
                        continue
                    outcomes.append(exc)
                    failed_early += 1
                    first_error = first_error or exc
                    continue
                except Exception as exc:  # a custom partitioner's bug fails its record only
                    budget.release(need)
                    err = InvalidArgumentError(f"the record could not be partitioned: {exc!r}")
                    err.__cause__ = exc
                    outcomes.append(err)
                    failed_early += 1
                    first_error = first_error or err
                    continue
                if woke:
                    wake = True
                    if handle._index == 0:
                        handle._batch.add_done_callback(on_batch_done)
                outcomes.append(handle)
            moved += stop - start
            # Records are dropped from the chunk as they go (futures keep only outcomes).
            if stop >= len(records):
                self.backlog.popleft()
                chunk.records = []
            else:
                entry[1] = stop
            if chunk.early_callbacks:
                self._settle_early(chunk)
            last_topic = None
            topics = producer._cluster.snapshot.topics
        if wake:
            producer._sender.wakeup()
        if failed_early:
            with self.cond:
                self.tally.failed += failed_early
                if self.tally.first_error is None:
                    self.tally.first_error = first_error
                self.cond.notify_all()
        if self.urgent and not self.space_waiters and producer._state == _PRODUCER_RUNNING:
            # Nobody waits for space any more: batches may linger again.
            self.urgent = False
            self._unurgent()
        if self.backlog and not self.pump_scheduled:
            self.pump_scheduled = True
            self.runner.loop.call_soon(self._pump_soon)

    def _pump_bulk(
        self, topic: str, info: TopicInfo, piece: _BulkSlice, ts: int, need: int
    ) -> tuple[int, BaseException | None, bool]:
        """Append one bulk slice; returns (records that failed, the error, wake)."""
        producer = self.producer
        assert producer is not None
        spans: list[tuple[ProducerBatch, int, int]] = []
        failed = 0
        error: BaseException | None = None
        wake = False
        try:
            wake = producer._append_slice(
                topic, info, piece.partition, ts, piece.cols, piece.start, piece.stop, need, spans
            )
        except Exception as exc:
            # _append_slice gave the reservation back; what it did not append fails.
            error = exc
            failed = piece.stop - piece.start - sum(span[2] for span in spans)
        on_batch_done = self._on_batch_done
        for batch, first, _count in spans:
            if first == 0:
                batch.add_done_callback(on_batch_done)
        piece.bulk._add_spans(spans)
        if piece.last:
            self._track_bulk(piece.bulk)
        return failed, error, wake

    def _track_bulk(self, bulk: BulkDelivery) -> None:
        bulk._track()
        bulk.add_done_callback(self._on_bulk_done)

    def _on_bulk_done(self, _bulk: BulkDelivery) -> None:
        with self.cond:
            if self.waiting:
                self.cond.notify_all()

    def buffer_bulk(self, topic: str, cols: _BulkColumns, ts: int, bulk: BulkDelivery) -> None:
        """Hand a prepared bulk send to the loop, slice by slice, waiting for space."""
        assert self.producer is not None
        budget = self.producer._budget
        batch_size = self.producer.config.batch_size
        pieces: list[tuple[_BulkSlice, int]] = []
        for part, start, stop in cols.runs:
            pos = start
            while pos < stop:
                end = cols.slice_end(pos, stop, part is None, batch_size)
                piece = _BulkSlice(cols, part, pos, end, bulk, False)
                pieces.append((piece, cols.estimate(pos, end)))
                pos = end
        # An empty last slice starts tracking the bulk once the loop has appended the
        # rest; it needs no space, so it goes in even when waiting for space failed.
        tracker = _BulkSlice(cols, None, 0, 0, bulk, True)
        with self.cond:
            try:
                for piece, need in pieces:
                    self._check_running()
                    if self.chunk.nbytes + budget.used + need > self.limit:
                        self._wait_for_space(need)
                    chunk = self.chunk
                    chunk.records.append((topic, piece, None, None, ts, _BULK, need))
                    chunk.nbytes += need
                    self.tally.records += piece.stop - piece.start
            finally:
                self.chunk.records.append((topic, tracker, None, None, ts, _BULK, 0))
                if not self.wake_scheduled:
                    self.wake_scheduled = True
                    self.runner.call_soon(self._pump_soon)

    def _settle_early(self, chunk: _Chunk) -> None:
        now: list[tuple[DeliveryFuture, Callable[..., Any]]] = []
        with self.cond:
            keep = []
            for future, fn in chunk.early_callbacks:
                out = future._outcome()
                if out is None:
                    keep.append((future, fn))
                elif type(out) is DeliveryHandle and not out._batch.done:
                    self.watchers.setdefault(out._batch, []).append((future, fn))
                else:
                    now.append((future, fn))
            chunk.early_callbacks = keep
        for future, fn in now:
            _run_callback(fn, future)

    def _on_batch_done(self, batch: ProducerBatch) -> None:
        failed, first = _failures(batch)
        with self.cond:
            if failed:
                self.tally.failed += failed
                if self.tally.first_error is None:
                    self.tally.first_error = first
            watchers = self.watchers.pop(batch, None) if self.watchers else None
            if self.waiting:
                self.cond.notify_all()
            if self.urgent and not self.space_waiters:
                self.urgent = False
                self._unurgent()
        if watchers:
            for future, fn in watchers:
                _run_callback(fn, future)

    async def flush(self, timeout: float | None) -> None:
        self._pump(math.inf)
        assert self.producer is not None
        await self.producer.flush(timeout)

    async def wait_for_topic(self, topic: str) -> TopicInfo:
        assert self.producer is not None
        return await self.producer._cluster.wait_for_topic(topic, self.max_block)

    async def metrics(self) -> dict[str, float]:
        assert self.producer is not None
        return self.producer.metrics()

    async def partitions_for(self, topic: str) -> list[int]:
        assert self.producer is not None
        return await self.producer.partitions_for(topic)


class SyncProducer:
    """A Kafka producer for threads: the :class:`~aioproducer.Producer` engine, blocking API.

    ::

        with SyncProducer(bootstrap_servers="127.0.0.1:9092") as producer:
            future = producer.send("events", b"value", key=b"k")
            metadata = future.result(timeout=30)

    Same configuration, semantics and errors as :class:`~aioproducer.Producer`. Safe to use
    from many threads at once. ``send()`` returns a :class:`DeliveryFuture` as soon as the
    record is buffered; it blocks only for the topic's first metadata or for buffer space,
    at most ``max_block_ms`` (then :class:`~aioproducer.errors.BufferFullError`). Bad input
    raises from ``send()`` in the calling thread and affects no other record.

    Nothing starts until the first use; a process forked from the one that used the
    producer gets a fresh one of its own on first use (records buffered by the parent stay
    the parent's). Pickling keeps only the configuration, so a producer captured in a
    closure travels as its settings and starts where it is next used. By default every sync
    producer of a process shares one loop thread (:func:`~aioproducer.runner.default_runner`);
    pass ``runner=`` to use another.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        runner: LoopRunner | None = None,
        **config: Any,
    ) -> None:
        self._kwargs: dict[str, Any] = {"bootstrap_servers": bootstrap_servers, **config}
        self.config = ProducerConfig.from_kwargs(self._kwargs)
        self._runner = runner
        self._lock = threading.Lock()
        self._engine: _Engine | None = None
        self._pid = os.getpid()
        self._closed = False
        _PRODUCERS.add(self)

    def _after_fork_in_child(self) -> None:
        # The engine belongs to the parent's loop thread, which does not exist here.
        self._lock = threading.Lock()
        self._engine = None

    # -- pickling -------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self._kwargs),))

    def __getstate__(self) -> dict[str, Any]:
        return {"kwargs": dict(self._kwargs)}

    def __repr__(self) -> str:
        servers = ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_list)
        engine = self._engine if self._pid == os.getpid() else None
        if self._closed:
            state = "closed"
        elif engine is None:
            state = "not started"
        else:
            state = ("new", "running", "closing", "closed")[engine.state]
        return f"<SyncProducer {state} bootstrap={servers} client_id={self.config.client_id!r}>"

    # -- lifecycle ------------------------------------------------------------------------

    def _get_engine(self) -> _Engine:
        engine = self._engine
        if engine is not None and self._pid == os.getpid() and engine.state == _RUNNING:
            return engine
        with self._lock:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            pid = os.getpid()
            if self._engine is None or self._pid != pid:
                # A producer inherited over fork() belongs to the parent's loop thread,
                # which does not exist here: start one of our own.
                runner = self._runner if self._runner is not None else default_runner()
                engine = _Engine(self._kwargs, self.config, runner)
                self._engine, self._pid = engine, pid
                try:
                    engine.start()
                except BaseException:
                    self._engine = None
                    raise
                weakref.finalize(self, _abandon, engine)
            engine = self._engine
            engine._check_running()
            return engine

    def start(self) -> SyncProducer:
        """Start now rather than on first use (connecting happens in the background)."""
        self._get_engine()
        return self

    def __enter__(self) -> SyncProducer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered within ``timeout`` seconds, then stop. Idempotent.

        Records still undelivered when the time is up fail with
        :class:`~aioproducer.errors.ProducerClosedError`; ``timeout=None`` waits until every
        record has an outcome (``delivery_timeout_ms`` bounds that). ``send()`` afterwards
        raises ``ProducerClosedError``.
        """
        with self._lock:
            self._closed = True
            engine = self._engine if self._pid == os.getpid() else None
        if engine is None:
            return
        if engine.runner.in_loop_thread():
            raise RuntimeError("SyncProducer.close() cannot be called on the producer's loop")
        main = engine.request_close(timeout)
        if main is not None:
            main.result()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # -- sending --------------------------------------------------------------------------

    def _topic_info(self, engine: _Engine, topic: str) -> TopicInfo:
        assert engine.producer is not None
        info = engine.producer._cluster.snapshot.topics.get(topic)
        if info is None:
            _check_topic(topic)
            info = engine.runner.call(engine.wait_for_topic, topic)
        return info

    def _prepare(
        self,
        engine: _Engine,
        topic: str,
        info: TopicInfo,
        key: Any,
        value: Any,
        headers: Headers | None,
        partition: int | None,
        ts: int,
    ) -> tuple[_Record, int]:
        # The producer's own checks; they read only its settings, so any thread may run them.
        producer = engine.producer
        assert producer is not None
        key, value, hdrs, ts = producer._prepare(topic, key, value, headers, ts)
        need = producer._record_size(key, value, hdrs)
        if partition is not None:
            count = len(info.partitions)
            if type(partition) is not int or not 0 <= partition < count:
                raise _invalid_partition(topic, partition, count)
        return (topic, key, value, hdrs, ts, partition, need), need

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryFuture:
        """Buffer one record and return its :class:`DeliveryFuture`.

        Blocks only for the topic's first metadata or for buffer space, at most
        ``max_block_ms`` in all. Bad input raises at once (``SerializationError``,
        ``RecordTooLargeError``, ``InvalidArgumentError``) and affects no other record.
        """
        engine = self._engine
        if engine is None or engine.state != _RUNNING:
            engine = self._get_engine()
        producer = engine.producer
        assert producer is not None
        info = producer._cluster.snapshot.topics.get(topic)
        if info is None:
            info = self._topic_info(engine, topic)
        ts = _record_timestamp(timestamp_ms)
        if (
            headers is None
            and partition is None
            and type(value) is bytes
            and (key is None or type(key) is bytes)
            and engine.value_serializer is None
            and engine.key_serializer is None
        ):
            # The common case, kept short: bytes in, nothing to convert or check but size.
            need = _FRAMING + len(value) + (len(key) if key is not None else 0)
            if need > engine.max_need:
                raise producer._too_large(need + RECORD_BATCH_OVERHEAD)
            record: _Record = (topic, key, value, None, ts, None, need)
        else:
            record, need = self._prepare(engine, topic, info, key, value, headers, partition, ts)
        with engine.lock:
            if engine.state != _RUNNING:
                raise ProducerClosedError("the producer is closed")
            chunk = engine.chunk
            if chunk.nbytes + producer._budget.used + need <= engine.limit:
                records = chunk.records
                records.append(record)
                chunk.nbytes += need
                pos = len(records) - 1
                engine.tally.records += 1
                if not engine.wake_scheduled:
                    engine.wake_scheduled = True
                    engine.runner.call_soon(engine._pump_soon)
                return DeliveryFuture(engine, chunk, pos)
        # No room: the general path waits for space (or raises BufferFullError).
        future: DeliveryFuture = engine.buffer([record], [need], True)[0]
        return future

    def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        """Send one record and wait (up to ``timeout`` seconds) for its acknowledgement."""
        return self.send(topic, value, key, headers, partition, timestamp_ms).result(timeout)

    def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None = None,
        headers: Iterable[Headers | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[DeliveryFuture]:
        """Buffer many records for one topic; returns their futures in order.

        ``keys`` and ``headers``, when given, are per-record and as long as ``values``. If
        one record is invalid, the records before it are buffered and the error is raised
        for it.
        """
        return self._send_bulk(topic, values, keys, headers, partition, timestamp_ms, True)

    def send_bulk(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers | None] | None = None,
        *,
        partitions: Sequence[int | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> BulkFuture:
        """Buffer many records for one topic; returns one :class:`BulkFuture` for them all.

        The fast way to send many records, as :meth:`aioproducer.Producer.send_bulk`: no
        per-record future, the records cross to the producer's loop a slice at a time and
        are encoded a run at a time. Blocks only for metadata or buffer space. If a record
        is invalid, the records before it are buffered and its error (naming its index)
        is raised.
        """
        bulk, _count, error = self._bulk(topic, values, keys, headers, partitions, timestamp_ms)
        if error is not None:
            raise error
        return BulkFuture(self._get_engine(), bulk)

    def _bulk(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Any] | None,
        partitions: Sequence[int | None] | None,
        timestamp_ms: int | None,
    ) -> tuple[BulkDelivery, int, BaseException | None]:
        """Buffer what comes before the first bad record; return the bulk, how many
        records it holds (the bad record's index) and that record's error."""
        engine = self._get_engine()
        info = self._topic_info(engine, topic)
        ts = _record_timestamp(timestamp_ms)
        assert engine.producer is not None
        cols = _prepare_bulk(engine.producer, topic, info, values, keys, headers, partitions)
        bulk = BulkDelivery(topic, ts)
        engine.buffer_bulk(topic, cols, ts, bulk)
        return bulk, sum(stop - start for _part, start, stop in cols.runs), cols.error

    def _send_bulk(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None,
        headers: Iterable[Headers | None] | None,
        partition: int | Sequence[int | None] | None,
        timestamp_ms: int | None,
        futures: bool,
        errors: list[tuple[int, BaseException]] | None = None,
        partitions_checked: bool = False,
    ) -> list[DeliveryFuture]:
        # With ``errors``, a bad record is reported there as (its index, the error) and the
        # call returns after buffering the records before it, instead of raising.
        engine = self._get_engine()
        info = self._topic_info(engine, topic)
        values = values if isinstance(values, Sequence) else list(values)
        count = len(values)
        key_list = _aligned(keys, count, "keys")
        header_list = _aligned(headers, count, "headers")
        partitions: Sequence[int | None] | None = None
        if partition is not None and not isinstance(partition, int):
            partitions = _aligned(partition, count, "partitions")
            partition = None
        ts = _record_timestamp(timestamp_ms)
        out: list[DeliveryFuture] = []
        # Plain bytes without headers or per-record partitions need no per-record checks
        # beyond the size, which is what DataFrame columns usually are.
        simple = (
            engine.key_serializer is None
            and engine.value_serializer is None
            and header_list is None
            and (partitions is None or partitions_checked)
            and partition is None
        )
        prepare = self._prepare
        for start in range(0, count, _BULK_STEP):
            stop = min(count, start + _BULK_STEP)
            records: list[_Record] = []
            sizes: list[int] = []
            error: BaseException | None = None
            if simple:
                error = _prepare_simple(
                    engine, topic, values, key_list, partitions, start, stop, ts, records, sizes
                )
            else:
                try:
                    for i in range(start, stop):
                        record, need = prepare(
                            engine,
                            topic,
                            info,
                            key_list[i] if key_list is not None else None,
                            values[i],
                            header_list[i] if header_list is not None else None,
                            partitions[i] if partitions is not None else partition,
                            ts,
                        )
                        records.append(record)
                        sizes.append(need)
                except KafkaError as exc:
                    error = exc
            if records:
                out += engine.buffer(records, sizes, futures)
            if error is not None:
                if errors is None:
                    raise error
                errors.append((start + len(records), error))
                return out
        return out

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without lingering, and wait for the outcomes.

        Raises :class:`~aioproducer.errors.KafkaTimeoutError` if ``timeout`` seconds pass
        first. Failed records do not make ``flush`` raise: their futures carry the errors.
        """
        if self._engine is None or self._pid != os.getpid() or self._closed:
            return  # nothing was sent here, or close() already delivered everything
        engine = self._get_engine()
        engine.runner.call(engine.flush, timeout)

    # -- information ----------------------------------------------------------------------

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        _check_topic(topic)
        engine = self._get_engine()
        return engine.runner.call(engine.partitions_for, topic)

    def metrics(self) -> dict[str, float]:
        """The producer's counters (see :meth:`aioproducer.Producer.metrics`), plus
        ``records_pending`` (buffered by threads, not yet in a batch)."""
        engine = self._engine
        if engine is None or engine.producer is None or self._pid != os.getpid():
            engine = self._get_engine()
        out = engine.runner.call(engine.metrics)
        with engine.cond:
            out["records_pending"] = len(engine.chunk.records)
        return out

    def _tally(self) -> Tally:
        """Records taken and failed so far in this process (for per-task accounting)."""
        engine = self._get_engine()
        with engine.cond:
            t = engine.tally
            return Tally(t.records, t.failed, t.first_error)


def _prepare_simple(
    engine: _Engine,
    topic: str,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    partitions: Sequence[int | None] | None,
    start: int,
    stop: int,
    ts: int,
    records: list[_Record],
    sizes: list[int],
) -> KafkaError | None:
    max_need = engine.max_record - RECORD_BATCH_OVERHEAD
    framing = Accumulator.estimate_size(0, 0, None)
    rec_append = records.append
    size_append = sizes.append
    try:
        for i in range(start, stop):
            value = values[i]
            key = keys[i] if keys is not None else None
            if key is not None and type(key) not in _BytesLike:
                key = _coerce(key, "key")
            if value is not None and type(value) not in _BytesLike:
                value = _coerce(value, "value")
            need = (
                framing
                + (len(key) if key is not None else 0)
                + (len(value) if value is not None else 0)
            )
            if need > max_need:
                assert engine.producer is not None
                raise engine.producer._too_large(need + RECORD_BATCH_OVERHEAD)
            part = partitions[i] if partitions is not None else None
            rec_append((topic, key, value, None, ts, part, need))
            size_append(need)
    except KafkaError as exc:
        return exc
    return None


def _rebuild(kwargs: dict[str, Any]) -> SyncProducer:
    return SyncProducer(**kwargs)


def _abandon(engine: _Engine) -> None:
    # The SyncProducer was garbage-collected without close(): let its loop task finish
    # delivering what it holds and stop, instead of running for the rest of the process.
    if engine.runner.closed or os.getpid() != getattr(engine.runner, "_pid", -1):
        return
    with contextlib.suppress(Exception):  # best effort, at garbage collection
        engine.request_close(None)


_PRODUCERS: weakref.WeakSet[SyncProducer] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for producer in list(_PRODUCERS):
        producer._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
