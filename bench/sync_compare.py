"""SyncProducer against the async Producer on the same workload, verified by reading back.

::

    python -m bench.sync_compare [--records 300000] [--value-size 100] [--rounds 3]
        [--partitions 12] [--chunk-size 10000] [--bootstrap-servers HOST:PORT]
        [--out bench/results/sync_compare.md] [--profile]

The workload is that of ``bench.producer_compare``: keyless records of ``--value-size``
bytes (each starting with its sequence number), acks=all, idempotence, linger 5 ms,
16384-byte batches, to a fresh topic per run. Four variants, each in its own process, in
interleaved rounds: the async ``Producer`` with ``await send()`` per record and with
``send_many()`` in chunks, and ``SyncProducer`` with ``send()`` per record and with
``send_many()`` in chunks. The clock runs from the first send to the last checked
acknowledgement. Every run is read back (every sequence number exactly once) or it counts
as failed. Writes a Markdown table to ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

VARIANTS = ("async-send", "sync-send", "async-bulk", "sync-bulk", "async-sendbulk", "sync-sendbulk")
CONFIG: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
SEQ_DIGITS = 12
_ROOT = Path(__file__).resolve().parent.parent


def _values(start: int, stop: int, size: int) -> list[bytes]:
    filler = b"." * (size - SEQ_DIGITS)
    return [b"%0*d" % (SEQ_DIGITS, seq) + filler for seq in range(start, stop)]


# -- one run, in a child process -------------------------------------------------------------


async def _run_async(ns: argparse.Namespace, bulk: bool) -> tuple[float, int]:
    from aioproducer import DeliveryHandle, Producer

    async with Producer(ns.bootstrap_servers, **CONFIG) as producer:
        await producer.partitions_for(ns.topic)
        handles: list[DeliveryHandle] = []
        t0 = time.perf_counter()
        if ns.variant.endswith("sendbulk"):
            # send_bulk(): one aggregate outcome per call instead of a handle per record.
            bulks = []
            for start in range(0, ns.records, ns.chunk_size):
                chunk = _values(start, min(ns.records, start + ns.chunk_size), ns.value_size)
                bulks.append(await producer.send_bulk(ns.topic, chunk))
            await producer.flush()
            return time.perf_counter() - t0, sum([(await b).failed for b in bulks])
        for start in range(0, ns.records, ns.chunk_size):
            chunk = _values(start, min(ns.records, start + ns.chunk_size), ns.value_size)
            if bulk:
                handles += await producer.send_many(ns.topic, chunk)
            else:
                send = producer.send
                topic = ns.topic
                for value in chunk:
                    handles.append(await send(topic, value))
        await producer.flush()
        failed = sum(1 for h in handles if h.exception() is not None)
        return time.perf_counter() - t0, failed


def _run_sync(ns: argparse.Namespace, bulk: bool) -> tuple[float, int]:
    from aioproducer import DeliveryFuture, SyncProducer

    with SyncProducer(ns.bootstrap_servers, **CONFIG) as producer:
        producer.partitions_for(ns.topic)
        futures: list[DeliveryFuture] = []
        t0 = time.perf_counter()
        if ns.variant.endswith("sendbulk"):
            # send_bulk(): one aggregate outcome per call instead of a future per record.
            bulks = []
            for start in range(0, ns.records, ns.chunk_size):
                chunk = _values(start, min(ns.records, start + ns.chunk_size), ns.value_size)
                bulks.append(producer.send_bulk(ns.topic, chunk))
            producer.flush()
            return time.perf_counter() - t0, sum(b.result().failed for b in bulks)
        for start in range(0, ns.records, ns.chunk_size):
            chunk = _values(start, min(ns.records, start + ns.chunk_size), ns.value_size)
            if bulk:
                futures += producer.send_many(ns.topic, chunk)
            else:
                send = producer.send
                topic = ns.topic
                for value in chunk:
                    futures.append(send(topic, value))
        producer.flush()
        failed = sum(1 for f in futures if f.exception() is not None)
        return time.perf_counter() - t0, failed


def _child(ns: argparse.Namespace) -> None:
    import uvloop

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    profiler = cProfile.Profile() if ns.profile_to else None
    if profiler is not None:
        profiler.enable()
    bulk = ns.variant.endswith("bulk")
    if ns.variant.startswith("async"):
        elapsed, failed = uvloop.run(_run_async(ns, bulk))
    else:
        elapsed, failed = _run_sync(ns, bulk)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(ns.profile_to)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(json.dumps({"elapsed_s": elapsed, "failed": failed, "cpu_s": cpu}))


# -- the harness ------------------------------------------------------------------------------


def _verify(bootstrap: str, topic: str, records: int) -> str | None:
    from aioproducer.testing.verify import consume_all

    got = consume_all(bootstrap, topic, expected=records, timeout=300)
    seen = bytearray(records)
    for rec in got:
        assert rec.value is not None
        seq = int(rec.value[:SEQ_DIGITS])
        if not 0 <= seq < records or seen[seq]:
            return f"unexpected or duplicate record {seq}"
        seen[seq] = 1
    if len(got) != records:
        return f"read {len(got)} records, expected {records}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.sync_compare", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--out", default=str(_ROOT / "bench/results/sync_compare.md"))
    parser.add_argument("--profile", action="store_true", help="also profile one sync-send run")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.variant:
        _child(ns)
        return 0

    from aioproducer.testing import KafkaCluster

    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    failures: list[str] = []
    with KafkaCluster(nodes=1) as kc:
        bootstrap = ns.bootstrap_servers or kc.bootstrap_servers

        def run(variant: str, tag: str, profile_to: str | None = None) -> dict[str, Any] | None:
            topic = f"sync-compare-{variant}-{tag}-{uuid.uuid4().hex[:6]}"
            kc.create_topic(topic, partitions=ns.partitions)
            cmd = [sys.executable, "-m", "bench.sync_compare", "--variant", variant]
            cmd += ["--topic", topic, "--bootstrap-servers", bootstrap]
            cmd += ["--records", str(ns.records), "--value-size", str(ns.value_size)]
            cmd += ["--chunk-size", str(ns.chunk_size)]
            if profile_to:
                cmd += ["--profile-to", profile_to]
            proc = subprocess.run(cmd, cwd=_ROOT, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                failures.append(f"{variant} {tag}: exit {proc.returncode}: {proc.stderr[-500:]}")
                return None
            report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
            problem = _verify(bootstrap, topic, ns.records)
            if problem or report["failed"]:
                failures.append(f"{variant} {tag}: {problem or report['failed']} failed")
                return None
            return report

        for variant in VARIANTS:  # warm-up: JIT of the broker, page cache
            run(variant, "warmup")
        failures.clear()
        for round_no in range(ns.rounds):
            for variant in VARIANTS:
                report = run(variant, str(round_no))
                if report is not None:
                    results[variant].append(report)
                    rate = ns.records / report["elapsed_s"]
                    print(f"round {round_no} {variant}: {rate:,.0f} records/s", file=sys.stderr)
        profile_text = ""
        if ns.profile:
            path = str(Path(ns.out).with_suffix(".prof"))
            run("sync-send", "profile", path)
            buf = io.StringIO()
            pstats.Stats(path, stream=buf).sort_stats("tottime").print_stats(20)
            profile_text = buf.getvalue()

    rates = {v: [ns.records / r["elapsed_s"] for r in rs] for v, rs in results.items() if rs}
    med = {v: statistics.median(r) for v, r in rates.items()}
    lines = [
        "# SyncProducer vs Producer",
        "",
        f"{ns.records:,} keyless {ns.value_size}-byte records, {ns.partitions} partitions, "
        f"acks=all, idempotence, linger 5 ms; bulk chunks of {ns.chunk_size:,}; median of "
        f"{ns.rounds} interleaved rounds after a warm-up; one single-node Kafka on the same "
        f"machine; Python {platform.python_version()}, {os.cpu_count()} cores "
        f"(shared with other work while measured: numbers are noisy). Async variants run "
        f"on uvloop, as does the SyncProducer's loop thread.",
        "",
        "| variant | records/s, median (min-max) | CPU µs/record | vs async same API |",
        "|---|---:|---:|---:|",
    ]
    for v in VARIANTS:
        if v not in rates:
            lines.append(f"| {v} | FAILED | | |")
            continue
        cpu = statistics.median(r["cpu_s"] for r in results[v]) * 1e6 / ns.records
        base = "async-send" if v.endswith("send") else "async-bulk"
        ratio = f"{med[v] / med[base]:.2f}x" if base in med else "-"
        lines.append(
            f"| {v} | {med[v]:,.0f} ({min(rates[v]):,.0f}-{max(rates[v]):,.0f}) | "
            f"{cpu:.1f} | {ratio} |"
        )
    if failures:
        lines += ["", "Failed runs:", *[f"- {f}" for f in failures]]
    if profile_text:
        lines += ["", "Profile of one sync-send run (cProfile, main thread only):", "", "```"]
        lines += [*profile_text.strip().splitlines()[:45], "```"]
    table = "\n".join(lines) + "\n"
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(table, encoding="utf-8")
    print(table)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
