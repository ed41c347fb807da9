"""``aioproducer.spark.producer()`` inside a user's own Spark functions, on real PySpark and
real Kafka, read back with confluent-kafka."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.slow


def test_map_in_pandas_returns_where_each_row_landed(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    servers = kafka.bootstrap_servers

    def send_rows(batches: Iterator[Any]) -> Iterator[Any]:
        from aioproducer import spark as kafka_spark

        with kafka_spark.producer(servers, linger_ms=5) as producer:
            sent = []
            for pdf in batches:
                futures = [
                    producer.send(topic, v.encode(), key=k.encode())
                    for k, v in zip(pdf["key"], pdf["value"], strict=True)
                ]
                sent.append((pdf, futures))
        # Out of the block: every future is done.
        for pdf, futures in sent:
            metas = [f.result() for f in futures]
            yield pdf.assign(
                kafka_partition=[m.partition for m in metas],
                kafka_offset=[m.offset for m in metas],
            )

    df = spark.range(3000, numPartitions=4).selectExpr(
        "concat('k', cast(id % 97 AS string)) AS key", "concat('row-', cast(id AS string)) AS value"
    )
    schema = "key string, value string, kafka_partition int, kafka_offset long"
    rows = df.mapInPandas(send_rows, schema).collect()

    assert sorted(r.value for r in rows) == sorted(f"row-{i}" for i in range(3000))
    landed = {
        (r.partition, r.offset): (r.key, r.value)
        for r in consume_all(servers, topic, expected=3000)
    }
    assert len(landed) == 3000
    for row in rows:
        assert landed[(row.kafka_partition, row.kafka_offset)] == (
            row.key.encode(),
            row.value.encode(),
        )


def test_a_function_that_raises_midway_fails_the_job_and_what_it_sent_is_in_kafka(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    from pyspark.errors import PythonException

    topic = new_topic(1)
    servers = kafka.bootstrap_servers

    def send_then_fail(rows: Iterator[Any]) -> Iterator[int]:
        from aioproducer import spark as kafka_spark

        with kafka_spark.producer(servers) as producer:
            for row in rows:
                if row == 50:
                    raise ValueError("row 50 is bad")
                producer.send(topic, b"%d" % row)
        yield 0

    # One partition, so the failed attempt and its one retry each send rows 0..49.
    with pytest.raises((PythonException, Exception), match="row 50 is bad"):
        spark.sparkContext.parallelize(range(100), 1).mapPartitions(send_then_fail).collect()
    values = [r.value for r in consume_all(servers, topic)]
    # At least once: each attempt's rows before the failure were delivered, in order.
    assert values and len(values) % 50 == 0
    for start in range(0, len(values), 50):
        assert values[start : start + 50] == [b"%d" % i for i in range(50)]


def test_a_record_that_fails_delivery_fails_the_task_with_a_typed_error(
    spark: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1, config={"max.message.bytes": "2000"})
    servers = kafka.bootstrap_servers

    def send_one_too_large(rows: Iterator[Any]) -> Iterator[int]:
        from aioproducer import spark as kafka_spark

        with kafka_spark.producer(servers, linger_ms=0) as producer:
            for row in rows:
                producer.send(topic, b"x" * (5000 if row == 3 else 10))
        yield 0

    with pytest.raises(Exception, match=r"SparkWriteError.*1 of 10 records"):
        spark.sparkContext.parallelize(range(10), 1).mapPartitions(send_one_too_large).collect()
    values = [r.value for r in consume_all(servers, topic)]
    # Both attempts delivered the nine good records; the big one never.
    assert values == [b"x" * 10] * 18
