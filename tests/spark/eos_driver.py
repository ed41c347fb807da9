"""The streaming queries of the exactly-once tests, and a driver process that runs them.

A query reads JSON files of ``{"id": n}`` lines (a replayable source: a micro-batch run
again reads the same files into the same partitions) and writes ``key = n``,
``value = "row-<n>"`` to a topic, through ``format("aioproducer")`` with ``exactlyOnce``
or through Spark's own ``format("kafka")``.

Run as a script (``python eos_driver.py '<json>'``) it is a whole Spark driver: it starts
its own local session, runs one query per entry of ``queries`` side by side until every
file is written (``availableNow``), and exits; the tests SIGKILL it midway and start it
again from the same checkpoints. Functions handed to Spark are closures, so they travel
by value to the Python workers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["fail_once", "slow", "start_query", "write_inputs"]


def write_inputs(folder: Path, files: int, rows: int, pad: int = 0) -> list[bytes]:
    """``files`` JSON files of ``rows`` ids each (named so they sort in id order); the
    values every row will be written as (by a query of the same ``pad``)."""
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    for f in range(files):
        ids = range(f * rows, (f + 1) * rows)
        lines = "".join(json.dumps({"id": i}) + "\n" for i in ids)
        (folder / f"part-{f:04d}.json").write_text(lines)
        values += [f"row-{i}:{'x' * pad}".encode() for i in ids]
    return values


def slow(delay: float) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A mapInArrow function passing rows on unchanged, ``delay`` s per Arrow batch, so a
    micro-batch lasts long enough to be killed in the middle."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            time.sleep(delay)
            yield batch

    return run


def fail_once(servers: str, topic: str, after: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A mapInArrow function that, in the first attempt of micro-batch 0 (run with one
    task per micro-batch), passes ``after + 1`` Arrow batches on, waits until rows of the
    topic are in the log (an open transaction's count: the high watermark), and raises:
    the task fails after it really sent rows. (Spark hands a Python sink its input through
    a 64 KiB buffer: the batches passed on must fill it.)"""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        failing = (
            tc is not None
            and tc.getLocalProperty("streaming.sql.batchId") == "0"
            and tc.attemptNumber() == 0
        )
        for index, batch in enumerate(batches):
            yield batch
            if failing and index == after:
                import confluent_kafka as ck

                probe: Any = ck.Consumer({"bootstrap.servers": servers, "group.id": "probe"})
                try:
                    parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
                    deadline = time.monotonic() + 10
                    while not any(
                        probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                        for p in parts
                    ):
                        if time.monotonic() > deadline:
                            raise TimeoutError("the task's first rows never reached the log")
                        time.sleep(0.05)
                finally:
                    probe.close()
                raise RuntimeError("injected failure after the first rows were sent")

    return run


def start_query(
    spark: Any,
    *,
    sink: str,
    source: str,
    topic: str,
    checkpoint: str,
    servers: str,
    files_per_batch: int = 2,
    step: Callable[[Iterator[Any]], Iterator[Any]] | None = None,
    pad: int = 0,
) -> Any:
    """Start the query (``availableNow``: every file there is, then it stops)."""
    frame = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", files_per_batch)
        .json(source)
        .selectExpr(
            "cast(id AS string) AS key",
            f"concat('row-', cast(id AS string), ':', repeat('x', {pad})) AS value",
        )
    )
    if step is not None:
        frame = frame.mapInArrow(step, frame.schema)
    writer = (
        frame.writeStream.format(sink)
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
    )
    if sink == "aioproducer":
        writer = writer.option("exactlyOnce", "true")
    return writer.trigger(availableNow=True).start()


def main(argv: list[str]) -> int:
    """Run ``queries`` (each: sink, topic, checkpoint) over ``source`` to their end."""
    args = json.loads(argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2,2]")
        .appName("aioproducer-eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    )
    if args.get("jars"):
        builder = builder.config("spark.jars", args["jars"])
    spark = builder.getOrCreate()
    from aioproducer.spark import register

    register(spark)
    queries = [
        start_query(
            spark,
            sink=q["sink"],
            source=args["source"],
            topic=q["topic"],
            checkpoint=q["checkpoint"],
            servers=args["servers"],
            files_per_batch=1,
            step=slow(args["delay"]),
        )
        for q in args["queries"]
    ]
    for query in queries:
        query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
