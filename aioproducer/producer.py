"""The public asynchronous :class:`Producer`."""

from __future__ import annotations

import bisect
import math
import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .accumulator import (
    Accumulator,
    BulkDelivery,
    DeliveryHandle,
    MemoryBudget,
    ProducerBatch,
    RecordMetadata,
)
from .cluster import Cluster, TopicInfo
from .config import ProducerConfig
from .errors import (
    BufferFullError,
    InvalidArgumentError,
    KafkaError,
    KafkaTimeoutError,
    MetadataNotReadyError,
    ProducerClosedError,
    ProducerNotStartedError,
    RecordTooLargeError,
    SerializationError,
)
from .metrics import Metrics
from .partitioner import StickyPartitioner, partition_for_key
from .protocol.records import RECORD_BATCH_OVERHEAD
from .sender import Sender

__all__ = ["Headers", "Producer"]

#: Headers as ``[(key, value), ...]`` or ``{key: value}``; keys str, values bytes-like/str/None.
Headers = Sequence[tuple[str, Any]] | Mapping[str, Any]

_NEW, _RUNNING, _CLOSING, _CLOSED = range(4)
_BytesLike = (bytes, bytearray)


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
        )
        self._metrics = Metrics()
        self._cluster = Cluster(cfg, authenticator=_authenticator(cfg))
        self._sender = Sender(cfg, self._acc, self._cluster, self._metrics)
        self._sticky = StickyPartitioner(cfg.batch_size)
        self._state = _NEW
        self._task_group: anyio.abc.TaskGroup | None = None
        self._closed_event: anyio.Event | None = None
        self._max_block = cfg.max_block_ms / 1000
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        self._key_serializer = cfg.key_serializer
        self._value_serializer = cfg.value_serializer
        self._keys_decide = cfg.partitioner is None and not cfg.partitioner_ignore_keys

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
        self._state = _CLOSING
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
        if self._state != _RUNNING:
            self._raise_not_running()
        key_b, value_b, hdrs, ts = self._prepare(topic, key, value, headers, timestamp_ms)
        info = self._cluster.snapshot.topics.get(topic)
        waited = 0.0
        if info is None:
            _check_topic(topic)
            started = time.monotonic()
            info = await self._cluster.wait_for_topic(topic, self._max_block)
            waited = time.monotonic() - started
        need, part = self._size_and_partition(topic, info, key_b, value_b, hdrs, partition)
        if not self._budget.try_reserve(need):
            await self._budget.reserve(need, max(0.0, self._max_block - waited))
            if self._state != _RUNNING:
                self._budget.release(need)
                self._raise_not_running()
            # The partition count may have changed while we waited.
            info = self._cluster.snapshot.topics.get(topic, info)
            part = self._partition(topic, info, key_b, partition)
        handle, wake = self._append(topic, info, part, ts, key_b, value_b, hdrs, need, partition)
        if wake:
            self._sender.wakeup()
            # Let the sender run between batches even if the caller never yields.
            await anyio.lowlevel.cancel_shielded_checkpoint()
        return handle

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
        key_b, value_b, hdrs, ts = self._prepare(topic, key, value, headers, timestamp_ms)
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            _check_topic(topic)
            self._cluster.add_topics((topic,))
            raise MetadataNotReadyError(f"metadata for topic {topic!r} is not loaded yet")
        need, part = self._size_and_partition(topic, info, key_b, value_b, hdrs, partition)
        if not self._budget.try_reserve(need):
            raise BufferFullError(
                f"no room in buffer_memory ({self._budget.limit} bytes, "
                f"{self._budget.used} in use) for a {need}-byte record"
            )
        handle, wake = self._append(topic, info, part, ts, key_b, value_b, hdrs, need, partition)
        if wake:
            self._sender.wakeup()
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
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            _check_topic(topic)
            info = await self._cluster.wait_for_topic(topic, self._max_block)
        values = list(values) if not isinstance(values, Sequence) else values
        count = len(values)
        key_list = _aligned(keys, count, "keys")
        header_list = _aligned(headers, count, "headers")
        handles: list[DeliveryHandle] = []
        append = handles.append
        prepare = self._prepare
        size_and_partition = self._size_and_partition
        budget = self._budget
        for i in range(count):
            key_b, value_b, hdrs, ts = prepare(
                topic,
                key_list[i] if key_list is not None else None,
                values[i],
                header_list[i] if header_list is not None else None,
                timestamp_ms,
            )
            need, part = size_and_partition(topic, info, key_b, value_b, hdrs, partition)
            if not budget.try_reserve(need):
                self._sender.wakeup()
                await budget.reserve(need, self._max_block)
                if self._state != _RUNNING:
                    budget.release(need)
                    self._raise_not_running()
                info = self._cluster.snapshot.topics.get(topic, info)
                part = self._partition(topic, info, key_b, partition)
            handle, wake = self._append(
                topic, info, part, ts, key_b, value_b, hdrs, need, partition
            )
            append(handle)
            if wake:
                self._sender.wakeup()
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return handles

    async def send_bulk(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers | None] | None = None,
        *,
        partitions: Sequence[int | None] | None = None,
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
        """
        if self._state != _RUNNING:
            self._raise_not_running()
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            _check_topic(topic)
            info = await self._cluster.wait_for_topic(topic, self._max_block)
        ts = _record_timestamp(timestamp_ms)
        cols = _prepare_bulk(self, topic, info, values, keys, headers, partitions)
        bulk = BulkDelivery(topic, ts)
        budget = self._budget
        try:
            for part, start, stop in cols.runs:
                pos = start
                while pos < stop:
                    end = cols.slice_end(pos, stop, part is None, self.config.batch_size)
                    need = cols.estimate(pos, end)
                    if not budget.try_reserve(need):
                        self._sender.wakeup()
                        await budget.reserve(need, self._max_block)
                        if self._state != _RUNNING:
                            budget.release(need)
                            self._raise_not_running()
                        info = self._cluster.snapshot.topics.get(topic, info)
                    spans: list[tuple[ProducerBatch, int, int]] = []
                    try:
                        wake = self._append_slice(
                            topic, info, part, ts, cols, pos, end, need, spans
                        )
                    finally:
                        bulk._add_spans(spans)
                    pos = end
                    if wake:
                        self._sender.wakeup()
                        await anyio.lowlevel.cancel_shielded_checkpoint()
        finally:
            bulk._order = cols.order
            bulk._track()
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

    # -- information -----------------------------------------------------------------------

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waits for metadata up to ``max_block_ms``)."""
        if self._state != _RUNNING:
            self._raise_not_running()
        _check_topic(topic)
        info = self._cluster.snapshot.topics.get(topic)
        if info is None:
            info = await self._cluster.wait_for_topic(topic, self._max_block)
        return list(info.partitions)

    def metrics(self) -> dict[str, float]:
        """Plain counters: records sent/failed/retried, batches, sizes, latency, buffer use."""
        return self._metrics.snapshot(
            buffer_bytes=self._budget.used,
            buffer_limit=self._budget.limit,
            requests_in_flight=self._sender.in_flight_requests,
        )

    # -- internals -------------------------------------------------------------------------

    def _raise_not_running(self) -> None:
        if self._state == _NEW:
            raise ProducerNotStartedError(
                "the producer is not started: use 'async with Producer(...)' "
                "or 'await producer.start()'"
            )
        raise ProducerClosedError("the producer is closed")

    def _too_large(self, size: int) -> RecordTooLargeError:
        return RecordTooLargeError(
            f"the record is {size} bytes when serialized, larger than "
            f"max_request_size ({self.config.max_request_size}) or "
            f"buffer_memory ({self.config.buffer_memory})"
        )

    def _prepare(
        self,
        topic: str,
        key: Any,
        value: Any,
        headers: Headers | None,
        timestamp_ms: int | None,
    ) -> tuple[Any, Any, list[tuple[str, bytes | None]] | None, int]:
        # None means "no key" / "no value" (a tombstone) and is never passed to a serializer.
        if self._key_serializer is not None and key is not None:
            key = _serialize(self._key_serializer, topic, key, "key")
        if self._value_serializer is not None and value is not None:
            value = _serialize(self._value_serializer, topic, value, "value")
        # bytes and bytearray are written as they are: the batch copies them on append.
        if key is not None and type(key) not in _BytesLike:
            key = _coerce(key, "key")
        if value is not None and type(value) not in _BytesLike:
            value = _coerce(value, "value")
        hdrs = _headers(headers) if headers else None
        return key, value, hdrs, _record_timestamp(timestamp_ms)

    def _size_and_partition(
        self,
        topic: str,
        info: TopicInfo,
        key: Any,
        value: Any,
        hdrs: list[tuple[str, bytes | None]] | None,
        partition: int | None,
    ) -> tuple[int, int]:
        """The bytes to reserve for a record (RecordTooLargeError if it can never fit) and
        its partition."""
        return self._record_size(key, value, hdrs), self._partition(topic, info, key, partition)

    def _record_size(
        self, key: Any, value: Any, hdrs: list[tuple[str, bytes | None]] | None
    ) -> int:
        """The bytes to reserve for a record; RecordTooLargeError if it can never fit."""
        need = self._acc.estimate_size(
            len(key) if key is not None else 0,
            len(value) if value is not None else 0,
            hdrs,
        )
        if need + RECORD_BATCH_OVERHEAD > self._max_record:
            raise self._too_large(need + RECORD_BATCH_OVERHEAD)
        return need

    def _partition(self, topic: str, info: TopicInfo, key: Any, partition: int | None) -> int:
        count = len(info.partitions)
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < count:
                raise _invalid_partition(topic, partition, count)
            return partition
        custom = self.config.partitioner
        if custom is not None:
            chosen = custom(topic, key, info.partitions, info.available)
            if type(chosen) is not int or not 0 <= chosen < count:
                raise InvalidArgumentError(
                    f"the partitioner returned {chosen!r} for topic {topic!r}, "
                    f"which has {count} partitions"
                )
            return chosen
        if key is not None and self._keys_decide:
            return partition_for_key(key, count)
        return self._sticky.partition(topic, info.available, count)

    def _append(
        self,
        topic: str,
        info: TopicInfo,
        part: int,
        ts: int,
        key: Any,
        value: Any,
        hdrs: list[tuple[str, bytes | None]] | None,
        need: int,
        explicit: int | None,
    ) -> tuple[DeliveryHandle, bool]:
        acc = self._acc
        handle, wake = acc.append(topic, part, ts, key, value, hdrs, need, time.monotonic())
        if (
            explicit is None
            and (key is None or not self._keys_decide)
            and self.config.partitioner is None
        ):
            # The record went into the partition's newest batch, so its fullness is the
            # partition's.
            self._sticky.on_append(
                topic,
                part,
                need,
                handle._batch.full,
                info.available,
                len(info.partitions),
            )
        return handle, wake

    def _append_slice(
        self,
        topic: str,
        info: TopicInfo,
        part: int | None,
        ts: int,
        cols: _BulkColumns,
        start: int,
        stop: int,
        reserved: int,
        spans: list[tuple[ProducerBatch, int, int]],
    ) -> bool:
        """Append records ``start:stop`` of ``cols`` (``reserved`` bytes already reserved)
        to ``part``, or to the sticky partition when ``part`` is None; returns whether
        the sender should be woken."""
        count = len(info.partitions)
        sticky = part is None
        if part is None:
            part = self._sticky.partition(topic, info.available, count)
        elif part >= count:
            # The topic shrank (or metadata changed) since the partitions were checked.
            self._budget.release(reserved)
            raise InvalidArgumentError(
                f"partition {part} is not valid for topic {topic!r}, which has {count} partitions"
            )
        before = len(spans)
        _appended, added, wake = self._acc.append_run(
            topic,
            part,
            ts,
            cols.keys,
            cols.values,
            cols.headers,
            start,
            stop,
            reserved,
            time.monotonic(),
            spans,
        )
        if sticky and len(spans) > before:
            self._sticky.on_append(topic, part, added, spans[-1][0].full, info.available, count)
        return wake


