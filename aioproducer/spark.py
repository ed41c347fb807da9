"""Write a Spark DataFrame to Kafka from PySpark's Python workers, losing nothing.

::

    from aioproducer import spark as kafka_spark

    report = kafka_spark.write(df, "events", bootstrap_servers="broker:9092", linger_ms=10)
    print(report.records, report.rows_per_second)

:func:`write` runs ``df.mapInArrow`` with a function whose closure holds only settings. In
each Python worker it takes a :class:`~aioproducer.SyncProducer` from a per-process cache
(created after the worker was forked, reused by the worker's next tasks), hands it every
Arrow batch through the bulk path, and flushes before the task returns, so a task succeeds
only once each of its records is acknowledged: nothing is left in a queue when PySpark
ends the worker with ``os._exit`` or a kill. Each task returns one row of figures; the
driver runs exactly one action over them and raises :class:`SparkWriteError` if any record
failed. :func:`partition_writer` does the same for ``rdd.foreachPartition`` over rows.

Delivery is at least once: Spark reruns a failed task from its start, with a new producer.

pyspark and pyarrow are imported only when these functions run; ``import aioproducer``
never needs them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .config import ProducerConfig
from .errors import InvalidArgumentError, KafkaError, KafkaTimeoutError
from .partitioner import partitions_for_keys
from .sync import SyncProducer

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "PartitionReport",
    "PartitionWriter",
    "SparkWriteError",
    "WriteReport",
    "partition_writer",
    "write",
]

_DEFAULT_KEY = "key"
_STATS_DDL = (
    "partition int, attempt int, pid long, records long, bytes long, delivered long, "
    "failed long, first_error string, producer string, producer_tasks long, elapsed_s double"
)
# Rows sent per bulk call from foreachPartition's row iterator.
_ROW_CHUNK = 10_000


# -- what the driver gets back -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PartitionReport:
    """What one Spark task wrote: its partition, its counts and the producer it used.

    ``producer`` names the producer (``"<pid>-<n>"``) and ``producer_tasks`` counts the
    tasks it has served so far, this one included: above 1 means the worker reused it.
    """

    partition: int
    attempt: int
    pid: int
    records: int
    bytes: int
    delivered: int
    failed: int
    first_error: str | None
    producer: str
    producer_tasks: int
    elapsed_s: float


@dataclasses.dataclass(frozen=True)
class WriteReport:
    """The outcome of :func:`write`: totals, the first error and one entry per partition.

    ``bytes`` counts keys and values as sent (before compression and framing).
    """

    topic: str | None
    records: int
    bytes: int
    delivered: int
    failed: int
    first_error: str | None
    elapsed_s: float
    partitions: list[PartitionReport]

    @property
    def rows_per_second(self) -> float:
        """Records written per second of the whole write (driver wall time)."""
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def producers(self) -> int:
        """How many distinct producers the tasks used."""
        return len({p.producer for p in self.partitions})

    @property
    def reused_producer_tasks(self) -> int:
        """Tasks that ran on a producer an earlier task of the same worker had created."""
        return sum(1 for p in self.partitions if p.producer_tasks > 1)


class SparkWriteError(KafkaError):
    """Some records of a Spark write were not delivered.

    ``report`` is the full :class:`WriteReport` (or ``None`` when a task raised it from
    :func:`partition_writer`); ``first_error``, ``failed`` and ``records`` summarise it.
    """

    def __init__(
        self,
        message: str,
        *,
        report: WriteReport | None = None,
        first_error: str | None = None,
        failed: int = 0,
        records: int = 0,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.first_error = first_error
        self.failed = failed
        self.records = records

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised inside executors too: it must survive pickling with its figures.
        return (
            _rebuild_error,
            (str(self), self.report, self.first_error, self.failed, self.records),
        )


def _rebuild_error(
    message: str, report: WriteReport | None, first: str | None, failed: int, records: int
) -> SparkWriteError:
    return SparkWriteError(
        message, report=report, first_error=first, failed=failed, records=records
    )


# -- the columns ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Everything a task needs, as plain picklable data (no live objects)."""

    topic: str | None
    key: str | None
    value: str
    headers: str | None
    headers_kind: str | None  # "map" or "array"
    partition: str | None
    topic_column: str | None
    producer_config: tuple[tuple[str, Any], ...]
    cache_key: str
    flush_timeout: float | None

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.producer_config)


