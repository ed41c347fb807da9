"""Package-internal: what runs inside Spark's Python workers for :mod:`aioproducer.spark`
(:func:`~aioproducer.spark.write` and the ``aioproducer`` data source).

The settings a task needs travel as a :class:`Spec` (plain picklable data, checked on the
driver by :func:`make_spec`). In the worker, :func:`run_task` leases a
:class:`~aioproducer.SyncProducer` from a per-process cache keyed by those settings (created
after the worker was forked, reused by the worker's next tasks), lets the task send its
records through the bulk path (:func:`send`, :func:`send_grouped`), flushes, and returns one
row of figures. :class:`ArrowTask` is the function ``mapInArrow`` runs; its rows have the
schema :data:`STATS_DDL`.

pyspark and pyarrow are imported only when these functions run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..config import ProducerConfig
from ..errors import ConfigError, InvalidArgumentError, KafkaTimeoutError
from ..producer import Producer
from ..sync import SyncProducer
from ._arrow import COALESCE_BYTES, COALESCE_ROWS, arrow_binary, arrow_nbytes, coalesce
from ._errors import SparkWriteError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: The key column's default name; a DataFrame without such a column sends no keys.
DEFAULT_KEY = "key"
#: The row of figures each task returns (the schema :func:`write_arrow` yields).
STATS_DDL = (
    "partition int, attempt int, pid long, records long, bytes long, delivered long, "
    "failed long, first_error string, producer string, producer_tasks long, elapsed_s double"
)


# -- the columns ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
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
    #: Set for transactional writes: each task is one transaction whose id is
    #: :func:`transactional_id` of this prefix and the task's partition index.
    transactional_id_prefix: str | None = None

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.producer_config)


def make_spec(
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
    transactional_id_prefix: str | None = None,
) -> Spec:
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
        if key == DEFAULT_KEY and key not in columns:
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
    check_config(config, transactional_id_prefix)  # ConfigError here, before any task runs
    if flush_timeout is not None and not flush_timeout > 0:
        raise InvalidArgumentError(f"flush_timeout must be positive or None, got {flush_timeout}")
    return Spec(
        topic=topic,
        key=key,
        value=value,
        headers=headers,
        headers_kind=headers_kind,
        partition=partition,
        topic_column=topic_column,
        producer_config=tuple(sorted(config.items())),
        cache_key=cache_key(config),
        flush_timeout=flush_timeout,
        transactional_id_prefix=transactional_id_prefix,
    )


def check_config(config: dict[str, Any], transactional_id_prefix: str | None) -> None:
    """Check the producer settings of a write (and its transactional prefix) on the driver."""
    if transactional_id_prefix is None:
        if config.get("transactional_id") is not None:
            raise ConfigError(
                "transactional_id would be shared by every task of the write, each fencing "
                "the others: give transactional_id_prefix instead (each task then uses "
                "'<prefix>-<partition index>')"
            )
        ProducerConfig.from_kwargs(config)
        return
    if not isinstance(transactional_id_prefix, str) or not transactional_id_prefix:
        raise ConfigError(
            f"transactional_id_prefix must be a non-empty str or None, "
            f"got {transactional_id_prefix!r}"
        )
    if "transactional_id" in config:
        raise ConfigError(
            "give transactional_id_prefix or transactional_id, not both (each task's id is "
            "'<prefix>-<partition index>')"
        )
    # The settings every task's producer will have (acks, idempotence) must allow one.
    ProducerConfig.from_kwargs(
        {**config, "transactional_id": transactional_id(transactional_id_prefix, 0)}
    )


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of the task writing Spark partition ``partition``.

    The same for every attempt of that partition (a retry, a speculative copy), so each
    new attempt fences the earlier ones when it starts.
    """
    return f"{prefix}-{partition}"


def cache_key(config: dict[str, Any]) -> str:
    """The producer cache's key for these settings."""
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


def _lease(spec: Spec) -> tuple[SyncProducer, str, int]:
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


def _give_back(spec: Spec, producer: SyncProducer) -> None:
    with _cache_lock:
        if producer.closed:
            _uses.pop(id(producer), None)
        else:
            _idle.setdefault(spec.cache_key, []).append(producer)


def lease_producer(config: dict[str, Any]) -> tuple[SyncProducer, Callable[[], None]]:
    """Package-internal (``aioproducer.spark.producer``): this worker's cached producer for
    these settings, and the call that gives it back."""
    spec = Spec(
        topic=None,
        key=None,
        value="value",
        headers=None,
        headers_kind=None,
        partition=None,
        topic_column=None,
        producer_config=tuple(sorted(config.items())),
        cache_key=cache_key(config),
        flush_timeout=None,
    )
    producer, _name, _uses_so_far = _lease(spec)
    return producer, functools.partial(_give_back, spec, producer)


