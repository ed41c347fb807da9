"""A blocking, thread-safe facade over :class:`~aioproducer.Producer`.

:class:`SyncProducer` runs an ordinary async producer on a :class:`~aioproducer.LoopRunner`
(a loop in a daemon thread, shared by every sync producer of the process by default) and
feeds it through the intake the producer offers other threads: calling threads check
records with its :class:`~aioproducer.intake.Intake` (a bad record raises in the caller
and harms nothing else) and hand them to its :class:`~aioproducer.handoff.Handoff`, which
moves them to the loop a chunk at a time. What ``send()`` returns is a promise read from
the hand-off (a :class:`DeliveryFuture`); waiting is a wait on the hand-off's condition.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import results, speedups
from .accumulator import HANDLE_FACTORY, ProducerBatch
from .config import ProducerConfig
from .errors import KafkaError, KafkaTimeoutError, ProducerClosedError, TransactionFailedError
from .handoff import RUNNING, Engine, Handoff, Tally
from .intake import Headers, PreparedRecord, aligned, check_topic, record_timestamp
from .producer import Producer
from .results import BulkDelivery, DeliveryHandle, RecordMetadata, raisable
from .runner import LoopRunner, default_runner
from .sending import FUTURE_FACTORY, FutureCallback, PromiseCore, SyncSendPath

if TYPE_CHECKING:
    import pyarrow as pa

    from .producer import Column

__all__ = ["BulkFuture", "DeliveryFuture", "SyncProducer"]

log = logging.getLogger("aioproducer.sync")

# Records send_many() checks (outside the hand-off's lock) before it hands them over.
_STEP = 1024


class _WaitTimeout(KafkaTimeoutError, concurrent.futures.TimeoutError):
    """``DeliveryFuture.result(timeout)`` ran out of time (the delivery goes on)."""


class DeliveryFuture(PromiseCore):
    """The pending delivery of one record sent with :meth:`SyncProducer.send`.

    It behaves like a :class:`concurrent.futures.Future` of a
    :class:`~aioproducer.RecordMetadata`: :meth:`result` and :meth:`exception` block (with
    an optional timeout), :meth:`done` and :meth:`add_done_callback` work as there, and a
    delivery cannot be cancelled. Callbacks run on the producer's loop thread (or at once in
    the caller's thread if the record is already done), so they must be quick and must not
    block. It is deliberately light: one small object per record, settled by its batch.
    For ``concurrent.futures.wait()`` or ``as_completed()`` use :meth:`as_future`.
    """

    # The fields, the builder (sending.new_promise) and the outcome's lookup are
    # PromiseCore's (``sending.py``): compiled, it builds a future per record without
    # running Python code, and it is the one object a record keeps alive.
    __slots__ = ("__weakref__",)

    def done(self) -> bool:
        """Whether the record has been delivered or has failed."""
        return self._is_done()

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
        out = self._settled()
        if out is not None:
            return out
        if not self._handoff.wait_for(self.done, timeout):
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
        # A copy: raised, the stored error would reference the caller's frames, which
        # reference this future (see results.raisable).
        raise raisable(out)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait like :meth:`result`; the delivery's error, or ``None`` if it succeeded."""
        out = self._error()  # compiled: no Python frame once the record is done
        if out is self:
            self._wait(timeout)
            out = self._error()
        assert not isinstance(out, PromiseCore)
        return out

    def add_done_callback(self, fn: Callable[[DeliveryFuture], Any]) -> None:
        """Call ``fn(future)`` once the record is done (at once if it already is)."""
        # One object per callback (compiled), not a chain of closures: a record sent
        # with a callback each would otherwise leave a dozen short-lived objects behind
        # until its batch completes, which makes the cyclic collector run more often.
        callback = FutureCallback(fn, self)
        if not self._handoff.when_done(self._pending, self._pos, callback):
            callback()

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
                    future.set_exception(raisable(out))
            except BaseException as exc:
                future.set_exception(exc)

        self.add_done_callback(settle)
        return future

    def __repr__(self) -> str:
        out = self._outcome()
        if out is None:
            return "<DeliveryFuture pending (not yet handed to the loop)>"
        if isinstance(out, DeliveryHandle):
            state = "done" if out.done() else "pending"
            return f"<DeliveryFuture {out.topic}-{out.partition} {state}>"
        return f"<DeliveryFuture failed {type(out).__name__}>"


#: Which :class:`DeliveryFuture` runs: ``"compiled"`` (``_future.pyx``) or ``"pure"``.
FUTURE_ACTIVE = "pure"
#: Why :data:`FUTURE_ACTIVE` is what it is, in words.
FUTURE_REASON = "not selected yet"


