"""The streaming queries of the exactly-once tests, and a driver process that runs them.

A query reads JSON files of ``{"id": n}`` lines (a replayable source: a micro-batch run
again reads the same files into the same partitions) and writes ``key = n``,
``value = "row-<n>"`` to a topic, through ``format("aioproducer")`` with ``exactlyOnce``
or through Spark's own ``format("kafka")``.

Run as a script (``python eos_driver.py '<json>'``) it is a whole Spark driver: it starts
its own local session, runs one query per entry of ``queries`` side by side until every
file is written (``availableNow``), and exits; the tests SIGKILL it while :func:`gate`
holds chosen tasks at chosen rows, and start it again from the same checkpoints. This module travels by value to the Python workers
(which cannot import it), with the functions handed to Spark.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["fail_first_attempts", "gate", "log_end", "start_query", "write_inputs"]

Step = Callable[[Iterator[Any]], Iterator[Any]]

try:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - the tests skip without pyspark
    pass


def write_inputs(folder: Path, files: int, rows: int, pad: int = 0) -> list[bytes]:
    """``files`` JSON files of ``rows`` ids each (named so they sort in id order); the
    values every row will be written as (by a query of the same ``pad``)."""
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    now = time.time()
    for f in range(files):
        ids = range(f * rows, (f + 1) * rows)
        lines = "".join(json.dumps({"id": i}) + "\n" for i in ids)
        path = folder / f"part-{f:04d}.json"
        path.write_text(lines)
        # The file source takes files in modification order: one second apart, the
        # micro-batches hold the files in name order (files written in the same
        # millisecond would be taken in any order).
        os.utime(path, (now - files + f, now - files + f))
        values += [f"row-{i}:{'x' * pad}".encode() for i in ids]
    return values


def gate(folder: str, batch: int, partitions: list[int], after: int) -> Step:
    """A mapInArrow function passing rows on unchanged, except in the tasks of micro-batch
    ``batch`` writing the Spark ``partitions``: after ``after`` Arrow batches those leave a
    file ``<folder>/<batch>-<partition>`` and wait there (until the test kills the driver;
    five minutes at most). So the test knows where every task is when it kills."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        stops = (
            tc is not None
            and tc.getLocalProperty("streaming.sql.batchId") == str(batch)
            and tc.partitionId() in partitions
        )
        for index, arrow_batch in enumerate(batches):
            if stops and index == after:
                assert tc is not None
                Path(folder, f"{batch}-{tc.partitionId()}").touch()
                time.sleep(300)
            yield arrow_batch

    return run


def fail_first_attempts(servers: str, topic: str, after: int) -> Step:
    """A mapInArrow function for a query run with one task per micro-batch. The first
    attempt of micro-batch 0 passes ``after + 1`` Arrow batches on, waits until rows of
    them are in the topic's log (its end offsets grew: an open transaction's rows count),
    and raises; the first attempt of micro-batch 1 does the same and then SIGKILLs its own
    Python worker. Both tasks fail after they really sent rows. (Spark hands a Python sink
    its input through a 64 KiB buffer: the batches passed on must fill it.)"""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        tc = TaskContext.get()
        batch = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
        failing = tc is not None and tc.attemptNumber() == 0 and batch in ("0", "1")
        start = log_end(servers, topic) if failing else 0
        for index, arrow_batch in enumerate(batches):
            yield arrow_batch
            if failing and index == after:
                deadline = time.monotonic() + 20
                while log_end(servers, topic) <= start:
                    if time.monotonic() > deadline:
                        raise TimeoutError("the task's first rows never reached the log")
                    time.sleep(0.05)
                if batch == "0":
                    raise RuntimeError("injected failure after the first rows were sent")
                os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-task

    return run


def log_end(servers: str, topic: str, *, committed: bool = False) -> int:
    """The sum of the end offsets of ``topic``'s partitions: the high watermarks, or with
    ``committed`` the last stable offsets (short of any open transaction)."""
    import confluent_kafka as ck

    probe: Any = ck.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "probe",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in parts
        )
    finally:
        probe.close()


def start_query(
    spark: Any,
    *,
    sink: str,
    source: str,
    topic: str,
    checkpoint: str,
    servers: str,
    files_per_batch: int = 2,
    step: Step | None = None,
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
    """Run ``queries`` (each: sink, topic, checkpoint, and a ``gate`` or none) over
    ``source`` to their end."""
    args = json.loads(argv[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        # Four task slots: the gated tasks of both queries wait side by side while the
        # others run to their end.
        SparkSession.builder.master("local[4,2]")
        .appName("aioproducer-eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Small Arrow batches: a gated task has passed whole batches on to its sink.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "5")
        # A short-lived driver: the JVM's quick compiler and simplest collector start it sooner.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
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
            step=gate(**q["gate"]) if q.get("gate") else None,
            pad=args["pad"],
        )
        for q in args["queries"]
    ]
    for query in queries:
        query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
