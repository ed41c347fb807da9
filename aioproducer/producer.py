"""The public asynchronous :class:`Producer`: its lifecycle and sending API.

Records get into batches through the producer's :class:`~aioproducer.intake.Intake`
(``intake.py``), which checks them and places them; the producer adds the waiting: for a
topic's first metadata and for buffer space. Transactions (``transactional_id``) are
driven by a :class:`~aioproducer.transactions.TransactionManager` (``transactions.py``).
"""

# Just over 700 lines, on purpose: it is one class, the public Producer, and almost all of
# it is the documented API (signatures and the docstrings the API reference shows). The
# work is elsewhere already (intake.py, sending.py, sender.py, transactions.py); moving
# public methods out would split the class's reference page, not its work.

from __future__ import annotations

import contextlib
import logging
import math
import time
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.abc
import anyio.lowlevel

from .accumulator import Accumulator
from .adaptive import DrainClock
from .budget import MemoryBudget
from .cluster import Cluster
from .config import ProducerConfig
from .errors import (
    BufferFullError,
    KafkaTimeoutError,
    MetadataNotReadyError,
    ProducerClosedError,
    ProducerNotStartedError,
    TransactionFailedError,
    TransactionStateError,
)
from .intake import Headers, Intake, PreparedRecord, aligned, check_topic, record_timestamp
from .metrics import Metrics
from .results import BulkDelivery, DeliveryHandle, RecordMetadata
from .sender import Sender
from .sending import SendPath
from .transactions import TransactionManager

if TYPE_CHECKING:
    import pyarrow as pa

    #: What ``send_bulk`` takes as a column: a sequence, or an Arrow array.
    Column: TypeAlias = Sequence[Any] | pa.Array | pa.ChunkedArray

__all__ = ["Headers", "Producer"]

log = logging.getLogger("aioproducer.producer")

_NEW, _RUNNING, _CLOSING, _CLOSED = range(4)

# send_bulk() yields at least this many bytes apart: below it a yield (a pass of the sender
# and of every connection) costs more than the sending it lets through gains. A topic of one
# partition of 16 KiB batches moved as many records a second at 32 and 64 KiB as at 512.
_MIN_BULK_STEP = 64 * 1024


