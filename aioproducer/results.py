"""What a send gives back: :class:`RecordMetadata`, and the pending deliveries that resolve
to it, :class:`DeliveryHandle` (one record) and :class:`BulkDelivery` (one bulk send).

They read outcomes from the batches holding their records (see ``accumulator.py``); no
per-record state is kept once a record is appended. The dependency is one-way: this module
imports the accumulator's, never the other way round.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Callable, Generator, Sequence
from typing import Any

import anyio

from . import speedups
from .accumulator import HANDLE_FACTORY, UNTRACK, ProducerBatch, RecordHandle

__all__ = ["BulkDelivery", "DeliveryHandle", "RecordMetadata"]

_log = logging.getLogger("aioproducer")


def _run_callback(callback: Callable[[Any], Any], arg: Any, what: str) -> None:
    # A done-callback runs on the producer's loop, inside the sender's completion of a
    # batch: its error must stop neither the sender nor the other callbacks (the other
    # records' outcomes), so it is logged, as asyncio logs a future's callback errors.
    try:
        callback(arg)
    except Exception:
        _log.exception("a %s done-callback raised", what)


def raisable(exc: BaseException) -> BaseException:
    """Package-internal: what raising the stored error ``exc`` of a record raises, a copy of it.

    A raised exception takes the frames it passes through into its traceback, and those
    frames their local variables: typically the handle or future whose ``result()`` or
    ``await`` raised it. Raising the batch's own error object would make it reference
    those frames, and so (through the handle, which references the batch) make a cycle
    through the handle. Where the handle is of a type the cyclic collector cannot see
    (compiled, ``_handle.pyx``), that cycle would keep the batch, the frames and all
    their locals alive for good. The copy has the same type, arguments, attributes,
    cause and context, and references nothing the batch does not; ``exception()``
    still returns the stored error itself.
    """
    cls = type(exc)
    try:
        # Without calling __init__, which may build its arguments from others (as
        # BrokerResponseError's message does).
        copy = cls.__new__(cls, *exc.args)
        vars(copy).update(vars(exc))
    except Exception:  # an exception class unlike the package's: raise it as it is
        return exc
    copy.__cause__ = exc.__cause__
    copy.__context__ = exc.__context__
    copy.__suppress_context__ = exc.__suppress_context__
    copy.__traceback__ = exc.__traceback__
    return copy


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


# RecordMetadata's constructor, frozen, sets each field through object.__setattr__: about
# 10,000 machine instructions a record. Its fields are plain slots, so the handles fill a
# new instance through the slots' own setters instead (the compiled handle does the same
# in C, ``_handle.pyx``): the same object, equal and hashed alike.
_new_object = object.__new__
(
    _set_topic,
    _set_partition,
    _set_offset,
    _set_timestamp,
    _set_key_size,
    _set_value_size,
) = (RecordMetadata.__dict__[name].__set__ for name in RecordMetadata.__slots__)


def _metadata(
    topic: str, partition: int, offset: int, timestamp_ms: int, key_size: int, value_size: int
) -> RecordMetadata:
    metadata: RecordMetadata = _new_object(RecordMetadata)
    _set_topic(metadata, topic)
    _set_partition(metadata, partition)
    _set_offset(metadata, offset)
    _set_timestamp(metadata, timestamp_ms)
    _set_key_size(metadata, key_size)
    _set_value_size(metadata, value_size)
    return metadata


class DeliveryHandle(RecordHandle):
    """The pending delivery of one record: ``await handle`` gives its :class:`RecordMetadata`.

    Awaiting is optional and may be repeated; cancelling an ``await handle`` never cancels
    the delivery. A failed delivery raises a :class:`~aioproducer.errors.KafkaError`.
    ``timestamp_ms``, ``key_size`` and ``value_size`` are the record's timestamp and its
    serialized key and value sizes (-1 for None).
    """

    # The pure-Python handle, and the typed and documented definition. Where the compiled
    # hot path runs, ``aioproducer.DeliveryHandle`` is instead the compiled twin of this
    # class (``_handle.pyx``, see _use_compiled_handle() below), a type the cyclic garbage
    # collector never tracks. The fields are RecordHandle's (``accumulator.py``), set by
    # its new_handle().
    __slots__ = ()

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
        """The metadata of a delivered record; raises its error if it failed (a copy of
        what :meth:`exception` returns).

        Raises ``RuntimeError`` if the delivery is still pending.
        """
        if not self._batch.done:
            raise RuntimeError("the record's delivery is still pending; await the handle")
        offset, log_append_time, exc = self._batch.outcome(self._index)
        if exc is not None:
            raise raisable(exc)
        return _metadata(
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
        """Call ``callback(handle)`` on the producer's loop once the record is done (at once
        if it is). An exception it raises is logged to the ``aioproducer`` logger."""
        handle = self

        def run(_batch: ProducerBatch) -> None:
            _run_callback(callback, handle, "DeliveryHandle")

        self._batch.add_done_callback(run)

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


#: Which :class:`DeliveryHandle` runs: ``"compiled"`` (``_handle.pyx``) or ``"pure"``.
HANDLE_ACTIVE = "pure"
#: Why :data:`HANDLE_ACTIVE` is what it is, in words.
HANDLE_REASON = "not selected yet"


def _use_compiled_handle() -> None:
    """Make the compiled handle ``DeliveryHandle`` if the compiled hot path runs and the
    handle was compiled with it (with the hot path in pure Python, so is the handle)."""
    global DeliveryHandle, HANDLE_ACTIVE, HANDLE_REASON
    if speedups.ACTIVE != "compiled":
        HANDLE_REASON = f"the hot path runs pure Python ({speedups.REASON})"
        return
    module, HANDLE_REASON = speedups.extension("aioproducer._handle")
    if module is None:
        return
    module.configure(RecordMetadata, raisable)
    HANDLE_FACTORY.append(module.new_handle)
    # Only with the compiled handle: the pure-Python handle is itself a tracked object per
    # record, so untracking its batch would gain nothing worth a second way to run.
    UNTRACK.append(module.untrack)
    # Rebound here, at import: every module that imports DeliveryHandle (the intake,
    # isinstance() checks, the package's namespace) gets the compiled type.
    DeliveryHandle = module.DeliveryHandle  # type: ignore[misc]
    HANDLE_ACTIVE = "compiled"


_use_compiled_handle()


class BulkDelivery:
    """The pending delivery of the records of one bulk send, as a whole.

    ``await bulk`` (or :meth:`wait`) returns it once every record has an outcome; nothing
    is tracked per record: it completes when the batches holding its records have (each
    batch tells it once). Then :attr:`delivered`, :attr:`failed` and :attr:`first_error`
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
        # Batches still to complete, plus one until track() has seen every span.
        self._pending = 1
        self._event: anyio.Event | None = None
        self._callbacks: list[Callable[[BulkDelivery], Any]] | None = None

    def add_spans(self, spans: list[tuple[ProducerBatch, int, int]]) -> None:
        """Package-internal: record that ``spans`` (batch, index of the record in it,
        record count) hold the bulk's next records, in append order."""
        ends = self._ends
        total = self.records
        for span in spans:
            total += span[2]
            ends.append(total)
        self._spans += spans
        self.records = total

    def track(self, order: Sequence[int] | None) -> None:
        """Package-internal: start waiting for the batches; call once, after the last span
        was added. ``order`` gives each appended record's position in the caller's input
        when grouping by partition reordered them (None: they were appended in order)."""
        self._order = order
        pending = 0
        shared: set[int] | None = None
        for batch, _first, _count in self._spans:
            if batch.done:
                continue
            owner = batch.bulk
            if owner is None:
                # The usual case: the batch tells this bulk when it completes, with no
                # callback object and no list per batch.
                batch.bulk = self
                pending += 1
            elif owner is not self:
                # The batch also holds an earlier bulk send's records (it was open when
                # this one began): a callback, once per batch.
                if shared is None:
                    shared = set()
                if id(batch) not in shared:
                    shared.add(id(batch))
                    pending += 1
                    batch.add_done_callback(self._batch_done)
        self._pending += pending
        self.batch_done()

    def _batch_done(self, _batch: ProducerBatch) -> None:
        self.batch_done()

    def batch_done(self) -> None:
        """Package-internal: one of the bulk's batches completed (``track()`` counted
        them); the last one completes the bulk."""
        self._pending -= 1
        if self._pending:
            return
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                _run_callback(callback, self, "BulkDelivery")

    def done(self) -> bool:
        """Whether every record has been delivered or has failed."""
        return self._pending == 0

    def add_done_callback(self, callback: Callable[[BulkDelivery], Any]) -> None:
        """Call ``callback(bulk)`` on the producer's loop once every record is done (at
        once if they are). An exception it raises is logged to the ``aioproducer`` logger."""
        if self._pending == 0:
            _run_callback(callback, self, "BulkDelivery")
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
        return sum(batch.failures(first, count)[0] for batch, first, count in self._spans)

    @property
    def delivered(self) -> int:
        """How many records were acknowledged (``RuntimeError`` while pending)."""
        return self.records - self.failed

    @property
    def first_error(self) -> BaseException | None:
        """The error of the first failed record in append order, ``None`` if none failed."""
        self._check_done()
        for batch, first, count in self._spans:
            exc = batch.failures(first, count)[1]
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
        return _metadata(
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
