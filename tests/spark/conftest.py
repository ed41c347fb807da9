"""One local PySpark session (``local[2,2]``) shared by the Spark tests of the session.

Two cores, and a failed task is tried once more (``local[N,F]``: local mode ignores
``spark.task.maxFailures``), as on a cluster: the transactional tests rely on the retry.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2,2]`` SparkSession whose Python workers run this interpreter."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("aioproducer-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone cluster (a master and two 1-core workers) on 127.0.0.1, started
    from pyspark's own launcher; every process is killed at the end, even on failure."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from standalone import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
