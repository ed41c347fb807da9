"""Exactly-once streaming into Kafka: the writer behind ``.option("exactlyOnce", "true")``.

What Spark gives a Python streaming sink
----------------------------------------
Each micro-batch ``N`` runs one task per Spark partition; ``write()`` runs in the task and
returns a message, and the driver then calls ``commit(messages, N)`` (every task
succeeded) or ``abort(messages, N)``; only after ``commit`` returns does Spark write
``commits/N`` to the checkpoint. A task that fails is run again (``spark.task.maxFailures``)
with the same input. After a restart, a batch whose offsets were logged but whose
``commits/N`` is missing is run again with the same id and the same input, including one
whose sink commit had already returned (the driver died in between). Inside ``write()``
the task knows its partition, attempt, the batch id (local property
``streaming.sql.batchId``) and the query id (``sql.streaming.queryId``, the same across
restarts from one checkpoint).

What Kafka gives
----------------
A transactional id fences every earlier holder when a producer initialises it
(InitProducerId), and aborts the transaction it left open. A group offset committed with
TxnOffsetCommit inside a transaction becomes visible exactly when the transaction commits,
and OffsetFetch with ``requireStable`` will not answer while an open transaction holds it
(:meth:`aioproducer.Producer.committed_offsets`).

The design chosen: each task commits its own transaction, with a marker
-----------------------------------------------------------------------
Every Spark partition ``p`` of a query has one transactional id, ``<prefix>-<p>``, the same
for every attempt, micro-batch and restart, and one marker: the offset of partition 0 of
the sink topic in the group ``<transactional id>@<query id>``, holding the last batch id
whose rows that partition committed, and in its metadata how many of that batch's rows
(counted in input order) are committed. A task of batch ``N``:

1. initialises its id: any earlier attempt of this partition is fenced, and the
   transaction it left open is aborted (a retry after a failure midway, a killed worker, a
   speculative copy, a task of a driver that died);
2. reads the marker with ``requireStable``; if it holds a later batch, or ``N`` with at
   least as many rows as this attempt has, this partition of batch ``N`` is already in
   Kafka: the task sends nothing;
3. otherwise it sends the rows after the ``k`` the marker says are committed (all of them
   for a new batch) and commits the marker ``N`` with its new count in one transaction.

So each row of each partition of each batch is committed once: by the first attempt to
commit it, with every later attempt fenced before it could or skipping it after. The
row count matters because Spark ends a Python sink's input alike when a task's rows are
all there and when a failure upstream in the same task (its source or a UDF raising)
cut them short: such an attempt commits the rows it received, with their count, and its
retry, which reads the same input again, sends only the rows after them. The driver's
``commit`` and ``abort`` have nothing left to do, and a replay of a batch Spark already
saw succeed (its ``commits/N`` missing) writes nothing again. The marker group's name
carries the query id, so a new query (a new checkpoint) starts with no markers even when
it reuses a ``transactionalIdPrefix``.

The other design, where tasks leave their transactions open and the driver's ``commit``
ends them all (two-phase commit, as Flink does), would make a micro-batch's rows visible
across partitions together. It was not taken: Spark offers no phase to ask tasks to
commit, so a transaction has to be ended from the driver by another process without
InitProducerId (which would abort it), every open transaction is lost if the query is not
resumed within ``transaction.timeout.ms``, and the attempts whose messages Spark drops
(speculation, duplicates after an executor loss) leave transactions that must be found and
swept. Here a batch's rows become visible partition by partition, each all at once.

What it needs: a replayable source, and a replayed batch or a retried task that puts the
same rows in the same Spark partitions in the same order (a deterministic plan: no
``rand()``, no repartition on non-deterministic keys, no shuffle whose order can change
between attempts); ``kafka.transaction.timeout.ms`` longer than one task's work; the
marker topic-partition existing. See docs/spark-exactly-once.md.

pyspark and pyarrow are imported only when the writer is used.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from ..errors import ConfigError, InvalidArgumentError
from ..sync import SyncProducer
from ._arrow import arrow_nbytes
from ._errors import SparkWriteError
from ._options import SinkOptions
from ._sink import input_columns, sink_spec
from ._tasks import (
    Spec,
    TaskResult,
    check_config,
    send,
    send_by_topic,
    transactional_id,
)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "ExactlyOnceCommitMessage",
    "ExactlyOnceStreamWriter",
    "committed_rows",
    "marker_group",
]

log = logging.getLogger("aioproducer.spark")

#: The partition of the marker topic every marker is kept on (it must exist).
MARKER_PARTITION = 0


@dataclasses.dataclass(frozen=True)
class ExactlyOnceCommitMessage(WriterCommitMessage):
    """What one exactly-once task reports: its partition's records of the batch, or that
    an earlier attempt had committed them (``skipped``)."""

    partition: int
    attempt: int
    batch_id: int
    transactional_id: str
    records: int
    skipped: bool


def marker_group(txn_id: str, query_id: str) -> str:
    """The group whose offset is the marker of the partition written with ``txn_id``."""
    return f"{txn_id}@{query_id}"


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """The streaming writer of ``exactlyOnce``: every task one transaction with its
    partition's marker (see the module docstring).

    Built on the driver, where the options and columns are checked: a setting that cannot
    be transactional (``kafka.acks`` other than all, idempotence off) or a missing or
    mistyped column fails the query before any task runs.
    """

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.spec: Spec = sink_spec(options, schema)
        #: None: derived in each task from the query id (stable across restarts).
        self.prefix: str | None = options.derived_prefix
        # The settings must allow a transactional producer (acks=all, idempotence).
        check_config(self.spec.config, self.prefix or "aioproducer")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ExactlyOnceCommitMessage:
        """Write this partition of the micro-batch once (see the module docstring)."""
        return run_exactly_once(self.spec, self.prefix, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task committed its transaction (or found it committed): nothing is left."""
        if messages and all(m is None for m in messages):
            raise ConfigError(
                "the aioproducer data source does not run on a continuous trigger: Spark "
                "never calls a Python sink's tasks then, so the rows would be lost; use a "
                "micro-batch trigger (processingTime, availableNow)"
            )
        skipped = sum(1 for m in messages if isinstance(m, ExactlyOnceCommitMessage) and m.skipped)
        if skipped:
            log.info(
                "micro-batch %d: %d partition(s) had been committed by an earlier run",
                batchId,
                skipped,
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed on every attempt. The partitions that committed stay committed,
        with their markers: when Spark runs the batch again they are skipped."""


def run_exactly_once(
    spec: Spec, prefix: str | None, batches: Iterable[pa.RecordBatch]
) -> ExactlyOnceCommitMessage:
    """The task body: initialise the partition's id, read its marker, write once."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    batch_text = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    query_id = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
    if tc is None or batch_text is None or query_id is None:
        raise InvalidArgumentError(
            "the exactly-once writer runs in the tasks of a streaming query (it needs the "
            "micro-batch id and the query id Spark gives them)"
        )
    batch_id, partition, attempt = int(batch_text), tc.partitionId(), tc.attemptNumber()
    txn_id = transactional_id(prefix or f"aioproducer-{query_id}", partition)
    rows = _non_empty(spec, batches)
    first = next(rows, None)
    if first is None:
        # No rows, nothing to commit: a replay of this batch has none either.
        return ExactlyOnceCommitMessage(partition, attempt, batch_id, txn_id, 0, False)
    marker = (spec.topic or _first_topic(spec, first), MARKER_PARTITION)
    group = marker_group(txn_id, query_id)
    producer = SyncProducer(**spec.config, transactional_id=txn_id)
    try:
        producer.begin_transaction()  # starts the producer: InitProducerId fences, aborts
        done, note = producer.committed_offsets([marker], group)[marker]
        committed = committed_rows(done, note, batch_id)
        counter = _RowCounter()
        before = producer.tally()
        result = TaskResult(strict=True)
        if committed is not None:
            # Read to the end in every case, as Spark expects; send what follows the rows
            # an earlier attempt committed (nothing after a complete one).
            _send_all(spec, producer, result, _after(counter.count(first, rows), committed))
        else:
            _send_all(spec, producer, result, counter.count(first, rows))
            committed = -1
        if counter.rows <= committed:
            producer.abort_transaction()  # empty: nothing reaches the coordinator
            producer.close()
            log.info(
                "partition %d of micro-batch %d was committed by an earlier attempt "
                "(marker %d, %d rows): skipped",
                partition,
                batch_id,
                done,
                committed,
            )
            return ExactlyOnceCommitMessage(partition, attempt, batch_id, txn_id, 0, True)
        producer.send_offsets_to_transaction(
            {marker: batch_id}, group, metadata={marker: f"rows={counter.rows}"}
        )
        producer.commit_transaction()  # delivers every record first; commits only if all were
        sent = producer.tally().records - before.records
    except Exception as exc:
        _abort_and_close(producer)
        cause = f"{type(exc).__name__}: {exc}"
        raise SparkWriteError(
            f"transaction {txn_id!r} of partition {partition} of micro-batch {batch_id} "
            f"(attempt {attempt}) was aborted; a retry or a replay writes it once: {cause}",
            first_error=cause,
        ) from exc
    except BaseException:
        _abort_and_close(producer)
        raise
    producer.close()
    return ExactlyOnceCommitMessage(partition, attempt, batch_id, txn_id, int(sent), False)


def committed_rows(done: int, note: str | None, batch_id: int) -> int | None:
    """How many rows of batch ``batch_id`` the marker (offset ``done``, metadata ``note``)
    says this partition committed: None for none (an earlier batch, or no marker), a
    number of rows for this batch, and every row (a huge count) for a later batch."""
    if done < batch_id:
        return None
    if done > batch_id:
        return _EVERY_ROW
    if note is not None and note.startswith("rows=") and note[5:].isdigit():
        return int(note[5:])
    # A marker of this batch without its count: the batch was committed whole.
    return _EVERY_ROW


#: More rows than one task ever has: "all of them are committed".
_EVERY_ROW = 2**62


class _RowCounter:
    """Counts the rows of a task's input as they are read."""

    def __init__(self) -> None:
        self.rows = 0

    def count(
        self, first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        for batch in itertools.chain([first], rest):
            self.rows += batch.num_rows
            yield batch


def _after(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """The rows after the first ``skip``, every batch read to the end."""
    seen = 0
    for batch in batches:
        start = max(0, min(batch.num_rows, skip - seen))
        seen += batch.num_rows
        if start < batch.num_rows:
            yield batch.slice(start) if start else batch


def _non_empty(spec: Spec, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The batches with rows, reduced to the columns the sink reads."""
    wanted = input_columns(spec)
    for batch in batches:
        if batch.num_rows:
            yield batch if batch.schema.names == wanted else batch.select(wanted)


def _first_topic(spec: Spec, batch: pa.RecordBatch) -> str:
    """Without a ``topic`` option the marker lives on the first row's topic."""
    assert spec.topic_column is not None
    topics = batch.column(batch.schema.names.index(spec.topic_column)).drop_null()
    if not len(topics):
        raise InvalidArgumentError("the row's topic column is null and no 'topic' option is set")
    return str(topics[0].as_py())


def _send_all(
    spec: Spec, producer: SyncProducer, result: TaskResult, batches: Iterable[pa.RecordBatch]
) -> None:
    """Every row through the bulk path, as Arrow columns (as the other writers send)."""
    for batch in batches:
        names = batch.schema.names
        values = batch.column(names.index(spec.value))
        result.bytes += arrow_nbytes(values)
        keys = None if spec.key is None else batch.column(names.index(spec.key))
        headers = None if spec.headers is None else batch.column(names.index(spec.headers))
        parts = None if spec.partition is None else batch.column(names.index(spec.partition))
        if spec.topic_column is not None:
            topics = batch.column(names.index(spec.topic_column))
            send_by_topic(producer, result, topics, values, keys, headers, parts, spec.topic)
        else:
            assert spec.topic is not None
            send(producer, result, spec.topic, values, keys, headers, parts)


def _abort_and_close(producer: SyncProducer) -> None:
    """Abort what the task left open, best effort: if this producer cannot (fenced,
    unreachable), the next attempt's InitProducerId, or the transaction timeout, does."""
    try:
        producer.abort_transaction()
    except Exception as exc:
        log.debug("abort after a failed exactly-once task: %s (pid %d)", exc, os.getpid())
    producer.close(timeout=0)
