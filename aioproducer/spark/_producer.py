"""``aioproducer.spark.producer()``: the worker's cached producer inside a user's own Spark
function (``mapInPandas``, ``mapInArrow``, ``pandas_udf``, ``rdd.mapPartitions``, UDFs).

The block leases the producer that :func:`aioproducer.spark.write` would use in this worker
for the same settings (made after the fork, kept for the worker's later tasks), and on exit
waits for every record sent *through the block*, not for the whole producer: blocks of
other threads of the same worker (a ``pandas_udf`` runs batches on threads) may share it.
A record that failed makes the exit raise :class:`~aioproducer.spark.SparkWriteError` naming
how many failed and the first error; nothing is lost silently when the function returns and
PySpark reuses or ends the worker.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..intake import Headers
from ..sync import BulkFuture, DeliveryFuture, SyncProducer
from ._errors import SparkWriteError
from ._tasks import lease_producer

__all__ = ["TaskProducer", "producer", "send_series"]


class TaskProducer:
    """What ``with aioproducer.spark.producer(...) as p`` gives: the sending half of a
    :class:`~aioproducer.SyncProducer`, remembering what this block sent.

    ``send`` and ``send_many`` return :class:`~aioproducer.sync.DeliveryFuture` objects,
    ``send_bulk`` a :class:`~aioproducer.sync.BulkFuture`; once the block has exited they
    are all done, so ``future.result()`` gives each record's partition and offset at once.
    """

    __slots__ = ("_bulks", "_futures", "_producer")

    def __init__(self, producer: SyncProducer) -> None:
        self._producer = producer
        self._futures: list[DeliveryFuture] = []
        self._bulks: list[BulkFuture] = []

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> DeliveryFuture:
        """Send one record (see :meth:`aioproducer.SyncProducer.send`)."""
        future = self._producer.send(topic, value, key, headers, partition, timestamp_ms)
        self._futures.append(future)
        return future

    def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        keys: Iterable[Any] | None = None,
        headers: Iterable[Headers | None] | None = None,
        *,
        partition: int | None = None,
    ) -> list[DeliveryFuture]:
        """Send many records, a future each (see :meth:`aioproducer.SyncProducer.send_many`)."""
        try:
            futures = self._producer.send_many(topic, values, keys, headers, partition=partition)
        except BaseException:
            # The records before the bad one went out without their futures reaching us:
            # settle them the only way left, with the whole producer, before the error.
            self._producer.flush()
            raise
        self._futures += futures
        return futures

    def send_bulk(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers | None] | None = None,
        *,
        partitions: Sequence[int | None] | None = None,
    ) -> BulkFuture:
        """Send many records with one outcome for them all (see
        :meth:`aioproducer.SyncProducer.send_bulk`)."""
        try:
            bulk = self._producer.send_bulk(topic, values, keys, headers, partitions=partitions)
        except BaseException:
            # As in send_many: the records before the bad one are buffered, untracked here.
            self._producer.flush()
            raise
        self._bulks.append(bulk)
        return bulk

    @property
    def sent(self) -> int:
        """How many records this block has sent so far."""
        return len(self._futures) + sum(b.records for b in self._bulks)

    def wait(self, timeout: float | None = None) -> tuple[int, BaseException | None]:
        """Wait for every record sent through this block; returns how many failed and the
        first error (in the order sent). Raises ``KafkaTimeoutError`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        failed = 0
        first: BaseException | None = None

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for future in self._futures:
            exc = future.exception(left())
            if exc is not None:
                failed += 1
                first = first or exc
        for bulk in self._bulks:
            outcome = bulk.result(left())
            if outcome.failed:
                failed += outcome.failed
                first = first or outcome.first_error
        return failed, first


@contextlib.contextmanager
def producer(
    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
    *,
    flush_timeout: float | None = None,
    **config: Any,
) -> Iterator[TaskProducer]:
    """Send to Kafka from inside any Spark Python function; every record is settled on exit.

    ::

        def enrich(batches):
            with aioproducer.spark.producer("broker:9092", linger_ms=20) as p:
                for pdf in batches:
                    futures = [p.send("events", v) for v in pdf["value"]]
                    ...
            # every record above is delivered here, or the block raised

    ``config`` are :class:`~aioproducer.SyncProducer` settings; blocks with the same
    settings in one worker share one producer (created on first use, after PySpark forked
    the worker), as :func:`aioproducer.spark.write` tasks do. On exit the block waits up to
    ``flush_timeout`` seconds (``None``: until ``delivery_timeout_ms`` settles every
    record) and raises :class:`~aioproducer.spark.SparkWriteError` if any record failed.
    If the block itself raised, the records it sent are still waited for, then its error
    propagates (failing the Spark task, which Spark may retry: rows sent before the
    failure are then sent again, at least once).
    """
    task, give_back = open_block({"bootstrap_servers": bootstrap_servers, **config})
    try:
        yield task
    except BaseException as exc:
        close_block(task, give_back, flush_timeout, exc)
        raise
    close_block(task, give_back, flush_timeout, None)


def open_block(config: dict[str, Any]) -> tuple[TaskProducer, Callable[[], None]]:
    """Package-internal: lease the worker's producer for ``config`` (with
    ``bootstrap_servers``); returns the block's producer and the call that gives it back."""
    sync, give_back = lease_producer(config)
    return TaskProducer(sync), give_back


def close_block(
    task: TaskProducer,
    give_back: Callable[[], None],
    flush_timeout: float | None,
    error: BaseException | None,
) -> None:
    """Package-internal: wait for what ``task`` sent and give the producer back.

    With ``error`` (the block raised) the records are waited for quietly and the caller
    raises ``error``; without, a failed record raises ``SparkWriteError``.
    """
    if error is not None:
        try:
            with contextlib.suppress(Exception):
                task.wait(flush_timeout)
        finally:
            give_back()
        return
    try:
        failed, first = task.wait(flush_timeout)
    finally:
        give_back()
    if failed:
        first_error = f"{type(first).__name__}: {first}" if first is not None else None
        raise SparkWriteError(
            f"{failed} of {task.sent} records sent in aioproducer.spark.producer() failed to "
            f"reach Kafka; first error: {first_error}",
            first_error=first_error,
            failed=failed,
            records=task.sent,
        )


def send_series(
    topic: str,
    values: Any,
    keys: Any = None,
    *,
    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
    flush_timeout: float | None = None,
    **config: Any,
) -> Any:
    """Send a pandas Series of values (and optionally one of keys) to ``topic`` and return
    where each landed: a pandas DataFrame with the Series' index and two columns,
    ``partition`` (int32) and ``offset`` (int64).

    Made for a ``pandas_udf`` returning ``"partition int, offset long"``::

        @pandas_udf("partition int, offset long")
        def to_kafka(values: pd.Series) -> pd.DataFrame:
            return aioproducer.spark.send_series("events", values,
                                                 bootstrap_servers="broker:9092")

        located = df.withColumn("kafka", to_kafka.asNondeterministic()("value"))

    Values and keys are ``str``, ``bytes`` or null (a null value is a tombstone, a null
    key means no key). The records go through the worker's cached producer as one bulk
    send (see :func:`producer`, whose settings ``config`` are); the call returns once all
    are acknowledged, or raises :class:`~aioproducer.spark.SparkWriteError` if any failed.
    """
    import pandas as pd

    if keys is not None and len(keys) != len(values):
        raise InvalidArgumentError(
            f"keys has {len(keys)} items and values {len(values)}; they must be as long"
        )
    value_list = _plain_list(values)
    key_list = _plain_list(keys) if keys is not None else None
    with producer(bootstrap_servers, flush_timeout=flush_timeout, **config) as block:
        bulk = block.send_bulk(topic, value_list, key_list) if value_list else None
    partitions, offsets = [], []
    if bulk is not None:
        done = bulk.result(0)  # the block waited: every record has its outcome
        for i in range(len(value_list)):
            meta = done.metadata(i)
            partitions.append(meta.partition)
            offsets.append(meta.offset)
    return pd.DataFrame(
        {
            "partition": pd.Series(partitions, dtype="int32", index=values.index),
            "offset": pd.Series(offsets, dtype="int64", index=values.index),
        }
    )


def _plain_list(series: Any) -> list[Any]:
    """A pandas Series as a list of str/bytes/None (pandas marks nulls as NaN or NA)."""
    items: list[Any] = series.tolist()
    nulls = series.isna().tolist()
    return [None if null else item for item, null in zip(items, nulls, strict=True)]
