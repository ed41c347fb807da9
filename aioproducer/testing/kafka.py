"""A real Apache Kafka cluster (KRaft, combined broker+controller nodes) for tests.

:class:`KafkaCluster` runs one or more Kafka JVMs on free ``127.0.0.1`` ports, waits until
every broker answers Metadata, and stops them again, reliably: on :meth:`KafkaCluster.stop`,
on context-manager exit, at interpreter exit, and (on Linux) when the Python process dies.
Individual brokers can be stopped, killed, paused and restarted to test failover.

The broker jars come from Maven Central (see :func:`ensure_kafka`); Java 17+ is required.
POSIX only (Linux, macOS).

Command line::

    python -m aioproducer.testing.kafka fetch              # download the jars (for CI caches)
    python -m aioproducer.testing.kafka start --nodes 3    # prints bootstrap.servers=..., runs
                                                           # until Ctrl-C / SIGTERM
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from ..errors import KafkaError, UnknownTopicOrPartitionError
from ..protocol.messages import MetadataResponse
from . import _admin
from ._install import (
    DEFAULT_KAFKA_VERSION,
    JavaRuntime,
    KafkaSetupError,
    _exclusive_lock,
    _tail,
    default_cache_dir,
    ensure_kafka,
    find_java,
)
from ._proc import signal_group, spawn, wait_stopped

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

_HOST = "127.0.0.1"
_LOG4J_RESOURCE = "kafka-log4j2.properties"
_PORT_ATTEMPTS = 5
_STOP_TIMEOUT = 30.0
_POLL_INTERVAL = 0.1
_TEMP_PREFIX = "aioproducer-kafka-"
_OWNER_FILE = "owner.pid"

#: JVM flags for a short-lived test broker; they cut start-up time by about a third on two
#: cores: C1 only (no C2 compilations competing for the CPUs), the serial collector (no GC
#: threads), no perf-data file in /tmp. C1-only code is slower at peak, so pass
#: ``jvm_args=()`` (or G1 flags) to :class:`KafkaCluster` for throughput benchmarks.
DEFAULT_JVM_ARGS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

# Keys the cluster derives from its own layout; overriding them would break it.
_MANAGED_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "broker.id",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
    }
)


#: Security protocols of the extra client listeners :class:`KafkaCluster` can add.
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
#: SASL mechanisms a listener can enable (the ones the producer speaks).
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_SASL_MECHANISMS: tuple[SaslMechanism, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_RESERVED_LISTENERS = frozenset({"PLAINTEXT", "CONTROLLER"})


@dataclass(frozen=True)
class BrokerTLS:
    """The TLS identity of a broker listener, as PEM text.

    ``certificate_chain`` is the server certificate followed by its issuers,
    ``private_key`` its unencrypted PKCS#8 key (``-----BEGIN PRIVATE KEY-----``), the form a
    Kafka ``PEM`` keystore reads without a key password. ``client_ca`` holds the authorities
    trusted to sign client certificates; a listener needs it for ``client_auth``.
    :class:`aioproducer.testing.certs.CertificateAuthority` makes all three at test time.
    """

    certificate_chain: str
    private_key: str = field(repr=False)
    client_ca: str | None = None

    @classmethod
    def from_certificate(cls, certificate: object, client_ca: object = None) -> BrokerTLS:
        """Build it from an :class:`~aioproducer.testing.certs.IssuedCertificate` and,
        optionally, the :class:`~aioproducer.testing.certs.CertificateAuthority` (or PEM
        text) trusted for client certificates."""
        from .certs import CertificateAuthority, IssuedCertificate

        if not isinstance(certificate, IssuedCertificate):
            raise TypeError("certificate must be an IssuedCertificate")
        ca_pem: str | None
        if client_ca is None or isinstance(client_ca, str):
            ca_pem = client_ca
        elif isinstance(client_ca, CertificateAuthority):
            ca_pem = client_ca.certificate_pem
        else:
            raise TypeError("client_ca must be a CertificateAuthority, PEM text or None")
        return cls(
            certificate.chain_pem or certificate.certificate_pem,
            certificate.private_key_pem,
            ca_pem,
        )


@dataclass(frozen=True)
class Listener:
    """An extra client listener of every broker, on its own port.

    ``name`` is the Kafka listener name (letters, digits and ``_``; not ``PLAINTEXT`` or
    ``CONTROLLER``, which the cluster uses itself) and ``protocol`` its security protocol,
    by default the name itself (``Listener("SASL_SSL")``). SASL listeners enable
    ``sasl_mechanisms`` for the cluster's ``sasl_users``. TLS listeners present the
    cluster's ``tls`` identity unless ``tls`` is given here; ``client_auth`` is Kafka's
    ``ssl.client.auth`` (``"required"`` for mutual TLS).
    """

    name: str
    protocol: SecurityProtocol | None = None
    sasl_mechanisms: tuple[SaslMechanism, ...] = _SASL_MECHANISMS
    client_auth: Literal["none", "requested", "required"] = "none"
    tls: BrokerTLS | None = None

    @property
    def security_protocol(self) -> SecurityProtocol:
        """The listener's security protocol (``protocol``, or else its name)."""
        if self.protocol is not None:
            return self.protocol
        if self.name in _PROTOCOLS:
            protocol: SecurityProtocol = self.name  # type: ignore[assignment]
            return protocol
        raise ValueError(f"listener {self.name!r}: give protocol= (one of {', '.join(_PROTOCOLS)})")

    @property
    def uses_tls(self) -> bool:
        """Whether clients of this listener speak TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """Whether clients of this listener authenticate with SASL."""
        return self.security_protocol.startswith("SASL")


def _defaults(nodes: int) -> dict[str, str]:
    replication = min(nodes, 3)
    min_isr = 2 if replication >= 3 else 1
    coordinator_partitions = str(min(nodes, 3))
    return {
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        # 50 partitions per internal topic is sized for production; creating them is the
        # slowest part of the first consumer-group or transaction in a test.
        "offsets.topic.num.partitions": coordinator_partitions,
        "transaction.state.log.num.partitions": coordinator_partitions,
        "share.coordinator.state.topic.num.partitions": coordinator_partitions,
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        # Fence a dead or paused broker after 3 s instead of 9 s, so failover tests are quick.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        # Leadership only moves when a test makes it move: the periodic preferred-leader
        # election would otherwise shift leaders under a running test after a restart.
        "auto.leader.rebalance.enable": "false",
        # Thread pools and buffers sized for a laptop or a 2-core CI runner.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "group.coordinator.threads": "1",
        "log.cleaner.dedupe.buffer.size": "8388608",
    }


@dataclass
class _Node:
    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    #: Port of each extra client listener, by listener name.
    listener_ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    log_offset: int = 0
    _log_handle: IO[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def address(self) -> str:
        return f"{_HOST}:{self.broker_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def open_log(self) -> IO[bytes]:
        self.close_log()
        handle = open(self.log_path, "ab")  # noqa: SIM115 - owned by the node until it stops
        self.log_offset = handle.tell()
        self._log_handle = handle
        return handle

    def recent_log(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_offset)
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""


class KafkaCluster:
    """A local Apache Kafka cluster of ``nodes`` combined broker+controller JVMs.

    ``nodes=1`` gives a single node with replication factor 1 for every internal topic.
    With three or more nodes the controllers form a static quorum of all nodes and new
    topics default to replication factor 3 with ``min.insync.replicas=2``.

    Both start quickly (about one to a few seconds once the jars are cached) and enable
    topic auto-creation, ``group.initial.rebalance.delay.ms=0`` and fast fencing of dead
    brokers (3 s). ``broker_config`` adds or overrides broker settings; settings that encode
    the cluster's layout (listeners, node ids, quorum, directories) cannot be overridden.

    Use it as a context manager or call :meth:`start` and :meth:`stop`::

        with KafkaCluster(nodes=3) as kc:
            producer = Producer(bootstrap_servers=kc.bootstrap_servers)

    Every method is blocking and uses plain sockets, so it may be called from synchronous
    code and from inside a running asyncio or trio test alike (it blocks the event loop
    while it waits; wrap it in a worker thread if that matters).

    ``work_dir`` holds the configuration, data and ``server.log`` of each node
    (``node-<id>/``). By default it is a temporary directory deleted by :meth:`stop`; a
    directory passed in is kept, and starting a cluster on it again reuses its data.
    ``port_base`` pins the ports (brokers ``port_base ..``, then controllers) instead of
    picking free ones; otherwise free ports are picked and start-up is retried on new ones
    if another process grabs one first. ``jvm_args`` replaces :data:`DEFAULT_JVM_ARGS` (the
    heap size is set by ``heap`` either way).

    Broker defaults besides replication: ``auto.leader.rebalance.enable=false`` (leaders
    move only when a test moves them), a small ``__consumer_offsets`` and transaction log
    (one partition per node, at most three), and small thread pools.

    The first start on a machine also records a class-data-sharing archive of the broker's
    classes next to the cached jars (a one-off ~3 s training run); later JVMs map it and
    start about twice as fast. Set ``AIOPRODUCER_KAFKA_CDS=0`` to turn this off.

    Brokers never outlive the process: :meth:`stop`, context exit and interpreter exit stop
    them, and on Linux the kernel kills them if the Python process dies (see
    :mod:`aioproducer.testing._proc` for other systems).

    Secured listeners: ``listeners`` adds client listeners next to the PLAINTEXT one, each on
    its own port (:meth:`bootstrap_servers_for` gives their addresses). TLS listeners use the
    ``tls`` identity (see :class:`BrokerTLS`); SASL listeners accept ``sasl_users`` (name to
    password) with PLAIN and SCRAM-SHA-256/512 (SCRAM credentials are written into the
    metadata log when the storage is formatted)::

        ca = CertificateAuthority()
        tls = BrokerTLS.from_certificate(ca.issue("localhost", "127.0.0.1"), client_ca=ca)
        with KafkaCluster(
            listeners=[Listener("SSL"), Listener("SASL_SSL"),
                       Listener("MTLS", "SSL", client_auth="required")],
            tls=tls,
            sasl_users={"alice": "alice-secret"},
        ) as kc:
            servers = kc.bootstrap_servers_for("SASL_SSL")

    The PLAINTEXT listener stays: brokers talk to each other and to the controllers over
    plaintext, and the cluster's own readiness checks and admin helpers use it.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        version: str = DEFAULT_KAFKA_VERSION,
        cache_dir: str | Path | None = None,
        broker_config: Mapping[str, str] | None = None,
        heap: str = "512m",
        startup_timeout: float = 120.0,
        work_dir: str | Path | None = None,
        port_base: int | None = None,
        jvm_args: Sequence[str] | None = None,
        listeners: Sequence[Listener] = (),
        tls: BrokerTLS | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, not {nodes}")
        if startup_timeout <= 0:
            raise ValueError("startup_timeout must be positive")
        self._listeners = tuple(listeners)
        self._tls = tls
        self._sasl_users = dict(sasl_users or {})
        _check_security(self._listeners, tls, self._sasl_users)
        ports = (2 + len(self._listeners)) * nodes
        if port_base is not None and not 1024 <= port_base <= 65535 - ports:
            raise ValueError(f"port_base {port_base} leaves no room for {ports} ports")
        overrides = {str(k): str(v) for k, v in (broker_config or {}).items()}
        managed = sorted(_MANAGED_KEYS.intersection(overrides))
        if managed:
            raise ValueError(
                f"broker_config may not set {', '.join(managed)}: KafkaCluster manages them"
            )
        self._size = nodes
        self._version = version
        self._cache_dir = cache_dir
        self._config = {**_defaults(nodes), **overrides}
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._user_work_dir = Path(work_dir).expanduser().resolve() if work_dir else None
        self._port_base = port_base
        self._jvm_args = tuple(jvm_args) if jvm_args is not None else DEFAULT_JVM_ARGS
        self._lock = threading.RLock()
        self._work_dir: Path | None = None
        self._nodes: dict[int, _Node] = {}
        self._java = ""
        self._libs: Path | None = None
        # Class-data sharing: an archive of the broker's loaded classes, written once per
        # machine, cuts JVM start-up CPU by about a third.
        self._cds_enabled = _cds_allowed(self._jvm_args)
        self._cds_archive: Path | None = None
        self._cds_dump: Path | None = None
        self._started = False
        # A forked child inherits this object but not the right to stop its brokers.
        self._owner_pid = os.getpid()

    # -- public properties ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` of every broker, e.g. ``"127.0.0.1:41123"``."""
        self._require_started()
        return ",".join(node.address for node in self._nodes.values())

    @property
    def node_ids(self) -> list[int]:
        """The node ids of the cluster, ``[1, ..., nodes]``."""
        return list(range(1, self._size + 1))

    @property
    def work_dir(self) -> Path:
        """The directory holding every node's configuration, data and ``server.log``."""
        self._require_started()
        assert self._work_dir is not None
        return self._work_dir

    @property
    def version(self) -> str:
        """The Apache Kafka version this cluster runs."""
        return self._version

    def broker_address(self, node_id: int) -> str:
        """``host:port`` of the client (PLAINTEXT) listener of broker ``node_id``."""
        return self._node(node_id).address

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """The extra client listeners given to the constructor."""
        return self._listeners

    def bootstrap_servers_for(self, listener: str) -> str:
        """Comma-separated ``host:port`` of listener ``listener`` on every broker.

        ``"PLAINTEXT"`` gives :attr:`bootstrap_servers`; any other name must be one of the
        ``listeners`` the cluster was built with.
        """
        self._require_started()
        if listener == "PLAINTEXT":
            return self.bootstrap_servers
        if not any(item.name == listener for item in self._listeners):
            names = ", ".join(["PLAINTEXT", *(item.name for item in self._listeners)])
            raise KeyError(f"no listener {listener!r} (listeners: {names})")
        return ",".join(f"{_HOST}:{node.listener_ports[listener]}" for node in self._nodes.values())

    def log_path(self, node_id: int) -> Path:
        """The file that broker ``node_id`` logs to (its stdout and stderr, too)."""
        return self._node(node_id).log_path

    def pid(self, node_id: int) -> int | None:
        """The process id of broker ``node_id``'s JVM, or None if it is not running."""
        node = self._node(node_id)
        return node.proc.pid if node.proc is not None and node.alive() else None

    def is_running(self, node_id: int) -> bool:
        """Whether broker ``node_id``'s process exists (a paused broker counts as running)."""
        return self._node(node_id).alive()

    def is_paused(self, node_id: int) -> bool:
        """Whether broker ``node_id`` is stopped with SIGSTOP by :meth:`pause_broker`."""
        node = self._node(node_id)
        return node.paused and node.alive()

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.bootstrap_servers if self._started else "stopped"
        return f"<KafkaCluster nodes={self._size} version={self._version} {state}>"

    def start(self) -> KafkaCluster:
        """Start every node and wait until each broker lists all brokers in Metadata.

        Does nothing if the cluster is already running. Raises :class:`KafkaSetupError`
        (with the tail of the failing broker's log) if the cluster does not come up within
        ``startup_timeout`` seconds; nothing is left running in that case.
        """
        with self._lock:
            if self._started:
                return self
            java = find_java()
            self._java = java.executable
            self._libs = ensure_kafka(self._version, self._cache_dir)
            if self._cds_enabled:
                self._cds_archive = _class_data_archive(java, self._libs, self)
            self._work_dir = self._prepare_work_dir()
            _register(self)
            try:
                self._start_all()
            except BaseException:
                self._teardown(graceful=False)
                raise
            self._started = True
            return self

    def stop(self) -> None:
        """Stop every broker this cluster started and remove its temporary work dir.

        Safe to call more than once and on a cluster that failed to start. With a temporary
        work dir the JVMs are killed outright (their data is deleted anyway); with a
        ``work_dir`` of the caller's they get SIGTERM and up to 30 s to shut down cleanly.
        """
        with self._lock:
            self._teardown(graceful=self._user_work_dir is not None)

    # -- per-broker control -----------------------------------------------------------------

    def stop_broker(self, node_id: int, timeout: float = _STOP_TIMEOUT) -> None:
        """Stop broker ``node_id`` cleanly (SIGTERM) and wait for it to exit.

        It is killed if it has not exited after ``timeout`` seconds. A paused broker is
        resumed first so that it can shut down.
        """
        with self._lock:
            self._require_started()
            self._stop_node(self._node(node_id), graceful=True, timeout=timeout)

    def kill_broker(self, node_id: int) -> None:
        """Kill broker ``node_id`` with SIGKILL (no controlled shutdown) and reap it."""
        with self._lock:
            self._require_started()
            self._stop_node(self._node(node_id), graceful=False, timeout=_STOP_TIMEOUT)

    def pause_broker(self, node_id: int) -> None:
        """Freeze broker ``node_id`` with SIGSTOP: it keeps its sockets but answers nothing.

        The controller fences it after ``broker.session.timeout.ms`` (3 s by default).
        """
        with self._lock:
            self._require_started()
            node = self._node(node_id)
            if not node.alive():
                raise KafkaSetupError(f"broker {node_id} is not running")
            assert node.proc is not None
            signal_group(node.proc, signal.SIGSTOP)
            wait_stopped(node.proc.pid)
            node.paused = True

    def resume_broker(
        self, node_id: int, *, wait: bool = True, timeout: float | None = None
    ) -> None:
        """Continue broker ``node_id`` after :meth:`pause_broker` (SIGCONT).

        With ``wait`` (the default) returns once every running broker lists it in Metadata
        again; a broker paused for longer than the session timeout was fenced and needs a
        moment to be let back in.
        """
        with self._lock:
            self._require_started()
            node = self._node(node_id)
            if node.proc is None or not node.alive():
                raise KafkaSetupError(f"broker {node_id} is not running")
            signal_group(node.proc, signal.SIGCONT)
            node.paused = False
            if wait:
                deadline = time.monotonic() + (timeout or self._startup_timeout)
                self._wait_visible([node], deadline)

    def start_broker(self, node_id: int, timeout: float | None = None) -> None:
        """Start broker ``node_id`` again, with the same ports and data directory.

        Returns once every running broker lists it in Metadata. Does nothing if it is
        running. ``timeout`` defaults to the cluster's ``startup_timeout``.
        """
        with self._lock:
            self._require_started()
            node = self._node(node_id)
            if node.alive():
                return
            self._launch(node)
            deadline = time.monotonic() + (timeout or self._startup_timeout)
            self._wait_visible([node], deadline)

    def restart_broker(
        self, node_id: int, *, kill: bool = False, timeout: float | None = None
    ) -> None:
        """Stop broker ``node_id`` (SIGTERM, or SIGKILL with ``kill=True``) and start it again.

        Returns once every running broker lists it in Metadata again.
        """
        with self._lock:
            self._require_started()
            self._stop_node(self._node(node_id), graceful=not kill, timeout=_STOP_TIMEOUT)
            self.start_broker(node_id, timeout=timeout)

    # -- admin helpers ----------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """A Metadata response (all topics when ``topics`` is None) from a running broker."""
        self._require_started()
        errors: list[str] = []
        for node in self._reachable_nodes():
            try:
                return _admin.fetch_metadata(_HOST, node.broker_port, topics, timeout=10.0)
            except KafkaError as exc:
                errors.append(f"broker {node.node_id}: {exc}")
        raise KafkaSetupError(
            "no broker answered Metadata: " + ("; ".join(errors) or "none is running")
        )

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create topic ``name`` and wait until every running broker knows a leader for each
        of its partitions.

        ``replication_factor`` defaults to the cluster's ``default.replication.factor``.
        Broker errors are raised as :mod:`aioproducer.errors` exceptions (e.g.
        :class:`~aioproducer.errors.TopicAlreadyExistsError`).
        """
        self._require_started()
        deadline = time.monotonic() + timeout
        rf = -1 if replication_factor is None else replication_factor
        topic_config = {str(k): str(v) for k, v in (config or {}).items()}
        attempted = False
        while True:
            node = self._first_reachable()
            try:
                _admin.create_topic(
                    _HOST,
                    node.broker_port,
                    name,
                    partitions,
                    rf,
                    topic_config,
                    timeout=max(1.0, deadline - time.monotonic()),
                    already_attempted=attempted,
                )
                break
            except KafkaError as exc:
                # Connection trouble or e.g. NOT_CONTROLLER while the quorum elects a leader.
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                attempted = True
                time.sleep(0.2)
        self._wait_for_leaders(name, partitions, deadline)

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """Map each partition of ``topic`` to its leader's node id (-1: no leader now).

        Raises :class:`~aioproducer.errors.UnknownTopicOrPartitionError` for an unknown
        topic (and the broker's error for any other topic-level error).
        """
        response = self.metadata([topic])
        for entry in response.topics:
            if entry.name == topic:
                _admin.raise_for_topic(entry)
                return {p.partition: p.leader_id for p in entry.partitions}
        raise UnknownTopicOrPartitionError(f"topic {topic!r} missing from the Metadata response")

    def leader_for(self, topic: str, partition: int) -> int:
        """Node id of the leader of ``topic``/``partition`` (-1 if it has none right now).

        Raises :class:`~aioproducer.errors.UnknownTopicOrPartitionError` if there is no
        such topic or partition.
        """
        leaders = self.partition_leaders(topic)
        try:
            return leaders[partition]
        except KeyError:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} (it has {len(leaders)})"
            ) from None

    # -- internals --------------------------------------------------------------------------

    def _require_started(self) -> None:
        if not self._started:
            raise KafkaSetupError("the Kafka cluster is not running; call start() first")

    def _node(self, node_id: int) -> _Node:
        self._require_started()
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id} (node ids: {self.node_ids})") from None

    def _prepare_work_dir(self) -> Path:
        if self._user_work_dir is not None:
            self._user_work_dir.mkdir(parents=True, exist_ok=True)
            return self._user_work_dir
        _remove_stale_work_dirs()
        work_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
        (work_dir / _OWNER_FILE).write_text(f"{os.getpid()}\n", encoding="ascii")
        return work_dir

    def _start_all(self) -> None:
        assert self._work_dir is not None
        (self._work_dir / "log4j2.properties").write_bytes(
            resources.files(__package__).joinpath(_LOG4J_RESOURCE).read_bytes()
        )
        (self._work_dir / "tmp").mkdir(exist_ok=True)
        attempts = 1 if self._port_base is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            self._nodes = self._layout()
            for node in self._nodes.values():
                node.directory.mkdir(parents=True, exist_ok=True)
                _write_properties(node.config_path, self._node_config(node))
            self._format_storage()
            for node in self._nodes.values():
                self._launch(node)
            deadline = time.monotonic() + self._startup_timeout
            try:
                self._wait_visible(list(self._nodes.values()), deadline)
                return
            except _PortInUse:
                # Another process took one of the ports between picking and binding it.
                for node in self._nodes.values():
                    self._stop_node(node, graceful=False, timeout=_STOP_TIMEOUT)
                if attempt == attempts:
                    raise KafkaSetupError(
                        f"could not find free ports for Kafka after {attempts} attempts"
                    ) from None

    def _layout(self) -> dict[int, _Node]:
        assert self._work_dir is not None
        count = (2 + len(self._listeners)) * self._size
        if self._port_base is not None:
            ports = list(range(self._port_base, self._port_base + count))
        else:
            ports = _free_ports(count)
        # Brokers first, then controllers, then each extra listener: a fixed port_base gives
        # the same addresses as before for the first two.
        return {
            node_id: _Node(
                node_id=node_id,
                broker_port=ports[node_id - 1],
                controller_port=ports[self._size + node_id - 1],
                directory=self._work_dir / f"node-{node_id}",
                listener_ports={
                    listener.name: ports[(2 + index) * self._size + node_id - 1]
                    for index, listener in enumerate(self._listeners)
                },
            )
            for node_id in self.node_ids
        }

    def _node_config(self, node: _Node) -> dict[str, str]:
        voters = ",".join(
            f"{other.node_id}@{_HOST}:{other.controller_port}" for other in self._nodes.values()
        )
        listeners = [f"PLAINTEXT://{_HOST}:{node.broker_port}"]
        listeners += [f"{n}://{_HOST}:{p}" for n, p in node.listener_ports.items()]
        protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        protocols += [f"{item.name}:{item.security_protocol}" for item in self._listeners]
        return {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            # A static quorum: the voter set lives in the configuration, not in the formatted
            # storage, so ports may change between runs on the same work dir.
            "controller.quorum.voters": voters,
            "listeners": ",".join([*listeners, f"CONTROLLER://{_HOST}:{node.controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(node.data_dir),
            **self._security_config(),
            **self._config,
        }

    def _security_config(self) -> dict[str, str]:
        """Per-listener TLS and SASL settings (``listener.name.<name>.`` prefixed)."""
        config: dict[str, str] = {}
        for listener in self._listeners:
            prefix = f"listener.name.{listener.name.lower()}."
            if listener.uses_tls:
                tls = listener.tls or self._tls
                assert tls is not None  # checked in __init__
                # Inline PEM: no key store files or store passwords to manage.
                config[prefix + "ssl.keystore.type"] = "PEM"
                config[prefix + "ssl.keystore.certificate.chain"] = tls.certificate_chain
                config[prefix + "ssl.keystore.key"] = tls.private_key
                config[prefix + "ssl.client.auth"] = listener.client_auth
                if tls.client_ca is not None:
                    config[prefix + "ssl.truststore.type"] = "PEM"
                    config[prefix + "ssl.truststore.certificates"] = tls.client_ca
            if listener.uses_sasl:
                config[prefix + "sasl.enabled.mechanisms"] = ",".join(listener.sasl_mechanisms)
                for mechanism in listener.sasl_mechanisms:
                    key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
                    if mechanism == "PLAIN":
                        # PLAIN checks passwords against the login module's user_<name> options.
                        users = " ".join(
                            f'user_{name}="{password}"'
                            for name, password in self._sasl_users.items()
                        )
                        config[key] = (
                            f"org.apache.kafka.common.security.plain.PlainLoginModule "
                            f"required {users};"
                        )
                    else:
                        # SCRAM checks against the credentials in the metadata log.
                        config[key] = (
                            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                        )
        return config

    def _scram_arguments(self) -> list[str]:
        """``--add-scram`` arguments of ``StorageTool format`` for every SASL user."""
        mechanisms = sorted(
            {m for item in self._listeners if item.uses_sasl for m in item.sasl_mechanisms}
            - {"PLAIN"}
        )
        args: list[str] = []
        for mechanism in mechanisms:
            for name, password in self._sasl_users.items():
                args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return args

    def _jvm_command(self, main_class: str, heap: str, *args: str) -> list[str]:
        assert self._work_dir is not None and self._libs is not None
        cds: list[str] = []
        if self._cds_archive is not None:
            cds.append(f"-XX:SharedArchiveFile={self._cds_archive}")
        elif self._cds_dump is not None and main_class == "kafka.Kafka":
            cds.append(f"-XX:ArchiveClassesAtExit={self._cds_dump}")
        return [
            self._java,
            f"-Xmx{heap}",
            *self._jvm_args,
            *cds,
            f"-Dlog4j2.configurationFile={self._work_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self._work_dir}",
            # Compression codecs unpack their native libraries into the temp dir and, when
            # the JVM is killed, leave them there; keep them inside the work dir instead.
            f"-Djava.io.tmpdir={self._work_dir / 'tmp'}",
            "-cp",
            str(self._libs / "*"),
            main_class,
            *args,
        ]

    def _format_storage(self) -> None:
        """Format the data directory of every node that has none yet (all in parallel)."""
        pending = [n for n in self._nodes.values() if not (n.data_dir / "meta.properties").exists()]
        if not pending:
            return
        cluster_id = self._existing_cluster_id() or _new_cluster_id()
        running: list[tuple[_Node, subprocess.Popen[bytes], Path]] = []
        try:
            for node in pending:
                log_path = node.directory / "format.log"
                with open(log_path, "wb") as log:
                    command = self._jvm_command(
                        "kafka.tools.StorageTool",
                        "256m",
                        "format",
                        "--cluster-id",
                        cluster_id,
                        "--config",
                        str(node.config_path),
                        *self._scram_arguments(),
                    )
                    proc = spawn(command, cwd=node.directory, stdout=log)
                running.append((node, proc, log_path))
            deadline = time.monotonic() + self._startup_timeout
            for node, proc, log_path in running:
                try:
                    code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise KafkaSetupError(
                        f"formatting the storage of node {node.node_id} timed out; "
                        f"last lines of its output:\n{_tail(log_path, 30)}"
                    ) from None
                if code != 0:
                    raise KafkaSetupError(
                        f"formatting the storage of node {node.node_id} failed "
                        f"(exit code {code}); last lines of its output:\n{_tail(log_path, 30)}"
                    )
        finally:
            for _, proc, _ in running:
                if proc.poll() is None:
                    signal_group(proc, signal.SIGKILL)
                    proc.wait()

    def _existing_cluster_id(self) -> str | None:
        for node in self._nodes.values():
            meta = node.data_dir / "meta.properties"
            with contextlib.suppress(OSError):
                for line in meta.read_text(encoding="latin-1").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "cluster.id" and value.strip():
                        return value.strip()
        return None

    def _launch(self, node: _Node) -> None:
        log = node.open_log()
        command = self._jvm_command("kafka.Kafka", self._heap, str(node.config_path))
        try:
            node.proc = spawn(command, cwd=node.directory, stdout=log)
        except OSError as exc:
            node.close_log()
            raise KafkaSetupError(f"could not start {self._java}: {exc}") from exc
        node.paused = False
        (node.directory / "broker.pid").write_text(f"{node.proc.pid}\n", encoding="ascii")

    def _stop_node(self, node: _Node, *, graceful: bool, timeout: float) -> None:
        proc = node.proc
        if proc is not None:
            if proc.poll() is None:
                if node.paused:
                    signal_group(proc, signal.SIGCONT)
                if graceful:
                    signal_group(proc, signal.SIGTERM)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=timeout)
                signal_group(proc, signal.SIGKILL)
            proc.wait()
        node.proc = None
        node.paused = False
        node.close_log()
        with contextlib.suppress(OSError):
            (node.directory / "broker.pid").unlink()

    def _teardown(self, *, graceful: bool) -> None:
        nodes = list(self._nodes.values())
        if graceful:
            # Signal everyone first so the shutdowns overlap.
            for node in nodes:
                if node.proc is not None and node.proc.poll() is None:
                    if node.paused:
                        signal_group(node.proc, signal.SIGCONT)
                    signal_group(node.proc, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT
        for node in nodes:
            self._stop_node(node, graceful=graceful, timeout=max(0.0, deadline - time.monotonic()))
        self._started = False
        _unregister(self)
        if self._user_work_dir is None and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None

    def _reachable_nodes(self) -> list[_Node]:
        return [n for n in self._nodes.values() if n.alive() and not n.paused]

    def _first_reachable(self) -> _Node:
        nodes = self._reachable_nodes()
        if not nodes:
            raise KafkaSetupError("no broker of the cluster is running (and not paused)")
        return nodes[0]

    def _check_alive(self, nodes: Iterable[_Node]) -> None:
        for node in nodes:
            if node.proc is None or node.proc.poll() is None:
                continue
            output = node.recent_log()
            if "Address already in use" in output and self._port_base is None:
                raise _PortInUse(node.node_id)
            where = f" (full log: {node.log_path})" if self._user_work_dir else ""
            raise KafkaSetupError(
                f"Kafka broker {node.node_id} exited with code {node.proc.returncode} while "
                f"starting{where}.\n{_log_excerpt(output)}"
            )

    def _wait_visible(self, targets: Sequence[_Node], deadline: float) -> None:
        """Wait until every reachable broker lists every target broker in Metadata."""
        wanted = {node.node_id for node in targets}
        waiting_for = "the brokers to start"
        while True:
            self._check_alive(targets)
            observers = self._reachable_nodes()
            pending: list[str] = []
            for node in observers:
                view = _admin.cluster_view(_HOST, node.broker_port, timeout=2.0)
                if view is None:
                    pending.append(f"broker {node.node_id} does not answer yet")
                    continue
                brokers, controller_id = view
                missing = wanted - brokers
                if missing:
                    pending.append(f"broker {node.node_id} does not list {sorted(missing)} yet")
                elif controller_id < 0:
                    pending.append(f"broker {node.node_id} knows no controller yet")
            if not pending:
                return
            waiting_for = "; ".join(pending)
            if time.monotonic() > deadline:
                tails = "\n".join(
                    f"--- broker {node.node_id} ({node.log_path.name}) ---\n"
                    + _log_excerpt(node.recent_log(), tail=20)
                    for node in targets
                )
                raise KafkaSetupError(
                    f"Kafka did not become ready in time ({waiting_for})\n{tails}"
                )
            time.sleep(_POLL_INTERVAL)

    def _wait_for_leaders(self, topic: str, partitions: int, deadline: float) -> None:
        while True:
            problems: list[str] = []
            for node in self._reachable_nodes():
                try:
                    response = _admin.fetch_metadata(_HOST, node.broker_port, [topic], timeout=5.0)
                except KafkaError as exc:
                    problems.append(f"broker {node.node_id}: {exc}")
                    continue
                entry = next((t for t in response.topics if t.name == topic), None)
                if entry is None or entry.error_code != 0:
                    problems.append(f"broker {node.node_id} does not know the topic yet")
                elif len(entry.partitions) < partitions or any(
                    p.leader_id < 0 for p in entry.partitions
                ):
                    problems.append(f"broker {node.node_id} lacks leaders")
            if not problems:
                return
            if time.monotonic() > deadline:
                raise KafkaSetupError(
                    f"topic {topic!r} has no leader for every partition in time: "
                    + "; ".join(problems)
                )
            time.sleep(_POLL_INTERVAL)


class _PortInUse(Exception):
    """A broker could not bind one of the ports picked for it."""


# -- process-wide registry: whatever is still running at interpreter exit gets stopped --------

_LIVE: set[KafkaCluster] = set()
_LIVE_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def _register(cluster: KafkaCluster) -> None:
    global _ATEXIT_REGISTERED
    with _LIVE_LOCK:
        _LIVE.add(cluster)
        if not _ATEXIT_REGISTERED:
            atexit.register(_stop_all)
            _ATEXIT_REGISTERED = True


def _unregister(cluster: KafkaCluster) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(cluster)


def _stop_all() -> None:
    with _LIVE_LOCK:
        clusters = [c for c in _LIVE if c._owner_pid == os.getpid()]
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop()


# -- class-data sharing -----------------------------------------------------------------------


def _cds_allowed(jvm_args: Sequence[str]) -> bool:
    if os.environ.get("AIOPRODUCER_KAFKA_CDS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return not any(
        "SharedArchiveFile" in a or "ArchiveClassesAtExit" in a or a.startswith("-Xshare")
        for a in jvm_args
    )


def _class_data_archive(java: JavaRuntime, libs: Path, model: KafkaCluster) -> Path | None:
    """A class-data-sharing archive for this Java and these jars, created on first use.

    The archive is made by a one-off training run: a single broker started with
    ``-XX:ArchiveClassesAtExit``, given a topic, and shut down cleanly. It is keyed by the
    Java build and the jar names, so another JDK gets its own. Any failure only costs the
    speed-up: it is remembered in a ``.failed`` file and the broker starts without CDS.
    Returns None while another process is creating the archive.
    """
    identity = "\n".join(
        [
            os.path.realpath(java.executable),
            java.version_line,
            *sorted(p.name for p in libs.iterdir()),
        ]
    )
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    directory = libs.parent / "cds"
    archive = directory / f"broker-{key}.jsa"
    failed = directory / f"broker-{key}.failed"
    if archive.is_file():
        return archive
    with contextlib.suppress(OSError):
        # A failed training run is retried a day later, in case the cause was passing.
        if time.time() - failed.stat().st_mtime < 86400:
            return None
    try:
        directory.mkdir(exist_ok=True)
        with _exclusive_lock(directory / ".lock", timeout=0.0):
            if archive.is_file():
                return archive
            staging = directory / f".broker-{key}-{os.getpid()}.jsa"
            try:
                _train_archive(model, staging)
                if staging.is_file() and staging.stat().st_size > 0:
                    os.replace(staging, archive)
                    return archive
                failed.write_text("the training broker wrote no archive\n", encoding="utf-8")
            except Exception as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
            finally:
                with contextlib.suppress(OSError):
                    staging.unlink()
    except (OSError, KafkaSetupError):
        # Read-only cache, or the lock is held by a process that is creating the archive.
        pass
    return None


def _train_archive(model: KafkaCluster, staging: Path) -> None:
    trainer = KafkaCluster(
        1, version=model._version, cache_dir=model._cache_dir, jvm_args=model._jvm_args
    )
    trainer._cds_enabled = False
    trainer._cds_dump = staging
    with trainer._lock:
        trainer.start()
        try:
            trainer.create_topic("aioproducer-cds-training", partitions=2)
        finally:
            # The JVM writes the archive only when it exits normally.
            trainer._teardown(graceful=True)


# -- helpers -----------------------------------------------------------------------------------


def _check_security(
    listeners: Sequence[Listener], tls: BrokerTLS | None, users: Mapping[str, str]
) -> None:
    """Reject listener and user settings that Kafka would refuse (or misread) at start-up."""
    seen: set[str] = set()
    for listener in listeners:
        name = listener.name
        if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise ValueError(f"listener name {name!r} may only use letters, digits and '_'")
        if name.upper() in _RESERVED_LISTENERS:
            raise ValueError(f"listener name {name!r} is reserved: KafkaCluster uses it itself")
        if name.upper() in seen:
            raise ValueError(f"listener name {name!r} is used twice")
        seen.add(name.upper())
        protocol = listener.security_protocol
        if protocol not in _PROTOCOLS:
            raise ValueError(f"listener {name!r}: unknown security protocol {protocol!r}")
        if listener.client_auth not in ("none", "requested", "required"):
            raise ValueError(f"listener {name!r}: unknown client_auth {listener.client_auth!r}")
        if listener.uses_tls:
            identity = listener.tls or tls
            if identity is None:
                raise ValueError(f"listener {name!r} uses TLS: pass tls= (or Listener(tls=...))")
            if listener.client_auth != "none" and identity.client_ca is None:
                raise ValueError(
                    f"listener {name!r}: client_auth={listener.client_auth!r} needs a "
                    "BrokerTLS with client_ca"
                )
        elif listener.client_auth != "none" or listener.tls is not None:
            raise ValueError(f"listener {name!r} ({protocol}) does not use TLS")
        if listener.uses_sasl:
            unknown = [m for m in listener.sasl_mechanisms if m not in _SASL_MECHANISMS]
            if unknown or not listener.sasl_mechanisms:
                raise ValueError(
                    f"listener {name!r}: sasl_mechanisms must be a non-empty selection of "
                    f"{', '.join(_SASL_MECHANISMS)}"
                )
            if not users:
                raise ValueError(f"listener {name!r} uses SASL: pass sasl_users=")
    for user, password in users.items():
        # The StorageTool splits --add-scram on ',' and the JAAS options are double-quoted,
        # so these characters cannot be passed through either.
        for what, text in (("name", user), ("password", password)):
            if not isinstance(text, str) or not text:
                raise ValueError(f"SASL user {what}s must be non-empty strings")
            if any(c in ',"\\]' or c.isspace() for c in text):
                raise ValueError(
                    f"SASL user {what}s may not contain commas, double quotes, backslashes, "
                    "']' or whitespace"
                    + (f" (user {user!r})" if what == "password" else f" ({text!r})")
                )
        if not all(c.isascii() and (c.isalnum() or c in "_-.@") for c in user):
            raise ValueError(f"SASL user name {user!r} may only use letters, digits and _-.@")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed orphan stays a zombie until init reaps it; it is dead all the same.
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:
        return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _remove_stale_work_dirs() -> None:
    """Delete temporary work dirs whose owning Python process died without cleaning up.

    That happens when the owner is SIGKILLed: the kernel kills its brokers, but nobody
    removes their data. A directory is only removed when its owner and all its brokers are
    gone; one without an owner file (still being created) is left alone.
    """
    for candidate in Path(tempfile.gettempdir()).glob(_TEMP_PREFIX + "*"):
        owner = _read_pid(candidate / _OWNER_FILE)
        if owner is None or _pid_alive(owner):
            continue
        brokers = (_read_pid(p) for p in candidate.glob("node-*/broker.pid"))
        if any(pid is not None and _pid_alive(pid) for pid in brokers):
            continue
        shutil.rmtree(candidate, ignore_errors=True)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picks them)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((_HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _log_excerpt(text: str, *, tail: int = 30) -> str:
    """The error lines of a broker log followed by its last lines: the cause is usually in
    the former, while the latter are mostly shutdown chatter and stack frames."""
    lines = text.splitlines()
    errors: list[str] = []
    for line in lines:
        stripped = line.strip()
        if (
            " ERROR " in line
            or " FATAL " in line
            or stripped.startswith(("Caused by:", "Error:", "Exception in thread"))
        ) and stripped not in errors:
            errors.append(stripped)
    parts = []
    if errors:
        parts.append("Errors logged:\n  " + "\n  ".join(errors[:10]))
    parts.append(f"Last {min(tail, len(lines))} lines:\n" + "\n".join(lines[-tail:]))
    return "\n".join(parts)


def _new_cluster_id() -> str:
    """A random Kafka ``Uuid`` string, as ``kafka-storage.sh random-uuid`` prints it."""
    while True:
        raw = os.urandom(16)
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue  # reserved by Kafka (ZERO_UUID, ONE_UUID)
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        # Kafka re-rolls ids that would look like a command-line option.
        if not text.startswith("-"):
            return text


def _escape_property(text: str, *, key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif (key and char in " =:#!") or (char == " " and index == 0):
            out.append("\\" + char)
        elif ord(char) > 0x7E or ord(char) < 0x20:
            # java.util.Properties reads files as ISO-8859-1.
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16_units(char)))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def _write_properties(path: Path, values: Mapping[str, str]) -> None:
    lines = [
        f"{_escape_property(k, key=True)}={_escape_property(v, key=False)}"
        for k, v in values.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


# -- command line ---------------------------------------------------------------------------


def _parse_config(pairs: Sequence[str]) -> dict[str, str]:
    config: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {pair!r}")
        config[key.strip()] = value
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``aioproducer-kafka`` / ``python -m aioproducer.testing.kafka``).

    ``fetch`` downloads the broker jars into the cache; ``start`` runs a cluster, prints
    ``bootstrap.servers=...`` on stdout and keeps it running until Ctrl-C or SIGTERM.
    Returns the process exit code.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kafka-version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"Apache Kafka version (default {DEFAULT_KAFKA_VERSION})",
    )
    common.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"where the jars are cached (default: {default_cache_dir()})",
    )
    parser = argparse.ArgumentParser(
        prog="python -m aioproducer.testing.kafka",
        description="Run a local Apache Kafka (KRaft) cluster for tests.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "fetch",
        parents=[common],
        help="download the Kafka jars (needs Java 17+ and Maven) and prepare the JVM cache",
    )
    start = commands.add_parser(
        "start", parents=[common], help="start a cluster and run until interrupted"
    )
    start.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
    start.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="use fixed ports: brokers on PORT_BASE.., controllers after them "
        "(default: free ports)",
    )
    start.add_argument("--work-dir", type=Path, default=None, help="keep data and logs here")
    start.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting (repeatable)",
    )
    start.add_argument("--heap", default="512m", help="JVM heap per node (default 512m)")
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            libs = ensure_kafka(args.kafka_version, args.cache_dir)
            print(f"kafka {args.kafka_version} jars: {libs}", flush=True)
            if _cds_allowed(DEFAULT_JVM_ARGS):
                model = KafkaCluster(version=args.kafka_version, cache_dir=args.cache_dir)
                archive = _class_data_archive(find_java(), libs, model)
                print(f"class-data-sharing archive: {archive or 'not available'}", flush=True)
            return 0
        try:
            config = _parse_config(args.config)
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
        return _run_cluster(
            KafkaCluster(
                args.nodes,
                version=args.kafka_version,
                cache_dir=args.cache_dir,
                broker_config=config,
                heap=args.heap,
                work_dir=args.work_dir,
                port_base=args.port_base,
            )
        )
    except (KafkaSetupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1


class _Interrupted(Exception):
    """A stop signal arrived while the cluster was still starting."""


def _run_cluster(cluster: KafkaCluster) -> int:
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        # While start() runs, unwind it (it cleans up after itself); afterwards just wake
        # the main loop.
        if not stop.is_set() and not cluster_started.is_set():
            stop.set()
            raise _Interrupted(signal.Signals(signum).name)
        stop.set()

    cluster_started = threading.Event()
    previous = {
        signum: signal.signal(signum, request_stop)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        started = time.monotonic()
        try:
            cluster.start()
        except _Interrupted as exc:
            print(f"interrupted by {exc} while starting", file=sys.stderr, flush=True)
            return 1
        cluster_started.set()
        for node_id in cluster.node_ids:
            print(
                f"node {node_id}: {cluster.broker_address(node_id)} "
                f"pid {cluster.pid(node_id)} log {cluster.log_path(node_id)}",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"started {len(cluster.node_ids)} node(s) in {time.monotonic() - started:.1f}s; "
            "Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
        while not stop.wait(0.5):
            if not any(cluster.is_running(node_id) for node_id in cluster.node_ids):
                print("error: every broker has exited", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        cluster_started.set()
        cluster.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