def _use_compiled_future() -> None:
    """Make the compiled future ``DeliveryFuture`` where the compiled handle runs (which
    it builds outcomes with) and the future was compiled with it."""
    global DeliveryFuture, FUTURE_ACTIVE, FUTURE_REASON
    if results.HANDLE_ACTIVE != "compiled" or not HANDLE_FACTORY:
        FUTURE_REASON = f"the pure-Python DeliveryHandle runs ({results.HANDLE_REASON})"
        return
    module, FUTURE_REASON = speedups.extension("aioproducer._future")
    if module is None:
        return
    module.configure(ProducerBatch, HANDLE_FACTORY[0], raisable, _WaitTimeout, FutureCallback)
    FUTURE_FACTORY.append((module.DeliveryFuture, module.new_future))
    # Rebound here, at import: the package's namespace, the engines this module starts
    # and isinstance() checks all get the compiled type.
    DeliveryFuture = module.DeliveryFuture  # type: ignore[misc]
    FUTURE_ACTIVE = "compiled"


_use_compiled_future()


class BulkFuture:
    """The pending delivery of one :meth:`SyncProducer.send_bulk`, as a whole.

    :meth:`result` blocks until every record has an outcome and returns the
    :class:`~aioproducer.results.BulkDelivery` (``delivered``, ``failed``,
    ``first_error``, per-record ``metadata(i)``). Deliveries cannot be cancelled.
    """

    __slots__ = ("_bulk", "_handoff")

    def __init__(self, handoff: Handoff[DeliveryFuture], bulk: BulkDelivery) -> None:
        self._handoff = handoff
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
        if not bulk.done() and not self._handoff.wait_for(bulk.done, timeout):
            raise _WaitTimeout(f"the bulk send was not done within {timeout} s (still pending)")
        return bulk

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<BulkFuture {self._bulk.topic} {state}>"


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
        self._engine: Engine[DeliveryFuture] | None = None
        self._pid = os.getpid()
        self._closed = False
        # ``send`` is its SyncSendPath's (compiled: an admitted record runs no Python
        # frame); it falls back to the method below whenever that common case ends.
        self._send_path = SyncSendPath(weakref.ref(self), SyncProducer.send, RUNNING)
        self.send = self._send_path.send  # type: ignore[method-assign]
        _PRODUCERS.add(self)

    def _after_fork_in_child(self) -> None:
        # The engine belongs to the parent's loop thread, which does not exist here.
        if self._engine is not None:
            # Its records will never complete here: their futures' callbacks must go.
            self._engine.forget_callbacks()
        self._lock = threading.Lock()
        self._engine = None
        self._send_path.engine = None

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

    def _get_engine(self) -> Engine[DeliveryFuture]:
        engine = self._engine
        if engine is not None and self._pid == os.getpid() and engine.state == RUNNING:
            return engine
        with self._lock:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            pid = os.getpid()
            if self._engine is None or self._pid != pid:
                # A producer inherited over fork() belongs to the parent's loop thread,
                # which does not exist here: start one of our own.
                runner = self._runner if self._runner is not None else default_runner()
                engine = Engine(self._kwargs, self.config, runner, DeliveryFuture)
                self._engine, self._pid = engine, pid
                try:
                    engine.start()
                except BaseException:
                    self._engine = None
                    raise
                self._send_path.engine = engine
                weakref.finalize(self, _abandon, engine)
            engine = self._engine
            engine.check_running()
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
        if engine is None or engine.state != RUNNING:
            engine = self._get_engine()
        hook = Producer.instrumentation
        if hook is not None:
            return self._send_traced(
                hook, engine, topic, value, key, headers, partition, timestamp_ms
            )
        handoff = engine.handoff
        # Compiled: checks the record and, in the common case, admits it at once.
        out = handoff.send(topic, value, key, headers, partition, timestamp_ms)
        if type(out) is tuple:  # a checked record (intake.RecordFields)
            return handoff.put(out)  # it waits for metadata or buffer space, or raises
        future: DeliveryFuture = out
        return future

    def _send_traced(
        self,
        hook: Any,
        engine: Engine[DeliveryFuture],
        topic: str,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> DeliveryFuture:
        # The span starts in the caller's thread, under its current context, and ends on
        # the loop when the record settles.
        span, headers = hook.start(self, topic, key, headers)
        try:
            record = engine.intake.record(topic, key, value, headers, partition, timestamp_ms)
            future = engine.handoff.put(record)
        except BaseException as exc:
            hook.failed(span, exc)
            raise
        future.add_done_callback(lambda done: hook.settled(span, done))
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
        engine = self._get_engine()
        handoff = engine.handoff
        info = handoff.topic_info(topic)
        values = values if isinstance(values, Sequence) else list(values)
        count = len(values)
        key_list = aligned(keys, count, "keys")
        header_list = aligned(headers, count, "headers")
        if partition is not None:
            engine.intake.check_partition(topic, partition, info)
        # One timestamp for the call, as a bulk send has.
        ts = record_timestamp(timestamp_ms)
        prepare = engine.intake.record
        hook = Producer.instrumentation
        out: list[DeliveryFuture] = []
        for start in range(0, count, _STEP):
            records: list[PreparedRecord] = []
            add = records.append
            spans: list[Any] = []
            error: KafkaError | None = None
            try:
                for i in range(start, min(count, start + _STEP)):
                    key = key_list[i] if key_list is not None else None
                    hdrs = header_list[i] if header_list is not None else None
                    if hook is not None:
                        # One span per record, as Producer.send_many: each has its own
                        # outcome and its own trace context in its headers.
                        span, hdrs = hook.start(self, topic, key, hdrs)
                        spans.append(span)
                    add(prepare(topic, key, values[i], hdrs, partition, ts))
            except KafkaError as exc:
                error = exc
                if hook is not None:
                    hook.failed(spans.pop(), exc)
            if records:
                futures = handoff.put_many(records)
                if hook is not None:
                    for span, future in zip(spans, futures, strict=True):
                        future.add_done_callback(functools.partial(_settle_span, hook, span))
                out += futures
            if error is not None:
                raise error
        return out

    def send_bulk(
        self,
        topic: str,
        values: Column | pa.Table | pa.RecordBatch,
        keys: Column | None = None,
        headers: Sequence[Headers | None] | pa.Array | pa.ChunkedArray | None = None,
        *,
        partitions: Sequence[int | None] | pa.Array | pa.ChunkedArray | None = None,
        timestamp_ms: int | None = None,
    ) -> BulkFuture:
        """Buffer many records for one topic; returns one :class:`BulkFuture` for them all.

        The fast way to send many records, as :meth:`aioproducer.Producer.send_bulk`: no
        per-record future, the records cross to the producer's loop a slice at a time and
        are encoded a run at a time. Blocks only for metadata or buffer space. If a record
        is invalid, the records before it are buffered and its error (naming its index)
        is raised.

        Columns are the fastest input: pyarrow arrays as ``values``/``keys``, or a
        ``pyarrow.Table``/``RecordBatch`` as ``values`` with columns named ``value``
        (required), ``key``, ``headers`` and ``partition``::

            table = pa.table({"key": [b"k1", b"k2"], "value": [b"v1", None]})
            producer.send_bulk("events", table).result()
            producer.send_bulk("events", pa.array(["a", "b"]), keys=pa.array([b"1", b"2"]))

        Arrow buffers are read in place (strings as their UTF-8 bytes) and the records
        encoded column-wise with numpy: no Python object per record. Value and key
        columns must be binary or string (large, chunked or dictionary-encoded too),
        ``headers`` ``list<struct<key: string, value: binary>>`` or ``map<string,
        binary>``, ``partition`` integers (null: the partitioner chooses); anything else
        raises :class:`~aioproducer.errors.SerializationError` or
        :class:`~aioproducer.errors.InvalidArgumentError` naming the column before a
        record is buffered. Serializers apply to sequences only.
        """
        hook = Producer.instrumentation
        span = hook.start_bulk(self, topic, len(values)) if hook is not None else None
        try:
            bulk, _count, error = self.send_bulk_until_error(
                topic, values, keys, headers, partitions, timestamp_ms, span=span
            )
        except BaseException as exc:
            if span is not None:
                hook.failed(span, exc)
            raise
        if error is not None:
            raise error
        return BulkFuture(self._get_engine().handoff, bulk)

    def send_bulk_until_error(
        self,
        topic: str,
        values: Any,
        keys: Any,
        headers: Any,
        partitions: Any,
        timestamp_ms: int | None = None,
        *,
        span: Any = None,
    ) -> tuple[BulkDelivery, int, BaseException | None]:
        """Package-internal (``aioproducer.spark``): :meth:`send_bulk` that returns
        instead of raising: buffers what comes before the first bad record and returns
        the bulk, how many records it holds (the bad record's index) and that record's
        error (None if there is none). ``span``: the call's tracing span, ended when the
        bulk is done."""
        engine = self._get_engine()
        handoff = engine.handoff
        info = handoff.topic_info(topic)
        ts = record_timestamp(timestamp_ms)
        cols = engine.intake.columns(topic, info, values, keys, headers, partitions)
        bulk = BulkDelivery(topic, ts)
        hook = Producer.instrumentation
        if span is not None and hook is not None:
            # Registered before the loop sees the bulk: from then on only the loop may.
            hook.bulk_tracked(span, bulk, cols.error)
        handoff.put_runs(cols.slices(self.config.batch_size, bulk), bulk, cols.order)
        return bulk, cols.count, cols.error

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without lingering, and wait for the outcomes.

        Raises :class:`~aioproducer.errors.KafkaTimeoutError` if ``timeout`` seconds pass
        first. Failed records do not make ``flush`` raise: their futures carry the errors.
        """
        if self._engine is None or self._pid != os.getpid() or self._closed:
            return  # nothing was sent here, or close() already delivered everything
        engine = self._get_engine()
        engine.runner.call(engine.flush, timeout)

    # -- transactions ---------------------------------------------------------------------

    def _transact(self, step: Callable[[Producer], Awaitable[None]]) -> None:
        engine = self._get_engine()
        engine.runner.call(engine.transact, step)

    def begin_transaction(self) -> None:
        """Start a transaction (see :meth:`aioproducer.Producer.begin_transaction`)."""
        self._transact(Producer.begin_transaction)

    def commit_transaction(self) -> None:
        """Deliver every record sent in the transaction (from any thread, before this call),
        then commit it (see :meth:`aioproducer.Producer.commit_transaction`)."""
        self._transact(Producer.commit_transaction)

    def abort_transaction(self) -> None:
        """Abort the transaction (see :meth:`aioproducer.Producer.abort_transaction`)."""
        self._transact(Producer.abort_transaction)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], int],
        group_id: str,
        *,
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Commit consumer offsets (and their metadata) with the transaction (see
        :meth:`aioproducer.Producer.send_offsets_to_transaction`)."""
        self._transact(
            lambda producer: producer.send_offsets_to_transaction(
                offsets, group_id, metadata=metadata
            )
        )

    def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], group_id: str
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """The offsets ``group_id`` committed for ``partitions``, once no open transaction
        holds them (see :meth:`aioproducer.Producer.committed_offsets`)."""
        wanted = list(partitions)
        found: dict[tuple[str, int], tuple[int, str | None]] = {}

        async def step(producer: Producer) -> None:
            found.update(await producer.committed_offsets(wanted, group_id))

        self._transact(step)
        return found

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SyncProducer]:
        """``with producer.transaction():`` begins a transaction, commits it when the block
        ends normally and aborts it if the block raises (the exception propagates), as
        :meth:`aioproducer.Producer.transaction` does."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            self._abort_quietly()
            raise
        try:
            self.commit_transaction()
        except TransactionFailedError:
            self._abort_quietly()
            raise

    def _abort_quietly(self) -> None:
        try:
            self.abort_transaction()
        except Exception as exc:
            # The block's own exception is the one to report.
            log.warning("aborting the transaction failed: %r", exc)

    # -- information ----------------------------------------------------------------------

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        check_topic(topic)
        engine = self._get_engine()
        return engine.runner.call(engine.partitions_for, topic)

    def metrics(self) -> dict[str, float]:
        """The producer's counters (see :meth:`aioproducer.Producer.metrics`), plus
        ``records_pending`` (buffered by threads, not yet in a batch)."""
        engine = self._engine
        if engine is None or engine.producer is None or self._pid != os.getpid():
            engine = self._get_engine()
        out = engine.runner.call(engine.metrics)
        out["records_pending"] = engine.handoff.pending_count()
        return out

    def tally(self) -> Tally:
        """Package-internal (``aioproducer.spark``): records taken and failed so far in
        this process, for per-task accounting."""
        return self._get_engine().handoff.tally()


def _rebuild(kwargs: dict[str, Any]) -> SyncProducer:
    return SyncProducer(**kwargs)


def _abandon(engine: Engine[DeliveryFuture]) -> None:
    # The SyncProducer was garbage-collected without close(): let its loop task finish
    # delivering what it holds and stop, instead of running for the rest of the process.
    if not engine.runner.started:
        return
    with contextlib.suppress(Exception):  # best effort, at garbage collection
        engine.request_close(None)


_PRODUCERS: weakref.WeakSet[SyncProducer] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for producer in list(_PRODUCERS):
        producer._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def _settle_span(hook: Any, span: Any, future: DeliveryFuture) -> None:
    hook.settled(span, future)
