"""The ``aioproducer`` data source against real PySpark (local[2,2]) and a real Kafka 4.3.1,
read back with confluent-kafka; and against Spark's own Kafka sink (``format("kafka")``)
on the same DataFrame with the same options."""

from __future__ import annotations

import pkgutil
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import spark as kafka_spark
from aioproducer.spark import SparkWriteError
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all, topic_end_offsets

if TYPE_CHECKING:
    from conftest import NewTopic


@pytest.fixture(autouse=True)
def _active_session(spark: Any) -> None:
    # Spark looks a Python data source up in the JVM thread's active session; the py4j
    # thread serving a test may not have it (a user's driver, which made the session in
    # the same thread, does).
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)


def rows_df(spark: Any, n: int, *, parts: int = 4) -> Any:
    """Keyed and keyless rows, headers, some explicit partitions, and a topic column the
    ``topic`` option overrides."""
    return spark.range(0, n, 1, parts).selectExpr(
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('k', cast(id % 97 AS string)) END AS key",
        "cast(concat('v-', cast(id AS string)) AS binary) AS value",
        "array(named_struct('key', 'id', 'value', cast(cast(id AS string) AS binary)),"
        " named_struct('key', 'src', 'value', cast('spark' AS binary))) AS headers",
        "CASE WHEN id % 7 = 0 THEN cast(id % 3 AS int) ELSE NULL END AS partition",
        "'not-this-topic' AS topic",
        "id AS extra",
    )


