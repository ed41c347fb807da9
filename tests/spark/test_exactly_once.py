"""Exactly-once streaming (``format("aioproducer")`` with ``exactlyOnce``) on real PySpark
and a real Kafka, against Spark's own ``format("kafka")`` on the same queries.

Every row of the input is read back by an independent ``read_committed`` consumer
(confluent-kafka) and counted by content. The faults: a task that fails on its first
attempt after it sent rows, and one whose Python worker is SIGKILLed; a micro-batch run
again after the sink had committed it (its ``commits/N`` removed from the checkpoint, as
when the driver dies between the sink's commit and Spark's commit log); and the driver
process SIGKILLed at two points its tasks are held at, and restarted from its checkpoint.
Both sinks run side by side in the same runs: Spark's Kafka sink writes duplicates there,
so the tests can tell the two apart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from eos_driver import fail_first_attempts, log_end, start_query, write_inputs

from aioproducer.testing import KafkaCluster

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = [pytest.mark.broker]

ROWS = 60  # per input file
PAD = 5000  # bytes in each value of the driver-kill test


def read_committed(servers: str, topic: str, *, committed: bool = True) -> Counter[bytes]:
    """How many times each value is in ``topic``, as a ``read_committed`` (or
    ``read_uncommitted``) consumer sees every partition up to its end."""
    import confluent_kafka as ck

    consumer: Any = ck.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"verify-{uuid.uuid4()}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    seen: Counter[bytes] = Counter()
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in parts])
        todo, deadline = set(parts), time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"partitions {sorted(todo)} never reached their end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error()
                todo.discard(msg.partition())
                continue
            seen[msg.value()] += 1
    finally:
        consumer.close()
    return seen


def duplicates(seen: Counter[bytes]) -> int:
    return sum(n - 1 for n in seen.values() if n > 1)


def assert_all_there(seen: Counter[bytes], values: list[bytes]) -> None:
    """Every row at least once, and nothing else."""
    assert set(seen) == set(values)


def run_to_end(*queries: Any) -> None:
    for query in queries:
        # A query stopped before its end would leave rows unwritten: wait for its end.
        assert query.awaitTermination(300), "the query did not reach the end of its input"
        assert query.exception() is None, query.exception()
        query.stop()  # releases the checkpoint before a restart from it
        assert not query.isActive


def ids(seen: Counter[bytes], *, twice: bool = False) -> set[int]:
    """The row ids in ``seen`` (only those seen more than once, with ``twice``)."""
    return {int(v.split(b":")[0][4:]) for v, n in seen.items() if n > 1 or not twice}


@pytest.mark.slow
def test_a_task_failing_midway_or_its_worker_killed_is_retried_without_duplicates(
    spark: Any, spark_sinks: list[str], kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    # Micro-batch 0's first attempt raises in a UDF after rows reached the sink; micro-batch
    # 1's first attempt SIGKILLs that UDF's Python worker at the same point. Either way
    # Spark ends the Python sink's input as if it were complete: the first attempt commits
    # the rows it got, with their count in its marker, and the retry must send only the
    # rows after them.
    rows = 150
    # 2 KB rows, 10 to an Arrow batch: 8 batches fill the buffer Spark feeds the sink through.
    values = write_inputs(tmp_path / "in", files=2, rows=rows, pad=2000)
    topics = {sink: new_topic(2) for sink in spark_sinks}
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    # Small Arrow batches: the sink gets the first rows before the failure.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        queries = [
            start_query(
                spark,
                sink=sink,
                source=str(tmp_path / "in"),
                topic=topic,
                checkpoint=str(tmp_path / f"cp-{sink}"),
                servers=kafka.bootstrap_servers,
                files_per_batch=1,  # one task per micro-batch: the log's rows are its own
                step=fail_first_attempts(kafka.bootstrap_servers, topic, after=8),
                pad=2000,
            )
            for sink, topic in topics.items()
        ]
        run_to_end(*queries)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    for sink, topic in topics.items():
        seen = read_committed(kafka.bootstrap_servers, topic)
        assert_all_there(seen, values)
        raw = read_committed(kafka.bootstrap_servers, topic, committed=False)
        if sink == "aioproducer":
            assert duplicates(seen) == 0
            assert sum(raw.values()) >= len(values)
        else:
            # The failed attempts' rows did reach the log, and Spark's Kafka sink keeps
            # them: duplicates from each of the two micro-batches.
            twice = ids(seen, twice=True)
            assert min(twice) < rows <= max(twice), sorted(twice)


@pytest.mark.slow
def test_a_micro_batch_replayed_after_its_commit_is_not_written_again(
    spark: Any, spark_sinks: list[str], kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    values = write_inputs(tmp_path / "in", files=4, rows=ROWS)
    topics = {sink: new_topic(2) for sink in spark_sinks}

    def run() -> None:
        run_to_end(
            *(
                start_query(
                    spark,
                    sink=sink,
                    source=str(tmp_path / "in"),
                    topic=topic,
                    checkpoint=str(tmp_path / f"cp-{sink}"),
                    servers=kafka.bootstrap_servers,
                )
                for sink, topic in topics.items()
            )
        )

    run()  # two micro-batches, 0 and 1
    for sink in topics:
        commits = tmp_path / f"cp-{sink}" / "commits"
        assert _batches(commits) == {0, 1}
        # As if the driver had died after the sink's commit of batch 1, before Spark
        # logged it.
        (commits / "1").unlink()
        (commits / ".1.crc").unlink(missing_ok=True)  # its checksum too
    run()
    for sink, topic in topics.items():
        assert (tmp_path / f"cp-{sink}" / "commits" / "1").exists()  # batch 1 ran again
        seen = read_committed(kafka.bootstrap_servers, topic)
        assert_all_there(seen, values)
        if sink == "aioproducer":
            assert duplicates(seen) == 0
        else:
            assert duplicates(seen) == 2 * ROWS  # the replayed batch's rows, twice


def _batches(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("[0-9]*")} if folder.exists() else set()


@pytest.mark.slow
@pytest.mark.timeout(900)  # three driver processes, each starting its own JVM
def test_the_driver_killed_at_two_points_and_restarted_writes_every_row_once(
    kafka: KafkaCluster, spark: Any, spark_sinks: list[str], new_topic: NewTopic, tmp_path: Path
) -> None:
    # Both sinks' queries run side by side in one driver process, killed together, each
    # time while gates hold chosen tasks at chosen rows (eos_driver.gate), so every kill
    # lands at a known point. Three micro-batches (0, 1, 2) of two tasks (two files) each.
    servers = kafka.bootstrap_servers
    values = write_inputs(tmp_path / "in", files=6, rows=ROWS, pad=PAD)
    per_batch = 2 * ROWS
    topics = {sink: new_topic(2) for sink in spark_sinks}
    checkpoints = {sink: tmp_path / f"cp-{sink}" for sink in spark_sinks}
    driver = Path(__file__).with_name("eos_driver.py")
    jars = spark.sparkContext.getConf().get("spark.jars", "")

    def start(run: int, gates: dict[str, tuple[int, list[int], int]]) -> subprocess.Popen[bytes]:
        """The driver, with ``gates``: sink -> (micro-batch, partitions, Arrow batches)."""
        queries = []
        for sink in spark_sinks:
            gate = None
            if sink in gates:
                folder = tmp_path / f"gates-{run}-{sink}"
                folder.mkdir()
                batch, partitions, after = gates[sink]
                gate = {"folder": str(folder), "batch": batch, "partitions": partitions}
                gate["after"] = after
            queries.append(
                {"sink": sink, "topic": topics[sink], "checkpoint": str(checkpoints[sink])}
                | {"gate": gate}
            )
        args = {"source": str(tmp_path / "in"), "servers": servers, "pad": PAD}
        args |= {"queries": queries, "jars": jars}
        return subprocess.Popen(
            [sys.executable, str(driver), json.dumps(args)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the driver and its JVM: one group to kill
        )

    def kill_when(proc: subprocess.Popen[bytes], *ready: Any) -> None:
        deadline = time.monotonic() + 300  # a loaded machine starts a JVM slowly
        for condition in ready:
            while not condition():
                assert proc.poll() is None, (
                    proc.stderr.read().decode()[-3000:] if proc.stderr else ""
                )
                assert time.monotonic() < deadline, f"the driver never got to {condition.__doc__}"
                time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def gated(run: int, sink: str, *tasks: str) -> Any:
        def there() -> bool:
            """the gates"""
            return all((tmp_path / f"gates-{run}-{sink}" / t).exists() for t in tasks)

        return there

    def log_at_least(sink: str, n: int) -> Any:
        def there() -> bool:
            """rows in the log"""
            return log_end(servers, topics[sink]) >= n

        return there

    def ours_task_0_committed() -> bool:
        """task 0's commit"""
        return marker(servers, topics["aioproducer"], checkpoints["aioproducer"], 0) == 1

    def open_transaction() -> bool:
        """an open transaction with rows"""
        ours = topics["aioproducer"]
        return log_end(servers, ours, committed=True) < log_end(servers, ours)

    theirs = "kafka" in spark_sinks
    # 1. Micro-batch 1 half done: task 0 has run to its end; task 1 has sent rows and is
    # held before its last ones. Ours: task 0's transaction committed with its marker,
    # task 1's open. Theirs: task 0's rows and some of task 1's are in the log.
    gates = {sink: (1, [1], 8) for sink in spark_sinks}  # 8 of 12 Arrow batches of 5 rows
    first = start(1, gates)
    ready = [gated(1, sink, "1-1") for sink in spark_sinks]
    ready += [ours_task_0_committed, open_transaction]
    if theirs:
        ready.append(log_at_least("kafka", per_batch + ROWS + 1))
    kill_when(first, *ready)
    assert _batches(checkpoints["aioproducer"] / "commits") == {0}
    assert ours_task_0_committed() and open_transaction()  # as the driver left them
    assert marker(servers, topics["aioproducer"], checkpoints["aioproducer"], 1) == 0
    cut = {}
    if theirs:
        assert _batches(checkpoints["kafka"] / "commits") == {0}
        # The rows of micro-batch 1 in the log, which its replay will write again.
        cut[1] = log_end(servers, topics["kafka"]) - per_batch
        assert ROWS < cut[1] < per_batch
    # 2. Right after micro-batch 1 (replayed) is committed, before micro-batch 2 sends a
    # row: ours' tasks of micro-batch 2 are held before their first row. Theirs is again
    # half-way through micro-batch 2.
    gates = {"aioproducer": (2, [0, 1], 0), "kafka": (2, [1], 8)}
    second = start(2, gates)
    ready = [gated(2, "aioproducer", "2-0", "2-1")]
    if theirs:
        ready += [
            gated(2, "kafka", "2-1"),
            log_at_least("kafka", 2 * per_batch + cut[1] + ROWS + 1),
        ]
    kill_when(second, *ready)
    assert _batches(checkpoints["aioproducer"] / "commits") == {0, 1}
    ours_seen = read_committed(servers, topics["aioproducer"])
    assert_all_there(ours_seen, values[: 2 * per_batch])  # micro-batches 0 and 1, once
    assert duplicates(ours_seen) == 0
    if theirs:
        assert _batches(checkpoints["kafka"] / "commits") == {0, 1}
        cut[2] = log_end(servers, topics["kafka"]) - (2 * per_batch + cut[1])
        assert ROWS < cut[2] < per_batch
    # 3. To the end.
    last = start(3, {})
    assert last.wait(300) == 0, last.stderr.read().decode()[-3000:] if last.stderr else ""
    for sink in spark_sinks:
        assert _batches(checkpoints[sink] / "commits") == {0, 1, 2}
        seen = read_committed(servers, topics[sink])
        assert_all_there(seen, values)
        if sink == "aioproducer":
            assert duplicates(seen) == 0
        else:
            # Spark's Kafka sink wrote again every row of both micro-batches it was killed in.
            assert duplicates(seen) == cut[1] + cut[2]


def marker(servers: str, topic: str, checkpoint: Path, partition: int) -> int:
    """The micro-batch id the marker of Spark ``partition`` of the exactly-once query
    holds (-1001 for none): the group offset its committed transactions leave."""
    import confluent_kafka as ck

    from aioproducer.spark._options import parse_options
    from aioproducer.spark._tasks import transactional_id
    from aioproducer.spark.exactly_once import MARKER_PARTITION, marker_group

    options = {"kafka.bootstrap.servers": servers, "checkpointlocation": str(checkpoint)}
    prefix = parse_options(options).derived_prefix
    assert prefix is not None
    query_id = json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    group = marker_group(transactional_id(prefix, partition), query_id)
    # read_uncommitted: librdkafka then fetches the offset without require_stable, so the
    # broker answers with what committed transactions left. read_committed would wait
    # (UNSTABLE_OFFSET_COMMIT, retried until the timeout) while a transaction that
    # committed an offset for this group is still open, as after the driver was killed.
    consumer: Any = ck.Consumer(
        {"bootstrap.servers": servers, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        [tp] = consumer.committed([ck.TopicPartition(topic, MARKER_PARTITION)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()
