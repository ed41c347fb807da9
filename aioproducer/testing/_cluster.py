"""The cluster model behind :mod:`aioproducer.testing.kafka`: :class:`KafkaCluster` starts,
controls and stops a real Apache Kafka cluster (KRaft, combined broker+controller nodes).

It runs one or more Kafka JVMs on free ``127.0.0.1`` ports, waits until every broker answers
Metadata, and stops them again, reliably: on :meth:`KafkaCluster.stop`, on context-manager
exit, at interpreter exit, and (on Linux) when the Python process dies. Individual brokers
can be stopped, killed, paused and restarted to test failover.

Users import it from :mod:`aioproducer.testing.kafka` or :mod:`aioproducer.testing`.
Package-internal: :func:`record_class_data`, for the ``fetch`` command.

Its helpers, each with one job: the layout of ports and node settings (``_layout``),
waiting for the brokers and topics to be ready (``_readiness``), the nodes' processes
(``_node``), the broker settings (``_broker_config``), the admin requests (``_admin``).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from functools import partial
from importlib import resources
from pathlib import Path
from types import TracebackType

from ..errors import KafkaError, UnknownTopicOrPartitionError
from ..protocol.messages import MetadataResponse
from . import _admin
from ._broker_config import (
    MANAGED_KEYS,
    BrokerTLS,
    Listener,
    check_security,
    default_config,
    scram_arguments,
    security_config,
)
from ._cds import BROKER_MAIN_CLASS, cds_allowed, class_data_archive, jvm_flags
from ._host import HOST, free_ports, new_work_dir, register, unregister
from ._install import DEFAULT_KAFKA_VERSION, KafkaSetupError, ensure_kafka, find_java
from ._layout import node_config, place_nodes, port_count
from ._node import Node, format_storage
from ._proc import signal_group, wait_stopped
from ._properties import write_properties
from ._readiness import PortInUse, wait_for_leaders, wait_visible

__all__ = ["DEFAULT_JVM_ARGS", "KafkaCluster", "record_class_data"]

_LOG4J_RESOURCE = "kafka-log4j2.properties"
_PORT_ATTEMPTS = 5
_STOP_TIMEOUT = 30.0

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

    Feature levels: ``features`` finalizes features when the storage is formatted, e.g.
    ``features={"transaction.version": 1}`` for a cluster that speaks transaction version 1
    (``StorageTool format --feature``); unset features get the release's defaults.

    Secured listeners: ``listeners`` adds client listeners next to the PLAINTEXT one, each on
    its own port (:meth:`bootstrap_servers_for` gives their addresses). TLS listeners use the
    ``tls`` identity (see :class:`BrokerTLS`); SASL listeners accept ``sasl_users`` (name to
    password) with PLAIN and SCRAM-SHA-256/512 (SCRAM credentials are written into the
    metadata log when the storage is formatted), and, where a listener enables it,
    OAUTHBEARER with unsecured tokens (see :mod:`aioproducer.testing.tokens`)::

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

    Elsewhere than loopback: ``host`` is the address every listener binds and advertises
    (``127.0.0.1`` by default) and ``launch_prefix`` goes before each broker's command, so
    that, for example, ``host="198.18.0.2", launch_prefix=["ip", "netns", "exec", "lab"]``
    runs the brokers inside network namespace ``lab`` on an address of its own.
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
        features: Mapping[str, int] | None = None,
        host: str = HOST,
        launch_prefix: Sequence[str] = (),
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, not {nodes}")
        if startup_timeout <= 0:
            raise ValueError("startup_timeout must be positive")
        self._listeners = tuple(listeners)
        self._tls = tls
        self._sasl_users = dict(sasl_users or {})
        check_security(self._listeners, tls, self._sasl_users)
        ports = port_count(nodes, self._listeners)
        if port_base is not None and not 1024 <= port_base <= 65535 - ports:
            raise ValueError(f"port_base {port_base} leaves no room for {ports} ports")
        overrides = {str(k): str(v) for k, v in (broker_config or {}).items()}
        managed = sorted(MANAGED_KEYS.intersection(overrides))
        if managed:
            raise ValueError(
                f"broker_config may not set {', '.join(managed)}: KafkaCluster manages them"
            )
        self._features = {str(k): int(v) for k, v in (features or {}).items()}
        self._host = host
        self._launch_prefix = tuple(launch_prefix)
        self._size = nodes
        self._version = version
        self._cache_dir = cache_dir
        self._config = {**default_config(nodes), **overrides}
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._user_work_dir = Path(work_dir).expanduser().resolve() if work_dir else None
        self._port_base = port_base
        self._jvm_args = tuple(jvm_args) if jvm_args is not None else DEFAULT_JVM_ARGS
        self._lock = threading.RLock()
        self._work_dir: Path | None = None
        self._nodes: dict[int, Node] = {}
        self._java = ""
        self._libs: Path | None = None
        # Class-data sharing: an archive of the broker's loaded classes, written once per
        # machine, cuts JVM start-up CPU by about a third.
        self._cds_enabled = cds_allowed(self._jvm_args)
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
        return ",".join(
            f"{self._host}:{node.listener_ports[listener]}" for node in self._nodes.values()
        )

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
                self._cds_archive = class_data_archive(
                    java, self._libs, partial(record_class_data, self)
                )
            self._work_dir = self._prepare_work_dir()
            register(self, self._owner_pid)
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
            self._node(node_id).stop(graceful=True, timeout=timeout)

    def kill_broker(self, node_id: int) -> None:
        """Kill broker ``node_id`` with SIGKILL (no controlled shutdown) and reap it."""
        with self._lock:
            self._require_started()
            self._node(node_id).stop(graceful=False, timeout=_STOP_TIMEOUT)

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
            self._node(node_id).stop(graceful=not kill, timeout=_STOP_TIMEOUT)
            self.start_broker(node_id, timeout=timeout)

    # -- admin helpers ----------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """A Metadata response (all topics when ``topics`` is None) from a running broker."""
        self._require_started()
        errors: list[str] = []
        for node in self._reachable_nodes():
            try:
                return _admin.fetch_metadata(self._host, node.broker_port, topics, timeout=10.0)
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
        of its partitions and each leader serves them (so a producer's first request is
        not refused with ``NOT_LEADER_OR_FOLLOWER`` while the leader creates the logs).

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
                    self._host,
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
        wait_for_leaders(self._host, self._reachable_nodes, name, partitions, deadline)

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

    def _node(self, node_id: int) -> Node:
        self._require_started()
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id} (node ids: {self.node_ids})") from None

    def _prepare_work_dir(self) -> Path:
        if self._user_work_dir is not None:
            self._user_work_dir.mkdir(parents=True, exist_ok=True)
            return self._user_work_dir
        return new_work_dir()

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
                write_properties(node.config_path, self._node_config(node))
            self._format_storage()
            for node in self._nodes.values():
                self._launch(node)
            deadline = time.monotonic() + self._startup_timeout
            try:
                self._wait_visible(list(self._nodes.values()), deadline)
                return
            except PortInUse:
                # Another process took one of the ports between picking and binding it.
                for node in self._nodes.values():
                    node.stop(graceful=False, timeout=_STOP_TIMEOUT)
                if attempt == attempts:
                    raise KafkaSetupError(
                        f"could not find free ports for Kafka after {attempts} attempts"
                    ) from None

    def _layout(self) -> dict[int, Node]:
        assert self._work_dir is not None
        count = port_count(self._size, self._listeners)
        if self._port_base is not None:
            ports = list(range(self._port_base, self._port_base + count))
        else:
            ports = free_ports(count)
        return place_nodes(self._size, ports, self._work_dir, self._host, self._listeners)

    def _node_config(self, node: Node) -> dict[str, str]:
        settings = {**security_config(self._listeners, self._tls, self._sasl_users), **self._config}
        return node_config(node, list(self._nodes.values()), self._host, self._listeners, settings)

    def _jvm_command(self, main_class: str, heap: str, *args: str) -> list[str]:
        assert self._work_dir is not None and self._libs is not None
        cds = jvm_flags(main_class, archive=self._cds_archive, record_to=self._cds_dump)
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
        scram = scram_arguments(self._listeners, self._sasl_users)

        def command(node: Node, cluster_id: str) -> list[str]:
            return self._jvm_command(
                "kafka.tools.StorageTool",
                "256m",
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(node.config_path),
                *scram,
                *(f"--feature={name}={level}" for name, level in sorted(self._features.items())),
            )

        format_storage(list(self._nodes.values()), command, self._startup_timeout)

    def _launch(self, node: Node) -> None:
        command = self._jvm_command(BROKER_MAIN_CLASS, self._heap, str(node.config_path))
        node.launch([*self._launch_prefix, *command])

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
            node.stop(graceful=graceful, timeout=max(0.0, deadline - time.monotonic()))
        self._started = False
        unregister(self)
        if self._user_work_dir is None and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None

    def _reachable_nodes(self) -> list[Node]:
        return [n for n in self._nodes.values() if n.alive() and not n.paused]

    def _first_reachable(self) -> Node:
        nodes = self._reachable_nodes()
        if not nodes:
            raise KafkaSetupError("no broker of the cluster is running (and not paused)")
        return nodes[0]

    def _wait_visible(self, targets: Sequence[Node], deadline: float) -> None:
        """Wait until every reachable broker lists every target broker in Metadata."""
        wait_visible(
            self._host,
            targets,
            self._reachable_nodes,
            deadline,
            ports_picked=self._port_base is None,
            log_kept=self._user_work_dir is not None,
        )


def record_class_data(model: KafkaCluster, archive: Path) -> None:
    """Run a one-off broker like ``model``'s that writes its loaded classes to ``archive``.

    The training run for :func:`~aioproducer.testing._cds.class_data_archive`: one node,
    the same Kafka and JVM flags, a topic created, and a clean shutdown (the JVM writes the
    archive only when it exits normally).
    """
    trainer = KafkaCluster(
        1, version=model._version, cache_dir=model._cache_dir, jvm_args=model._jvm_args
    )
    trainer._cds_enabled = False
    trainer._cds_dump = archive
    with trainer._lock:
        trainer.start()
        try:
            trainer.create_topic("aioproducer-cds-training", partitions=2)
        finally:
            trainer._teardown(graceful=True)
