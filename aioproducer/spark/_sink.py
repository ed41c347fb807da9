"""Package-internal: the column contract of Spark's Kafka sink, and the task body the
``aioproducer`` data source's writers run.

The columns are Spark's: ``value`` (string or binary, required), ``key`` (string or
binary, optional), ``headers`` (``array<struct<key:string,value:binary>>``, optional),
``topic`` (string; required unless the ``topic`` option is given, which wins) and
``partition`` (int, optional; null lets the partitioner choose). Other columns are
ignored, as Spark does. :func:`sink_spec` checks them against the input schema on the
driver and returns the same :class:`~aioproducer.spark._tasks.Spec` that
:func:`aioproducer.spark.write` builds, so a data source task runs the very same Arrow
task body (:func:`~aioproducer.spark._tasks.write_arrow`): the worker's cached producer,
``send_bulk`` of Arrow columns, a flush per task.

pyspark and pyarrow are imported only when these functions run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgumentError
from ._errors import SparkWriteError
from ._options import SinkOptions
from ._tasks import Spec, make_spec, write_arrow

__all__ = ["DEFAULT_BATCH_SIZE", "run_sink_task", "sink_spec"]

#: ``batch.size`` unless ``kafka.batch.size`` is given: a task hands Spark's Arrow batches
#: over whole, so batches fill without lingering (as :func:`aioproducer.spark.write` does).
DEFAULT_BATCH_SIZE = 256 * 1024

_KAFKA_COLUMNS = ("key", "value", "headers", "topic", "partition")
_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def sink_spec(options: SinkOptions, schema: Any) -> Spec:
    """Check ``schema`` (the input DataFrame's ``StructType``) against the Kafka sink's
    column rules and build the tasks' settings; raise
    :class:`~aioproducer.errors.InvalidArgumentError` naming a missing or mistyped column
    (and the closest column the DataFrame has)."""
    from pyspark.sql import types as T

    columns = {f.name: f.dataType for f in schema.fields}

    def missing(name: str, why: str) -> InvalidArgumentError:
        hint = difflib.get_close_matches(name, list(columns), n=1, cutoff=0.6)
        near = f"; did you mean {hint[0]!r} (rename it with alias({name!r}))?" if hint else ""
        have = ", ".join(repr(c) for c in columns) or "none"
        return InvalidArgumentError(
            f"the DataFrame has no {name!r} column, {why}{near} (its columns: {have})"
        )

    def check(name: str, allowed: tuple[type, ...], shown: str) -> None:
        dtype = columns[name]
        if not isinstance(dtype, allowed):
            raise InvalidArgumentError(
                f"column {name!r} is {dtype.simpleString()}; the Kafka sink needs {shown}"
            )

    text_or_bytes = (T.StringType, T.BinaryType)
    if "value" not in columns:
        raise missing("value", "which every Kafka sink write needs (string or binary)")
    check("value", text_or_bytes, "string or binary")
    if "key" in columns:
        check("key", text_or_bytes, "string or binary")
    topic_column = None
    if options.topic is None:
        if "topic" not in columns:
            raise missing("topic", "and no 'topic' option is given: set one of the two")
        check("topic", (T.StringType,), "string")
        topic_column = "topic"
    elif "topic" in columns:
        check("topic", (T.StringType,), "string")  # Spark checks it even when the option wins
    headers = None
    if "headers" in columns:
        dtype = columns["headers"]
        if dtype.simpleString() != _HEADERS_TYPE:
            raise InvalidArgumentError(
                f"column 'headers' is {dtype.simpleString()}; the Kafka sink needs {_HEADERS_TYPE}"
            )
        headers = "headers"
    partition = None
    if "partition" in columns:
        check("partition", (T.IntegerType,), "int")
        partition = "partition"
    config = dict(options.producer_config)
    servers = config.pop("bootstrap_servers")
    config.setdefault("batch_size", DEFAULT_BATCH_SIZE)
    return make_spec(
        columns,
        options.topic,
        bootstrap_servers=servers,
        key="key" if "key" in columns else None,
        value="value",
        headers=headers,
        partition=partition,
        topic_column=topic_column,
        flush_timeout=options.flush_timeout,
        producer_config=config,
        transactional_id_prefix=options.transactional_id_prefix,
    )


def input_columns(spec: Spec) -> list[str]:
    """The columns a task reads, in a stable order."""
    wanted = [spec.value, spec.key, spec.headers, spec.partition, spec.topic_column]
    return list(dict.fromkeys(c for c in wanted if c is not None))


def run_sink_task(spec: Spec, batches: Iterable[Any]) -> dict[str, Any]:
    """Run one data source task over its Arrow batches: send, flush, and return its
    figures; raise :class:`~aioproducer.spark.SparkWriteError` (failing the task) if any
    record failed."""
    wanted = input_columns(spec)

    def only_wanted() -> Iterable[Any]:
        for batch in batches:
            names = batch.schema.names
            if names != wanted:
                batch = batch.select(wanted)
            yield batch

    out = list(write_arrow(spec, only_wanted()))
    stats: dict[str, Any] = out[0].to_pylist()[0]
    if stats["failed"] or stats["delivered"] != stats["records"]:
        raise SparkWriteError(
            f"{stats['failed']} of {stats['records']} records of partition "
            f"{stats['partition']} failed to reach Kafka; first error: {stats['first_error']}",
            first_error=stats["first_error"],
            failed=stats["failed"],
            records=stats["records"],
        )
    return stats
