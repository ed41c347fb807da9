"""Records in: every check a record passes, bulk preparation, and placing records in batches.

Whichever API a record comes through (``Producer.send``, ``send_many``, ``send_bulk`` or
their :class:`~aioproducer.SyncProducer` twins), it is checked here, once: serializers,
bytes coercion, headers, timestamp, partition and size. The checking half of
:class:`Intake` reads only settings, so any thread may run it and a bad record raises in
the caller's thread; its result is a :class:`PreparedRecord` or, for a bulk send, a
:class:`PreparedColumns` cut into :class:`ColumnRun` slices. The placing half
(:meth:`Intake.append`, :meth:`Intake.append_run`, :meth:`Intake.hurry`) chooses the
partition and appends to the accumulator; it runs on the producer's loop.
"""

# Just over 700 lines, on purpose: one class, Intake, that every API's records pass
# through, plus the checks it runs on them; compiled together, a record's checks are
# native calls. The bulk preparation is elsewhere already (columns.py, sequences.py,
# run_append.py).

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple, cast

from .accumulator import Accumulator, ProducerBatch, new_handle
from .adaptive import DrainClock, PartitionLoad
from .budget import MemoryBudget
from .cluster import Cluster, TopicInfo
from .config import ProducerConfig
from .errors import (
    InvalidArgumentError,
    KafkaError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from .partitioner import StickyPartitioner, moves_on, partition_for_key
from .prepared import ColumnRun, PreparedColumns
from .protocol.columnar import encode_compressed_batches
from .protocol.compression import Codec
from .protocol.records import RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BOUND, record_size_bound
from .results import DeliveryHandle
from .run_append import append_run
from .sequences import aligned
from .sequences import prepare as prepare_sequences

__all__ = [
    "ColumnRun",
    "HeaderList",
    "Headers",
    "Intake",
    "PreparedColumns",
    "PreparedRecord",
    "RecordFields",
    "aligned",
    "check_topic",
    "invalid_partition",
    "record_timestamp",
]

#: Headers as ``[(key, value), ...]`` or ``{key: value}``; keys str, values bytes-like/str/None.
Headers = Sequence[tuple[str, Any]] | Mapping[str, Any]
#: Headers once checked: str keys, bytes or None values.
HeaderList = list[tuple[str, bytes | None]]

_BytesLike = (bytes, bytearray)
# time.time bound once: compiled, ``time.time`` is an attribute lookup per record.
_wall_clock: Final = time.time
_NoneType = type(None)


class PreparedRecord(NamedTuple):
    """One record that passed every check, ready to be admitted and appended."""

    topic: str
    key: bytes | bytearray | None
    value: bytes | bytearray | None
    headers: HeaderList | None
    timestamp_ms: int
    #: The partition the caller gave (checked again on append: a topic may shrink), or
    #: None to let the partitioner choose.
    partition: int | None
    #: The bytes it reserves in the memory budget: its :func:`record_size_bound`.
    size: int


#: A :class:`PreparedRecord`'s fields as a plain tuple (:meth:`Intake.fields`): what a
#: thread hands over in the common case. Either is accepted wherever a record is. The
#: topic, key and value are typed Any: compiled, a narrower type is checked on return,
#: and a topic that is not a str must reach ``check_topic``'s clear error.
RecordFields = tuple[Any, Any, Any, HeaderList | None, int, Any, int]

# tuple.__new__ directly: a NamedTuple's own __new__ adds a Python frame per record.
_tuple_new = tuple.__new__


class Intake:
    """How records get into a producer's batches; one per :class:`~aioproducer.Producer`.

    Package-internal: :class:`~aioproducer.Producer` and the thread hand-off behind
    :class:`~aioproducer.SyncProducer` (``handoff.py``) both use it. :meth:`record`,
    :meth:`columns`, :meth:`check_partition` and :meth:`topic_info` may run in any
    thread; the rest runs on the producer's loop.
    """

    def __init__(
        self,
        config: ProducerConfig,
        budget: MemoryBudget,
        acc: Accumulator,
        cluster: Cluster,
        wake_sender: Callable[[], None],
        drain_clock: DrainClock | None = None,
    ) -> None:
        self.config = config
        #: The memory budget records are admitted into (see ``budget.py``).
        self.budget = budget
        #: Where the metadata lives: ``cluster.snapshot.topics`` may be read from any thread.
        self.cluster = cluster
        #: Whether appends are accepted; the producer sets it while it runs.
        self.accepting = False
        #: Raises if records may not be sent now (a transactional producer outside a
        #: transaction); checked by :meth:`record`, :meth:`columns` and on append.
        self.gate: Callable[[], None] | None = None
        self._acc = acc
        self._wake_sender = wake_sender
        load = None
        if config.partitioner_adaptive_partitioning_enable:
            load = PartitionLoad(acc.batches, self._leaders, drain_clock)
        self._sticky = StickyPartitioner(config.batch_size, load=load)
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        self._custom = config.partitioner
        self._keys_decide = config.partitioner is None and not config.partitioner_ignore_keys
        #: Whether the latest :meth:`offer` that appended woke the sender.
        self.woke = False
        #: The largest record size bound that can ever be sent.
        self.max_size = min(config.max_request_size, config.buffer_memory) - RECORD_BATCH_OVERHEAD
        # The topic the latest offer() found in the metadata snapshot, its TopicInfo and
        # partition count: records in a row for one topic skip two attribute reads, a dict
        # lookup and a len() of the uncompiled metadata classes. Snapshots are replaced,
        # never changed, so the cache holds while the snapshot is the same object.
        self._seen_snapshot: Any = None
        self._seen_topic: Any = None
        self._seen_info: TopicInfo | None = None
        self._seen_count = 0
        # The public handle class, read as a field (compiled, a module-global lookup of
        # a class from an uncompiled module costs a dict lookup per record).
        self._handle_class: type[DeliveryHandle] = DeliveryHandle

    # -- checking (any thread) --------------------------------------------------------------

    # Values straight from the caller are typed Any on purpose: this module may be compiled
    # (``speedups.py``), where a typed parameter is checked on entry and would raise a
    # bare TypeError before the checks below can name what was wrong.

    def record(
        self,
        topic: Any,
        key: Any,
        value: Any,
        headers: Any,
        partition: Any,
        timestamp_ms: Any,
    ) -> PreparedRecord:
        """Serialize, convert and check one record (not its partition: see
        :meth:`check_partition`); raises ``SerializationError``, ``RecordTooLargeError``
        or ``InvalidArgumentError``. ``headers`` is :data:`Headers` or None."""
        key, value, hdrs, timestamp_ms, size = self._check(topic, key, value, headers, timestamp_ms)
        return _tuple_new(PreparedRecord, (topic, key, value, hdrs, timestamp_ms, partition, size))

    def fields(
        self,
        topic: Any,
        key: Any,
        value: Any,
        headers: Any,
        partition: Any,
        timestamp_ms: Any,
    ) -> RecordFields:
        """:meth:`record` as a plain tuple: compiled, built in one allocation, where a
        :class:`PreparedRecord` (a tuple subclass) takes two and a generic call."""
        key, value, hdrs, timestamp_ms, size = self._check(topic, key, value, headers, timestamp_ms)
        return topic, key, value, hdrs, timestamp_ms, partition, size

    def _check(
        self, topic: Any, key: Any, value: Any, headers: Any, timestamp_ms: Any
    ) -> tuple[Any, Any, HeaderList | None, int, int]:
        # record()'s work: key, value, headers, timestamp and size bound, checked. A
        # fixed-size tuple, which compiled code passes unboxed (no tuple per record).
        if self.gate is not None:
            self.gate()
        # None means "no key" / "no value" (a tombstone) and is never passed to a serializer.
        if self._key_serializer is not None and key is not None:
            key = _serialize(self._key_serializer, topic, key, "key")
        if self._value_serializer is not None and value is not None:
            value = _serialize(self._value_serializer, topic, value, "value")
        # bytes and bytearray are written as they are: the batch copies them on append.
        # Two type identity tests each: compiled, ``in _BytesLike`` would look the tuple up
        # in the module's globals and compare types through Python, per record.
        if key is not None and type(key) is not bytes and type(key) is not bytearray:
            key = _coerce(key, "key")
        if value is not None and type(value) is not bytes and type(value) is not bytearray:
            value = _coerce(value, "value")
        if headers:
            hdrs: HeaderList | None = _headers(headers)
            size = record_size_bound(
                len(key) if key is not None else 0, len(value) if value is not None else 0, hdrs
            )
        else:
            hdrs = None
            # record_size_bound() without headers, written out: this is the hot path.
            size = RECORD_FRAMING_BOUND
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
        # ``ts`` typed int, not the Any parameter: compiled, it stays a machine integer
        # (no boxing and unboxing per record).
        if timestamp_ms is None:
            ts = int(_wall_clock() * 1000)
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            ts = record_timestamp(timestamp_ms)  # raises
        else:
            ts = timestamp_ms
        if size > self.max_size:
            raise self.too_large(size + RECORD_BATCH_OVERHEAD)
        return key, value, hdrs, ts, size

    def offer(
        self,
        topic: Any,
        key: Any,
        value: Any,
        headers: Any,
        partition: Any,
        timestamp_ms: Any,
    ) -> DeliveryHandle | PreparedRecord:
        """:meth:`record`, then, if the topic's metadata is loaded and the budget has room
        right now, its admission and :meth:`append` (loop): returns the handle, and sets
        ``woke`` to whether the sender was woken. Otherwise returns the checked record
        for the caller to wait with (nothing reserved).

        ``Producer.send`` in one call: most records need no waiting.
        """
        key, value, hdrs, ts, size = self._check(topic, key, value, headers, timestamp_ms)
        snapshot = self.cluster.snapshot
        if topic is self._seen_topic and snapshot is self._seen_snapshot:
            info = self._seen_info
        else:
            info = snapshot.topics.get(topic)
            if info is not None:
                self._seen_snapshot = snapshot
                self._seen_topic = topic
                self._seen_info = info
                self._seen_count = len(info.partitions)
        if info is not None:
            if partition is not None:
                self.check_partition(topic, partition, info)
            if self.budget.try_reserve(size):
                handle, self.woke = self._place(topic, key, value, hdrs, ts, partition, size, info)
                return handle
        return _tuple_new(PreparedRecord, (topic, key, value, hdrs, ts, partition, size))

    def check_partition(self, topic: Any, partition: Any, info: TopicInfo) -> None:
        """Raise ``InvalidArgumentError`` unless ``partition`` is one of the topic's."""
        count = len(info.partitions)
        if type(partition) is not int or not 0 <= partition < count:
            raise invalid_partition(topic, partition, count)

    def too_large(self, size: int) -> RecordTooLargeError:
        """The error for a record of ``size`` bytes (with a batch header) that never fits."""
        return RecordTooLargeError(
            f"the record is {size} bytes when serialized, larger than "
            f"max_request_size ({self.config.max_request_size}) or "
            f"buffer_memory ({self.config.buffer_memory})"
        )

    def topic_info(self, topic: str) -> TopicInfo | None:
        """The topic's metadata if loaded (a read of the current snapshot: any thread)."""
        return self.cluster.snapshot.topics.get(topic)

    async def wait_for_topic(self, topic: Any, timeout: float) -> TopicInfo:
        """The topic's metadata, loading it if needed, waiting up to ``timeout`` (loop)."""
        check_topic(topic)
        return await self.cluster.wait_for_topic(topic, timeout)

    def columns(
        self,
        topic: str,
        info: TopicInfo,
        values: Any,
        keys: Any,
        headers: Any,
        partitions: Any,
    ) -> PreparedColumns:
        """Check and convert a bulk send's columns, cut them at the first bad record and
        group them by partition.

        Arrow columns (or a table as ``values``) go to :func:`aioproducer.columns.prepare`,
        which does all of it with numpy, and sequences to
        :func:`aioproducer.sequences.prepare`; both read this intake's settings through
        the methods below. Keys are hashed and a custom partitioner is called here, so in
        any thread that runs it.
        """
        if self.gate is not None:
            self.gate()
        if _columnar(values) or _columnar(keys):
            # Imported here: it needs numpy, which sending sequences never imports.
            from .columns import prepare

            return prepare(self, topic, info, values, keys, headers, partitions)
        plain = self._value_serializer is None and self._key_serializer is None
        return prepare_sequences(self, topic, info, values, keys, headers, partitions, plain)

    # -- what bulk sends use (aioproducer.columns and .sequences; package-internal) ------------

    @property
    def custom_partitioner(self) -> bool:
        """Whether a custom partitioner (a Python function) chooses the partitions."""
        return self._custom is not None

    @property
    def hashes_keys(self) -> bool:
        """Whether a record's key decides its partition (by murmur2), when none is given."""
        return self._custom is None and self._keys_decide

    def serialize_column(
        self,
        topic: str,
        column: Sequence[Any],
        what: str,
        fail: Callable[[int, BaseException], None],
    ) -> Sequence[Any]:
        """A column of keys (``what="key"``) or values as bytes or None: the serializer
        applied to each item, as for a bulk send of sequences; a bad item is reported to
        ``fail(index, error)`` and the column ends before it."""
        serializer = self._value_serializer if what == "value" else self._key_serializer
        return _bulk_bytes(topic, column, serializer, what, fail)

    def header_list(self, headers: Any) -> HeaderList:
        """One record's headers checked (``SerializationError`` if bad), as for a send."""
        return _headers(headers)

    def invalid_partition(self, topic: str, partition: object, count: int) -> KafkaError:
        """The error for a partition the topic does not have."""
        return invalid_partition(topic, partition, count)

    def partitioner_failed(self, exc: Exception) -> KafkaError:
        """The error for a record the custom partitioner raised ``exc`` for."""
        return partitioner_failed(exc)

    # -- placing (the producer's loop) -----------------------------------------------------

    def partition(self, topic: str, info: TopicInfo, key: Any, partition: Any) -> int:
        """The partition for a record: ``partition`` if given (checked), else the custom
        partitioner's, the key's hash, or the sticky partition."""
        count = len(info.partitions)
        if partition is not None:
            if type(partition) is not int or not 0 <= partition < count:
                raise invalid_partition(topic, partition, count)
            return partition
        custom: Any = self._custom  # Any: its result is checked below, not on return
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

    def append(self, record: PreparedRecord, info: TopicInfo) -> tuple[DeliveryHandle, bool]:
        """Append a record whose ``size`` is reserved in the budget, waking the sender if a
        batch started or filled; returns its handle and whether that happened.

        If the record cannot be appended (the producer stopped, its partition is not the
        topic's, a custom partitioner failed), its reservation is given back and the error
        raised.
        """
        topic, key, value, hdrs, ts, explicit, need = record
        return self._place(topic, key, value, hdrs, ts, explicit, need, info)

    def append_at(self, record: RecordFields, info: TopicInfo) -> tuple[ProducerBatch, int]:
        """:meth:`append` without a handle: the batch holding the record and its index
        there (a thread's record, whose promise reads its outcome from the batch)."""
        topic, key, value, hdrs, ts, explicit, need = record
        batch, index, _wake = self._put(topic, key, value, hdrs, ts, explicit, need, info)
        return batch, index

    def _place(
        self,
        topic: str,
        key: bytes | bytearray | None,
        value: bytes | bytearray | None,
        hdrs: HeaderList | None,
        ts: int,
        explicit: int | None,
        need: int,
        info: TopicInfo,
    ) -> tuple[DeliveryHandle, bool]:
        # append() with the record's fields (offer() has them unpacked).
        batch, index, wake = self._put(topic, key, value, hdrs, ts, explicit, need, info)
        handle = new_handle(
            self._handle_class,
            batch,
            index,
            ts,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
        )
        return cast(DeliveryHandle, handle), wake

    def _put(
        self,
        topic: str,
        key: bytes | bytearray | None,
        value: bytes | bytearray | None,
        hdrs: HeaderList | None,
        ts: int,
        explicit: int | None,
        need: int,
        info: TopicInfo,
    ) -> tuple[ProducerBatch, int, bool]:
        # Choose the partition and append: the batch, the record's index in it and
        # whether the sender was woken (a fixed-size tuple: compiled, returned unboxed).
        # The sticky partitioner's [partition, bytes produced] for the topic, read and
        # updated in place (no call per record), when it places this record.
        state: list[int] | None = None
        count = self._seen_count if info is self._seen_info else len(info.partitions)
        try:
            if not self.accepting:
                raise ProducerClosedError("the producer was closed before the record")
            if self.gate is not None:
                self.gate()
            if explicit is None and (key is None or not self._keys_decide) and self._custom is None:
                state = self._sticky.states.get(topic)
                if state is None or state[0] >= count:
                    self._sticky.partition(topic, info.available, count)
                    state = self._sticky.states[topic]
                part = state[0]
            else:
                part = self.partition(topic, info, key, explicit)
        except BaseException:
            self.budget.release(need)
            raise
        acc = self._acc
        batch, index, wake = acc.append(topic, part, ts, key, value, hdrs, need)
        if state is not None:
            produced = state[1] + need
            state[1] = produced
            limit = acc.last_batch_limit
            # on_append()'s own rule, tested here first so that most records make no call
            # (its limit is never below this one, so this never skips a move).
            if moves_on(produced, acc.last_batch_full, limit):
                self._sticky.on_append(
                    topic, part, 0, acc.last_batch_full, info.available, count, limit
                )
        if wake:
            self._wake_sender()
        return batch, index, wake

    def append_run(self, run: ColumnRun, info: TopicInfo) -> bool:
        """Append a :class:`ColumnRun` whose ``size`` is reserved, adding where its records
        went to its bulk; returns whether the sender was woken.

        If a record is invalid, the ones before it stay appended (``run.appended`` says
        how many), the rest's reservation is given back and its error raised.
        """
        bulk = run.bulk
        topic = bulk.topic
        part = run.partition
        count = len(info.partitions)
        sticky = part is None
        try:
            if not self.accepting:
                raise ProducerClosedError("the producer was closed before the records")
            if self.gate is not None:
                self.gate()
            if part is None:
                part = self._sticky.partition(topic, info.available, count)
            elif part >= count:
                # The topic shrank (or metadata changed) since the partitions were checked.
                raise InvalidArgumentError(
                    f"partition {part} is not valid for topic {topic!r}, "
                    f"which has {count} partitions"
                )
        except BaseException:
            self.budget.release(run.size)
            raise
        cols = run.columns
        spans: list[tuple[ProducerBatch, int, int]] = []
        try:
            _appended, added, wake = append_run(
                self._acc,
                topic,
                part,
                bulk.timestamp_ms,
                cols.keys,
                cols.values,
                cols.headers,
                run.start,
                run.stop,
                run.size,
                time.monotonic(),
                spans,
                run.pieces,
                run.fills,
            )
        finally:
            run.appended = sum(span[2] for span in spans)
            bulk.add_spans(spans)
        if sticky and spans:
            last = spans[-1][0]
            self._sticky.on_append(topic, part, added, last.full, info.available, count, last.limit)
        if wake:
            self._wake_sender()
        return wake

    def encode_ahead(self, run: ColumnRun) -> None:
        """Encode a keyed run of columns into whole batches and compress them in the
        calling thread, before it is handed to the loop (:attr:`ColumnRun.pieces`).

        For a :class:`~aioproducer.SyncProducer`'s bulk sends with compression: the
        compiled encoder and the compressors release the GIL, so this work runs beside
        the loop's instead of on it. Runs for the sticky partitioner, of sequences, of
        too few records to fill a batch or not compressed are left to the loop (it fills
        the partition's open batch with them).
        """
        cols = run.columns
        acc = self._acc
        codec = acc.codec
        if codec is Codec.NONE or run.partition is None or cols.sizes is None:
            # Uncompressed, the encoding saved is less than what the extra batches cost
            # (each run's pieces start a batch; the open one is left partly filled).
            return
        limit = acc.fill_limit(run.bulk.topic)
        start, stop = run.start, run.stop
        if cols.estimate(start, stop) < limit:
            return
        # The first batch is cut at the topic's estimated ratio, which starts at 1.0 and
        # learns slowly (as Java's does: it cannot re-cut a batch it underestimated). Its
        # real ratio is known once it is compressed here, so the rest of the run is cut
        # where its records compress to about batch_size, as batch_size means bytes sent.
        sizes = cols.sizes
        first = int(sizes.searchsorted(sizes[start] + limit - RECORD_BATCH_OVERHEAD, "right")) - 1
        first = min(stop, max(start + 1, first))
        out = self._compressed_batches(cols, start, first, limit)
        if first < stop:
            encoded_bytes = sum(len(piece[1]) for piece in out)
            compressed_bytes = sum(len(piece[2]) for piece in out)
            if 0 < compressed_bytes < encoded_bytes:
                fitting = acc.batch_size * encoded_bytes // compressed_bytes
                limit = min(acc.max_batch_bytes, max(limit, fitting))
            out += self._compressed_batches(cols, first, stop, limit)
        run.pieces = out

    def _compressed_batches(
        self, cols: PreparedColumns, start: int, stop: int, limit: int
    ) -> list[tuple[int, bytearray, bytes | bytearray]]:
        # Records start:stop of ``cols`` as whole batches of at most ``limit`` bytes:
        # (records, their bytes, those bytes compressed with the producer's codec).
        acc = self._acc
        return encode_compressed_batches(
            cols.values,
            cols.keys,
            cols.headers,
            (start, stop),
            RECORD_BATCH_OVERHEAD,
            limit,
            acc.codec,
            acc.compression_level,
        )

    def _leaders(self, topic: str) -> dict[int, int] | None:
        info = self.cluster.snapshot.topics.get(topic)
        return info.leaders if info is not None else None

    def forget_topics(self, topics: list[str]) -> None:
        """Drop per-topic state of ``topics``, which left the metadata (loop)."""
        self._sticky.forget(topics)
        self._acc.forget_topics(topics)

    def hurry(self, on: bool) -> None:
        """Make batches leave without lingering (``on``), or let them linger again; calls
        nest. Threads waiting for buffer space use it, as waiting senders do."""
        if on:
            self._acc.flushing += 1
            self._wake_sender()
        else:
            self._acc.flushing -= 1

    def watch_batches(self, callback: Callable[[ProducerBatch], None] | None) -> None:
        """Call ``callback(batch)`` for every batch opened from now on (None: stop)."""
        self._acc.on_new_batch = callback


# -- checks ------------------------------------------------------------------------------------


def record_timestamp(timestamp_ms: Any) -> int:
    """``timestamp_ms`` checked, or now in milliseconds since the epoch if None."""
    if timestamp_ms is None:
        return int(time.time() * 1000)
    if type(timestamp_ms) is int and timestamp_ms >= 0:
        return timestamp_ms
    raise InvalidArgumentError(
        f"timestamp_ms must be a non-negative int (milliseconds since the epoch) or "
        f"None, got {timestamp_ms!r}"
    )


def invalid_partition(topic: Any, partition: object, count: int) -> InvalidArgumentError:
    """The error for a partition the topic does not have."""
    return InvalidArgumentError(
        f"partition {partition!r} is not valid for topic {topic!r}, which has "
        f"{count} partitions (0..{count - 1})"
    )


def partitioner_failed(exc: Exception) -> InvalidArgumentError:
    """The error for a record a custom partitioner raised ``exc`` for."""
    err = InvalidArgumentError(f"the record could not be partitioned: {exc!r}")
    err.__cause__ = exc
    return err


# Kafka's own rule (org.apache.kafka.common.internals.Topic): ASCII letters, digits, '.',
# '_' and '-', at most 249 characters, and neither "." nor "..".
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def check_topic(topic: object) -> None:
    """Raise ``InvalidArgumentError`` unless ``topic`` is a legal Kafka topic name.

    Called where a topic's metadata is not loaded yet, so records for known topics never
    pay for it.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
    if len(topic) > 249:
        raise InvalidArgumentError(f"topic name is longer than 249 characters: {topic[:40]!r}...")
    if topic in (".", ".."):
        raise InvalidArgumentError(f"topic name cannot be {topic!r}")
    bad = sorted(set(topic) - _LEGAL_TOPIC_CHARS)
    if bad:
        raise InvalidArgumentError(
            f"topic name {topic!r} has characters Kafka does not allow: "
            f"{''.join(bad)!r} (allowed: ASCII letters, digits, '.', '_' and '-')"
        )


def _columnar(obj: object) -> bool:
    """Whether ``obj`` is an Arrow object or a BinaryColumn (by its module: no import)."""
    module = type(obj).__module__
    return module.startswith("pyarrow") or module == "aioproducer.protocol.column_view"


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


def _coerce_header(key: str, obj: object) -> bytes:
    # Header values have no serializer setting: convert them before sending.
    if isinstance(obj, (str, bytes, bytearray, memoryview)):
        return _coerce(obj, "header value")
    raise SerializationError(
        f"header {key!r} value must be bytes, bytearray, memoryview, str or None, "
        f"got {type(obj).__name__}"
    )


def _serialize(serializer: Any, topic: str, obj: object, what: str) -> Any:
    try:
        out = serializer(topic, obj)
    except Exception as exc:
        raise SerializationError(f"{what}_serializer failed: {exc!r}") from exc
    if out is not None and type(out) not in _BytesLike:
        out = _coerce(out, what)
    return out


def _headers(headers: Headers) -> HeaderList:
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    out: HeaderList = []
    try:
        for hkey, hvalue in items:
            if not isinstance(hkey, str):
                raise SerializationError(
                    f"header keys must be str, got {type(hkey).__name__} ({hkey!r})"
                )
            if hvalue is not None and type(hvalue) is not bytes:
                hvalue = _coerce_header(hkey, hvalue)
            out.append((hkey, hvalue))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SerializationError):
            raise
        raise SerializationError(
            "headers must be a sequence of (str, bytes) pairs or a mapping of str to bytes"
        ) from exc
    return out


# -- bulk preparation --------------------------------------------------------------------------


def _bulk_bytes(
    topic: str,
    column: Sequence[Any],
    serializer: Any,
    what: str,
    fail: Callable[[int, BaseException], None],
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
