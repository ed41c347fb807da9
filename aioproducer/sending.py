"""``Producer.send``'s common case, compiled: a record admitted at once costs no Python frame.

:class:`SendPath` holds one producer's ``send``. Where the hot path is compiled
(``speedups.py``), its ``send`` is a compiled coroutine: awaiting it runs the intake's
checks, admission and append (:meth:`~aioproducer.intake.Intake.offer`) and returns the
record's handle without creating a Python frame or suspending. Everything else (a
producer not running, tracing, a topic whose metadata is not loaded yet, a full buffer)
goes to the producer's own coroutine, which behaves as ``send()`` always did.

The documented behaviour holds on both paths: bad input raises at ``send()`` and harms no
other record; the record is appended before the first suspension point, so a cancelled
``send()`` leaves it fully buffered or not at all; and when an append started or filled
a batch, ``send()`` passes a cancel-shielded checkpoint, so the sender runs between
batches even if the caller never yields.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

from anyio.lowlevel import cancel_shielded_checkpoint

from ._mypyc import mypyc_attr
from .accumulator import ProducerBatch, new_handle
from .budget import MemoryBudget
from .cluster import Cluster
from .errors import KafkaError, ProducerClosedError, UnknownTopicOrPartitionError
from .intake import Intake, PreparedRecord, RecordFields, partitioner_failed
from .results import DeliveryHandle

__all__ = [
    "FUTURE_FACTORY",
    "TRACING",
    "FutureCallback",
    "HandoffCore",
    "Pending",
    "PromiseCore",
    "SendPath",
    "SyncSendPath",
    "Tally",
    "new_promise",
]

# Callbacks of DeliveryFuture log on SyncProducer's logger.
_sync_log = logging.getLogger("aioproducer.sync")

#: ``TRACING[0]`` is true once any producer may trace its sends (set by ``otel.py``, never
#: reset): until then the common case skips looking up the producer's tracing hook.
TRACING: Final = [False]

#: ``Producer._send_waiting``: the rest of a send whose record must wait.
Waiting = Callable[[PreparedRecord, Any], Awaitable[DeliveryHandle]]
#: ``Producer._send_other``: a send the fast path does not take, from its arguments.
Other = Callable[[Any, Any, Any, Any, Any, Any], Awaitable[DeliveryHandle]]


class SendPath:
    """Package-internal: one producer's ``send``, as :meth:`send` (bound, it is what
    ``producer.send`` finds).

    ``producer`` is read for its tracing hook (``instrumentation``, which may be set on
    the class or on the producer at any time) once :data:`TRACING` says that any producer
    may trace.
    """

    def __init__(self, producer: Any, intake: Intake, waiting: Waiting, other: Other) -> None:
        self.producer = producer
        self.intake = intake
        self._waiting = waiting
        self._other = other

    async def send(
        self,
        topic: Any,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: Any = None,
        timestamp_ms: Any = None,
    ) -> DeliveryHandle:
        """``Producer.send`` (see there)."""
        intake = self.intake
        if not intake.accepting or (TRACING[0] and self.producer.instrumentation is not None):
            return await self._other(topic, value, key, headers, partition, timestamp_ms)
        result = intake.offer(topic, key, value, headers, partition, timestamp_ms)
        if isinstance(result, PreparedRecord):
            # Checked, but it must wait for its topic's metadata or for buffer space.
            return await self._waiting(result, partition)
        if intake.woke:
            # A batch started or filled: let the sender run even if the caller never
            # yields (shielded: the record is already buffered).
            await cancel_shielded_checkpoint()
        return result


# -- SyncProducer's hand-off (``handoff.py``, ``sync.py``) -------------------------------------


class Tally:
    """Counts of records a producer has taken and how many of them failed."""

    def __init__(
        self, records: int = 0, failed: int = 0, first_error: BaseException | None = None
    ) -> None:
        self.records = records
        self.failed = failed
        self.first_error = first_error


class Pending:
    """Entries handed over by threads between two wake-ups of the loop."""

    def __init__(self) -> None:
        #: Records (:class:`~aioproducer.intake.PreparedRecord` or, handed over by
        #: :meth:`HandoffCore.send`, a plain :data:`~aioproducer.intake.RecordFields`
        #: tuple) and bulk-send entries.
        self.entries: list[Any] = []
        #: Bytes the entries were admitted with, not yet charged to the budget.
        self.nbytes = 0
        #: Per entry, once the loop has taken it: the batch holding a record, or the
        #: error that kept it out of the accumulator; None for a bulk send's entries.
        #: No handle per record: a record's promise reads its outcome from the batch,
        #: so each record keeps one object alive until it settles, not two.
        self.outcomes: list[ProducerBatch | BaseException | None] = []
        #: Per entry, alongside ``outcomes``: a record's index in its batch (else 0).
        self.indexes: list[int] = []
        #: (position, callback) added before the loop took the entry at that position.
        self.callbacks: list[tuple[int, FutureCallback]] = []


@mypyc_attr(allow_interpreted_subclasses=True)
class HandoffCore:
    """Package-internal: the state a :class:`~aioproducer.handoff.Handoff` shares between
    threads and its loop, and its per-record common cases, compiled.

    :meth:`send` checks a record and admits it in the calling thread; :meth:`take` appends
    a chunk's records on the loop. ``lock`` guards ``open``, ``pending``,
    ``wake_scheduled`` and ``counts``. ``wake`` (set by the subclass) schedules the
    loop's next take; it is called with ``lock`` held, once per chunk. ``promise`` is
    the class of what :meth:`send` returns for a record (:func:`new_promise` builds it).
    """

    def __init__(
        self,
        intake: Intake,
        promise: type[Any],
        wake: Callable[[], None],
    ) -> None:
        self.intake = intake
        self.cluster: Cluster = intake.cluster
        self.budget: MemoryBudget = intake.budget
        self.limit = intake.budget.limit
        self.promise = promise
        self.wake = wake
        self.lock = threading.Lock()
        #: Whether records are accepted (threads); close() ends it.
        self.open = True
        self.pending = Pending()
        self.wake_scheduled = False
        self.counts = Tally()
        # (metadata snapshot, topic) of the latest record send() found loaded: records in
        # a row for one topic skip an attribute read and a dict lookup of the uncompiled
        # metadata classes. One field replaced whole, so any thread may read and write
        # it; snapshots are replaced, never changed, so it holds while one is current.
        self._seen: tuple[Any, Any] = (None, None)

    def send(
        self, topic: Any, value: Any, key: Any, headers: Any, partition: Any, timestamp_ms: Any
    ) -> Any:
        """Check one record (bad input raises here) and admit it if its topic's metadata is
        loaded, it names no partition and the buffer has room at once: its promise. Else
        the checked record (a plain tuple, :data:`~aioproducer.intake.RecordFields`), for
        the general path."""
        record = self.intake.fields(topic, key, value, headers, partition, timestamp_ms)
        if partition is not None:
            return record
        snapshot = self.cluster.snapshot
        seen = self._seen
        if seen[0] is not snapshot or seen[1] is not topic:
            if snapshot.topics.get(topic) is None:
                return record
            self._seen = (snapshot, topic)
        need: int = record[6]
        pos = -1
        lock = self.lock
        # acquire()/release() rather than ``with``: compiled, a with statement looks up
        # and calls __enter__ and __exit__(None, None, None), about twice the cost.
        lock.acquire()
        try:
            if self.open:
                pending = self.pending
                if pending.nbytes + self.budget.used + need <= self.limit:
                    entries = pending.entries
                    entries.append(record)
                    pending.nbytes += need
                    self.counts.records += 1
                    if not self.wake_scheduled:
                        self.wake_scheduled = True
                        self.wake()
                    pos = len(entries) - 1
        finally:
            lock.release()
        if pos < 0:
            return record  # closed (the general path raises) or no room (it waits)
        return new_promise(self.promise, self, pending, pos, record)

    def take(
        self,
        pending: Pending,
        start: int,
        stop: int,
        topics: dict[str, Any],
        other: Callable[[Any, dict[str, Any]], tuple[int, BaseException | None]],
    ) -> tuple[int, BaseException | None]:
        """Append entries ``start:stop`` of ``pending`` (loop), recording each record's
        outcome; ``other(entry, topics)`` handles a bulk send's entries. Returns how many
        failed before reaching a batch, and the first of their errors."""
        intake = self.intake
        entries = pending.entries
        outcomes = pending.outcomes
        indexes = pending.indexes
        failed = 0
        first_error: BaseException | None = None
        last_topic: Any = None
        info: Any = None
        for i in range(start, stop):
            record = entries[i]
            if type(record) is not tuple and type(record) is not PreparedRecord:
                outcomes.append(None)
                indexes.append(0)
                bad, error = other(record, topics)
                if bad:
                    failed += bad
                    if first_error is None:
                        first_error = error
                continue
            topic = record[0]
            try:
                if topic is not last_topic:
                    info = topics.get(topic) or self.cluster.recall(topic)
                    last_topic = topic
                if info is None:
                    self.budget.release(record[6])
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} is no longer in the cluster's metadata"
                    )
                batch, index = intake.append_at(record, info)
                outcomes.append(batch)
                indexes.append(index)
            except KafkaError as exc:
                outcomes.append(exc)
                indexes.append(0)
                failed += 1
                if first_error is None:
                    first_error = exc
            except Exception as exc:  # a custom partitioner's bug fails its record only
                err = partitioner_failed(exc)
                outcomes.append(err)
                indexes.append(0)
                failed += 1
                if first_error is None:
                    first_error = err
        return failed, first_error


class FutureCallback:
    """Package-internal: ``fn(future)`` for a callback added to a
    :class:`~aioproducer.sync.DeliveryFuture`, as one object (it is called with the
    record's batch once that completes, or with nothing if the record already is done).
    A callback that raises is logged, not propagated."""

    __slots__ = ("fn", "future")

    def __init__(self, fn: Callable[[Any], Any], future: Any) -> None:
        self.fn = fn
        self.future = future

    def __call__(self, _batch: Any = None) -> None:
        try:
            self.fn(self.future)
        except Exception:
            _sync_log.exception("a DeliveryFuture callback raised")


class SyncSendPath:
    """Package-internal: one :class:`~aioproducer.SyncProducer`'s ``send``, as
    :meth:`send` (bound, it is what ``producer.send`` finds).

    Compiled, a record admitted at once runs no Python frame: the engine's hand-off
    checks and admits it (:meth:`HandoffCore.send`). Everything else (no engine running
    yet or any more, tracing, a record that must wait for metadata or buffer space) goes
    to ``other(owner, ...)``, ``SyncProducer.send`` itself. The owner is held weakly, so
    a dropped producer is still freed (and its abandonment noticed) at once.
    """

    def __init__(self, owner: Callable[[], Any], other: Callable[..., Any], running: int) -> None:
        #: The owner's engine; set by the owner whenever it changes (None: none yet).
        self.engine: Any = None
        self._owner = owner
        self._other = other
        self._running = running

    def send(
        self,
        topic: Any,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: Any = None,
        timestamp_ms: Any = None,
    ) -> Any:
        """``SyncProducer.send`` (see there)."""
        engine = self.engine
        if engine is None or engine.state != self._running or TRACING[0]:
            owner = self._owner()
            if owner is None:  # only this bound method was kept
                raise ProducerClosedError("the producer was garbage-collected")
            return self._other(owner, topic, value, key, headers, partition, timestamp_ms)
        handoff: HandoffCore = engine.handoff
        out = handoff.send(topic, value, key, headers, partition, timestamp_ms)
        if type(out) is tuple:
            # Checked, but it must wait for its topic's metadata or for buffer space.
            return engine.handoff.put(out)
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class PromiseCore:
    """Package-internal: the fields of :class:`~aioproducer.sync.DeliveryFuture`, which
    subclasses it; compiled, building one per record runs no Python code.

    It is the only object a record keeps alive until it settles: where the record went
    is read from its chunk (:class:`Pending`: the batch and the index there), and the
    record's timestamp and sizes are kept here, as machine integers, for its metadata.
    A :class:`~aioproducer.DeliveryHandle` is built only when the outcome is asked for.
    """

    __slots__ = ("_handoff", "_key_size", "_pending", "_pos", "_timestamp_ms", "_value_size")

    # Set by new_promise(), not by a constructor with arguments: compiled, creating the
    # public subclass's instance then parses no arguments.
    _handoff: Any
    _pending: Pending
    _pos: int
    _timestamp_ms: int
    _key_size: int
    _value_size: int

    def _outcome(self) -> DeliveryHandle | BaseException | None:
        """The record's handle or the error that kept it out of a batch; None until the
        loop has taken the record."""
        pending = self._pending
        outcomes = pending.outcomes
        pos = self._pos
        if pos >= len(outcomes):
            return None
        out = outcomes[pos]
        if isinstance(out, ProducerBatch):
            handle = new_handle(
                DeliveryHandle,
                out,
                pending.indexes[pos],
                self._timestamp_ms,
                self._key_size,
                self._value_size,
            )
            return cast(DeliveryHandle, handle)
        return out

    def _is_done(self) -> bool:
        """Whether the record is done (delivered or failed)."""
        outcomes = self._pending.outcomes
        pos = self._pos
        if pos >= len(outcomes):
            return False
        out = outcomes[pos]
        return not isinstance(out, ProducerBatch) or out.done

    def _settled(self) -> DeliveryHandle | BaseException | None:
        """The outcome once the record is done (delivered or failed), else None."""
        if not self._is_done():
            return None
        return self._outcome()

    def _error(self) -> BaseException | PromiseCore | None:
        """Once the record is done, its error (None if it was delivered); else ``self``."""
        if not self._is_done():
            return self
        pending = self._pending
        out = pending.outcomes[self._pos]
        if isinstance(out, ProducerBatch):
            return out.outcome(pending.indexes[self._pos])[2]
        return out


#: ``(class, factory)`` of the compiled :class:`~aioproducer.sync.DeliveryFuture`
#: (``_future.pyx``) once ``sync.py`` has made it the public one, else empty:
#: :func:`new_promise` then builds every promise of that class with one call of the factory.
FUTURE_FACTORY: Final[list[tuple[type[Any], Callable[[Any, Pending, int, Any], Any]]]] = []


def new_promise(
    cls: type[Any], handoff: Any, pending: Pending, pos: int, record: RecordFields
) -> Any:
    """A promise of class ``cls`` (:class:`~aioproducer.sync.DeliveryFuture`) for entry
    ``pos`` of ``pending``, the checked ``record`` handed over there: by the compiled
    future's factory if ``cls`` is its class (:data:`FUTURE_FACTORY`), else an instance of
    ``cls``, a :class:`PromiseCore` subclass."""
    if FUTURE_FACTORY:
        compiled, factory = FUTURE_FACTORY[0]
        if cls is compiled:
            return factory(handoff, pending, pos, record)
    promise: PromiseCore = cls()
    promise._handoff = handoff
    promise._pending = pending
    promise._pos = pos
    key = record[1]
    value = record[2]
    promise._timestamp_ms = record[4]
    promise._key_size = -1 if key is None else len(key)
    promise._value_size = -1 if value is None else len(value)
    return promise
