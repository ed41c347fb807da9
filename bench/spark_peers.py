"""The confluent-kafka peer of ``bench.spark_compare``, importable on Spark's Python workers.

Written the way a careful user would: one producer per worker process, cached in this
module (not in the driver's ``__main__``, whose globals are recreated for every task) and
reused by the worker's next tasks; no Python callback per delivered record
(``delivery.report.only.error``), ``BufferError`` answered with ``poll()``, a ``poll(0)``
every few thousand rows, and a ``flush()`` before the partition's function returns, which
raises if anything was not delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfluentPartitionWriter", "arrow_floor"]

_producers: dict[tuple[tuple[str, Any], ...], Any] = {}
_lock = threading.Lock()


class ConfluentPartitionWriter:
    """``df.foreachPartition(ConfluentPartitionWriter(conf, topic))``."""

    def __init__(
        self, conf: dict[str, Any], topic: str, keyed: bool = True, flush_timeout: float = 120.0
    ) -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.keyed = keyed
        self.flush_timeout = flush_timeout

    def _producer(self, errors: list[Any]) -> Any:
        from confluent_kafka import Producer

        key = tuple(sorted(self.conf.items()))
        with _lock:
            producer = _producers.get(key)
            if producer is None:
                conf = {**self.conf, "delivery.report.only.error": True}
                # The error callback is per producer; it reports into the current task's list.
                conf["on_delivery"] = lambda err, _msg: errors_sink[0].append(err)
                producer = _producers[key] = Producer(conf)
            errors_sink[0] = errors
            return producer

    def __call__(self, rows: Iterable[Any]) -> None:
        errors: list[Any] = []
        producer = self._producer(errors)
        produce, poll, topic, keyed = producer.produce, producer.poll, self.topic, self.keyed
        for n, row in enumerate(rows, 1):
            value = row["value"]
            key = row["key"] if keyed else None
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.05)
            if not n % 5000:
                poll(0)
        remaining = producer.flush(self.flush_timeout)
        if remaining or errors:
            raise RuntimeError(
                f"confluent-kafka: {remaining} records not flushed, {len(errors)} failed; "
                f"first error: {errors[0] if errors else None}"
            )


errors_sink: list[list[Any]] = [[]]


def arrow_floor(batches: Iterable[Any]) -> Iterable[Any]:
    """A mapInArrow function that only counts its rows: what the JVM's Arrow conversion and
    the trip to the Python worker cost before any producer runs (the floor of every
    mapInArrow writer)."""
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([("rows", pa.int64())]))
