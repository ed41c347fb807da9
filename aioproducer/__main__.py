"""``python -m aioproducer``: ``demo`` produces a million records and reports how it went;
``info`` says which implementation of the hot path runs.

Without ``--bootstrap-servers`` it starts a local single-node Apache Kafka through
:mod:`aioproducer.testing` and stops it afterwards (the ``--help`` text says the same
without markup).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio

from . import Producer, __version__, results, speedups, sync
from .results import DeliveryHandle

_DESCRIPTION = """\
python -m aioproducer demo: produce a million records and report how it went.

Without --bootstrap-servers it starts a local single-node Apache Kafka (Java 17+ and
Maven needed; the broker jars are fetched once) and stops it afterwards.
"""


_OVERVIEW = """\
python -m aioproducer: the aioproducer command line.

commands:
  demo   produce a million records (to a local broker it starts and stops, or to
         --bootstrap-servers) and print a delivery summary: throughput, latency,
         failures
  info   print the version and whether the per-record hot path runs compiled with
         mypyc or as pure Python, and why

'python -m aioproducer COMMAND --help' describes a command's options.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aioproducer",
        description=_OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aioproducer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="produce records and print a delivery summary",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info = sub.add_parser(
        "info",
        help="print the version and which implementation of the hot path runs",
        description="Print the version and which implementation of the per-record hot "
        "path runs: compiled with mypyc, or pure Python (and why).",
    )
    info.add_argument(
        "--require-compiled",
        action="store_true",
        help="exit with status 1 if a C compiler is present here but the compiled hot "
        f"path is not active (unless {speedups.ENV_VAR}=1 asks for pure Python)",
    )
    demo.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT[,...]",
        help="an existing Kafka cluster (default: start a local broker for this run)",
    )
    demo.add_argument("--topic", default=None, help="topic (default: a new demo-* topic)")
    demo.add_argument(
        "--records", type=int, default=1_000_000, help="how many records (default: 1000000)"
    )
    demo.add_argument(
        "--value-size", type=int, default=100, help="bytes per record value (default: 100)"
    )
    demo.add_argument(
        "--partitions",
        type=int,
        default=12,
        help="partitions of the topic it creates on a local broker (default: 12)",
    )
    demo.add_argument("--tasks", type=int, default=8, help="concurrent sending tasks (default: 8)")
    demo.add_argument(
        "--compression",
        default="none",
        help="compression codec: none, gzip, snappy, lz4 or zstd (default: none)",
    )
    demo.add_argument(
        "--linger-ms",
        type=float,
        default=5.0,
        help="how long a batch waits for more records, in ms (default: 5)",
    )
    demo.add_argument(
        "--backend",
        default="asyncio",
        choices=["asyncio", "uvloop", "trio"],
        help="event loop (default: asyncio)",
    )
    return parser


