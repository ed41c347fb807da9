"""One local PySpark session (``local[2,2]``) shared by the Spark tests of the session.

Two cores, and a failed task is tried once more (``local[N,F]``: local mode ignores
``spark.task.maxFailures``), as on a cluster: the transactional tests rely on the retry.
The session carries Spark's own Kafka sink (``format("kafka")``, jars fetched once with
Maven, as ``bench.spark_compare`` does) when they can be had: the tests that compare
against it skip otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
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
    # PySpark finds the aioproducer data source by scanning sys.path for top-level
    # pyspark_* modules, which an editable install's import hook does not show: put the
    # checkout on the workers' path, where a wheel install would have put the package.
    root = str(Path(__file__).resolve().parent.parent.parent)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, *paths) if p)
    builder = SparkSession.builder
    jars = _kafka_sink_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2,2]")
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


_SINK_JARS: list[str] = []


def _kafka_sink_jars() -> list[str]:
    """Spark's Kafka sink jars (cached under ~/.cache/aioproducer/bench), or none."""
    try:
        import pyspark

        root = Path(__file__).resolve().parent.parent.parent
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        from bench.spark_compare import _SINK_JARS as wanted
        from bench.spark_compare import fetch_sink_jars

        cache = Path.home() / ".cache" / "aioproducer" / "bench"
        # A connector fetched before is used as it is (Maven is asked nothing).
        done = sorted(cache.glob("spark-sql-kafka-*/.complete"), reverse=True)
        if done:
            jars = [
                str(j)
                for j in sorted((done[0].parent / "jars").glob("*.jar"))
                if j.name.startswith(wanted)
            ]
        else:
            jars, _note = fetch_sink_jars(pyspark.__version__, cache)
    except Exception:  # no Maven, offline: the comparison tests skip
        return []
    _SINK_JARS[:] = jars
    return jars


@pytest.fixture
def spark_kafka_sink(spark: Any) -> Any:
    """The shared session, when it has Spark's own Kafka sink (``format("kafka")``)."""
    if not _SINK_JARS:
        # CI has Maven and Maven Central: a comparison that silently skips there proves
        # nothing, so it fails instead.
        if os.environ.get("CI"):
            pytest.fail("Spark's Kafka sink jars could not be fetched with Maven")
        pytest.skip("Spark's Kafka sink jars could not be fetched with Maven")
    return spark


@pytest.fixture
def spark_sinks(spark: Any) -> list[str]:
    """The sinks a comparison runs side by side in the shared session: ``aioproducer``
    (registered, for the JVM thread serving the test) and Spark's ``kafka`` when the
    session has its jars."""
    from aioproducer.spark import register

    register(spark)
    # Spark looks Python data sources up through the JVM thread's active session.
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    if _SINK_JARS:
        return ["aioproducer", "kafka"]
    if os.environ.get("CI"):
        pytest.fail("Spark's Kafka sink jars could not be fetched with Maven")
    return ["aioproducer"]
