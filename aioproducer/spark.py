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
With ``transactional_id_prefix`` each task is one Kafka transaction (id
``"<prefix>-<partition index>"``, so a rerun fences the attempt it replaces), committed
after its last row: ``read_committed`` consumers see a task's rows all or none. Those
producers are made per task and never cached (see :func:`write`).

pyspark and pyarrow are imported only when these functions run; ``import aioproducer``
never needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ._spark_foreach import KafkaForeachWriter
from ._spark_producer import TaskProducer, producer, send_series
from ._spark_tasks import (
    DEFAULT_KEY,
    STATS_DDL,
    ArrowTask,
    Spec,
    TaskResult,
    cache_key,
    check_config,
    make_spec,
    run_task,
    send,
    send_grouped,
)
from .errors import InvalidArgumentError, KafkaError
from .sync import SyncProducer

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

__all__ = [
    "KafkaForeachWriter",
    "PartitionReport",
    "PartitionWriter",
    "SparkWriteError",
    "TaskProducer",
    "WriteReport",
    "partition_writer",
    "producer",
    "send_series",
    "write",
]

# Rows sent per bulk call from foreachPartition's row iterator.
_ROW_CHUNK = 10_000

# write()'s record batch size unless one is given: a task hands whole Arrow batches over
# at once, so batches fill without lingering, and the columnar encoder's cost is per
# batch. 256 KiB measured about 25% more rows/s than the producer's 16 KiB (100 B rows).
_WRITE_BATCH_SIZE = 256 * 1024

