"""``aioproducer.spark.KafkaForeachWriter``: a Structured Streaming row sink
(``df.writeStream.foreach(...)``) on the worker's cached producer.

Spark gives each task a fresh unpickled copy of the writer and calls ``open(partition_id,
epoch_id)``, ``process(row)`` for each of the partition's rows of that micro-batch, then
``close(error)``. The writer leases the worker's producer in ``open`` (as
:func:`aioproducer.spark.producer` does), sends rows a chunk at a time through the bulk
path, and in ``close`` waits for every record it sent: if one failed, ``close`` raises
:class:`~aioproducer.spark.SparkWriteError`, which fails the task and so the epoch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ._producer import TaskProducer, close_block, open_block
from ._tasks import DEFAULT_KEY, check_config

__all__ = ["KafkaForeachWriter"]

# Rows buffered before one bulk send: large enough to batch well, small enough that a
# micro-batch's rows start flowing while Spark still deserializes the rest.
_CHUNK = 2_000


class KafkaForeachWriter:
    """A Structured Streaming sink writing each row to Kafka: give it to
    ``df.writeStream.foreach(...)``.

    ::

        query = (stream_df.writeStream
                 .foreach(KafkaForeachWriter("events", bootstrap_servers="broker:9092"))
                 .option("checkpointLocation", "/checkpoints/events")
                 .start())

    Rows are read by column name: ``value`` (string or binary, required), ``key``
    (optional: under the default name a row without that column sends no key),
    ``headers`` (a map of string to binary, or an array of ``key``/``value`` structs) and
    ``partition`` (an integer column) when named. ``config`` are
    :class:`~aioproducer.SyncProducer` settings, checked here on the driver; the writer
    pickles as these settings only.

    Each epoch's task waits in ``close`` for every record it sent (up to
    ``flush_timeout`` seconds, ``None``: until ``delivery_timeout_ms``) and raises
    :class:`~aioproducer.spark.SparkWriteError` if any failed, so the epoch fails rather
    than being committed with rows missing. Delivery is at least once: a retried task or
    a re-run epoch sends its rows again.
    """

    __slots__ = ("_block", "_buffer", "_settings")

    def __init__(
        self,
        topic: str,
        *,
        bootstrap_servers: str | Sequence[str],
        value: str = "value",
        key: str | None = DEFAULT_KEY,
        headers: str | None = None,
        partition: str | None = None,
        flush_timeout: float | None = None,
        **config: Any,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise InvalidArgumentError(f"topic must be a non-empty str, got {topic!r}")
        if flush_timeout is not None and not flush_timeout > 0:
            raise InvalidArgumentError(
                f"flush_timeout must be positive or None, got {flush_timeout}"
            )
        producer_config = {"bootstrap_servers": bootstrap_servers, **config}
        check_config(producer_config, None)  # ConfigError now, not in every task
        self._settings: dict[str, Any] = {
            "topic": topic,
            "value": value,
            "key": key,
            "headers": headers,
            "partition": partition,
            "flush_timeout": flush_timeout,
            "config": producer_config,
        }
        self._block: tuple[TaskProducer, Callable[[], None]] | None = None
        self._buffer: list[Any] = []

    def __reduce__(self) -> tuple[Any, ...]:
        # Settings only: a lease or buffered rows never travel to another process.
        return (_rebuild, (self._settings,))

    def __repr__(self) -> str:
        return f"<KafkaForeachWriter topic={self._settings['topic']!r}>"

    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Lease the worker's producer for this task; always processes the rows."""
        self._block = open_block(dict(self._settings["config"]))
        self._buffer = []
        return True

    def process(self, row: Any) -> None:
        """Buffer one row; a full chunk is sent (a bad row raises, failing the task)."""
        self._buffer.append(row)
        if len(self._buffer) >= _CHUNK:
            self._send()

    def close(self, error: BaseException | None) -> None:
        """Send what is buffered and wait for every record this task sent.

        Raises :class:`~aioproducer.spark.SparkWriteError` if any failed. With ``error``
        (the task already failed) the records sent are waited for, and Spark raises
        ``error``.
        """
        if self._block is None:
            return
        task, give_back = self._block
        self._block = None
        if error is None:
            try:
                self._send(task)
            except BaseException as exc:
                close_block(task, give_back, self._settings["flush_timeout"], exc)
                raise
        self._buffer = []
        close_block(task, give_back, self._settings["flush_timeout"], error)

    def _send(self, task: TaskProducer | None = None) -> None:
        rows, self._buffer = self._buffer, []
        if not rows:
            return
        if task is None:
            if self._block is None:
                raise InvalidArgumentError("process() was called before open()")
            task = self._block[0]
        s = self._settings
        fields = getattr(rows[0], "__fields__", None)
        key = s["key"]
        if key == DEFAULT_KEY and fields is not None and key not in fields:
            key = None  # the default names an optional column

        def column(name: str) -> list[Any]:
            if fields is not None:
                # A Row is a tuple: take the column by position, not by name per row.
                return list(map(operator.itemgetter(fields.index(name)), rows))
            return [row[name] for row in rows]

        try:
            values = _plain(column(s["value"]))
            keys = _plain(column(key)) if key is not None else None
            headers = None
            if s["headers"] is not None:
                headers = [_headers(h) for h in column(s["headers"])]
            partitions = None
            if s["partition"] is not None:
                partitions = column(s["partition"])
        except (KeyError, ValueError, IndexError) as exc:
            columns = ", ".join(repr(f) for f in fields) if fields is not None else "unknown"
            raise InvalidArgumentError(
                f"KafkaForeachWriter: a row lacks a column it was told to read ({exc}); "
                f"the rows' columns are {columns}"
            ) from exc
        task.send_bulk(s["topic"], values, keys, headers, partitions=partitions)


def _rebuild(settings: dict[str, Any]) -> KafkaForeachWriter:
    writer = KafkaForeachWriter.__new__(KafkaForeachWriter)
    writer._settings = settings
    writer._block = None
    writer._buffer = []
    return writer


def _plain(items: list[Any]) -> list[Any]:
    # PySpark gives binary columns as bytearray; str and bytes go through unchanged.
    return [bytes(v) if type(v) is bytearray else v for v in items]


def _headers(obj: Any) -> Any:
    if obj is None or isinstance(obj, dict):
        return obj
    # array<struct<key, value>> arrives as a list of Rows (tuples in field order).
    return [(h["key"], h["value"]) for h in obj]
