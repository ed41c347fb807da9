"""Package-internal: :func:`aioproducer.spark.write` and :func:`~aioproducer.spark.partition_writer`
(the driver side of a write over ``mapInArrow``, and ``foreachPartition`` over rows)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..sync import SyncProducer
from ._errors import PartitionReport, SparkWriteError, WriteReport
from ._tasks import (
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

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

# Rows sent per bulk call from foreachPartition's row iterator.
_ROW_CHUNK = 10_000

# write()'s record batch size unless one is given: a task hands whole Arrow batches over
# at once, so batches fill without lingering, and the columnar encoder's cost is per
# batch. 256 KiB measured about 25% more rows/s than the producer's 16 KiB (100 B rows).
_WRITE_BATCH_SIZE = 256 * 1024

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
    # Spark's own Arrow batch size is kept (10,000 rows by default): the task joins its
    # batches before encoding (see _arrow.coalesce), and larger batches cost the JVM more
    # per row to fill and send than they save.
    rows = _collect(stats_df)
    elapsed = time.perf_counter() - started
    return _report(spec.topic, rows, elapsed)


def _collect(stats_df: Any) -> list[dict[str, Any]]:
    """Collect the tasks' figures; a task that failed outright (its retries run out)
    raises :class:`SparkWriteError` here, naming the task and the cause."""
    try:
        return [row.asDict() for row in stats_df.collect()]
    except Exception as exc:
        error = task_error(exc)
        if error is None:
            raise
        raise error from None  # the cause is in the message; Spark's chain is pages long


def task_error(exc: BaseException) -> SparkWriteError | None:
    """The :class:`SparkWriteError` a task raised, found in the exception Spark gave the
    driver (which carries the worker's traceback as text), or ``None``."""
    # The last one is the final attempt's.
    found = re.findall(r"SparkWriteError: (.*?)\s*$", str(exc), re.MULTILINE)
    if not found:
        return None
    message = found[-1]
    if message.startswith("transaction "):
        cause = message.split(" is committed: ", 1)[-1]
        return SparkWriteError(f"a transactional write failed: {message}", first_error=cause)
    cause = message.split(" failed: ", 1)[-1]
    return SparkWriteError(f"the write failed: {message}", first_error=cause)


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