def _make_spec(
    columns: dict[str, Any],
    topic: str | None,
    *,
    bootstrap_servers: str | Sequence[str],
    key: str | None,
    value: str,
    headers: str | None,
    partition: str | None,
    topic_column: str | None,
    flush_timeout: float | None,
    producer_config: dict[str, Any],
) -> _Spec:
    """Check the columns (``name -> Spark DataType``) and the settings on the driver."""
    from pyspark.sql import types as T

    def column(name: str, what: str) -> Any:
        if name not in columns:
            raise InvalidArgumentError(
                f"the DataFrame has no {what} column {name!r}; its columns are "
                f"{', '.join(repr(c) for c in columns) or 'none'}"
            )
        return columns[name]

    def mistyped(name: str, what: str, dtype: Any, allowed: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"the {what} column {name!r} is {dtype.simpleString()}; it must be {allowed}"
        )

    text_or_bytes = (T.StringType, T.BinaryType)
    if topic is None and topic_column is None:
        raise InvalidArgumentError("give a topic, or a topic_column naming each row's topic")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
    dtype = column(value, "value")
    if not isinstance(dtype, text_or_bytes):
        raise mistyped(value, "value", dtype, "string or binary")
    if key is not None:
        if key == _DEFAULT_KEY and key not in columns:
            key = None  # the default names an optional column: no such column, no keys
        else:
            dtype = column(key, "key")
            if not isinstance(dtype, text_or_bytes):
                raise mistyped(key, "key", dtype, "string or binary")
    headers_kind = None
    if headers is not None:
        dtype = column(headers, "headers")
        allowed = "map<string,binary> or array<struct<key:string,value:binary>>"
        if isinstance(dtype, T.MapType):
            if not isinstance(dtype.keyType, T.StringType) or not isinstance(
                dtype.valueType, text_or_bytes
            ):
                raise mistyped(headers, "headers", dtype, allowed)
            headers_kind = "map"
        elif isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.StructType):
            fields = {f.name: f.dataType for f in dtype.elementType.fields}
            if (
                set(fields) != {"key", "value"}
                or not isinstance(fields["key"], T.StringType)
                or not isinstance(fields["value"], text_or_bytes)
            ):
                raise mistyped(headers, "headers", dtype, allowed)
            headers_kind = "array"
        else:
            raise mistyped(headers, "headers", dtype, allowed)
    if partition is not None:
        dtype = column(partition, "partition")
        if not isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            raise mistyped(partition, "partition", dtype, "an integer type")
    if topic_column is not None:
        dtype = column(topic_column, "topic")
        if not isinstance(dtype, T.StringType):
            raise mistyped(topic_column, "topic", dtype, "string")
    config = {"bootstrap_servers": bootstrap_servers, **producer_config}
    ProducerConfig.from_kwargs(config)  # ConfigError here, before any task runs
    if flush_timeout is not None and not flush_timeout > 0:
        raise InvalidArgumentError(f"flush_timeout must be positive or None, got {flush_timeout}")
    return _Spec(
        topic=topic,
        key=key,
        value=value,
        headers=headers,
        headers_kind=headers_kind,
        partition=partition,
        topic_column=topic_column,
        producer_config=tuple(sorted(config.items())),
        cache_key=_cache_key(config),
        flush_timeout=flush_timeout,
    )


def _cache_key(config: dict[str, Any]) -> str:
    # Computed once on the driver: serializer callables arrive as fresh objects in every
    # task, so the worker could not compare them by identity.
    try:
        from pyspark import cloudpickle

        blob: bytes = cloudpickle.dumps(sorted(config.items()), protocol=4)  # type: ignore[no-untyped-call]
    except Exception:
        blob = repr(sorted(config.items())).encode()
    return hashlib.sha256(blob).hexdigest()


# -- the per-process producer cache ----------------------------------------------------------

_cache_lock = threading.Lock()
_idle: dict[str, list[SyncProducer]] = {}
_uses: dict[int, list[Any]] = {}  # id(producer) -> [name, tasks served]
_created = 0
_cache_pid = os.getpid()


