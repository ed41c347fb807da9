"""Send to Kafka from your own Spark functions, and keep where each row landed.

python examples/spark_functions.py                 # local[*] Spark and a local Kafka broker
python examples/spark_functions.py --bootstrap-servers host:9092 --topic orders
spark-submit --master spark://host:7077 examples/spark_functions.py \\
    --bootstrap-servers host:9092 --topic orders --stream-dir /shared/orders-in

Three patterns, each sending the same orders (JSON, keyed by customer):

1. ``mapInPandas``: validate and enrich each batch, send each row, return the rows with
   the partition and offset they were written at;
2. a ``pandas_udf`` returning ``partition``/``offset`` for a column, via
   ``aioproducer.spark.send_series``;
3. Structured Streaming, row by row, with ``writeStream.foreach(KafkaForeachWriter(...))``.

Every worker function leases the executor's cached producer and returns only once its
records are acknowledged (or fails its task). A DataFrame whose function sends is lazy:
run exactly one action on it (here a ``collect()``), since every action sends again.
Executors need aioproducer (and pandas, pyarrow) installed for the same Python version.
On a cluster, ``--stream-dir`` must be a directory every executor can read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pandas as pd  # module level: pandas_udf reads its type hints from these globals
from _local import add_broker_argument, kafka, spark_session

from aioproducer import spark as kafka_spark


def orders(spark: Any, rows: int, via: str) -> Any:
    """A DataFrame of orders: id, customer and amount."""
    return spark.range(0, rows).selectExpr(
        "id",
        "concat('customer-', cast(id % 50 AS string)) AS customer",
        "cast(id * 7 % 1000 AS double) / 10 AS amount",
        f"'{via}' AS via",
    )


def with_map_in_pandas(df: Any, servers: str, topic: str) -> list[Any]:
    """Each batch: enrich, send every row, return the rows with where they landed."""

    def send_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        with kafka_spark.producer(servers, linger_ms=10) as producer:
            sent = []
            for pdf in batches:
                pdf = pdf.assign(large=pdf["amount"] >= 50)
                values = pdf[["id", "customer", "amount", "large", "via"]].to_json(
                    orient="records", lines=True
                )
                futures = producer.send_many(
                    topic, values.splitlines(), keys=pdf["customer"].tolist()
                )
                sent.append((pdf, futures))
        # Out of the block: every record is acknowledged (or the block raised).
        for pdf, futures in sent:
            metas = [f.result() for f in futures]
            yield pdf.assign(
                kafka_partition=[m.partition for m in metas],
                kafka_offset=[m.offset for m in metas],
            )

    schema = (
        "id long, customer string, amount double, via string, large boolean, "
        "kafka_partition int, kafka_offset long"
    )
    return list(df.mapInPandas(send_batches, schema).collect())


def with_pandas_udf(df: Any, servers: str, topic: str) -> list[Any]:
    """A pandas_udf that sends a column and returns each value's partition and offset."""
    from pyspark.sql import functions as F

    # pyspark's own typing of pandas_udf differs between versions: give it a plain type.
    pandas_udf: Callable[[str], Callable[[Callable[..., Any]], Any]] = cast(Any, F).pandas_udf

    @pandas_udf("partition int, offset long")
    def to_kafka(values: pd.Series, keys: pd.Series) -> pd.DataFrame:
        return kafka_spark.send_series(topic, values, keys, bootstrap_servers=servers)

    value = F.to_json(F.struct("id", "customer", "amount", "via"))
    # Sending is a side effect: asNondeterministic() keeps Spark from running it twice.
    located = df.withColumn("kafka", to_kafka.asNondeterministic()(value, "customer"))
    return list(
        located.select(
            "id",
            "customer",
            F.col("kafka.partition").alias("kafka_partition"),
            F.col("kafka.offset").alias("kafka_offset"),
        ).collect()
    )


def with_streaming_foreach(
    spark: Any, servers: str, topic: str, rows: int, directory: Path
) -> list[int]:
    """Stream JSON files through ``KafkaForeachWriter``; returns the rows per micro-batch."""
    incoming = directory / "in"
    incoming.mkdir(parents=True, exist_ok=True)
    bounds = sorted({rows * k // 3 for k in range(4)})  # three files: three micro-batches
    for start, end in itertools.pairwise(bounds):
        lines = [
            json.dumps({"id": i, "customer": f"customer-{i % 50}", "amount": i * 7 % 1000 / 10})
            for i in range(start, end)
        ]
        (incoming / f"orders-{start:09d}.json").write_text("\n".join(lines) + "\n")
    stream = (
        spark.readStream.schema("id long, customer string, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(incoming))
        .selectExpr(
            "customer AS key", "to_json(struct(id, customer, amount, 'foreach' AS via)) AS value"
        )
    )
    writer = kafka_spark.KafkaForeachWriter(topic, bootstrap_servers=servers, linger_ms=10)
    query = (
        stream.writeStream.foreach(writer)
        .option("checkpointLocation", str(directory / "checkpoint"))
        .trigger(availableNow=True)  # every file present now, then stop
        .start()
    )
    query.awaitTermination()
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


def main() -> None:
    """Parse arguments and run the three patterns against one topic."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_broker_argument(parser)
    parser.add_argument("--topic", default="spark-functions-example")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--master", help="Spark master when not run by spark-submit")
    parser.add_argument("--stream-dir", help="where the streaming input and checkpoint go")
    parser.add_argument("--output", help="write each located row here (JSON lines)")
    args = parser.parse_args()

    spark = spark_session("aioproducer-spark-functions", args.master)
    try:
        with (
            kafka(args.bootstrap_servers, args.topic, partitions=3) as servers,
            tempfile.TemporaryDirectory(prefix="spark-functions-") as scratch,
        ):
            located = with_map_in_pandas(
                orders(spark, args.rows, "mapInPandas"), servers, args.topic
            )
            first = min(located, key=lambda r: r.id)
            print(
                f"mapInPandas  sent {len(located):,} rows; row {first.id} is at partition "
                f"{first.kafka_partition}, offset {first.kafka_offset}"
            )
            udf_rows = with_pandas_udf(orders(spark, args.rows, "pandas_udf"), servers, args.topic)
            first = min(udf_rows, key=lambda r: r.id)
            print(
                f"pandas_udf   sent {len(udf_rows):,} rows; row {first.id} is at partition "
                f"{first.kafka_partition}, offset {first.kafka_offset}"
            )
            directory = Path(args.stream_dir or scratch)
            batches = with_streaming_foreach(spark, servers, args.topic, args.rows, directory)
            print(f"foreach      sent {sum(batches):,} rows in {len(batches)} micro-batches")
            if args.output:
                with open(args.output, "w") as out:
                    for via, rows in (("mapInPandas", located), ("pandas_udf", udf_rows)):
                        for r in rows:
                            where = {"partition": r.kafka_partition, "offset": r.kafka_offset}
                            out.write(json.dumps({"via": via, "id": r.id, **where}) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
