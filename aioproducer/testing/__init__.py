"""Test support: a real Apache Kafka cluster, started from Python, for integration tests,
and :class:`FakeCluster`, an in-process fake that speaks the protocol and injects faults.

::

    from aioproducer.testing import KafkaCluster

    with KafkaCluster(nodes=3) as kc:
        kc.create_topic("events", partitions=6)
        ...  # produce to kc.bootstrap_servers; kc.kill_broker(kc.leader_for("events", 0))

Needs Java 17+ and, the first time (to download the broker jars into a cache), Apache Maven.
See :mod:`aioproducer.testing.kafka` for the command-line interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._install import (
    DEFAULT_KAFKA_VERSION,
    KafkaSetupError,
    default_cache_dir,
    ensure_kafka,
    find_java,
)

# Shown in tracebacks; the defining module is an implementation detail.
KafkaSetupError.__module__ = __name__

if TYPE_CHECKING:
    from .fake import FakeCluster
    from .kafka import DEFAULT_JVM_ARGS, BrokerTLS, KafkaCluster, Listener

__all__ = [
    "DEFAULT_JVM_ARGS",
    "DEFAULT_KAFKA_VERSION",
    "BrokerTLS",
    "FakeCluster",
    "KafkaCluster",
    "KafkaSetupError",
    "Listener",
    "default_cache_dir",
    "ensure_kafka",
    "find_java",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: importing .kafka here eagerly would make
    # ``python -m aioproducer.testing.kafka`` run a module that is already in sys.modules.
    if name in ("KafkaCluster", "DEFAULT_JVM_ARGS", "BrokerTLS", "Listener"):
        from . import kafka

        return getattr(kafka, name)
    if name == "FakeCluster":
        from .fake import FakeCluster

        return FakeCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
