"""Transactional Spark writes (``transactional_id_prefix``) on real PySpark and Kafka.

Each Spark partition ``p`` of these DataFrames writes to Kafka partition ``p`` (a
``part`` column), so what a task committed can be told apart per partition, and a failure
can be injected in one task once its first records are in the log. An independent
confluent-kafka consumer reads the topics back with ``read_committed``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import spark as kafka_spark
from aioproducer.errors import ConfigError
from aioproducer.spark import SparkWriteError
from aioproducer.testing import KafkaCluster

if TYPE_CHECKING:
    from conftest import NewTopic

TASKS = 4
ROWS = 2000  # 500 per task
PER_TASK = ROWS // TASKS


def read_back(
    bootstrap_servers: str, topic: str, *, committed: bool = True, timeout: float = 30.0
) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """Every (key, value) of ``topic`` per partition, in offset order, as a
    ``read_committed`` (or ``read_uncommitted``) consumer sees it up to the partition's end."""
    import confluent_kafka as ck

    consumer: Any = ck.Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"verify-{uuid.uuid4()}",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        out = {p: [] for p in meta.topics[topic].partitions}
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in out])
        todo = set(out)
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(todo)} of {topic} did not reach their end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    todo.discard(msg.partition())
                    continue
                raise RuntimeError(f"consumer error: {err}")
            out[msg.partition()].append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def task_rows(p: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) rows Spark partition ``p`` writes."""
    return [(str(i).encode(), f"v-{i}".encode()) for i in range(p * PER_TASK, (p + 1) * PER_TASK)]


@pytest.fixture
def frame(spark: Any) -> Iterator[Any]:
    """ROWS rows in TASKS partitions; partition p goes to Kafka partition p. Arrow batches
    of 100 rows, so a task hands its first rows to the producer before its later ones."""
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        yield spark.range(0, ROWS, 1, TASKS).selectExpr(
            "cast(id AS string) AS key",
            "cast(concat('v-', cast(id AS string)) AS binary) AS value",
            f"cast(floor(id / {PER_TASK}) AS int) AS part",
        )
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)


def failing_at(
    bootstrap_servers: str, topic: str, row: int, attempts: frozenset[int], crash: bool
) -> Callable[[str, bytes], bytes]:
    """A value serializer that, in the given attempts of the task holding ``row``, waits
    until the task's earlier records are in the log, then raises (or kills the Python
    worker, as a lost executor would)."""
    target = f"v-{row}".encode()
    partition = row // PER_TASK

    def serialize(_topic: str, value: bytes) -> bytes:
        if value == target:
            import confluent_kafka as ck
            from pyspark import TaskContext

            tc = TaskContext.get()
            if tc is not None and tc.attemptNumber() in attempts:
                # The high watermark, not the last stable offset: the records of an open
                # transaction count.
                probe: Any = ck.Consumer(
                    {
                        "bootstrap.servers": bootstrap_servers,
                        "group.id": "probe",
                        "isolation.level": "read_uncommitted",
                    }
                )
                try:
                    deadline = time.monotonic() + 30
                    tp = ck.TopicPartition(topic, partition)
                    while probe.get_watermark_offsets(tp, timeout=10)[1] == 0:
                        if time.monotonic() > deadline:
                            raise TimeoutError("the task's first records never reached the log")
                        time.sleep(0.05)
                finally:
                    probe.close()
                if crash:
                    os._exit(3)
                raise RuntimeError(f"injected failure at row {row}")
        return value

    return serialize


@pytest.mark.slow
def test_each_task_commits_its_rows_exactly_once(
    frame: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(TASKS)
    prefix = f"job-{uuid.uuid4().hex[:8]}"
    report = kafka_spark.write(
        frame,
        topic,
        bootstrap_servers=kafka.bootstrap_servers,
        partition="part",
        transactional_id_prefix=prefix,
    )
    assert (report.records, report.delivered, report.failed) == (ROWS, ROWS, 0)
    assert sorted(p.partition for p in report.partitions) == list(range(TASKS))
    # One producer per task: transactional producers are never reused.
    assert report.producers == TASKS and report.reused_producer_tasks == 0
    got = read_back(kafka.bootstrap_servers, topic)
    for p in range(TASKS):
        assert got[p] == task_rows(p)


@pytest.mark.slow
def test_a_crashed_attempt_is_fenced_and_its_retry_commits_every_row_once(
    frame: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(TASKS)
    serializer = failing_at(
        kafka.bootstrap_servers, topic, PER_TASK + 300, frozenset({0}), crash=True
    )
    report = kafka_spark.write(
        frame,
        topic,
        bootstrap_servers=kafka.bootstrap_servers,
        partition="part",
        transactional_id_prefix=f"job-{uuid.uuid4().hex[:8]}",
        value_serializer=serializer,
    )
    assert (report.records, report.delivered) == (ROWS, ROWS)
    assert [(p.partition, p.attempt) for p in report.partitions if p.partition == 1] == [(1, 1)]
    got = read_back(kafka.bootstrap_servers, topic)
    for p in range(TASKS):
        assert got[p] == task_rows(p)
    # The crashed attempt had written records to partition 1: the log holds them, aborted.
    raw = read_back(kafka.bootstrap_servers, topic, committed=False)
    assert len(raw[1]) > PER_TASK
    assert Counter(raw[1]) - Counter(task_rows(1))  # the first attempt's copies
    assert set(raw[1]) == set(task_rows(1))


def test_a_partition_that_keeps_failing_commits_nothing_and_the_write_raises(
    frame: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(TASKS)
    serializer = failing_at(
        kafka.bootstrap_servers, topic, PER_TASK + 300, frozenset({0, 1}), crash=False
    )
    prefix = f"job-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SparkWriteError) as info:
        kafka_spark.write(
            frame,
            topic,
            bootstrap_servers=kafka.bootstrap_servers,
            partition="part",
            transactional_id_prefix=prefix,
            value_serializer=serializer,
        )
    message = str(info.value)
    assert f"transaction '{prefix}-1' of partition 1 (attempt 1) was aborted" in message
    assert info.value.first_error is not None
    assert "injected failure at row 800" in info.value.first_error
    got = read_back(kafka.bootstrap_servers, topic)
    assert got[1] == []
    # The job was cancelled when partition 1 ran out of attempts: every other task
    # committed all of its rows or none of them.
    for p in (0, 2, 3):
        assert got[p] in ([], task_rows(p))
    # The first attempt had written records before it aborted: they are in the log.
    raw = read_back(kafka.bootstrap_servers, topic, committed=False)
    assert raw[1] and set(raw[1]) <= set(task_rows(1))


def test_partition_writer_commits_each_partition_or_aborts_it(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(2, config={"max.message.bytes": "2000"})
    prefix = f"rows-{uuid.uuid4().hex[:8]}"
    good = spark.range(0, 400, 1, 2).selectExpr(
        "cast(id AS string) AS key", "concat('r-', cast(id AS string)) AS value"
    )
    writer = kafka_spark.partition_writer(
        topic, bootstrap_servers=kafka.bootstrap_servers, transactional_id_prefix=prefix
    )
    good.foreachPartition(writer)
    committed = read_back(kafka.bootstrap_servers, topic)
    assert Counter(r for rows in committed.values() for r in rows) == Counter(
        (str(i).encode(), f"r-{i}".encode()) for i in range(400)
    )
    # A record the broker refuses makes its partition's transaction abort: none of that
    # partition's rows becomes visible, and the job fails with the typed error.
    bad = spark.range(400, 800, 1, 2).selectExpr(
        "cast(id AS string) AS key",
        "CASE WHEN id = 700 THEN repeat('y', 6000) ELSE concat('r-', cast(id AS string)) END"
        " AS value",
    )
    with pytest.raises(Exception, match="SparkWriteError") as info:
        bad.foreachPartition(writer)
    assert f"transaction '{prefix}-1' of partition 1" in str(info.value)
    assert "MESSAGE_TOO_LARGE" in str(info.value)
    after = read_back(kafka.bootstrap_servers, topic)
    new = Counter(r for rows in after.values() for r in rows) - Counter(
        r for rows in committed.values() for r in rows
    )
    # Partition 0 (rows 400-599) committed, partition 1 (600-799) did not.
    assert new == Counter((str(i).encode(), f"r-{i}".encode()) for i in range(400, 600))


def test_transactional_settings_are_checked_on_the_driver(kafka: KafkaCluster) -> None:
    servers = kafka.bootstrap_servers
    with pytest.raises(ConfigError, match="give transactional_id_prefix instead"):
        kafka_spark.partition_writer("t", bootstrap_servers=servers, transactional_id="x")
    with pytest.raises(ConfigError, match="not both"):
        kafka_spark.partition_writer(
            "t", bootstrap_servers=servers, transactional_id_prefix="p", transactional_id="x"
        )
    with pytest.raises(ConfigError, match="acks must be 'all'"):
        kafka_spark.partition_writer(
            "t", bootstrap_servers=servers, transactional_id_prefix="p", acks=1
        )
    with pytest.raises(ConfigError, match="transactional_id_prefix must be a non-empty str"):
        kafka_spark.partition_writer("t", bootstrap_servers=servers, transactional_id_prefix="")