def _lease(spec: _Spec) -> tuple[SyncProducer, str, int]:
    """An idle producer for these settings, or a new one; with its name and use count."""
    global _created, _cache_pid
    with _cache_lock:
        if _cache_pid != os.getpid():
            # Inherited over fork: those producers belong to the parent.
            _idle.clear()
            _uses.clear()
            _cache_pid = os.getpid()
        pool = _idle.get(spec.cache_key)
        producer = pool.pop() if pool else None
        if producer is None or producer.closed:
            _created += 1
            producer = SyncProducer(**spec.config)
            _uses[id(producer)] = [f"{os.getpid()}-{_created}", 0]
        use = _uses[id(producer)]
        use[1] += 1
        return producer, use[0], use[1]


def _give_back(spec: _Spec, producer: SyncProducer) -> None:
    with _cache_lock:
        if producer.closed:
            _uses.pop(id(producer), None)
        else:
            _idle.setdefault(spec.cache_key, []).append(producer)


# -- the task side ----------------------------------------------------------------------------


class _TaskResult:
    __slots__ = ("bytes", "failed_early", "first_error", "records")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.failed_early = 0
        self.first_error: str | None = None

    def note(self, exc: BaseException) -> None:
        self.failed_early += 1
        if self.first_error is None:
            self.first_error = _describe(exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _send(
    producer: SyncProducer,
    result: _TaskResult,
    topic: str,
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Any] | None,
    partitions: Sequence[int | None] | None,
) -> None:
    """Send a run of records; a record rejected at send() fails alone and is counted.

    Goes through the bulk path: the records cross to the producer's loop a slice at a
    time and are encoded a run per partition, with no per-record future.
    """
    start, count = 0, len(values)
    while start < count:
        _bulk, index, error = producer.send_bulk_until_error(
            topic,
            values[start:] if start else values,
            keys[start:] if keys is not None and start else keys,
            headers[start:] if headers is not None and start else headers,
            partitions[start:] if partitions is not None and start else partitions,
            None,
        )
        if error is None:
            return
        result.note(error)
        start += index + 1


def _send_grouped(
    producer: SyncProducer,
    result: _TaskResult,
    topics: Sequence[str | None],
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Any] | None,
    partitions: Sequence[int | None] | None,
    default_topic: str | None,
) -> None:
    """Per-row topics: send each topic's rows in their order (a key's order is kept)."""
    groups: dict[str | None, list[int]] = {}
    for i, t in enumerate(topics):
        groups.setdefault(t if t is not None else default_topic, []).append(i)
    for topic, idx in groups.items():
        if topic is None:
            for _ in idx:
                result.note(InvalidArgumentError("the row's topic column is null"))
            continue

        def pick(seq: Sequence[Any] | None, idx: list[int] = idx) -> list[Any] | None:
            return None if seq is None else [seq[i] for i in idx]

        _send(
            producer,
            result,
            topic,
            pick(values) or [],
            pick(keys),
            pick(headers),
            pick(partitions),
        )


def _arrow_binary(column: pa.Array) -> pa.Array:
    """A string or binary Arrow column as binary (strings are UTF-8 already: no copy)."""
    import pyarrow as pa

    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    return column


def _arrow_nbytes(column: pa.Array) -> int:
    import pyarrow.compute as pc

    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


def _arrow_headers(column: pa.Array, kind: str | None) -> list[Any]:
    """Headers as lists of (key, value) pairs per row (None where there are none)."""
    import pyarrow as pa

    if kind == "array":
        # list<struct<key, value>> has the layout of map<key, value>; viewing it as one
        # makes Arrow build the (key, value) tuples instead of a dict per header.
        values = column.values
        keys, items = values.field("key"), values.field("value")
        try:
            column = pa.MapArray.from_arrays(column.offsets, keys, items)
        except (pa.ArrowInvalid, ValueError):
            return [
                [(h["key"], h["value"]) for h in row] if row else None for row in column.to_pylist()
            ]
    rows: list[Any] = column.to_pylist()
    return rows


