"""The command line of the test cluster: ``aioproducer-kafka`` or
``python -m aioproducer.testing.kafka``::

    python -m aioproducer.testing.kafka fetch              # download the jars (for CI caches)
    python -m aioproducer.testing.kafka start --nodes 3    # prints bootstrap.servers=..., runs
                                                           # until Ctrl-C / SIGTERM
    python -m aioproducer.testing.kafka start --tls --sasl-user alice:alice-secret \
        --sasl-mechanism SCRAM --sasl-mechanism OAUTHBEARER

Secured listeners: ``--tls`` adds an ``SSL`` listener with certificates made at start-up
(the CA is written to ``<work dir>/certs/ca.pem``); ``--sasl-user`` and ``--sasl-mechanism``
add a ``SASL_PLAINTEXT`` listener, and a ``SASL_SSL`` one as well with ``--tls``. After the
``bootstrap.servers=`` line, stdout lists each listener's client settings, one
``<LISTENER>.<setting>=<value>`` per line in librdkafka/Java names, then an empty line.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from ._broker_config import BrokerTLS, Listener, SaslMechanism
from ._cds import cds_allowed, class_data_archive
from ._cluster import DEFAULT_JVM_ARGS, KafkaCluster, record_class_data
from ._install import (
    DEFAULT_KAFKA_VERSION,
    KafkaSetupError,
    default_cache_dir,
    ensure_kafka,
    find_java,
)

__all__ = ["main"]

_MECHANISMS: dict[str, tuple[SaslMechanism, ...]] = {
    "PLAIN": ("PLAIN",),
    "SCRAM": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "SCRAM-SHA-256": ("SCRAM-SHA-256",),
    "SCRAM-SHA-512": ("SCRAM-SHA-512",),
    "OAUTHBEARER": ("OAUTHBEARER",),
}


def _parse_users(pairs: Sequence[str]) -> dict[str, str]:
    users: dict[str, str] = {}
    for pair in pairs:
        name, sep, password = pair.partition(":")
        if not sep or not name or not password:
            raise argparse.ArgumentTypeError(f"expected NAME:PASSWORD, got {pair!r}")
        users[name] = password
    return users


def _security(args: argparse.Namespace) -> tuple[list[Listener], BrokerTLS | None, dict[str, str]]:
    """The listeners, TLS identity and SASL users the ``start`` flags ask for."""
    users = _parse_users(args.sasl_user)
    chosen: list[SaslMechanism] = []
    for name in args.sasl_mechanism or (["PLAIN", "SCRAM"] if users else []):
        chosen += [m for m in _MECHANISMS[name] if m not in chosen]
    if chosen and chosen != ["OAUTHBEARER"] and not users:
        raise argparse.ArgumentTypeError(
            f"--sasl-mechanism {','.join(chosen)} needs at least one --sasl-user NAME:PASSWORD"
        )
    if args.max_reauth_ms is not None and not chosen:
        raise argparse.ArgumentTypeError("--max-reauth-ms needs a SASL listener")
    listeners: list[Listener] = []
    tls: BrokerTLS | None = None
    if args.tls:
        from .certs import CertificateAuthority

        ca = CertificateAuthority("aioproducer-kafka CLI CA")
        tls = BrokerTLS.from_certificate(ca.issue("localhost", "127.0.0.1"), client_ca=ca)
        listeners.append(Listener("SSL"))
    if chosen:
        mechanisms = tuple(chosen)
        listeners.append(
            Listener("SASL_PLAINTEXT", sasl_mechanisms=mechanisms, max_reauth_ms=args.max_reauth_ms)
        )
        if args.tls:
            listeners.append(
                Listener("SASL_SSL", sasl_mechanisms=mechanisms, max_reauth_ms=args.max_reauth_ms)
            )
    return listeners, tls, users


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
    secured = start.add_argument_group("secured listeners (next to the PLAINTEXT one)")
    secured.add_argument(
        "--tls",
        action="store_true",
        help="add an SSL listener (and SASL_SSL with SASL); certificates are made at start-up "
        "and the CA written to <work dir>/certs/ca.pem",
    )
    secured.add_argument(
        "--sasl-user",
        action="append",
        default=[],
        metavar="NAME:PASSWORD",
        help="add a SASL_PLAINTEXT listener (and SASL_SSL with --tls) with this user (repeatable)",
    )
    secured.add_argument(
        "--sasl-mechanism",
        action="append",
        choices=sorted(_MECHANISMS),
        default=None,
        help="SASL mechanism of the SASL listeners (repeatable; SCRAM means both SHA-256 and "
        "SHA-512; default PLAIN and SCRAM). OAUTHBEARER accepts unsecured JWS tokens "
        "(see aioproducer.testing.tokens) and needs no --sasl-user",
    )
    secured.add_argument(
        "--max-reauth-ms",
        type=int,
        default=None,
        help="connections.max.reauth.ms of the SASL listeners (clients must re-authenticate "
        "within it)",
    )
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            libs = ensure_kafka(args.kafka_version, args.cache_dir)
            print(f"kafka {args.kafka_version} jars: {libs}", flush=True)
            if cds_allowed(DEFAULT_JVM_ARGS):
                model = KafkaCluster(version=args.kafka_version, cache_dir=args.cache_dir)
                archive = class_data_archive(find_java(), libs, partial(record_class_data, model))
                print(f"class-data-sharing archive: {archive or 'not available'}", flush=True)
            return 0
        try:
            config = _parse_config(args.config)
            listeners, tls, users = _security(args)
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
                listeners=listeners,
                tls=tls,
                sasl_users=users,
            ),
            tls,
            list(users),
        )
    except (KafkaSetupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1


def _print_listeners(cluster: KafkaCluster, tls: BrokerTLS | None, users: Sequence[str]) -> None:
    """Each extra listener's client settings on stdout, a usage hint on stderr."""
    if not cluster.listeners:
        return
    ca_path: Path | None = None
    if tls is not None and tls.client_ca is not None:
        # The CLI's CA signs the server certificate, so it is what clients must trust.
        ca_path = cluster.work_dir / "certs" / "ca.pem"
        ca_path.parent.mkdir(exist_ok=True)
        ca_path.write_text(tls.client_ca, encoding="ascii")
    lines = []
    for listener in cluster.listeners:
        name = listener.name
        lines.append(f"{name}.bootstrap.servers={cluster.bootstrap_servers_for(name)}")
        lines.append(f"{name}.security.protocol={listener.security_protocol}")
        if listener.uses_sasl:
            lines.append(f"{name}.sasl.mechanisms={','.join(listener.sasl_mechanisms)}")
            if users:
                lines.append(f"{name}.sasl.users={','.join(users)}")
            if listener.max_reauth_ms is not None:
                lines.append(f"{name}.connections.max.reauth.ms={listener.max_reauth_ms}")
        if listener.uses_tls and ca_path is not None:
            lines.append(f"{name}.ssl.ca.location={ca_path}")
    print("\n".join(lines) + "\n", flush=True)
    hints = ["aioproducer clients of these listeners:"]
    if ca_path is not None:
        hints.append(
            f"  TLS: ssl_context=ssl.create_default_context(cafile={str(ca_path)!r}) "
            "(the certificate names localhost and 127.0.0.1)"
        )
    if any(listener.uses_sasl for listener in cluster.listeners):
        hints.append(
            "  SASL: sasl_mechanism=..., sasl_username=..., sasl_password=... (one of the "
            "--sasl-user pairs)"
        )
        hints.append(
            "  OAUTHBEARER: sasl_oauth_token_provider=aioproducer.testing.tokens."
            "unsecured_token_provider('alice') (unsecured tokens: for tests only)"
        )
    print("\n".join(hints), file=sys.stderr, flush=True)


class _Interrupted(Exception):
    """A stop signal arrived while the cluster was still starting."""


def _run_cluster(
    cluster: KafkaCluster, tls: BrokerTLS | None = None, users: Sequence[str] = ()
) -> int:
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
        _print_listeners(cluster, tls, users)
        while not stop.wait(0.5):
            if not any(cluster.is_running(node_id) for node_id in cluster.node_ids):
                print("error: every broker has exited", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        cluster_started.set()
        was_running = cluster.node_ids and any(cluster.is_running(n) for n in cluster.node_ids)
        cluster.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if was_running:
            # Say so: a user who pressed Ctrl-C should see the brokers are gone.
            print(f"stopped {len(cluster.node_ids)} node(s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
