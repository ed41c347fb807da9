"""Makes PySpark find the ``aioproducer`` data source with no registration call.

PySpark imports every top-level module whose name starts with ``pyspark_`` at its first
data-source lookup and registers its ``DefaultSource``: ``df.write.format("aioproducer")``
then works wherever ``aioproducer[spark]`` is installed.
"""

from aioproducer.spark.datasource import AioproducerDataSource as DefaultSource

__all__ = ["DefaultSource"]