def _task_stats(
    result: _TaskResult,
    producer_name: str,
    producer_tasks: int,
    delivered: int,
    failed: int,
    first_error: str | None,
    started: float,
) -> dict[str, Any]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return {
        "partition": tc.partitionId() if tc is not None else -1,
        "attempt": tc.attemptNumber() if tc is not None else 0,
        "pid": os.getpid(),
        "records": result.records,
        "bytes": result.bytes,
        "delivered": delivered,
        "failed": failed,
        "first_error": first_error,
        "producer": producer_name,
        "producer_tasks": producer_tasks,
        "elapsed_s": time.perf_counter() - started,
    }


def _run_task(spec: _Spec, body: Any) -> dict[str, Any]:
    """Lease a producer, run ``body(producer, result)``, flush, and count the outcomes."""
    started = time.perf_counter()
    producer, name, tasks = _lease(spec)
    result = _TaskResult()
    try:
        before = producer.tally()
        body(producer, result)
        try:
            producer.flush(spec.flush_timeout)
        except KafkaTimeoutError:
            # Whatever is left fails now, with this task: a cached producer must not carry
            # this task's records into the next one's accounting.
            producer.close(timeout=0)
        after = producer.tally()
    except BaseException:
        # The worker may be torn down after a failed task; close what we can.
        producer.close(timeout=0)
        raise
    finally:
        _give_back(spec, producer)
    taken = after.records - before.records
    failed = after.failed - before.failed
    first = None
    if failed and after.first_error is not None:
        first = _describe(after.first_error)
    first = result.first_error or first
    failed += result.failed_early
    delivered = taken - (after.failed - before.failed)
    result.records = taken + result.failed_early
    return _task_stats(result, name, tasks, delivered, failed, first, started)


