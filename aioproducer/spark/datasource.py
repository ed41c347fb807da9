"""The ``aioproducer`` Spark data source: ``df.write.format("aioproducer")`` and
``df.writeStream.format("aioproducer")``, with the options and columns of Spark's own
Kafka sink.

::

    (df.write.format("aioproducer").mode("append")
        .option("kafka.bootstrap.servers", "broker:9092")
        .option("topic", "events")
        .save())

PySpark finds it by itself where ``aioproducer[spark]`` is installed (the top-level
module ``pyspark_aioproducer``); :func:`aioproducer.spark.register` registers it too.

Options are read and columns checked in :meth:`AioproducerDataSource.writer` and
:meth:`~AioproducerDataSource.streamWriter`, which Spark calls while planning the write,
before any task runs: an unknown option, a missing column or a column of the wrong type
fails the write there, naming it. Each task then runs the Arrow task body of
:func:`aioproducer.spark.write` (the worker's cached producer, Arrow columns through
``send_bulk``, a flush before the task ends); a record that fails fails its task with
:class:`~aioproducer.spark.SparkWriteError`. Delivery is at least once, as with Spark's
Kafka sink, unless the streaming option ``exactlyOnce`` is ``true``.

Batch writes need ``.mode("append")``: Spark itself refuses ``errorifexists`` (its
default) and ``ignore`` for Python data sources, and ``overwrite`` is refused here (a
topic cannot be truncated). Streaming writes run on micro-batch triggers. Spark never
calls a Python sink's tasks on a continuous trigger, and nothing tells the data source
which trigger a query has: if Spark commits an epoch whose tasks returned no message the
commit fails the query (:class:`ContinuousTriggerError`), but with PySpark 4.3 such a
query was seen to run without ever committing, writing nothing. Use micro-batch triggers.

This module imports pyspark: import it only where pyspark is installed.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..errors import ConfigError
from ._options import SinkOptions, parse_options
from ._sink import run_sink_task, sink_spec
from ._tasks import Spec

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "AioproducerDataSource",
    "BatchWriter",
    "ContinuousTriggerError",
    "StreamWriter",
    "TaskCommitMessage",
]


class ContinuousTriggerError(ConfigError):
    """A streaming write to the ``aioproducer`` data source ran on a continuous trigger.

    Spark never runs a Python sink's tasks on a continuous trigger: an epoch it commits
    has no rows written. Raised when such a commit arrives; Spark may also never commit
    (the query then runs and writes nothing). Use a micro-batch trigger
    (``processingTime``, ``availableNow``).
    """


@dataclasses.dataclass(frozen=True)
class TaskCommitMessage(WriterCommitMessage):
    """What one task of the data source reports to the driver: its figures."""

    partition: int
    attempt: int
    records: int
    bytes: int
    delivered: int
    producer: str


class AioproducerDataSource(DataSource):
    """The ``aioproducer`` data source: a writer with Spark's Kafka sink contract.

    Options (names are case-insensitive): ``kafka.bootstrap.servers`` (required),
    ``topic``, ``includeHeaders``, ``kafka.<Java producer setting>``,
    ``transactionalIdPrefix`` (batch: each task one transaction), ``exactlyOnce``
    (streaming), ``flushTimeout``. See docs/spark-kafka-sink.md for the full table.
    """

    @classmethod
    def name(cls) -> str:
        """``"aioproducer"``: the name ``format()`` takes."""
        return "aioproducer"

    def _sink(self) -> SinkOptions:
        return parse_options(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        """The batch writer, after the options and columns are checked (on the driver)."""
        if overwrite:
            raise ConfigError(
                "mode('overwrite') is not supported by the aioproducer data source: records "
                "are appended to the topic; use .mode('append')"
            )
        sink = self._sink()
        if sink.exactly_once:
            raise ConfigError(
                "option 'exactlyOnce' applies to streaming writes (writeStream); a batch "
                "write is made atomic per task with 'transactionalIdPrefix'"
            )
        return BatchWriter(sink_spec(sink, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        """The streaming writer: at least once, or exactly once with ``exactlyOnce``."""
        if overwrite:
            raise ConfigError(
                "outputMode('complete') is not supported by the aioproducer data source: "
                "records are appended to the topic; use outputMode('append')"
            )
        sink = self._sink()
        if sink.exactly_once:
            try:
                module = importlib.import_module(f"{__package__}.exactly_once")
            except ImportError as exc:  # pragma: no cover - present in a complete install
                raise ConfigError(
                    f"option 'exactlyOnce' is not available in this install: {exc}"
                ) from None
            sink_spec(sink, schema)  # the same column checks, before any task
            writer: DataSourceStreamArrowWriter = module.ExactlyOnceStreamWriter(sink, schema)
            return writer
        if sink.transactional_id_prefix is not None:
            raise ConfigError(
                "option 'transactionalIdPrefix' applies to batch writes; a streaming write "
                "is made transactional with 'exactlyOnce'"
            )
        return StreamWriter(sink_spec(sink, schema))


def _message(stats: dict[str, Any]) -> TaskCommitMessage:
    return TaskCommitMessage(
        partition=stats["partition"],
        attempt=stats["attempt"],
        records=stats["records"],
        bytes=stats["bytes"],
        delivered=stats["delivered"],
        producer=stats["producer"],
    )


class BatchWriter(DataSourceArrowWriter):
    """The batch writer: each task sends its rows and flushes before it returns.

    Commit and abort have nothing to do: a task's records are acknowledged (or, with
    ``transactionalIdPrefix``, its transaction committed) before the task ends.
    """

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommitMessage:
        """Send the task's Arrow batches; fail the task if any record failed."""
        return _message(run_sink_task(self.spec, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: its records are in Kafka already."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed: the records of the tasks that succeeded stay in Kafka (at least
        once, as with Spark's Kafka sink)."""


class StreamWriter(DataSourceStreamArrowWriter):
    """The at-least-once streaming writer: each micro-batch's tasks send and flush.

    A micro-batch Spark replays (after a failure or a restart) is sent again, as with
    Spark's Kafka sink.
    """

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommitMessage:
        """Send the task's Arrow batches; fail the task if any record failed."""
        return _message(run_sink_task(self.spec, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The micro-batch's records are in Kafka; refuse a continuous trigger."""
        _refuse_continuous(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed: what other tasks sent stays in Kafka (at least once)."""


def _refuse_continuous(messages: Sequence[object | None]) -> None:
    # In a micro-batch every task returns a message, even for an empty partition; only a
    # continuous trigger commits an epoch whose tasks never ran write().
    if messages and all(m is None for m in messages):
        raise ContinuousTriggerError(
            "the aioproducer data source does not run on a continuous trigger: Spark never "
            "calls a Python sink's tasks then, so the rows would be lost; use a micro-batch "
            "trigger (processingTime, availableNow)"
        )
