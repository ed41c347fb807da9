"""Write Spark DataFrames to Kafka from PySpark's Python workers, losing nothing.

Two ways in. The data source, named ``aioproducer``, takes the options and columns of
Spark's own Kafka sink (see docs/spark-kafka-sink.md)::

    (df.write.format("aioproducer").mode("append")
        .option("kafka.bootstrap.servers", "broker:9092").option("topic", "events").save())

Installing ``aioproducer[spark]`` makes PySpark find it with no call (the top-level module
``pyspark_aioproducer``); :func:`register` registers it explicitly. And :func:`write`::

    from aioproducer import spark as kafka_spark

    report = kafka_spark.write(df, "events", bootstrap_servers="broker:9092", linger_ms=10)
    print(report.records, report.rows_per_second)

:func:`write` runs ``df.mapInArrow`` with a function whose closure holds only settings. In
each Python worker it takes a :class:`~aioproducer.SyncProducer` from a per-process cache
(created after the worker was forked, reused by the worker's next tasks), hands it every
Arrow batch through the bulk path, and flushes before the task returns, so a task succeeds
only once each of its records is acknowledged: nothing is left in a queue when PySpark
ends the worker with ``os._exit`` or a kill. Each task returns one row of figures; the
driver runs exactly one action over them and raises :class:`SparkWriteError` if any record
failed. The data source's tasks run the very same task body. :func:`partition_writer` does
the same for ``rdd.foreachPartition`` over rows; :func:`producer`, :func:`send_series` and
:class:`KafkaForeachWriter` serve users' own Spark functions.

Delivery is at least once: Spark reruns a failed task from its start, with a new producer.
With ``transactional_id_prefix`` each task is one Kafka transaction (id
``"<prefix>-<partition index>"``, so a rerun fences the attempt it replaces), committed
after its last row: ``read_committed`` consumers see a task's rows all or none. Those
producers are made per task and never cached (see :func:`write`).

pyspark and pyarrow are imported only when these functions run; ``import aioproducer``
never needs them.
"""

from __future__ import annotations

from typing import Any

from ._errors import PartitionReport, SparkWriteError, WriteReport
from ._foreach import KafkaForeachWriter
from ._producer import TaskProducer, producer, send_series
from ._write import PartitionWriter, partition_writer, write

__all__ = [
    "KafkaForeachWriter",
    "PartitionReport",
    "PartitionWriter",
    "SparkWriteError",
    "TaskProducer",
    "WriteReport",
    "partition_writer",
    "producer",
    "register",
    "send_series",
    "write",
]


def register(spark: Any) -> None:
    """Register the ``aioproducer`` data source with the SparkSession ``spark``.

    Not needed where ``aioproducer[spark]`` is installed for the driver's Python: PySpark
    then finds it by itself (through the top-level module ``pyspark_aioproducer``). Call it
    where that lookup is off or the package reaches Spark another way (``--py-files``).
    """
    from .datasource import AioproducerDataSource

    spark.dataSource.register(AioproducerDataSource)