class Producer:
    """An asyncio/trio Kafka producer.

    Use it as an async context manager (or call :meth:`start` and :meth:`close` from the
    same task)::

        async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
            handle = await producer.send("topic", b"value", key=b"k")
            metadata = await handle

    ``send()`` returns as soon as the record is buffered; the returned
    :class:`~aioproducer.DeliveryHandle` resolves to a :class:`~aioproducer.RecordMetadata`
    once the broker acknowledged the record, or raises a typed
    :class:`~aioproducer.errors.KafkaError`. Configuration keys are those of
    :class:`~aioproducer.config.ProducerConfig`; unknown keys and bad values raise
    :class:`~aioproducer.errors.ConfigError` here.
    """

    # The OpenTelemetry hooks (``otel.py``): set on the class by
    # ``AioproducerInstrumentor().instrument()``, on one producer by
    # ``instrument_producer()``; plain attributes, so that the compiled send path reads
    # one field per record.
    #: Package-internal: the hook that traces every send, or None (one attribute check
    #: per record).
    instrumentation: Any = None
    #: Package-internal: the hook that only reports metrics, per batch (no cost per
    #: record), or None.
    metrics_instrumentation: Any = None

    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", **config: Any):
        self.config = ProducerConfig.from_kwargs({"bootstrap_servers": bootstrap_servers, **config})
        cfg = self.config
        self._budget = MemoryBudget(cfg.buffer_memory)
        self._acc = Accumulator(
            batch_size=cfg.batch_size,
            linger=cfg.linger_ms / 1000,
            delivery_timeout=cfg.delivery_timeout_ms / 1000,
            codec=cfg.codec,
            compression_level=cfg.compression_level,
            budget=self._budget,
            transactional=cfg.transactional_id is not None,
            max_batch_bytes=cfg.max_request_size,
        )
        #: Package-internal: this producer's counters (:meth:`metrics` reads them);
        #: instrumentation (``otel.py``) hears their events through their ``listener``.
        self.counters = Metrics()
        self._cluster = Cluster(cfg, authenticator=_authenticator(cfg))
        # Which brokers stopped draining, for adaptive partitioning (sender writes it).
        clock = None
        if cfg.partitioner_availability_timeout_ms:
            clock = DrainClock(cfg.partitioner_availability_timeout_ms / 1000)
        self._sender = Sender(cfg, self._acc, self._cluster, self.counters, clock)
        #: Package-internal: how records get into this producer's batches. Its checks may
        #: run in any thread; SyncProducer feeds the producer through it (``handoff.py``).
        self.intake = Intake(
            cfg, self._budget, self._acc, self._cluster, self._sender.appended, clock
        )
        self._cluster.busy_topics = self._acc.busy_topics
        self._cluster.on_topics_expired = self._forget_topics
        self._txn: TransactionManager | None = None
        if cfg.transactional_id is not None:
            self._txn = TransactionManager(cfg, self._cluster, self._acc, self._sender)
            self._sender.txn = self._txn
            self.intake.gate = self._txn.check_send
        # ``producer.send`` is the compiled common case where the hot path is compiled
        # (``sending.py``): a bound method of a compiled class, stored on the instance so
        # that an ``await producer.send(...)`` runs no Python frame. The class's ``send``
        # documents it and delegates to it.
        self._send_path = SendPath(self, self.intake, self._send_record, self._send_other)
        self.send = self._send_path.send  # type: ignore[method-assign]
        self._state = _NEW
        self._task_group: anyio.abc.TaskGroup | None = None
        self._closed_event: anyio.Event | None = None
        self._max_block = cfg.max_block_ms / 1000

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # A producer dropped while running takes its buffered records with it, silently
        # unless we say so: the records never reach Kafka and their handles never settle.
        if getattr(self, "_state", None) == _RUNNING:  # __init__ may have raised
            pending = sum(batch.record_count for batch in self._acc.incomplete)
            text = (
                f"{self!r} was never closed: {pending} record(s) not delivered yet may "
                "never be (use 'async with Producer(...)' or await close())"
            )
            _warn(text, ResourceWarning, source=self)
            # Python hides ResourceWarning unless asked (-X dev, -W): the log is seen
            # by default (logging's last-resort handler prints warnings to stderr).
            log.warning("%s", text)
        if getattr(self, "_acc", None) is not None:
            self.abandon_batches()

    def abandon_batches(self) -> None:
        """Package-internal: nothing will complete the incomplete batches any more (the
        producer is being collected, or this is a forked child of its process): drop
        their callbacks unrun. They reference handles or futures, which reference the
        batches and may be invisible to the cyclic collector: kept, they would keep the
        batches (and what they reach) alive for good."""
        for batch in self._acc.incomplete:
            batch.abandon()

    def __repr__(self) -> str:
        state = ("new", "running", "closing", "closed")[self._state]
        servers = ",".join(f"{h}:{p}" for h, p in self.config.bootstrap_list)
        return f"<Producer {state} bootstrap={servers} client_id={self.config.client_id!r}>"

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background tasks. ``close()`` must later be called from the same task."""
        if self._state != _NEW:
            raise ProducerClosedError("a producer can only be started once")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._closed_event = anyio.Event()
        self._cluster.bind(task_group)
        task_group.start_soon(self._cluster.run)
        task_group.start_soon(self._sender.run)
        self._cluster.request_refresh()
        self._state = _RUNNING
        self.intake.accepting = True
        hook = self.instrumentation or self.metrics_instrumentation
        if hook is not None:
            hook.attach(self)
        if self._txn is not None:
            try:
                await self._txn.initialize()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.close(0)
                raise

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Deliver what is buffered within ``timeout`` seconds, then stop.

        Records still undelivered when the time is up fail with
        :class:`~aioproducer.errors.ProducerClosedError` (``timeout=None`` waits until every
        record has an outcome, which ``delivery_timeout_ms`` bounds). Safe to call twice.
        """
        if self._state == _NEW:
            self._state = _CLOSED
            self._budget.close()
            return
        if self._state != _RUNNING:
            if self._closed_event is not None:
                await self._closed_event.wait()
            return
        if self._txn is not None:
            # As Java does: a transaction left open is aborted, not left to time out.
            await self._txn.abort_on_close(timeout)
        self._state = _CLOSING
        self.intake.accepting = False
        self._acc.closing = True
        self._sender.wakeup()
        try:
            with anyio.move_on_after(math.inf if timeout is None else max(0.0, timeout)):
                for batch in list(self._acc.incomplete):
                    await batch.wait()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        # Runs even when close() itself is cancelled: nothing may outlive the producer.
        def closed_error() -> ProducerClosedError:
            return ProducerClosedError("the producer was closed before the record was delivered")

        self._sender.abort_everything(closed_error)
        self._budget.close()
        self._cluster.shut_down(closed_error())
        self._sender.stop()
        task_group = self._task_group
        assert task_group is not None
        task_group.cancel_scope.cancel()
        try:
            # The task group's own scope must be the current one when it exits, so the
            # shield goes around the socket cleanup only.
            await task_group.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self._cluster.close()
            self._state = _CLOSED
            assert self._closed_event is not None
            self._closed_event.set()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._state >= _CLOSING

    # -- sending ---------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryHandle:
        """Buffer one record and return its :class:`~aioproducer.DeliveryHandle`.

        Waits only for the topic's first metadata or for buffer space, at most
        ``max_block_ms`` in total. Bad input raises at once (``SerializationError``,
        ``RecordTooLargeError``, ``InvalidArgumentError``) and affects no other record. If
        the calling task is cancelled, the record is either fully buffered or not at all.
        """
        # Reached only through the class (``Producer.send(producer, ...)``): on a producer,
        # ``send`` is its SendPath's, set in __init__.
        return await self._send_path.send(topic, value, key, headers, partition, timestamp_ms)

    async def _send_other(
        self,
        topic: Any,
        value: Any,
        key: Any,
        headers: Any,
        partition: Any,
        timestamp_ms: Any,
    ) -> DeliveryHandle:
        # send() where SendPath's common case does not apply: the producer is not running,
        # or it traces its sends.
        if self._state != _RUNNING:
            self._raise_not_running()
        if self.instrumentation is None:
            record = self.intake.record(topic, key, value, headers, partition, timestamp_ms)
            handle, wake = await self._send_waiting(record, partition)
        else:
            handle, wake = await self._send_traced(
                topic, value, key, headers, partition, timestamp_ms
            )
        if wake:
            # Let the sender run between batches even if the caller never yields.
            await anyio.lowlevel.cancel_shielded_checkpoint()
        return handle

    async def _send_record(self, record: PreparedRecord, partition: Any) -> DeliveryHandle:
        # send() for a checked record SendPath could not admit at once.
        handle, wake = await self._send_waiting(record, partition)
        if wake:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # as in _send_other
        return handle

    async def _send_traced(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> tuple[DeliveryHandle, bool]:
        hook = self.instrumentation
        span, headers = hook.start(self, topic, key, headers)
        try:
            record = self.intake.record(topic, key, value, headers, partition, timestamp_ms)
            handle, wake = await self._send_waiting(record, partition)
        except BaseException as exc:
            hook.failed(span, exc)
            raise
        hook.appended(span, handle)
        return handle, wake

    async def _send_waiting(
        self, record: PreparedRecord, partition: int | None
    ) -> tuple[DeliveryHandle, bool]:
        # send() for a record that may have to wait: for its topic's first metadata, or for
        # buffer space. Returns its handle and whether the sender was woken.
        intake = self.intake
        topic = record.topic
        info = self._cluster.snapshot.topics.get(topic)
        waited = 0.0
        if info is None:
            started = time.monotonic()
            info = await intake.wait_for_topic(topic, self._max_block)
            waited = time.monotonic() - started
        if partition is not None:
            intake.check_partition(topic, partition, info)
        need = record.size
        if not self._budget.try_reserve(need):
            await self._budget.reserve(need, max(0.0, self._max_block - waited))
            if self._state != _RUNNING:
                self._budget.release(need)
                self._raise_not_running()
            # The partition count may have changed while we waited.
            info = self._cluster.snapshot.topics.get(topic, info)
        return intake.append(record, info)

    def try_send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryHandle:
        """Buffer one record without waiting, or raise at once.

        Raises :class:`~aioproducer.errors.BufferFullError` if there is no buffer space and
        :class:`~aioproducer.errors.MetadataNotReadyError` if the topic's metadata has not
        been loaded yet (it starts loading; ``await send()`` would wait for it).
        """
        if self._state != _RUNNING:
            self._raise_not_running()
        hook = self.instrumentation
        span = None
        if hook is not None:
            span, headers = hook.start(self, topic, key, headers)
        try:
            intake = self.intake
            record = intake.record(topic, key, value, headers, partition, timestamp_ms)
            info = self._cluster.snapshot.topics.get(topic)
            if info is None:
                check_topic(topic)
                self._cluster.add_topics((topic,))
                raise MetadataNotReadyError(f"metadata for topic {topic!r} is not loaded yet")
            if partition is not None:
                intake.check_partition(topic, partition, info)
            need = record.size
            if not self._budget.try_reserve(need):
                raise BufferFullError(
                    f"no room in buffer_memory ({self._budget.limit} bytes, "
                    f"{self._budget.used} in use) for a {need}-byte record"
                )
            handle = intake.append(record, info)[0]
        except BaseException as exc:
            if span is not None:
                hook.failed(span, exc)
            raise
        if span is not None:
            hook.appended(span, handle)
        return handle

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        handle = await self.send(topic, value, key, headers, partition, timestamp_ms)
        return await handle

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None = None,
        headers: Iterable[Headers | None] | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[DeliveryHandle]:
        """Buffer many records for one topic; returns their handles in order.

        ``keys`` and ``headers``, when given, are per-record and must be as long as
        ``values``. The bulk path does per-record work only where it must; it waits for
        buffer space like :meth:`send` (``max_block_ms`` per wait). If one record is
        invalid, the records before it are buffered and the error is raised for it.
        """
        if self._state != _RUNNING:
            self._raise_not_running()
        intake = self.intake
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            info = await intake.wait_for_topic(topic, self._max_block)
        values = list(values) if not isinstance(values, Sequence) else values
        count = len(values)
        key_list = aligned(keys, count, "keys")
        header_list = aligned(headers, count, "headers")
        if partition is not None:
            intake.check_partition(topic, partition, info)
        handles: list[DeliveryHandle] = []
        add = handles.append
        prepare = intake.record
        append = intake.append
        budget = self._budget
        hook = self.instrumentation
        span = None
        for i in range(count):
            key = key_list[i] if key_list is not None else None
            hdrs = header_list[i] if header_list is not None else None
            if hook is not None:
                span, hdrs = hook.start(self, topic, key, hdrs)
            try:
                record = prepare(topic, key, values[i], hdrs, partition, timestamp_ms)
                need = record.size
                if not budget.try_reserve(need):
                    self._sender.wakeup()
                    await budget.reserve(need, self._max_block)
                    if self._state != _RUNNING:
                        budget.release(need)
                        self._raise_not_running()
                    info = self._cluster.snapshot.topics.get(topic, info)
                handle, wake = append(record, info)
            except BaseException as exc:
                if span is not None:
                    hook.failed(span, exc)
                raise
            if span is not None:
                hook.appended(span, handle)
            add(handle)
            if wake:
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return handles

    async def send_bulk(
        self,
        topic: str,
        values: Column | pa.Table | pa.RecordBatch,
        keys: Column | None = None,
        headers: Sequence[Headers | None] | pa.Array | pa.ChunkedArray | None = None,
        *,
        partitions: Sequence[int | None] | pa.Array | pa.ChunkedArray | None = None,
        timestamp_ms: int | None = None,
    ) -> BulkDelivery:
        """Buffer many records for one topic and return one :class:`BulkDelivery` for all.

        The fast way to send many records: no per-record handle exists, records are
        encoded a run at a time and the result completes once per batch. ``keys``,
        ``headers`` and ``partitions`` (a partition per record, ``None`` letting the
        partitioner choose) are per record and as long as ``values``; every record gets
        the same timestamp. Records given the same partition (or the same key) keep
        their relative order. Waits for
        buffer space like :meth:`send`. If a record is invalid, the records before it are
        buffered and its error (naming its index) is raised.

        Columns: ``values`` and ``keys`` may be pyarrow arrays (``binary``, ``string``,
        ``large_binary``, ``large_string``; chunked or dictionary-encoded too), and
        ``values`` a ``pyarrow.Table`` or ``RecordBatch`` with the columns ``value``
        (required), ``key``, ``headers`` (``list<struct<key: string, value: binary>>`` or
        ``map<string, binary>``) and ``partition`` (integers, null: let the partitioner
        choose). They are read in place and encoded column-wise with numpy, with no
        Python object per record (a custom partitioner excepted); serializers
        apply to sequences only. A column of the wrong type raises
        :class:`~aioproducer.errors.SerializationError` (values, keys) or
        :class:`~aioproducer.errors.InvalidArgumentError` (other columns) naming it,
        before anything is buffered.
        """
        if self._state != _RUNNING:
            self._raise_not_running()
        intake = self.intake
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            info = await intake.wait_for_topic(topic, self._max_block)
        hook = self.instrumentation
        span = None
        if hook is not None:
            span = hook.start_bulk(self, topic, len(values))
        try:
            ts = record_timestamp(timestamp_ms)
            cols = intake.columns(topic, info, values, keys, headers, partitions)
        except BaseException as exc:
            if span is not None:
                hook.failed(span, exc)
            raise
        bulk = BulkDelivery(topic, ts)
        budget = self._budget
        # The sender, and the connections' readers and writers, run only when this
        # yields. Not after every run that filled a batch: a request would then carry one
        # batch rather than one per partition (a request costs the loop far more than a
        # batch in it). But every half of what one request to this topic can carry (a
        # batch per partition): each of their passes answers and sends at most one wave
        # of requests, and at half of max_request_size (most of a megabyte) the appends
        # outran them, so requests went out late, the buffer filled up and flush() was
        # left most of the sending to do. Counted in uncompressed bytes, as runs are: a
        # compressed batch holds more of them.
        config = self.config
        fill = self._acc.fill_limit(topic)
        whole = min(
            config.max_request_size * fill // config.batch_size, fill * len(info.partitions)
        )
        step = max(_MIN_BULK_STEP, whole // 2)
        unsent = 0
        woke = False
        try:
            for run in cols.slices(config.batch_size, bulk):
                if not budget.try_reserve(run.size):
                    self._sender.wakeup()
                    await budget.reserve(run.size, self._max_block)
                    if self._state != _RUNNING:
                        budget.release(run.size)
                        self._raise_not_running()
                    info = self._cluster.snapshot.topics.get(topic, info)
                    unsent = 0
                if intake.append_run(run, info):
                    woke = True
                unsent += run.size
                if woke and unsent >= step:
                    woke = False
                    unsent = 0
                    await anyio.lowlevel.cancel_shielded_checkpoint()
            if woke:
                await anyio.lowlevel.cancel_shielded_checkpoint()
        except BaseException as exc:
            if span is not None:
                hook.failed(span, exc)
                span = None
            raise
        finally:
            bulk.track(cols.order)
            if span is not None:
                hook.bulk_tracked(span, bulk, cols.error)
        if cols.error is not None:
            raise cols.error
        return bulk

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without lingering, and wait for the outcomes.

        Records sent after the call started are not waited for. Raises
        :class:`~aioproducer.errors.KafkaTimeoutError` if ``timeout`` seconds pass first.
        Failed records do not make ``flush`` raise: their handles carry the errors.
        """
        if self._state == _NEW:
            return
        batches = list(self._acc.incomplete)
        self._acc.flushing += 1
        self._sender.wakeup()
        try:
            with anyio.move_on_after(math.inf if timeout is None else timeout) as scope:
                for batch in batches:
                    await batch.wait()
        finally:
            self._acc.flushing -= 1
        if scope.cancelled_caught:
            pending = sum(b.record_count for b in batches if not b.done)
            raise KafkaTimeoutError(f"flush timed out after {timeout} s; {pending} records pending")

    # -- transactions ----------------------------------------------------------------------

    def _transactions(self, what: str) -> TransactionManager:
        if self._state != _RUNNING:
            self._raise_not_running()
        if self._txn is None:
            raise TransactionStateError(
                f"{what}() needs a transactional producer: set transactional_id"
            )
        return self._txn

    async def begin_transaction(self) -> None:
        """Start a transaction: records sent until it is committed or aborted belong to it.

        Needs ``transactional_id``. Raises
        :class:`~aioproducer.errors.TransactionStateError` if a transaction is already open.
        """
        self._transactions("begin_transaction").begin()
        await anyio.lowlevel.checkpoint()

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it.

        Records become visible to ``read_committed`` consumers together. If any record of
        the transaction failed, nothing is committed and
        :class:`~aioproducer.errors.TransactionFailedError` is raised (its ``__cause__`` is
        the first failure): call :meth:`abort_transaction`. A fatal error
        (:class:`~aioproducer.errors.ProducerFencedError`, ...) is raised as itself; the
        producer can then only be closed. If the coordinator cannot be reached within
        ``max_block_ms``, ``KafkaTimeoutError`` is raised and the call may be repeated.
        """
        await self._transactions("commit_transaction").commit()

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not yet sent fail with
        :class:`~aioproducer.errors.TransactionAbortedError`, records in flight are waited
        for, and none of them become visible to ``read_committed`` consumers. The producer
        can begin a new transaction afterwards."""
        await self._transactions("abort_transaction").abort()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], int],
        group_id: str,
        *,
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        ``offsets`` maps ``(topic, partition)`` to the next offset the group ``group_id``
        should consume. They are committed with the transaction and dropped if it aborts.
        ``metadata`` optionally gives a partition's offset a metadata string (Java's
        ``OffsetAndMetadata.metadata()``), which :meth:`committed_offsets` reads back.
        """
        txn = self._transactions("send_offsets_to_transaction")
        await txn.send_offsets(offsets, group_id, metadata)

    async def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], group_id: str
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """The offsets the group ``group_id`` committed for ``partitions``, as
        ``{(topic, partition): (offset, metadata)}`` (offset -1 where it has none).

        Only committed transactions count: while an open transaction holds an offset the
        call waits (within ``max_block_ms``) until it ends. Called right after
        :meth:`start`, it reads what the previous holder of the transactional id
        committed with :meth:`send_offsets_to_transaction`, since starting aborted a
        transaction it left open. Needs ``transactional_id`` and a broker that supports
        OffsetFetch v7 (Kafka 2.5+).
        """
        txn = self._transactions("committed_offsets")
        return await txn.committed_offsets(partitions, group_id)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Producer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends normally and aborts it if the block raises or is cancelled (the
        exception propagates). The abort runs shielded from cancellation, for at most
        ``max_block_ms``. If the commit fails with
        :class:`~aioproducer.errors.TransactionFailedError`, the transaction is aborted
        and the error raised."""
        await self.begin_transaction()
        try:
            yield self
        except BaseException:
            await self._abort_shielded()
            raise
        try:
            await self.commit_transaction()
        except TransactionFailedError:
            await self._abort_shielded()
            raise

    async def _abort_shielded(self) -> None:
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self._max_block
            try:
                await self.abort_transaction()
            except Exception as exc:
                # The block's own exception is the one to report; the transaction times
                # out on the coordinator if this abort could not reach it.
                log.warning("aborting the transaction failed: %r", exc)
        if scope.cancelled_caught:
            log.warning("aborting the transaction did not finish within max_block_ms")

    # -- information -----------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        if self._state != _RUNNING:
            self._raise_not_running()
        check_topic(topic)
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            info = await self.intake.wait_for_topic(topic, self._max_block)
        return list(info.partitions)

    def metrics(self) -> dict[str, float]:
        """Plain counters: records sent/failed/retried, batches, sizes, latency, buffer use,
        and the topics (``topics_tracked``) and partitions (``partitions_tracked``) the
        producer keeps state for."""
        return self.counters.snapshot(
            buffer_bytes=self._budget.used,
            buffer_limit=self._budget.limit,
            requests_in_flight=self._sender.in_flight_requests,
            topics_tracked=self._cluster.topics_in_use,
            partitions_tracked=self._sender.partitions_tracked,
        )

    # -- internals -------------------------------------------------------------------------

    def _forget_topics(self, topics: list[str]) -> None:
        # Topics idle for metadata_max_idle_ms left the metadata: drop what else is kept
        # per topic or partition, so a producer that wanders over many topics stays small.
        self._sender.forget_topics(topics)
        self.intake.forget_topics(topics)

    def _raise_not_running(self) -> None:
        if self._state == _NEW:
            raise ProducerNotStartedError(
                "the producer is not started: use 'async with Producer(...)' "
                "or 'await producer.start()'"
            )
        raise ProducerClosedError("the producer is closed")


def _authenticator(config: ProducerConfig) -> Any:
    if not config.security_protocol.startswith("SASL"):
        return None
    from .sasl import authenticator

    return authenticator(config)
