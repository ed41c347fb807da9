"""aioproducer.spark against real PySpark (local[2]) and a real Kafka (4.4.0 by default)."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import spark as kafka_spark
from aioproducer.errors import ConfigError, InvalidArgumentError
from aioproducer.spark import PartitionWriter, SparkWriteError, WriteReport
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all, topic_end_offsets

if TYPE_CHECKING:
    from conftest import NewTopic


def expected_row(i: int) -> tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]:
    key = None if i % 4 == 0 else f"k{i % 1000}".encode()
    return key, f"v-{i}".encode(), (("id", str(i).encode()), ("src", b"spark"))


def test_200k_rows_keyed_and_keyless_with_headers_arrive_exactly(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(6)
    n = 200_000
    df = spark.range(0, n, 1, 8).selectExpr(
        "CASE WHEN id % 4 = 0 THEN NULL ELSE concat('k', cast(id % 1000 AS string)) END AS key",
        "cast(concat('v-', cast(id AS string)) AS binary) AS value",
        "map('id', cast(cast(id AS string) AS binary), 'src', cast('spark' AS binary)) AS hdrs",
    )
    arrow_rows = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(arrow_rows, None)
    report = kafka_spark.write(df, topic, bootstrap_servers=kafka.bootstrap_servers, headers="hdrs")
    # The write leaves the session's Arrow batch settings as they are.
    assert spark.conf.get(arrow_rows, None) == before

    assert isinstance(report, WriteReport)
    assert (report.records, report.delivered, report.failed) == (n, n, 0)
    assert report.first_error is None
    expected = [expected_row(i) for i in range(n)]
    assert report.bytes == sum(len(v) + (len(k) if k else 0) for k, v, _ in expected)
    assert sorted(p.partition for p in report.partitions) == list(range(8))
    assert sum(p.records for p in report.partitions) == n
    # Two worker processes served eight tasks: producers were reused, not made per task.
    assert report.producers < len(report.partitions)
    assert report.reused_producer_tasks >= len(report.partitions) - report.producers

    records = consume_all(kafka.bootstrap_servers, topic, expected=n)
    assert len(records) == n
    got = Counter((r.key, r.value, r.headers) for r in records)
    assert got == Counter(expected)
    # Keyed rows are spread by key: every record of one key is in one partition.
    partitions_of_key: dict[bytes, set[int]] = {}
    for r in records:
        if r.key is not None:
            partitions_of_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values())


def test_struct_headers_partition_and_topic_columns(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    even, odd = new_topic(3), new_topic(3)
    n = 3000
    df = spark.range(0, n, 1, 3).selectExpr(
        f"CASE WHEN id % 2 = 0 THEN '{even}' ELSE '{odd}' END AS destination",
        "cast(id AS string) AS value",
        "cast(id % 3 AS int) AS part",
        "array(named_struct('key', 'n', 'value', cast(cast(id AS string) AS binary)),"
        "      named_struct('key', 'tag', 'value', cast('x' AS binary))) AS hs",
    )
    report = kafka_spark.write(
        df,
        bootstrap_servers=kafka.bootstrap_servers,
        key=None,
        headers="hs",
        partition="part",
        topic_column="destination",
        linger_ms=2,
    )
    assert (report.records, report.delivered, report.failed) == (n, n, 0)
    for topic, parity in ((even, 0), (odd, 1)):
        records = consume_all(kafka.bootstrap_servers, topic, expected=n // 2)
        assert len(records) == n // 2
        for r in records:
            i = int(r.value)
            assert i % 2 == parity and r.key is None
            assert r.partition == i % 3
            assert r.headers == (("n", str(i).encode()), ("tag", b"x"))
        assert sorted(int(r.value) for r in records) == list(range(parity, n, 2))


def test_a_failing_write_raises_with_the_first_error_and_counts(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(2, config={"max.message.bytes": "2000"})
    n = 4000
    # Every 100th value is larger than the topic accepts.
    df = spark.range(0, n, 1, 4).selectExpr(
        "cast(id AS string) AS key",
        "CASE WHEN id % 100 = 7 THEN repeat('x', 5000) "
        "ELSE concat('ok-', cast(id AS string)) END AS value",
    )
    with pytest.raises(SparkWriteError) as info:
        kafka_spark.write(df, topic, bootstrap_servers=kafka.bootstrap_servers)
    error = info.value
    assert error.records == n and error.failed == n // 100
    assert error.first_error is not None and "MESSAGE_TOO_LARGE" in error.first_error
    assert "40 of 4000 records failed" in str(error) and "MESSAGE_TOO_LARGE" in str(error)
    report = error.report
    assert report is not None and report.delivered == n - n // 100
    assert sum(p.failed for p in report.partitions) == n // 100
    # The records that were acknowledged are there, and only those.
    records = consume_all(kafka.bootstrap_servers, topic, expected=n - n // 100)
    assert sorted(int(r.key) for r in records if r.key) == [i for i in range(n) if i % 100 != 7]
    assert all(r.value == f"ok-{int(r.key)}".encode() for r in records if r.key)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": "payload"}, InvalidArgumentError, "no value column 'payload'"),
        ({"key": "id"}, InvalidArgumentError, "key column 'id' is bigint"),
        ({"key": "nope"}, InvalidArgumentError, "no key column 'nope'"),
        ({"headers": "value"}, InvalidArgumentError, "headers column 'value' is binary"),
        ({"partition": "key"}, InvalidArgumentError, "partition column 'key' is string"),
        ({"topic_column": "id"}, InvalidArgumentError, "topic column 'id' is bigint"),
        ({"linger_msec": 5}, ConfigError, "did you mean 'linger_ms'"),
    ],
)
def test_missing_or_mistyped_columns_fail_before_anything_is_sent(
    spark: Any,
    kafka: KafkaCluster,
    new_topic: NewTopic,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    topic = new_topic(1)
    df = spark.range(0, 10, 1, 1).selectExpr(
        "id", "cast(id AS string) AS key", "cast(cast(id AS string) AS binary) AS value"
    )
    with pytest.raises(error, match=message):
        kafka_spark.write(df, topic, bootstrap_servers=kafka.bootstrap_servers, **kwargs)
    assert topic_end_offsets(kafka.bootstrap_servers, topic) == {0: 0}


def test_the_task_function_pickles_as_settings_only(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    from pyspark import cloudpickle

    from aioproducer.spark._tasks import ArrowTask, make_spec

    df = spark.range(1).selectExpr("cast(id AS string) AS value")
    spec = make_spec(
        {f.name: f.dataType for f in df.schema.fields},
        "t",
        bootstrap_servers=kafka.bootstrap_servers,
        key="key",
        value="value",
        headers=None,
        partition=None,
        topic_column=None,
        flush_timeout=None,
        producer_config={"linger_ms": 3},
    )
    blob = cloudpickle.dumps(ArrowTask(spec))
    for live in (b"SyncProducer", b"LoopRunner", b"_thread", b"Lock", b"socket"):
        assert live not in blob
    assert cloudpickle.loads(blob).spec == spec

    # A writer that has already run here (so this process holds a cached producer) still
    # pickles as its settings.
    topic = new_topic(1)
    writer = kafka_spark.partition_writer(topic, bootstrap_servers=kafka.bootstrap_servers)
    from pyspark.sql import Row

    writer([Row(key="a", value=b"1")])
    blob = pickle.dumps(writer)
    assert b"SyncProducer" not in blob and b"Lock" not in blob
    assert isinstance(pickle.loads(blob), PartitionWriter)
    assert pickle.loads(blob).spec == writer.spec
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value) == (b"a", b"1")


def test_partition_writer_for_foreach_partition(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    n = 5000
    df = spark.range(0, n, 1, 4).selectExpr(
        "concat('k', cast(id % 50 AS string)) AS key",
        "cast(concat('row-', cast(id AS string)) AS binary) AS value",
        "map('id', cast(id AS string)) AS meta",
    )
    df.foreachPartition(
        kafka_spark.partition_writer(
            topic, bootstrap_servers=kafka.bootstrap_servers, headers="meta"
        )
    )
    records = consume_all(kafka.bootstrap_servers, topic, expected=n)
    assert len(records) == n
    got = sorted((r.key, r.value, r.headers) for r in records)
    want = sorted(
        (f"k{i % 50}".encode(), f"row-{i}".encode(), (("id", str(i).encode()),)) for i in range(n)
    )
    assert got == want


def test_partition_writer_fails_the_job_when_records_fail(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1, config={"max.message.bytes": "2000"})
    df = spark.range(0, 200, 1, 2).selectExpr(
        "CASE WHEN id = 150 THEN repeat('y', 6000) ELSE cast(id AS string) END AS value"
    )
    writer = kafka_spark.partition_writer(topic, bootstrap_servers=kafka.bootstrap_servers)
    with pytest.raises(Exception, match="SparkWriteError") as info:
        df.rdd.foreachPartition(writer)
    assert "1 of 100 records of partition 1 failed" in str(info.value)
    assert "MESSAGE_TOO_LARGE" in str(info.value)


def test_arrow_batches_with_null_topics_and_a_too_large_record(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    """The task function on Arrow batches without a Spark session: rows whose topic is null
    fail alone (or take the default topic), and a record over max_request_size fails alone
    while the rows after it in the same batch are still sent."""
    pa = pytest.importorskip("pyarrow")
    from pyspark.sql import types as T

    from aioproducer.spark import _tasks as _spark_tasks

    first, second = new_topic(2), new_topic(2)
    big = "x" * 5000
    batch = pa.record_batch(
        {
            "dest": pa.array([first, None, second, first, None, first], pa.string()),
            "key": pa.array(["a", "b", None, "d", "e", "f"], pa.string()),
            "value": pa.array(["0", "1", "2", big, "4", "5"], pa.string()),
        }
    )
    columns = {"dest": T.StringType(), "key": T.StringType(), "value": T.StringType()}

    def run(default: str | None) -> dict[str, Any]:
        spec = _spark_tasks.make_spec(
            columns,
            default,
            bootstrap_servers=kafka.bootstrap_servers,
            key="key",
            value="value",
            headers=None,
            partition=None,
            topic_column="dest",
            flush_timeout=None,
            producer_config={"max_request_size": 2000},
        )
        (out,) = list(_spark_tasks.write_arrow(spec, iter([batch])))
        stats: dict[str, Any] = out.to_pylist()[0]
        return stats

    try:
        check_null_topics(run, kafka, first, second)
    finally:
        # The task cached its producer in this process, as a worker would: close it.
        for pool in _spark_tasks._idle.values():
            for producer in pool:
                producer.close()
        _spark_tasks._idle.clear()


def check_null_topics(run: Any, kafka: KafkaCluster, first: str, second: str) -> None:
    stats = run(None)
    assert (stats["records"], stats["delivered"], stats["failed"]) == (6, 3, 3)
    assert stats["first_error"] is not None
    got = {
        t: consume_all(kafka.bootstrap_servers, t, expected=n) for t, n in ((first, 2), (second, 1))
    }
    assert sorted((r.key, r.value) for r in got[first]) == [(b"a", b"0"), (b"f", b"5")]
    assert [(r.key, r.value) for r in got[second]] == [(None, b"2")]

    stats = run(second)  # null topics go to the default
    assert (stats["records"], stats["delivered"], stats["failed"]) == (6, 5, 1)
    again = consume_all(kafka.bootstrap_servers, second, expected=4)
    assert sorted((r.key or b"", r.value) for r in again) == [
        (b"", b"2"),
        (b"", b"2"),
        (b"b", b"1"),
        (b"e", b"4"),
    ]


def test_a_task_joins_small_arrow_batches_in_order_within_its_bounds() -> None:
    """Spark's small Arrow batches are sent together (fewer, longer runs per Kafka
    partition): every row once, in order; a batch at a bound passes through uncopied."""
    pa = pytest.importorskip("pyarrow")
    from aioproducer.spark._arrow import coalesce

    sizes = [3, 0, 4, 5, 1, 9, 2]
    batches = [
        pa.record_batch(
            {
                "key": pa.array([f"k{n}-{i}" for i in range(n)], pa.string()),
                "value": pa.array([b"v" * (i + 1) for i in range(n)], pa.binary()),
            }
        )
        for n in sizes
    ]
    whole = pa.Table.from_batches(batches)
    out = list(coalesce(iter(batches), 8, 1 << 30))
    assert [b.num_rows for b in out] == [12, 10, 2]
    assert pa.Table.from_batches(out).equals(whole)
    for batch in out:
        assert all(column.num_chunks == 1 for column in pa.Table.from_batches([batch]).columns)
    # A byte bound below every batch: each non-empty batch alone, the very same object.
    alone = list(coalesce(iter(batches), 1 << 30, 1))
    assert [b.num_rows for b in alone] == [n for n in sizes if n]
    assert all(a is b for a, b in zip(alone, [b for b in batches if b.num_rows], strict=True))
    assert list(coalesce(iter([]), 8, 8)) == []