# -- the task side ----------------------------------------------------------------------------


class TaskResult:
    """What a task counted itself: records, bytes, and records rejected before sending."""

    __slots__ = ("bytes", "failed_early", "first_error", "records", "strict")

    def __init__(self, *, strict: bool = False) -> None:
        self.records = 0
        self.bytes = 0
        self.failed_early = 0
        self.first_error: str | None = None
        #: In a transaction one refused record dooms the task: raise at once.
        self.strict = strict

    def note(self, exc: BaseException) -> None:
        if self.strict:
            raise exc
        self.failed_early += 1
        if self.first_error is None:
            self.first_error = _describe(exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def send(
    producer: SyncProducer,
    result: TaskResult,
    topic: str,
    values: Any,
    keys: Any,
    headers: Any,
    partitions: Any,
) -> None:
    """Send a run of records; a record rejected at send() fails alone and is counted.

    Goes through the bulk path: the records cross to the producer's loop a slice at a
    time and are encoded a run per partition, with no per-record future. The columns are
    sequences, or Arrow arrays (encoded column-wise; sliced, not copied, past a bad row).
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


def send_grouped(
    producer: SyncProducer,
    result: TaskResult,
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

        send(
            producer,
            result,
            topic,
            pick(values) or [],
            pick(keys),
            pick(headers),
            pick(partitions),
        )


def _task_stats(
    result: TaskResult,
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


def run_task(spec: Spec, body: Any) -> dict[str, Any]:
    """Lease a producer, run ``body(producer, result)``, flush, and count the outcomes.

    Under the global OpenTelemetry instrumentation (``aioproducer.otel``, set up in the
    worker) the task is one span, not one per row.
    """
    hook = Producer.instrumentation
    if hook is None:
        return _run_task(spec, body)
    span = hook.start_task(spec.topic, spec.config.get("client_id"))
    try:
        stats = _run_task(spec, body)
    except BaseException as exc:
        hook.failed(span, exc)
        raise
    hook.task_done(span, stats)
    return stats


def _run_task(spec: Spec, body: Any) -> dict[str, Any]:
    if spec.transactional_id_prefix is not None:
        return _run_transaction(spec, spec.transactional_id_prefix, body)
    started = time.perf_counter()
    producer, name, tasks = _lease(spec)
    result = TaskResult()
    try:
        before = producer.tally()
        try:
            body(producer, result)
        except Exception as exc:
            # The task cannot go on (no metadata from the brokers, say): fail it with the
            # typed error naming the cause, which the driver finds in Spark's report.
            raise _task_failed(exc) from exc
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


def _task_failed(exc: Exception) -> SparkWriteError:
    from pyspark import TaskContext

    if isinstance(exc, SparkWriteError):
        return exc
    tc = TaskContext.get()
    where = f"partition {tc.partitionId()} (attempt {tc.attemptNumber()})" if tc else "a task"
    cause = _describe(exc)
    return SparkWriteError(f"{where} failed: {cause}", first_error=cause)


def _run_transaction(spec: Spec, prefix: str, body: Any) -> dict[str, Any]:
    """Run the task as one transaction of its own producer: commit or abort, then close.

    The producer is made for this attempt and never cached: starting it runs
    InitProducerId, which is what fences an earlier attempt of the same partition (and
    aborts what that attempt left open); a cached one would skip that, and could itself
    have been fenced since by an attempt on another worker.
    """
    from pyspark import TaskContext

    started = time.perf_counter()
    tc = TaskContext.get()
    if tc is None:
        raise InvalidArgumentError(
            "a transactional write runs inside Spark tasks: its transactional ids come "
            "from the task's partition index"
        )
    partition, attempt = tc.partitionId(), tc.attemptNumber()
    txn_id = transactional_id(prefix, partition)
    name = _new_name()
    producer = SyncProducer(**spec.config, transactional_id=txn_id)
    result = TaskResult(strict=True)
    before = None
    try:
        producer.begin_transaction()  # starts the producer: InitProducerId fences
        before = producer.tally()
        body(producer, result)
        if spec.flush_timeout is not None:
            producer.flush(spec.flush_timeout)
        producer.commit_transaction()  # delivers every record first; commits only if all were
        after = producer.tally()
    except Exception as exc:
        sent = _sent_since(producer, before)
        _abort_and_close(producer)
        cause = _describe(exc)
        raise SparkWriteError(
            f"transaction {txn_id!r} of partition {partition} (attempt {attempt}) was "
            f"aborted, none of its {sent} records sent is committed: {cause}",
            first_error=cause,
            failed=sent,
            records=sent,
        ) from exc
    except BaseException:
        _abort_and_close(producer)
        raise
    producer.close()
    taken = after.records - before.records
    result.records = taken
    return _task_stats(result, name, 1, taken, 0, None, started)


def _sent_since(producer: SyncProducer, before: Any) -> int:
    if before is None:
        return 0
    try:
        return int(producer.tally().records - before.records)
    except Exception:  # the producer is gone: the count is unknown
        return 0


def _abort_and_close(producer: SyncProducer) -> None:
    """Abort what the task left open (best effort: a fenced or unreachable producer cannot,
    and then the next attempt's InitProducerId, or the transaction timeout, aborts it)."""
    with contextlib.suppress(Exception):
        producer.abort_transaction()
    producer.close(timeout=0)


def _new_name() -> str:
    global _created
    with _cache_lock:
        _created += 1
        return f"{os.getpid()}-{_created}"


def write_arrow(spec: Spec, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: send every batch, flush, yield one row of figures.

    Each Arrow batch goes to the producer as columns (``send_bulk`` of Arrow arrays): values
    and keys are read in place from Arrow's buffers (strings as their UTF-8 bytes, no cast
    copy), keys are hashed to partitions and records encoded with numpy, with no Python
    object per row; headers (list of key/value structs, or a map) are encoded the same way.
    Only a column given a ``value_serializer`` or ``key_serializer`` is turned into Python
    objects, row by row.
    """
    import pyarrow as pa

    def body(producer: SyncProducer, result: TaskResult) -> None:
        # Joining batches pays off in the column encoder; a serializer turns its column
        # into Python objects row by row anyway, so such batches go as Spark hands them
        # (and what was read before a failure has been sent).
        serialized = value_serializer or key_serializer
        joined = batches if serialized else coalesce(batches, COALESCE_ROWS, COALESCE_BYTES)
        for batch in joined:
            names = batch.schema.names
            values: Any = batch.column(names.index(spec.value))
            result.bytes += arrow_nbytes(values)
            if value_serializer:
                values = arrow_binary(values).to_pylist()
            keys: Any = None
            if spec.key is not None:
                keys = batch.column(names.index(spec.key))
                result.bytes += arrow_nbytes(keys)
                if key_serializer:
                    keys = arrow_binary(keys).to_pylist()
            headers = None
            if spec.headers is not None:
                headers = batch.column(names.index(spec.headers))
            partitions = None
            if spec.partition is not None:
                partitions = batch.column(names.index(spec.partition))
            if spec.topic_column is not None:
                topics = batch.column(names.index(spec.topic_column))
                send_by_topic(
                    producer, result, topics, values, keys, headers, partitions, spec.topic
                )
            else:
                assert spec.topic is not None
                send(producer, result, spec.topic, values, keys, headers, partitions)

    # A serializer is a Python function of each value (as bytes): those columns go as lists.
    config = spec.config
    value_serializer = config.get("value_serializer") is not None
    key_serializer = config.get("key_serializer") is not None
    stats = run_task(spec, body)
    yield pa.RecordBatch.from_pylist([stats], schema=_stats_schema())


def send_by_topic(
    producer: SyncProducer,
    result: TaskResult,
    topics: pa.Array,
    values: pa.Array,
    keys: pa.Array | None,
    headers: pa.Array | None,
    partitions: pa.Array | None,
    default_topic: str | None,
) -> None:
    """Per-row topics of an Arrow batch: each topic's rows, in their order, as columns."""
    import pyarrow.compute as pc

    if default_topic is not None and topics.null_count:
        topics = pc.fill_null(topics, default_topic)
    elif topics.null_count:
        for _ in range(topics.null_count):
            result.note(InvalidArgumentError("the row's topic column is null"))
    for topic in pc.unique(topics.drop_null()).to_pylist():
        mask = pc.equal(topics, topic)

        def pick(column: pa.Array | None, mask: Any = mask) -> Any:
            return None if column is None else column.filter(mask)

        send(producer, result, topic, pick(values), pick(keys), pick(headers), pick(partitions))


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


class ArrowTask:
    """The function given to mapInArrow: a settings holder, picklable by value."""

    __slots__ = ("spec",)

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return write_arrow(self.spec, batches)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArrowTask, (self.spec,))
