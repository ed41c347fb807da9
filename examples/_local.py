"""Shared by the examples: which Kafka cluster to use, or a local one started for the run.

The cluster is the one given by ``--bootstrap-servers``, else the one in the
``KAFKA_BOOTSTRAP`` environment variable (as the getting-started guide sets it); only when
neither is given does an example start its own throwaway broker, and it says so on stderr.
That broker is a single-node Apache Kafka run by :mod:`aioproducer.testing` (Java 17+
needed, and Maven the first time, to fetch the broker jars); it is stopped when the example
ends, even on Ctrl-C.

The Spark examples get their session from :func:`spark_session`, so that each runs both on
its own (``python examples/spark_write.py``) and unchanged under ``spark-submit``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

#: The environment variable every example (and the guides' snippets) reads.
ENV_VAR = "KAFKA_BOOTSTRAP"


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap-servers`` to an example's command line."""
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help=(
            f"an existing Kafka cluster (default: ${ENV_VAR} if set, else a local broker "
            "started for this run)"
        ),
    )


def configured_servers(bootstrap_servers: str | None = None) -> str | None:
    """``bootstrap_servers`` if given, else ``$KAFKA_BOOTSTRAP`` if set, else ``None``."""
    return bootstrap_servers or os.environ.get(ENV_VAR) or None


@contextlib.contextmanager
def kafka(bootstrap_servers: str | None, topic: str, partitions: int = 3) -> Iterator[str]:
    """Yield the cluster to use (see :func:`configured_servers`), or a local broker's
    address with ``topic`` created when none is configured."""
    servers = configured_servers(bootstrap_servers)
    if servers:
        yield servers
        return
    from aioproducer.testing import KafkaCluster

    print(
        f"no --bootstrap-servers and no ${ENV_VAR}: starting a throwaway local Kafka broker "
        "for this run ...",
        file=sys.stderr,
        flush=True,
    )
    with KafkaCluster() as cluster:
        cluster.create_topic(topic, partitions)
        print(f"bootstrap servers: {cluster.bootstrap_servers}", file=sys.stderr, flush=True)
        yield cluster.bootstrap_servers


def spark_session(app: str, master: str | None = None) -> Any:
    """A SparkSession named ``app``, with Spark's log cut down to errors.

    Under ``spark-submit`` the JVM is already running (it passes its gateway port) and the
    master is whatever was submitted to, so ``master`` is ignored; run directly, Spark runs
    on ``master`` (default: every local core) with its Python workers on this interpreter.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[*]")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