def placed(records: list[Any]) -> Counter[tuple[Any, ...]]:
    """Each record with its partition where the partition is determined (a key or an
    explicit partition); keyless rows without one go where the sticky partitioner
    chooses, so only their content is compared."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in records:
        fixed = r.key is not None or int(r.headers[0][1]) % 7 == 0
        out[(r.partition if fixed else None, r.key, r.value, r.headers)] += 1
    return out


def test_the_same_records_as_spark_kafka_sink(
    spark_kafka_sink: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    spark = spark_kafka_sink
    n = 4_000
    ours, theirs = new_topic(6), new_topic(6)
    df = rows_df(spark, n)

    def save(fmt: str, topic: str) -> None:
        writer = (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", topic)
            .option("kafka.linger.ms", "10")
            .option("kafka.compression.type", "lz4")
            .option("kafka.acks", "all")
            .option("includeHeaders", "true")
        )
        writer.mode("append").save()

    save("aioproducer", ours)  # no register() call: PySpark found it by itself
    save("kafka", theirs)

    got = consume_all(kafka.bootstrap_servers, ours, expected=n)
    want = consume_all(kafka.bootstrap_servers, theirs, expected=n)
    assert len(got) == len(want) == n
    assert placed(got) == placed(want)
    assert sorted(int(r.value[2:]) for r in got) == list(range(n))
    # The option won over the topic column, for both sinks.
    assert "not-this-topic" not in topic_end_offsets(kafka.bootstrap_servers, ours)


def test_the_topic_column_and_string_values_as_spark_kafka_sink(
    spark_kafka_sink: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    spark = spark_kafka_sink
    ours, theirs = new_topic(3), new_topic(3)
    df = spark.range(0, 3000, 1, 3).selectExpr(
        "cast(id AS string) AS key", "concat('s-', cast(id AS string)) AS value"
    )
    for fmt, topic in (("kafka", theirs), ("aioproducer", ours)):
        (
            df.selectExpr("*", f"'{topic}' AS topic")
            .write.format(fmt)
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .mode("append")
            .save()
        )
    got = consume_all(kafka.bootstrap_servers, ours, expected=3000)
    want = consume_all(kafka.bootstrap_servers, theirs, expected=3000)
    assert Counter((r.partition, r.key, r.value, r.headers) for r in got) == Counter(
        (r.partition, r.key, r.value, r.headers) for r in want
    )
    assert len(got) == 3000


def _write(df: Any, options: dict[str, str], mode: str = "append") -> None:
    writer = df.write.format("aioproducer").mode(mode)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


@pytest.fixture(scope="module")
def untouched(kafka: KafkaCluster) -> str:
    """One topic every refused write of the module aims at: it must stay empty."""
    name = f"untouched-{time.monotonic_ns()}"
    kafka.create_topic(name, 1)
    return name


@pytest.mark.parametrize(
    ("options", "columns", "message"),
    [
        (
            {"kafka.linger.msx": "5"},
            None,
            r"unknown option 'kafka\.linger\.msx'.*'kafka\.linger\.ms'",
        ),
        ({"topik": "t"}, None, r"unknown option 'topik'.*did you mean 'topic'"),
        ({"kafka.acks": "2"}, None, r"'kafka\.acks'='2' is invalid"),
        ({"kafka.batch.size": "big"}, None, r"'kafka\.batch\.size'='big' is invalid"),
        ({"kafka.value.serializer": "x"}, None, r"'kafka\.value\.serializer' is not supported"),
        ({"kafka.transactional.id": "x"}, None, r"transactionalIdPrefix"),
        ({"kafka.ssl.truststore.type": "JKS"}, None, r"'JKS' is not supported: give PEM"),
        ({"kafka.bootstrap.servers": None}, None, r"'kafka\.bootstrap\.servers' is required"),
        ({"exactlyOnce": "true"}, None, r"'exactlyOnce' applies to streaming writes"),
        ({}, ("cast(id AS string) AS values",), r"no 'value' column.*did you mean 'values'"),
        ({}, ("id AS value",), r"column 'value' is bigint; the Kafka sink needs string or binary"),
        ({}, ("'v' AS value", "1.5 AS key"), r"column 'key' is decimal\(2,1\)"),
        ({}, ("'v' AS value", "cast(1 AS bigint) AS partition"), r"column 'partition' is bigint"),
        ({}, ("'v' AS value", "map('a', 'b') AS headers"), r"'headers' is map<string,string>"),
        ({"topic": None}, ("'v' AS value",), r"no 'topic' column, and no 'topic' option"),
    ],
)
def test_a_bad_option_or_column_fails_before_any_task(
    spark: Any,
    kafka: KafkaCluster,
    untouched: str,
    options: dict[str, Any],
    columns: tuple[str, ...] | None,
    message: str,
) -> None:
    topic = untouched
    base: dict[str, Any] = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic}
    merged = {k: v for k, v in {**base, **options}.items() if v is not None}
    df = spark.range(0, 10, 1, 2).selectExpr(*(columns or ("cast(id AS string) AS value",)))
    group = f"bad-{time.monotonic_ns()}"
    spark.sparkContext.setJobGroup(group, "a write that must not start")
    try:
        with pytest.raises(Exception, match=message):
            _write(df, merged)
    finally:
        spark.sparkContext.setJobGroup("", "")
    # Refused while planning: no Spark job ran, nothing reached the topic.
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    assert sum(topic_end_offsets(kafka.bootstrap_servers, topic).values()) == 0


def test_modes_other_than_append_are_refused(
    spark: Any, kafka: KafkaCluster, untouched: str
) -> None:
    topic = untouched
    df = spark.range(0, 5).selectExpr("cast(id AS string) AS value")
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": topic}
    with pytest.raises(Exception, match=r"mode\('overwrite'\) is not supported.*append"):
        _write(df, options, "overwrite")
    # Spark itself refuses its default mode for every Python data source.
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        _write(df, options, "errorifexists")
    assert sum(topic_end_offsets(kafka.bootstrap_servers, topic).values()) == 0


def test_a_failing_record_fails_its_task_with_spark_write_error(
    spark: Any, kafka: KafkaCluster, topic: str
) -> None:
    df = spark.range(0, 400, 1, 2).selectExpr(
        "CASE WHEN id = 123 THEN repeat('x', 5000) ELSE cast(id AS string) END AS value"
    )
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "topic": topic,
        "kafka.max.request.size": "2000",
    }
    with pytest.raises(
        Exception, match=r"SparkWriteError: 1 of 200 records of partition 0"
    ) as info:
        _write(df, options)
    assert "RecordTooLarge" in str(info.value) or "too large" in str(info.value)


def test_a_wrong_broker_raises_spark_write_error_naming_the_cause(spark: Any) -> None:
    df = spark.range(0, 10, 1, 1).selectExpr("cast(id AS string) AS value")
    with pytest.raises(SparkWriteError) as info:
        kafka_spark.write(df, "t", bootstrap_servers="127.0.0.1:9", max_block_ms=1500)
    error = info.value
    assert "partition 0" in str(error) and "KafkaTimeoutError" in str(error)
    assert error.first_error is not None and error.first_error.startswith("KafkaTimeoutError")
    assert error.__suppress_context__  # one short traceback, not Spark's pages
    # The data source's task fails with the same typed error, named in Spark's report.
    with pytest.raises(
        Exception,
        match=r"SparkWriteError: partition 0 \(attempt \d\) failed: "
        r"KafkaTimeoutError",
    ):
        _write(
            df,
            {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.max.block.ms": "1500"},
        )


def test_transactional_id_prefix_makes_each_task_one_transaction(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(2)
    df = spark.range(0, 2000, 1, 4).selectExpr(
        "cast(id % 50 AS string) AS key", "cast(id AS string) AS value"
    )
    _write(
        df,
        {
            "kafka.bootstrap.servers": kafka.bootstrap_servers,
            "topic": topic,
            "transactionalIdPrefix": f"{topic}-tx",
        },
    )
    from test_spark_transactions import read_back

    committed = read_back(kafka.bootstrap_servers, topic)  # read_committed
    assert sorted(int(v or b"") for rows in committed.values() for _k, v in rows) == list(
        range(2000)
    )


def _parquet_source(spark: Any, folder: Path, start: int, n: int) -> None:
    spark.range(start, start + n, 1, 2).selectExpr(
        "cast(id % 11 AS string) AS key", "cast(id AS string) AS value"
    ).write.mode("append").parquet(str(folder))


def test_streaming_micro_batches_at_least_once(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(3)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    _parquet_source(spark, source, 0, 1000)
    schema = spark.read.parquet(str(source)).schema

    def run() -> None:
        query = (
            spark.readStream.schema(schema)
            .parquet(str(source))
            .writeStream.format("aioproducer")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("topic", topic)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    _parquet_source(spark, source, 1000, 500)
    run()  # restarted from the checkpoint: only the new files
    records = consume_all(kafka.bootstrap_servers, topic, expected=1500)
    assert sorted(int(r.value or b"") for r in records) == list(range(1500))
    for r in records:
        assert r.key == str(int(r.value or b"") % 11).encode()


def test_pyspark_finds_the_data_source_without_registration(spark: Any) -> None:
    # What PySpark's lookup scans: top-level modules named pyspark_*, with a DefaultSource.
    assert "pyspark_aioproducer" in {m.name for m in pkgutil.iter_modules()}
    import pyspark_aioproducer

    assert pyspark_aioproducer.DefaultSource.name() == "aioproducer"
    kafka_spark.register(spark)  # explicit registration works too (and is harmless)
