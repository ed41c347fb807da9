"""Write to Kafka with ``format("aioproducer")``: Spark's Kafka sink options, batch and
streaming.

python examples/spark_datasource.py                   # local[*] Spark and a local Kafka broker
python examples/spark_datasource.py --bootstrap-servers host:9092 --topic events --rows 100000
spark-submit examples/spark_datasource.py --bootstrap-servers host:9092 --topic events

The options and columns are those of Spark's own Kafka sink (``format("kafka")``): change
the word and keep the rest (add ``.mode("append")``: Spark asks it of every Python data
source). With ``aioproducer[spark]`` installed for the driver's Python, PySpark finds the
data source by itself; ``aioproducer.spark.register(spark)`` registers it explicitly.

The example writes ``--rows`` rows as one batch write, then streams as many again from a
folder of Parquet files (``availableNow``: one run over what is there), checkpointed in
``--checkpoint`` (a fresh temporary folder unless given).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from _local import add_broker_argument, kafka, spark_session


def main() -> None:
    """Parse arguments, then write a DataFrame and a stream through the data source."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_broker_argument(parser)
    parser.add_argument("--topic", default="spark-datasource-example")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--checkpoint", help="a folder all of Spark's workers can reach")
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    args = parser.parse_args()

    work = args.checkpoint or tempfile.mkdtemp(prefix="aioproducer-example-")
    # The broker first: Spark finds Python data sources through the session that is
    # active in the calling thread, so the session is made right before it is used.
    with kafka(args.bootstrap_servers, args.topic, partitions=6) as servers:
        spark = spark_session("aioproducer-spark-datasource", args.master)
        try:

            def rows(start: int) -> Any:
                return spark.range(start, start + args.rows).selectExpr(
                    "concat('user-', cast(id % 1000 AS string)) AS key",
                    "to_json(named_struct('id', id, 'amount', id * 3 % 100)) AS value",
                    "array(named_struct('key', 'source',"
                    " 'value', cast('spark-example' AS binary))) AS headers",
                )

            # Batch: the same call as with format("kafka").
            (
                rows(0)
                .write.format("aioproducer")
                .mode("append")
                .option("kafka.bootstrap.servers", servers)
                .option("topic", args.topic)
                .option("kafka.linger.ms", "10")
                .save()
            )
            print(f"batch: wrote {args.rows:,} rows to {args.topic!r}")

            # Streaming: Parquet files in a folder, one micro-batch run over them.
            source = os.path.join(work, "in")
            rows(args.rows).write.mode("append").parquet(source)
            schema = spark.read.parquet(source).schema
            query = (
                spark.readStream.schema(schema)
                .parquet(source)
                .writeStream.format("aioproducer")
                .option("kafka.bootstrap.servers", servers)
                .option("topic", args.topic)
                .option("checkpointLocation", os.path.join(work, "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            streamed = sum(p["numInputRows"] for p in query.recentProgress)
            print(f"stream: wrote {streamed:,} rows to {args.topic!r}")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