_FRAMING = Accumulator.estimate_size(0, 0, None)
_NoneType = type(None)
# Records appended per slice of a bulk send: between slices the sender may run.
_BULK_SLICE = 4096


class _BulkColumns:
    """A bulk send's records, checked and converted, grouped into runs by partition."""

    __slots__ = (
        "error",
        "header_sizes",
        "headers",
        "keys",
        "max_estimate",
        "order",
        "runs",
        "values",
    )

    def __init__(
        self,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Any] | None,
    ) -> None:
        self.values = values
        self.keys = keys
        self.headers = headers
        # Per-record upper bounds of the headers' encoded size, when there are headers.
        self.header_sizes: list[int] | None = None
        self.max_estimate = _FRAMING
        self.order: Sequence[int] | None = None
        self.runs: list[tuple[int | None, int, int]] = []
        self.error: BaseException | None = None

    def estimate(self, start: int, stop: int) -> int:
        """An upper bound of the bytes records ``start:stop`` add to batches."""
        total = _FRAMING * (stop - start)
        total += sum(map(len, filter(None, self.values[start:stop])))
        if self.keys is not None:
            total += sum(map(len, filter(None, self.keys[start:stop])))
        if self.header_sizes is not None:
            total += sum(self.header_sizes[start:stop])
        return total

    def slice_end(self, start: int, stop: int, sticky: bool, batch_size: int) -> int:
        """Where the slice starting at ``start`` ends: at most a batch's worth for the
        sticky partitioner (it may move on after each batch), else ``_BULK_SLICE``
        records, and never so many bytes that one reservation could take the buffer."""
        step = _BULK_SLICE
        if sticky:
            step = min(step, max(1, batch_size // self.max_estimate))
        return min(stop, start + step)


def _prepare_bulk(
    producer: Producer,
    topic: str,
    info: TopicInfo,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Any] | None,
    partitions: Sequence[int | None] | None,
) -> _BulkColumns:
    """Check and convert a bulk send's columns, cut them at the first bad record and
    group them by partition.

    Per-record Python runs only where the input needs it (serializers, values that are
    not bytes, headers, keys to hash); columns of bytes are checked with C-level passes.
    """
    values = values if isinstance(values, Sequence) else list(values)
    count = len(values)
    keys = _aligned(keys, count, "keys")
    headers = _aligned(headers, count, "headers")
    partitions = _aligned(partitions, count, "partitions")
    bad = count
    error: BaseException | None = None

    def fail(index: int, exc: BaseException) -> None:
        nonlocal bad, error
        if index < bad:
            bad = index
            error = type(exc)(f"record {index} of the bulk send: {exc}")
            error.__cause__ = exc

    values = _bulk_bytes(topic, values, producer._value_serializer, "value", fail)
    if keys is not None:
        keys = _bulk_bytes(topic, keys, producer._key_serializer, "key", fail)
    header_sizes: list[int] | None = None
    if headers is not None:
        normalized: list[Any] = []
        header_sizes = []
        for i, hdrs in enumerate(headers):
            if i >= bad:
                break
            try:
                hl = _headers(hdrs) if hdrs else None
            except SerializationError as exc:
                fail(i, exc)
                break
            normalized.append(hl)
            header_sizes.append(Accumulator.estimate_size(0, 0, hl) - _FRAMING)
        headers = normalized
    # Sizes: one C-level pass finds the largest record bound; only if that is too large
    # for a request is each record measured to find the first culprit.
    max_need = producer._max_record - RECORD_BATCH_OVERHEAD
    vmax = max(map(len, filter(None, values[:bad])), default=0)
    kmax = max(map(len, filter(None, keys[:bad])), default=0) if keys is not None else 0
    hmax = max(header_sizes, default=0) if header_sizes else 0
    if _FRAMING + vmax + kmax + hmax > max_need:
        for i in range(bad):
            v, k = values[i], keys[i] if keys is not None else None
            need = (
                _FRAMING
                + (len(v) if v is not None else 0)
                + (len(k) if k is not None else 0)
                + (header_sizes[i] if header_sizes is not None else 0)
            )
            if need > max_need:
                fail(i, producer._too_large(need + RECORD_BATCH_OVERHEAD))
                break
    parts: list[Any] | None = None
    nparts = len(info.partitions)
    if partitions is not None:
        parts = list(partitions[:bad])
        for i, p in enumerate(parts):
            if p is not None and (type(p) is not int or not 0 <= p < nparts):
                fail(i, _invalid_partition(topic, p, nparts))
                break
    custom = producer.config.partitioner
    if custom is not None or (keys is not None and producer._keys_decide):
        # Keys to hash or a custom partitioner: one partition per record, decided here.
        if parts is None:
            parts = [None] * bad
        for i in range(bad):
            if parts[i] is None:
                k = keys[i] if keys is not None else None
                if custom is None and k is None:
                    continue  # a null key goes to the sticky partition
                try:
                    parts[i] = producer._partition(topic, info, k, None)
                except KafkaError as exc:
                    fail(i, exc)
                    break
                except Exception as exc:
                    err = InvalidArgumentError(f"the record could not be partitioned: {exc!r}")
                    err.__cause__ = exc
                    fail(i, err)
                    break
    cols = _BulkColumns(values, keys, headers)
    cols.header_sizes = header_sizes
    cols.max_estimate = _FRAMING + vmax + kmax + hmax
    cols.error = error
    if parts is not None:
        del parts[bad:]
    _group(cols, parts, bad)
    return cols


def _bulk_bytes(
    topic: str,
    column: Sequence[Any],
    serializer: Any,
    what: str,
    fail: Any,
) -> Sequence[Any]:
    """``column`` with every item bytes or None (a C-level type scan when it already is)."""
    if serializer is None and set(map(type, column)) <= {bytes, _NoneType}:
        return column
    out: list[Any] = []
    append = out.append
    for i, item in enumerate(column):
        try:
            if serializer is not None and item is not None:
                item = _serialize(serializer, topic, item, what)
            if item is not None and type(item) is not bytes:
                item = _coerce(item, what)
        except SerializationError as exc:
            fail(i, exc)
            break
        append(item)
    return out


def _group(cols: _BulkColumns, parts: list[Any] | None, count: int) -> None:
    """Order ``cols``' first ``count`` records by partition (stably) and cut them into runs."""
    if count == 0:
        return
    if parts is None:
        cols.runs = [(None, 0, count)]
        return
    distinct = set(parts)
    if len(distinct) == 1:
        cols.runs = [(parts[0], 0, count)]
        return
    if None in distinct:
        # Records for the sticky partitioner sort first, under a key no partition has.
        sort_keys: list[int] = [-1 if p is None else p for p in parts]
    else:
        sort_keys = parts
    order = sorted(range(count), key=sort_keys.__getitem__)
    pick = operator.itemgetter(*order)
    ordered_keys = list(pick(sort_keys))
    cols.values = list(pick(cols.values))
    if cols.keys is not None:
        cols.keys = list(pick(cols.keys))
    if cols.headers is not None:
        cols.headers = list(pick(cols.headers))
    if cols.header_sizes is not None:
        cols.header_sizes = list(pick(cols.header_sizes))
    cols.order = order
    runs: list[tuple[int | None, int, int]] = []
    for p in sorted(distinct, key=lambda x: -1 if x is None else x):
        key = -1 if p is None else p
        runs.append(
            (p, bisect.bisect_left(ordered_keys, key), bisect.bisect_right(ordered_keys, key))
        )
    cols.runs = runs


def _record_timestamp(timestamp_ms: int | None) -> int:
    if timestamp_ms is None:
        return int(time.time() * 1000)
    if type(timestamp_ms) is int and timestamp_ms >= 0:
        return timestamp_ms
    raise InvalidArgumentError(
        f"timestamp_ms must be a non-negative int (milliseconds since the epoch) or "
        f"None, got {timestamp_ms!r}"
    )


def _invalid_partition(topic: str, partition: object, count: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"partition {partition!r} is not valid for topic {topic!r}, which has "
        f"{count} partitions (0..{count - 1})"
    )


def _check_topic(topic: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
    if len(topic) > 249:
        raise InvalidArgumentError(f"topic name is longer than 249 characters: {topic[:40]!r}...")


def _coerce(obj: object, what: str) -> bytes:
    if isinstance(obj, str):
        return obj.encode("utf-8")
    if isinstance(obj, memoryview):
        return obj.tobytes()
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    raise SerializationError(
        f"{what} must be bytes, bytearray, memoryview, str or None "
        f"(or configure {what}_serializer), got {type(obj).__name__}"
    )


def _serialize(serializer: Any, topic: str, obj: object, what: str) -> Any:
    try:
        out = serializer(topic, obj)
    except Exception as exc:
        raise SerializationError(f"{what}_serializer failed: {exc!r}") from exc
    if out is not None and type(out) not in _BytesLike:
        out = _coerce(out, what)
    return out


def _headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    try:
        for hkey, hvalue in items:
            if not isinstance(hkey, str):
                raise SerializationError(
                    f"header keys must be str, got {type(hkey).__name__} ({hkey!r})"
                )
            if hvalue is not None and type(hvalue) is not bytes:
                hvalue = _coerce(hvalue, f"header {hkey!r} value")
            out.append((hkey, hvalue))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SerializationError):
            raise
        raise SerializationError(
            "headers must be a sequence of (str, bytes) pairs or a mapping of str to bytes"
        ) from exc
    return out


def _aligned(items: Iterable[Any] | None, count: int, name: str) -> Sequence[Any] | None:
    if items is None:
        return None
    seq = items if isinstance(items, Sequence) else list(items)
    if len(seq) != count:
        raise InvalidArgumentError(f"{name} has {len(seq)} items but values has {count}")
    return seq


def _authenticator(config: ProducerConfig) -> Any:
    if not config.security_protocol.startswith("SASL"):
        return None
    from .sasl import authenticator

    return authenticator(config)
