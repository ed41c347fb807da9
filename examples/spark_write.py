"""Write a Spark DataFrame to Kafka with one call, and print what happened.

python examples/spark_write.py                     # local[*] Spark and a local Kafka broker
python examples/spark_write.py --bootstrap-servers host:9092 --topic events --rows 1000000
spark-submit examples/spark_write.py --bootstrap-servers host:9092 --topic events

On a cluster, aioproducer must be installed where the executors' Python runs (or shipped
with ``--py-files``). Each task flushes before it ends, so a successful job means every row
was acknowledged; a failed record raises ``SparkWriteError`` on the driver.

Structured Streaming, one write per micro-batch (``foreachBatch`` gets a plain DataFrame)::

    def to_kafka(batch_df, batch_id):
        aioproducer.spark.write(batch_df, "events", bootstrap_servers="host:9092")

    stream_df.writeStream.foreachBatch(to_kafka).start()

Or from the RDD API, with rows::

    df.foreachPartition(aioproducer.spark.partition_writer("events",
                                                           bootstrap_servers="host:9092"))
"""

from __future__ import annotations

import argparse

from _local import add_broker_argument, kafka, spark_session

from aioproducer import spark as kafka_spark


def main() -> None:
    """Parse arguments, build a DataFrame and write it to Kafka."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_broker_argument(parser)
    parser.add_argument("--topic", default="spark-example")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    args = parser.parse_args()

    spark = spark_session("aioproducer-spark-write", args.master)
    try:
        with kafka(args.bootstrap_servers, args.topic, partitions=6) as servers:
            df = spark.range(0, args.rows).selectExpr(
                "concat('user-', cast(id % 1000 AS string)) AS key",
                "to_json(named_struct('id', id, 'amount', id * 3 % 100)) AS value",
                "map('source', cast('spark-example' AS binary)) AS headers",
            )
            report = kafka_spark.write(
                df, args.topic, bootstrap_servers=servers, headers="headers", linger_ms=10
            )
            print(
                f"wrote {report.delivered:,} of {report.records:,} rows "
                f"({report.bytes:,} bytes) to {args.topic!r} in {report.elapsed_s:.1f} s "
                f"from {len(report.partitions)} tasks on {report.producers} producers"
            )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
