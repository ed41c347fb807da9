"""Sending from a user's own Spark functions (``pandas_udf``, ``mapInArrow``,
``rdd.mapPartitions``, plain UDFs), what a task retry does, and the Structured Streaming
row sink, on real PySpark and real Kafka, read back with confluent-kafka."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import ConsumedRecord, consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.slow
# At module level: pandas_udf resolves its type hints in this module's globals.
pd = pytest.importorskip("pandas")


def by_position(records: list[ConsumedRecord]) -> dict[tuple[int, int], ConsumedRecord]:
    return {(r.partition, r.offset): r for r in records}


def test_pandas_udf_returns_the_partition_and_offset_of_each_value(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(3)
    servers = kafka.bootstrap_servers

    @F.pandas_udf("partition int, offset long")  # type: ignore[call-overload]
    def to_kafka(values: pd.Series, keys: pd.Series) -> pd.DataFrame:
        from aioproducer import spark as kafka_spark

        return kafka_spark.send_series(topic, values, keys, bootstrap_servers=servers)

    df = spark.range(2000, numPartitions=3).selectExpr(
        "concat('v', cast(id AS string)) AS value",
        # Every tenth row has no key (a null key).
        "CASE WHEN id % 10 = 0 THEN NULL ELSE concat('k', cast(id % 31 AS string)) END AS key",
    )
    # Sending is a side effect: asNondeterministic() keeps Spark from evaluating it twice.
    located = df.withColumn("kafka", to_kafka.asNondeterministic()("value", "key"))
    rows = located.select("value", "key", "kafka.partition", "kafka.offset").collect()

    assert sorted(r.value for r in rows) == sorted(f"v{i}" for i in range(2000))
    landed = by_position(consume_all(servers, topic, expected=2000))
    assert len(landed) == 2000  # nothing sent twice
    for row in rows:
        record = landed[row.partition, row.offset]
        assert record.value == row.value.encode()
        assert record.key == (row.key.encode() if row.key is not None else None)


def test_map_in_arrow_and_rdd_map_partitions_return_where_rows_landed(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    servers = kafka.bootstrap_servers

    def send_batches(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from aioproducer import spark as kafka_spark

        with kafka_spark.producer(servers, linger_ms=5) as producer:
            sent = []
            for batch in batches:
                keys = batch.column("key").to_pylist()
                bulk = producer.send_bulk(topic, batch.column("value").to_pylist(), keys)
                sent.append((batch, bulk))
        for batch, bulk in sent:
            done = bulk.result()
            metas = [done.metadata(i) for i in range(batch.num_rows)]
            yield batch.append_column(
                "kafka_partition", pa.array([m.partition for m in metas], pa.int32())
            ).append_column("kafka_offset", pa.array([m.offset for m in metas], pa.int64()))

    def send_rows(rows: Iterator[Any]) -> Iterator[tuple[str, int, int]]:
        from aioproducer import spark as kafka_spark

        with kafka_spark.producer(servers, linger_ms=5) as producer:
            sent = [(row, producer.send(topic, row.encode())) for row in rows]
        for row, future in sent:
            meta = future.result()
            yield row, meta.partition, meta.offset

    df = spark.range(3000, numPartitions=3).selectExpr(
        "concat('k', cast(id % 53 AS string)) AS key",
        "cast(concat('arrow-', cast(id AS string)) AS binary) AS value",
    )
    arrow_rows = df.mapInArrow(
        send_batches, "key string, value binary, kafka_partition int, kafka_offset long"
    ).collect()
    rdd_rows = (
        spark.sparkContext.parallelize([f"rdd-{i}" for i in range(1500)], 3)
        .mapPartitions(send_rows)
        .collect()
    )

    assert sorted(bytes(r.value) for r in arrow_rows) == sorted(
        b"arrow-%d" % i for i in range(3000)
    )
    assert sorted(v for v, _, _ in rdd_rows) == sorted(f"rdd-{i}" for i in range(1500))
    landed = by_position(consume_all(servers, topic, expected=4500))
    assert len(landed) == 4500
    for row in arrow_rows:
        record = landed[row.kafka_partition, row.kafka_offset]
        assert (record.key, record.value) == (row.key.encode(), bytes(row.value))
    for value, partition, offset in rdd_rows:
        assert (landed[partition, offset].key, landed[partition, offset].value) == (
            None,
            value.encode(),
        )


def test_a_plain_udf_sends_each_row_and_returns_where_it_landed(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(2)
    servers = kafka.bootstrap_servers

    def to_kafka(value):  # type: ignore[no-untyped-def]  # no hints: a plain pickled UDF
        from aioproducer import spark as kafka_spark

        # One record per call, waited for at the end of the block (so linger_ms=0).
        with kafka_spark.producer(servers, linger_ms=0) as producer:
            future = producer.send(topic, value.encode(), key=value[-1:].encode())
        meta = future.result()
        return f"{meta.partition}:{meta.offset}"

    send = F.udf(to_kafka, "string").asNondeterministic()
    df = spark.range(300, numPartitions=2).selectExpr("concat('udf-', cast(id AS string)) AS v")
    rows = df.select("v", send("v").alias("at")).collect()

    landed = by_position(consume_all(servers, topic, expected=300))
    assert len(landed) == 300
    assert sorted(r.v for r in rows) == sorted(f"udf-{i}" for i in range(300))
    for row in rows:
        partition, offset = map(int, row.at.split(":"))
        assert (landed[partition, offset].key, landed[partition, offset].value) == (
            row.v[-1:].encode(),
            row.v.encode(),
        )


def test_a_retried_task_sends_the_rows_before_its_failure_again(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(2)
    servers = kafka.bootstrap_servers

    def send_rows(rows: Iterator[int]) -> Iterator[int]:
        from pyspark import TaskContext

        from aioproducer import spark as kafka_spark

        context = TaskContext.get()
        assert context is not None
        with kafka_spark.producer(servers) as producer:
            for row in rows:
                # The first attempt of partition 1 fails at its 300th row; the retry does not.
                if row == 1300 and context.attemptNumber() == 0:
                    raise RuntimeError("injected failure")
                producer.send(topic, b"%d" % row, key=b"%d" % (row % 7))
        yield context.attemptNumber()

    # conftest's local[2,2] tries a failed task once more; the job then succeeds.
    attempts = spark.sparkContext.parallelize(range(3000), 3).mapPartitions(send_rows).collect()

    assert sorted(attempts) == [0, 0, 1]
    counts = collections.Counter(int(r.value or b"") for r in consume_all(servers, topic))
    # At least once: the 300 rows the failed attempt sent before failing are there twice,
    # every other row exactly once.
    assert counts == {i: 2 if 1000 <= i < 1300 else 1 for i in range(3000)}


def write_json_files(directory: Path, batches: int, per_batch: int) -> list[dict[str, Any]]:
    directory.mkdir()
    rows = []
    for b in range(batches):
        part = [
            {"id": b * per_batch + i, "user": f"user-{i % 5}", "amount": i * 7 % 100}
            for i in range(per_batch)
        ]
        (directory / f"part-{b:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in part))
        rows += part
    return rows


def test_foreach_writer_sends_every_row_of_every_micro_batch(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    from aioproducer.spark import KafkaForeachWriter

    topic = new_topic(3)
    servers = kafka.bootstrap_servers
    rows = write_json_files(tmp_path / "in", batches=3, per_batch=1000)
    stream = (
        spark.readStream.schema("id long, user string, amount int")
        .option("maxFilesPerTrigger", 1)  # one file per micro-batch: three epochs
        .json(str(tmp_path / "in"))
        .selectExpr("user AS key", "to_json(struct(id, user, amount)) AS value")
    )
    writer = KafkaForeachWriter(topic, bootstrap_servers=servers, linger_ms=5)
    query = (
        stream.writeStream.foreach(writer)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the query did not finish within 180 s"
    assert query.exception() is None
    epochs = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in epochs] == [1000, 1000, 1000]

    records = consume_all(servers, topic, expected=3000)
    assert len(records) == 3000
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == list(range(3000))
    for record in records:
        body = json.loads(record.value or b"")
        assert body == rows[body["id"]]
        assert record.key == body["user"].encode()


def test_foreach_writer_fails_the_query_when_a_record_is_refused(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    from aioproducer.spark import KafkaForeachWriter

    topic = new_topic(1, config={"max.message.bytes": "2000"})
    servers = kafka.bootstrap_servers
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"n": i, "pad": "x" * (5000 if i == 7 else 10)}) for i in range(20)]
    (tmp_path / "in" / "part-000.json").write_text("\n".join(lines) + "\n")
    stream = (
        spark.readStream.schema("n int, pad string")
        .json(str(tmp_path / "in"))
        .selectExpr("to_json(struct(n, pad)) AS value")
    )
    query = (
        stream.writeStream.foreach(KafkaForeachWriter(topic, bootstrap_servers=servers))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException, match=r"SparkWriteError.*1 of 20 records"):
        query.awaitTermination(180)
    assert not query.isActive
    values = [json.loads(r.value or b"")["n"] for r in consume_all(servers, topic)]
    # Each of the two attempts delivered the 19 records the broker accepts, in order.
    good = [i for i in range(20) if i != 7]
    assert values == good + good


def test_foreach_writer_pickles_as_its_settings_only() -> None:
    import pickle

    from aioproducer.errors import ConfigError
    from aioproducer.spark import KafkaForeachWriter

    writer = KafkaForeachWriter("events", bootstrap_servers="127.0.0.1:1", linger_ms=7)
    copy = pickle.loads(pickle.dumps(writer))
    assert type(copy) is KafkaForeachWriter
    assert copy._settings == writer._settings
    assert copy._settings["config"] == {"bootstrap_servers": "127.0.0.1:1", "linger_ms": 7}
    copy.close(None)  # never opened: nothing to wait for
    with pytest.raises(ConfigError):
        KafkaForeachWriter("events", bootstrap_servers="127.0.0.1:1", acks="sometimes")


def test_foreach_writer_rows_with_a_bad_or_missing_column_fail_with_a_typed_error(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    from pyspark.sql import Row

    from aioproducer.errors import InvalidArgumentError, SerializationError
    from aioproducer.spark import KafkaForeachWriter

    topic = new_topic(1)
    writer = KafkaForeachWriter(topic, bootstrap_servers=kafka.bootstrap_servers, key="id")

    # Run as Spark does (open, process each row, close with the error seen), minus Spark.
    assert writer.open(0, 0)
    writer.process(Row(id="a", value=b"first"))
    writer.process(Row(id="b", value=42))  # not str or bytes
    with pytest.raises(SerializationError, match=r"value must be bytes.*got int"):
        writer.close(None)

    assert writer.open(1, 0)
    writer.process(Row(id="c", payload=b"x"))
    with pytest.raises(InvalidArgumentError, match="'id', 'payload'"):
        writer.close(None)

    assert writer.open(2, 0)
    writer.process(Row(id="d", value="last"))
    writer.close(None)
    records = consume_all(kafka.bootstrap_servers, topic, expected=2)
    # The row before the bad one went out (the bulk path buffers up to the bad record).
    assert [(r.key, r.value) for r in records] == [(b"a", b"first"), (b"d", b"last")]
