"""Shared by the examples: use the cluster given on the command line, or start a local one.

The local broker is a single-node Apache Kafka run by :mod:`aioproducer.testing` (Java 17+
needed, and Maven the first time, to fetch the broker jars); it is stopped when the example
ends, even on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap-servers`` to an example's command line."""
    parser.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="an existing Kafka cluster (default: start a local broker for this run)",
    )


@contextlib.contextmanager
def kafka(bootstrap_servers: str | None, topic: str, partitions: int = 3) -> Iterator[str]:
    """Yield ``bootstrap_servers``, or those of a local broker with ``topic`` created."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    from aioproducer.testing import KafkaCluster

    print("starting a local Kafka broker ...", file=sys.stderr, flush=True)
    with KafkaCluster() as cluster:
        cluster.create_topic(topic, partitions)
        print(f"bootstrap servers: {cluster.bootstrap_servers}", file=sys.stderr, flush=True)
        yield cluster.bootstrap_servers