class _Progress:
    """A dependency-free progress bar on stderr."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self._last < 0.2):
            return
        self._last = now
        width = 30
        filled = int(width * done / max(1, self.total))
        rate = done / max(1e-9, now - self.started)
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{self.total:,} "
            f"{rate:>10,.0f} rec/s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))
    return sorted_values[index]


async def _produce(args: argparse.Namespace, bootstrap: str, topic: str) -> int:
    total, tasks = args.records, max(1, args.tasks)
    payload = os.urandom(args.value_size)
    latencies: list[float] = []
    sample_every = 100
    progress = _Progress(total, sys.stderr.isatty())
    sent = 0
    failures: dict[str, int] = {}

    def sampled(handle: DeliveryHandle, started: float) -> None:
        handle.add_done_callback(lambda h: latencies.append(time.perf_counter() - started))

    async with Producer(
        bootstrap,
        compression_type=args.compression,
        linger_ms=args.linger_ms,
        client_id="aioproducer-demo",
    ) as producer:
        await producer.partitions_for(topic)
        started = time.perf_counter()
        all_handles: list[list[DeliveryHandle]] = [[] for _ in range(tasks)]

        async def worker(w: int) -> None:
            nonlocal sent
            handles = all_handles[w]
            for i in range(w, total, tasks):
                t0 = time.perf_counter()
                handle = await producer.send(topic, payload, key=b"%d" % (i % 10_000))
                handles.append(handle)
                if i % sample_every == 0:
                    sampled(handle, t0)
                sent += 1
                if w == 0:
                    progress.update(sent)

        async with anyio.create_task_group() as tg:
            for w in range(tasks):
                tg.start_soon(worker, w)
        await producer.flush()
        elapsed = time.perf_counter() - started
        progress.update(sent, force=True)
        progress.close()
        metrics = producer.metrics()
    for handles in all_handles:
        for handle in handles:
            exc = handle.exception()
            if exc is not None:
                name = type(exc).__name__
                failures[name] = failures.get(name, 0) + 1
    failed = sum(failures.values())
    latencies.sort()
    mb = total * args.value_size / 1e6
    print(f"topic                {topic} ({args.partitions} partitions)")
    print(f"records              {total:,} x {args.value_size} B, {args.tasks} tasks")
    print(f"delivered            {total - failed:,}")
    print(f"failed               {failed:,} {failures if failures else ''}")
    print(f"throughput           {total / elapsed:,.0f} records/s, {mb / elapsed:,.1f} MB/s")
    print(
        f"ack latency (1% sample) p50 {1000 * _percentile(latencies, 0.5):.1f} ms, "
        f"p99 {1000 * _percentile(latencies, 0.99):.1f} ms"
    )
    print(
        f"batches              {metrics['batches_sent']:,} "
        f"(mean {metrics['records_per_batch_mean']:.0f} records, "
        f"{metrics['bytes_per_batch_mean'] / 1024:.1f} KiB), "
        f"requests {metrics['requests_sent']:,}, retried records {metrics['records_retried']:,}"
    )
    print(f"elapsed              {elapsed:.2f} s")
    return 1 if failed else 0


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    if args.bootstrap_servers:
        yield args.bootstrap_servers, None
        return
    from .testing import KafkaCluster

    print("starting a local Apache Kafka (KRaft, single node) ...", flush=True)
    with KafkaCluster(nodes=1) as cluster:
        print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
        yield cluster.bootstrap_servers, cluster


def _demo(args: argparse.Namespace) -> int:
    topic = args.topic or f"demo-{uuid.uuid4().hex[:8]}"
    with _cluster(args) as (bootstrap, cluster):
        if cluster is not None:
            cluster.create_topic(topic, partitions=args.partitions)
        backend, options = args.backend, {}
        if backend == "uvloop":
            backend, options = "asyncio", {"use_uvloop": True}
        code: int = anyio.run(
            _produce, args, bootstrap, topic, backend=backend, backend_options=options
        )
    if cluster is not None:
        print("local broker stopped")
    return code


def _info(args: argparse.Namespace) -> int:
    print(f"aioproducer {__version__}")
    print(f"python      {sys.version.split()[0]} ({sys.implementation.name})")
    print(f"hot path    {speedups.ACTIVE}: {speedups.REASON}")
    from .protocol import columnar

    column_codec = "compiled" if columnar.CODEC is not None else "numpy"
    print(f"columns     {column_codec}: {columnar.CODEC_REASON}")
    print(f"handles     {results.HANDLE_ACTIVE}: {results.HANDLE_REASON}")
    print(f"futures     {sync.FUTURE_ACTIVE}: {sync.FUTURE_REASON}")
    compiler = speedups.can_compile()
    print(f"C compiler  {compiler or 'none found'}")
    if (
        args.require_compiled
        and (
            speedups.ACTIVE != "compiled"
            or columnar.CODEC is None
            or results.HANDLE_ACTIVE != "compiled"
        )
        and compiler is not None
        and os.environ.get(speedups.ENV_VAR) != "1"
    ):
        print(
            "error: a C compiler is present but the compiled hot path is not active; "
            "reinstall (pip install -e .) and read the build output",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m aioproducer``."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "info":
        return _info(args)
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
