"""A real Apache Kafka cluster (KRaft, combined broker+controller nodes) for tests.

:class:`KafkaCluster` runs one or more Kafka JVMs on free ``127.0.0.1`` ports, waits until
every broker answers Metadata, and stops them again, reliably: on :meth:`KafkaCluster.stop`,
on context-manager exit, at interpreter exit, and (on Linux) when the Python process dies.
Individual brokers can be stopped, killed, paused and restarted to test failover.
:class:`Listener` and :class:`BrokerTLS` add TLS and SASL client listeners.

The broker jars come from Maven Central (see :func:`ensure_kafka`); Java 17+ is required.
POSIX only (Linux, macOS).

Command line (see :mod:`aioproducer.testing.cli`)::

    python -m aioproducer.testing.kafka fetch              # download the jars (for CI caches)
    python -m aioproducer.testing.kafka start --nodes 3    # prints bootstrap.servers=..., runs
                                                           # until Ctrl-C / SIGTERM

This module is the public face; the work is done by package-internal modules: the cluster
model (``_cluster``), each node's process and storage (``_node``), the broker settings and
listeners (``_broker_config``), class-data sharing (``_cds``), ports, work dirs and clean-up
(``_host``) and the ``server.properties`` writer (``_properties``).
"""

from __future__ import annotations

import sys

from ._broker_config import BrokerTLS, Listener, SaslMechanism, SecurityProtocol
from ._cluster import DEFAULT_JVM_ARGS, KafkaCluster
from ._install import KafkaSetupError, ensure_kafka
from .cli import main

__all__ = [
    "DEFAULT_JVM_ARGS",
    "BrokerTLS",
    "KafkaCluster",
    "KafkaSetupError",
    "Listener",
    "SaslMechanism",
    "SecurityProtocol",
    "ensure_kafka",
    "main",
]

if __name__ == "__main__":
    sys.exit(main())
