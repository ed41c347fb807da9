"""The command line of the test cluster: ``aioproducer-kafka`` or
``python -m aioproducer.testing.kafka``::

    python -m aioproducer.testing.kafka fetch              # download the jars (for CI caches)
    python -m aioproducer.testing.kafka start --nodes 3    # prints bootstrap.servers=..., runs
                                                           # until Ctrl-C / SIGTERM
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
            if cds_allowed(DEFAULT_JVM_ARGS):
                model = KafkaCluster(version=args.kafka_version, cache_dir=args.cache_dir)
                archive = class_data_archive(find_java(), libs, partial(record_class_data, model))
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