def _write_arrow(spec: _Spec, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: send every batch, flush, yield one row of figures."""
    import pyarrow as pa

    def body(producer: SyncProducer, result: _TaskResult) -> None:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            names = batch.schema.names
            value_col = batch.column(names.index(spec.value))
            values = _arrow_binary(value_col).to_pylist()
            result.bytes += _arrow_nbytes(value_col)
            keys = None
            key_partitions = None
            if spec.key is not None:
                key_col = _arrow_binary(batch.column(names.index(spec.key)))
                keys = key_col.to_pylist()
                result.bytes += _arrow_nbytes(key_col)
                if vector_partitions:
                    assert spec.topic is not None
                    if spec.topic not in partition_counts:
                        partition_counts[spec.topic] = len(producer.partitions_for(spec.topic))
                    try:
                        key_partitions = partitions_for_keys(key_col, partition_counts[spec.topic])
                    except ImportError:  # no numpy: the producer partitions record by record
                        key_partitions = None
            headers = None
            if spec.headers is not None:
                headers = _arrow_headers(batch.column(names.index(spec.headers)), spec.headers_kind)
            partitions = None
            if spec.partition is not None:
                partitions = batch.column(names.index(spec.partition)).to_pylist()
            if spec.topic_column is not None:
                topics = batch.column(names.index(spec.topic_column)).to_pylist()
                _send_grouped(
                    producer, result, topics, values, keys, headers, partitions, spec.topic
                )
            elif key_partitions is not None:
                assert spec.topic is not None
                _send(producer, result, spec.topic, values, keys, headers, key_partitions)
            else:
                assert spec.topic is not None
                _send(producer, result, spec.topic, values, keys, headers, partitions)

    config = spec.config
    # Keyed rows of one topic, with the default partitioner: hash every key of a batch in
    # one go instead of one Python murmur2 call per record on the producer's loop.
    vector_partitions = (
        spec.key is not None
        and spec.partition is None
        and spec.topic_column is None
        and config.get("partitioner") is None
        and not config.get("partitioner_ignore_keys", False)
    )
    partition_counts: dict[str, int] = {}
    stats = _run_task(spec, body)
    yield pa.RecordBatch.from_pylist([stats], schema=_stats_schema())


def _stats_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("partition", pa.int32()),
            ("attempt", pa.int32()),
            ("pid", pa.int64()),
            ("records", pa.int64()),
            ("bytes", pa.int64()),
            ("delivered", pa.int64()),
            ("failed", pa.int64()),
            ("first_error", pa.string()),
            ("producer", pa.string()),
            ("producer_tasks", pa.int64()),
            ("elapsed_s", pa.float64()),
        ]
    )


class _ArrowTask:
    """The function given to mapInArrow: a settings holder, picklable by value."""

    __slots__ = ("spec",)

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _write_arrow(self.spec, batches)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ArrowTask, (self.spec,))


# -- the driver side ----------------------------------------------------------------------------


def write(
    df: DataFrame,
    topic: str | None = None,
    *,
    bootstrap_servers: str | Sequence[str],
    key: str | None = _DEFAULT_KEY,
    value: str = "value",
    headers: str | None = None,
    partition: str | None = None,
    topic_column: str | None = None,
    flush_timeout: float | None = None,
    **producer_config: Any,
) -> WriteReport:
    """Write every row of ``df`` to Kafka and return a :class:`WriteReport`.

    Columns: ``value`` (string or binary; null is a tombstone), ``key`` (string or binary;
    the default ``"key"`` is optional, ``key=None`` sends no keys), ``headers``
    (``map<string,binary>`` or ``array<struct<key:string,value:binary>>``), ``partition``
    (an integer column choosing each row's partition) and ``topic_column`` (a string
    column choosing each row's topic; ``topic`` is then the fallback for null). A missing
    or mistyped column raises :class:`~aioproducer.errors.InvalidArgumentError` and a bad
    setting :class:`~aioproducer.errors.ConfigError`, before anything is sent.

    Other keyword arguments are producer settings (see :class:`~aioproducer.Producer`).
    Each task flushes before it ends (``flush_timeout`` seconds at most, ``None`` waits for
    every outcome, which ``delivery_timeout_ms`` bounds). The write runs exactly one Spark
    action. If any record failed, :class:`SparkWriteError` is raised with the first error,
    the counts and the report; a task that fails outright fails the Spark job (and Spark
    may retry it: delivery is at least once).
    """
    schema = df.schema
    spec = _make_spec(
        {f.name: f.dataType for f in schema.fields},
        topic,
        bootstrap_servers=bootstrap_servers,
        key=key,
        value=value,
        headers=headers,
        partition=partition,
        topic_column=topic_column,
        flush_timeout=flush_timeout,
        producer_config=producer_config,
    )
    wanted = [spec.value, spec.key, spec.headers, spec.partition, spec.topic_column]
    columns = list(dict.fromkeys(c for c in wanted if c is not None))
    started = time.perf_counter()
    stats_df = df.select(*columns).mapInArrow(_ArrowTask(spec), _STATS_DDL)
    # Exactly one full action: every further action on stats_df would write everything
    # again, and limit-style actions (first, show, take) would run only some partitions.
    rows = [row.asDict() for row in stats_df.collect()]
    elapsed = time.perf_counter() - started
    return _report(spec.topic, rows, elapsed)


def _report(topic: str | None, rows: list[dict[str, Any]], elapsed: float) -> WriteReport:
    parts = sorted((PartitionReport(**row) for row in rows), key=lambda p: (p.partition, p.attempt))
    records = sum(p.records for p in parts)
    failed = sum(p.failed for p in parts)
    delivered = sum(p.delivered for p in parts)
    first = next((p.first_error for p in parts if p.first_error), None)
    report = WriteReport(
        topic=topic,
        records=records,
        bytes=sum(p.bytes for p in parts),
        delivered=delivered,
        failed=failed,
        first_error=first,
        elapsed_s=elapsed,
        partitions=parts,
    )
    if failed or delivered != records:
        raise SparkWriteError(
            f"{failed} of {records} records failed to reach Kafka "
            f"({delivered} delivered); first error: {first}",
            report=report,
            first_error=first,
            failed=failed,
            records=records,
        )
    return report


# -- foreachPartition over rows ------------------------------------------------------------------


class PartitionWriter:
    """A picklable callable for ``rdd.foreachPartition`` / ``df.foreachPartition``.

    Built by :func:`partition_writer`. Called with an iterator of rows (``pyspark.sql.Row``,
    or any object indexable by column name), it sends them through the worker's cached
    producer, flushes, and raises :class:`SparkWriteError` on the executor if any record
    failed, which fails the task (and so the job, unless Spark's retry succeeds).
    """

    __slots__ = ("spec",)

    def __init__(self, spec: _Spec) -> None:
        self.spec = spec

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartitionWriter, (self.spec,))

    def __repr__(self) -> str:
        return f"<PartitionWriter topic={self.spec.topic!r}>"

    def __call__(self, rows: Iterable[Any]) -> None:
        """Write the partition's rows; return once every one is acknowledged."""
        spec = self.spec

        def body(producer: SyncProducer, result: _TaskResult) -> None:
            iterator = iter(rows)
            while True:
                chunk = [row for _, row in zip(range(_ROW_CHUNK), iterator, strict=False)]
                if not chunk:
                    return
                values = [_plain(row[spec.value]) for row in chunk]
                keys = [_plain(row[spec.key]) for row in chunk] if spec.key else None
                headers = None
                if spec.headers is not None:
                    headers = [_row_headers(row[spec.headers]) for row in chunk]
                partitions = None
                if spec.partition is not None:
                    partitions = [row[spec.partition] for row in chunk]
                result.bytes += sum(len(v) for v in values if v is not None)
                if keys is not None:
                    result.bytes += sum(len(k) for k in keys if k is not None)
                if spec.topic_column is not None:
                    topics = [row[spec.topic_column] for row in chunk]
                    _send_grouped(
                        producer, result, topics, values, keys, headers, partitions, spec.topic
                    )
                else:
                    assert spec.topic is not None
                    _send(producer, result, spec.topic, values, keys, headers, partitions)

        stats = _run_task(spec, body)
        if stats["failed"]:
            raise SparkWriteError(
                f"{stats['failed']} of {stats['records']} records of partition "
                f"{stats['partition']} failed to reach Kafka; first error: "
                f"{stats['first_error']}",
                first_error=stats["first_error"],
                failed=stats["failed"],
                records=stats["records"],
            )


def _plain(obj: Any) -> Any:
    # PySpark gives binary columns as bytearray; str and bytes go through unchanged.
    return bytes(obj) if type(obj) is bytearray else obj


def _row_headers(obj: Any) -> Any:
    if obj is None or isinstance(obj, dict):
        return obj
    # array<struct<key, value>> arrives as a list of Rows (tuples in field order).
    return [(h["key"], h["value"]) if hasattr(h, "__getitem__") else h for h in obj]


def partition_writer(
    topic: str | None = None,
    *,
    bootstrap_servers: str | Sequence[str],
    key: str | None = _DEFAULT_KEY,
    value: str = "value",
    headers: str | None = None,
    partition: str | None = None,
    topic_column: str | None = None,
    flush_timeout: float | None = None,
    **producer_config: Any,
) -> PartitionWriter:
    """A callable for ``rdd.foreachPartition(...)`` that writes rows to Kafka.

    The columns are named as in :func:`write` (rows are read by name; a missing ``key``
    field under the default name means no keys). Settings are checked here, on the driver;
    each partition flushes before its task ends and raises :class:`SparkWriteError` if
    any of its records failed.

    ::

        df.foreachPartition(partition_writer("events", bootstrap_servers="broker:9092"))
    """
    if topic is None and topic_column is None:
        raise InvalidArgumentError("give a topic, or a topic_column naming each row's topic")
    config = {"bootstrap_servers": bootstrap_servers, **producer_config}
    ProducerConfig.from_kwargs(config)
    spec = _Spec(
        topic=topic,
        key=key,
        value=value,
        headers=headers,
        headers_kind=None,
        partition=partition,
        topic_column=topic_column,
        producer_config=tuple(sorted(config.items())),
        cache_key=_cache_key(config),
        flush_timeout=flush_timeout,
    )
    return _RowsWriter(spec) if key == _DEFAULT_KEY else PartitionWriter(spec)


class _RowsWriter(PartitionWriter):
    """A :class:`PartitionWriter` whose key column is optional (the default name)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_RowsWriter, (self.spec,))

    def __call__(self, rows: Iterable[Any]) -> None:
        iterator = iter(rows)
        first = next(iterator, None)
        if first is None:
            return super().__call__(())
        spec = self.spec
        fields = getattr(first, "__fields__", None)
        if fields is not None and spec.key not in fields:
            spec = dataclasses.replace(spec, key=None)
        import itertools

        return PartitionWriter(spec)(itertools.chain([first], iterator))