# The Arrow batches write() asks Spark for where the session has not set these (Spark's
# defaults: 10,000 rows, 64 MiB): the columnar encoder's cost is mostly per batch and per
# partition run, so fewer, larger batches are cheaper on both sides of the JVM/Python
# boundary; the byte limit keeps a worker's memory bounded when rows are large.
_ARROW_WANTED = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.execution.arrow.maxBytesPerBatch": str(8 * 1024 * 1024),
}


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

    ``report`` is the full :class:`WriteReport`, or ``None`` when a task raised it (from
    :func:`partition_writer`, or a transactional task whose transaction was aborted: then
    :func:`write` raises it with the last failed attempt's message and ``first_error``);
    ``first_error``, ``failed`` and ``records`` summarise it.
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


# -- the driver side ----------------------------------------------------------------------------


def write(
    df: DataFrame,
    topic: str | None = None,
    *,
    bootstrap_servers: str | Sequence[str],
    key: str | None = DEFAULT_KEY,
    value: str = "value",
    headers: str | None = None,
    partition: str | None = None,
    topic_column: str | None = None,
    flush_timeout: float | None = None,
    transactional_id_prefix: str | None = None,
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

    Other keyword arguments are producer settings (see :class:`~aioproducer.Producer`);
    ``batch_size`` defaults to 256 KiB here (the producer's own default is 16 KiB), as
    each task hands Spark's Arrow batches over whole.
    Each task flushes before it ends (``flush_timeout`` seconds at most, ``None`` waits for
    every outcome, which ``delivery_timeout_ms`` bounds). The write runs exactly one Spark
    action. If any record failed, :class:`SparkWriteError` is raised with the first error,
    the counts and the report; a task that fails outright fails the Spark job (and Spark
    may retry it: delivery is at least once).

    With ``transactional_id_prefix`` each task writes its rows in one Kafka transaction
    under the id ``"<prefix>-<partition index>"``, the same for every attempt of that
    partition: a new attempt fences the earlier ones and aborts what they left open. The
    task commits after its last row (the commit delivers every record first); on any
    failure it aborts and fails with :class:`SparkWriteError`, and a job whose retries run
    out raises :class:`SparkWriteError` here. A ``read_committed`` consumer sees each
    task's rows all or none. See docs/spark.md for what this does not guarantee (a
    committed task Spark reruns writes its rows again).
    """
    schema = df.schema
    producer_config.setdefault("batch_size", _WRITE_BATCH_SIZE)
    spec = make_spec(
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
        transactional_id_prefix=transactional_id_prefix,
    )
    wanted = [spec.value, spec.key, spec.headers, spec.partition, spec.topic_column]
    columns = list(dict.fromkeys(c for c in wanted if c is not None))
    started = time.perf_counter()
    stats_df = df.select(*columns).mapInArrow(ArrowTask(spec), STATS_DDL)
    # Exactly one full action: every further action on stats_df would write everything
    # again, and limit-style actions (first, show, take) would run only some partitions.
    with _arrow_batches(df):
        if spec.transactional_id_prefix is None:
            rows = [row.asDict() for row in stats_df.collect()]
        else:
            rows = _collect_transactional(stats_df)
    elapsed = time.perf_counter() - started
    return _report(spec.topic, rows, elapsed)


@contextlib.contextmanager
def _arrow_batches(df: Any) -> Iterator[None]:
    """Larger Arrow batches for the write's one action, where the session has not set
    them (a value the user set is left alone); unset again after it."""
    try:
        conf = df.sparkSession.conf
        current = {key: conf.get(key, None) for key in _ARROW_WANTED}
    except Exception:  # a session without these settings (an older Spark): leave it
        yield
        return
    changed = [key for key in _ARROW_WANTED if current[key] is None]
    for key in changed:
        conf.set(key, _ARROW_WANTED[key])
    try:
        yield
    finally:
        for key in changed:
            conf.unset(key)


def _collect_transactional(stats_df: Any) -> list[dict[str, Any]]:
    """Collect the tasks' figures; a task that ran out of retries raises SparkWriteError."""
    try:
        return [row.asDict() for row in stats_df.collect()]
    except Exception as exc:
        # Spark hands the driver the worker's traceback as text, not the exception: find
        # the task's own message in it (the last one is the final attempt's).
        found = re.findall(r"SparkWriteError: (transaction .*?)\s*$", str(exc), re.MULTILINE)
        if not found:
            raise
        message = found[-1]
        cause = message.split(" is committed: ", 1)[-1]
        raise SparkWriteError(
            f"a transactional write failed: {message}", first_error=cause
        ) from exc


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

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartitionWriter, (self.spec,))

    def __repr__(self) -> str:
        return f"<PartitionWriter topic={self.spec.topic!r}>"

    def __call__(self, rows: Iterable[Any]) -> None:
        """Write the partition's rows; return once every one is acknowledged."""
        spec = self.spec

        def body(producer: SyncProducer, result: TaskResult) -> None:
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
                    send_grouped(
                        producer, result, topics, values, keys, headers, partitions, spec.topic
                    )
                else:
                    assert spec.topic is not None
                    send(producer, result, spec.topic, values, keys, headers, partitions)

        stats = run_task(spec, body)
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
    key: str | None = DEFAULT_KEY,
    value: str = "value",
    headers: str | None = None,
    partition: str | None = None,
    topic_column: str | None = None,
    flush_timeout: float | None = None,
    transactional_id_prefix: str | None = None,
    **producer_config: Any,
) -> PartitionWriter:
    """A callable for ``rdd.foreachPartition(...)`` that writes rows to Kafka.

    The columns are named as in :func:`write` (rows are read by name; a missing ``key``
    field under the default name means no keys). Settings are checked here, on the driver;
    each partition flushes before its task ends and raises :class:`SparkWriteError` if
    any of its records failed. ``transactional_id_prefix`` makes each partition one
    transaction, as in :func:`write`.

    ::

        df.foreachPartition(partition_writer("events", bootstrap_servers="broker:9092"))
    """
    if topic is None and topic_column is None:
        raise InvalidArgumentError("give a topic, or a topic_column naming each row's topic")
    config = {"bootstrap_servers": bootstrap_servers, **producer_config}
    check_config(config, transactional_id_prefix)
    spec = Spec(
        topic=topic,
        key=key,
        value=value,
        headers=headers,
        headers_kind=None,
        partition=partition,
        topic_column=topic_column,
        producer_config=tuple(sorted(config.items())),
        cache_key=cache_key(config),
        flush_timeout=flush_timeout,
        transactional_id_prefix=transactional_id_prefix,
    )
    return _RowsWriter(spec) if key == DEFAULT_KEY else PartitionWriter(spec)


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
