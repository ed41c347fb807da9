"""Throughput of aioproducer against other Python Kafka producers, verified by reading back.

::

    python -m bench.producer_compare [--records 300000] [--value-size 100] [--rounds 3]
        [--partitions 12] [--clients a,b,...] [--bootstrap-servers HOST:PORT]
        [--out bench/results/producer_compare.md] [--profile]

Every client produces the same keyless records (acks=all, idempotence on, linger 5 ms,
16384-byte batches where the client has such settings) in its own process, to a fresh topic.
After each run the topic is read back with an independent consumer (librdkafka, via
:func:`aioproducer.testing.verify.consume_all`): a run counts only if every sequence number
is there exactly once and the client reported no delivery error; otherwise it is FAILED.
Rounds are interleaved (A B C ... A B C ...). The summary is a Markdown table on stdout and
in ``--out``; every run's raw measurements go to ``<out dir>/raw/<out name>.json``.
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.metadata
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .clients import CLIENTS, PYTHON_CLIENTS
from .clients._common import BATCH_SIZE, LINGER_MS, SEQ_DIGITS, make_value, parse_seq

__all__ = ["RunResult", "main", "run_client", "summarize", "verify_records"]

_REPO_ROOT = Path(__file__).resolve().parent.parent
_BASELINES = ("aiokafka", "confluent-sync")
_PROFILE_TOP = 25
_STDERR_TAIL = 20

#: The test cluster's JVM flags without ``-XX:TieredStopAtLevel=1``: that flag makes a
#: short-lived test broker start faster but keeps the C2 compiler off, which would leave
#: the broker slower than a real one for the whole benchmark.
_BROKER_JVM_ARGS = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


# -- one run ---------------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
    """One client's run in one round: its report, and whether the read-back verified it."""

    client: str
    round: int
    topic: str
    ok: bool = False
    failure: str | None = None
    report: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    stderr_tail: str = ""

    @property
    def rate(self) -> float:
        """Records per second (only meaningful when ``ok``)."""
        assert self.report is not None
        return float(self.report["records"]) / float(self.report["elapsed_s"])

    @property
    def cpu_us_per_record(self) -> float:
        """User+system CPU microseconds per record, all threads of the client process."""
        assert self.report is not None
        cpu = float(self.report["cpu_user_s"]) + float(self.report["cpu_sys_s"])
        return cpu * 1e6 / float(self.report["records"])

    @property
    def cpu_per_wall(self) -> float:
        """CPU seconds per elapsed second (above 1 means more than one core was busy)."""
        assert self.report is not None
        cpu = float(self.report["cpu_user_s"]) + float(self.report["cpu_sys_s"])
        return cpu / float(self.report["elapsed_s"])


def run_client(
    client: str,
    bootstrap: str,
    topic: str,
    args: argparse.Namespace,
    *,
    profile_path: Path | None = None,
) -> tuple[dict[str, Any] | None, str | None, str]:
    """Run one client in a subprocess.

    Returns (its JSON report, None, stderr tail) or (None, why not, stderr tail).
    """
    command = [
        sys.executable,
        "-m",
        CLIENTS[client].module,
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--records",
        str(args.records),
        "--value-size",
        str(args.value_size),
        "--chunk-size",
        str(args.chunk_size),
        "--log-level",
        args.client_log_level,
    ]
    if profile_path is not None:
        command += ["--profile", str(profile_path)]
    try:
        proc = subprocess.run(
            command,
            cwd=_REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        tail = "\n".join(stderr.strip().splitlines()[-_STDERR_TAIL:])
        return None, f"the client did not finish within {args.timeout} s", tail
    tail = "\n".join(proc.stderr.strip().splitlines()[-_STDERR_TAIL:])
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None, f"the client exited with status {proc.returncode}:\n{tail}", tail
    try:
        report: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None, f"the client's last line is not JSON: {lines[-1][:200]!r}", tail
    return report, None, tail


def verify_records(records: Sequence[Any], expected: int, value_size: int) -> dict[str, Any]:
    """Check what was read back: each of ``expected`` sequence numbers exactly once.

    ``records`` are :class:`~aioproducer.testing.verify.ConsumedRecord`. Every value must be
    exactly what the clients send for its sequence number (no corruption), and keyless.
    Returns counts; ``ok`` says whether the topic holds exactly the records that were sent.
    """
    seen = bytearray(expected)
    duplicates = malformed = 0
    for record in records:
        value = record.value
        if record.key is not None or value is None or len(value) != value_size:
            malformed += 1
            continue
        try:
            seq = parse_seq(value)
        except ValueError:
            malformed += 1
            continue
        if not 0 <= seq < expected or value != make_value(seq, value_size):
            malformed += 1
        elif seen[seq]:
            duplicates += 1
        else:
            seen[seq] = 1
    missing = expected - sum(seen)
    partitions = Counter(record.partition for record in records)
    return {
        "ok": len(records) == expected and not (duplicates or missing or malformed),
        "read": len(records),
        "missing": missing,
        "missing_ranges": _missing_ranges(seen, limit=10),
        "duplicates": duplicates,
        "malformed": malformed,
        "partitions_used": len(partitions),
        "largest_partition_share": max(partitions.values()) / len(records) if records else 0.0,
    }


def _missing_ranges(seen: bytearray, limit: int) -> list[list[int]]:
    """The first ``limit`` runs of unseen sequence numbers, as [first, last] pairs."""
    ranges: list[list[int]] = []
    start = seen.find(0)
    while start >= 0 and len(ranges) < limit:
        end = seen.find(1, start)
        last = (len(seen) if end < 0 else end) - 1
        ranges.append([start, last])
        start = -1 if end < 0 else seen.find(0, end)
    return ranges


def _describe_failure(verification: dict[str, Any], expected: int) -> str:
    return (
        f"read back {verification['read']} of {expected} records: "
        f"{verification['missing']} missing, {verification['duplicates']} duplicated, "
        f"{verification['malformed']} malformed"
    )


def _run_and_verify(
    client: str,
    round_no: int,
    broker: _Broker,
    args: argparse.Namespace,
    profile_path: Path | None = None,
) -> RunResult:
    from aioproducer.testing.verify import consume_all

    topic = f"bench-{broker.run_id}-{client}-{'profile' if profile_path else round_no}"
    result = RunResult(client, round_no, topic)
    broker.create_topic(topic, args.partitions)
    report, failure, result.stderr_tail = run_client(
        client, broker.bootstrap, topic, args, profile_path=profile_path
    )
    result.report = report
    if report is None:
        result.failure = failure
        return result
    try:
        records = consume_all(broker.bootstrap, topic, expected=args.records, timeout=300)
    except (TimeoutError, RuntimeError) as exc:
        result.failure = f"reading the topic back failed: {exc}"
        return result
    result.verification = verification = verify_records(records, args.records, args.value_size)
    problems = []
    if report.get("errors"):
        samples = "; ".join(report.get("error_samples") or [])
        problems.append(f"the client reported {report['errors']} failed deliveries ({samples})")
    if report.get("records") != args.records:
        problems.append(f"the client reported {report.get('records')} records")
    if not verification["ok"]:
        problems.append(_describe_failure(verification, args.records))
    result.ok = not problems
    result.failure = "; ".join(problems) or None
    return result


# -- the broker ------------------------------------------------------------------------------


class _Broker:
    """Where the topics are created: our own single-node cluster, or an external one."""

    def __init__(self, bootstrap: str, create: Callable[[str, int], None]) -> None:
        self.bootstrap = bootstrap
        self.create_topic = create
        self.run_id = uuid.uuid4().hex[:8]


@contextlib.contextmanager
def _broker(args: argparse.Namespace) -> Iterator[tuple[_Broker, str]]:
    if args.bootstrap_servers:
        bootstrap = args.bootstrap_servers
        yield (
            _Broker(bootstrap, lambda name, n: _create_topic_external(bootstrap, name, n)),
            f"external cluster at {bootstrap}",
        )
        return
    from aioproducer.testing import KafkaCluster

    _log("starting a single-node Kafka cluster ...")
    with KafkaCluster(nodes=1, heap=args.broker_heap, jvm_args=_BROKER_JVM_ARGS) as kc:

        def create(name: str, partitions: int) -> None:
            kc.create_topic(name, partitions=partitions)

        yield (
            _Broker(kc.bootstrap_servers, create),
            f"Apache Kafka {kc.version}, one node (KafkaCluster, -Xmx{args.broker_heap}), "
            "on this machine",
        )


def _create_topic_external(bootstrap: str, name: str, partitions: int) -> None:
    # The documented import path; mypy cannot see that the module re-exports NewTopic.
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(30)
    # Wait until every partition has a leader, so no client pays for leader election.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {name!r} has no leader for every partition after 30 s")


def _warm_up(broker: _Broker, args: argparse.Namespace) -> None:
    """Run every client once, unmeasured, so that no client meets a cold broker.

    A freshly started broker JVM is several times slower for its first seconds of load
    (JIT compilation), which would penalise whichever client runs first. Running each
    client also exercises the request versions and patterns each one uses.
    """
    if args.warmup_records <= 0:
        return
    warm = argparse.Namespace(**{**vars(args), "records": args.warmup_records})
    for client in args.clients:
        _log(f"warm-up: {client} ...")
        topic = f"bench-{broker.run_id}-warmup-{client}"
        broker.create_topic(topic, args.partitions)
        report, failure, _tail = run_client(client, broker.bootstrap, topic, warm)
        if report is None:
            _log(f"  warm-up run failed (ignored): {failure}")


# -- summary ---------------------------------------------------------------------------------


def summarize(results: Sequence[RunResult], clients: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per client: medians over verified rounds, or the failures if any round failed."""
    summary: dict[str, dict[str, Any]] = {}
    for client in clients:
        runs = [r for r in results if r.client == client and r.round > 0]
        failed = [r for r in runs if not r.ok]
        if failed or not runs:
            summary[client] = {
                "ok": False,
                "rounds": len(runs),
                "failed_rounds": len(failed),
                "failures": [f"round {r.round}: {r.failure}" for r in failed],
            }
            continue
        rates = [r.rate for r in runs]
        assert all(r.report is not None for r in runs)
        summary[client] = {
            "ok": True,
            "rounds": len(runs),
            "rate_median": statistics.median(rates),
            "rate_min": min(rates),
            "rate_max": max(rates),
            "cpu_us_per_record_median": statistics.median(r.cpu_us_per_record for r in runs),
            "cpu_per_wall_median": statistics.median(r.cpu_per_wall for r in runs),
            "peak_rss_mib_max": max(float(r.report["peak_rss_mib"]) for r in runs if r.report),
        }
    return summary


def _ratio(summary: dict[str, dict[str, Any]], client: str, baseline: str) -> str:
    base, mine = summary.get(baseline), summary[client]
    if base is None or not base["ok"] or not mine["ok"]:
        return "-"
    return f"{mine['rate_median'] / base['rate_median']:.2f}x"


def render_table(summary: dict[str, dict[str, Any]], value_size: int) -> str:
    """The Markdown results table."""
    header = (
        "| client | records/s, median (min-max) | MB/s | CPU µs/record | CPU/wall "
        "| peak RSS MiB | vs aiokafka | vs confluent-sync |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for client, s in summary.items():
        if not s["ok"]:
            what = (
                f"**FAILED** ({s['failed_rounds']}/{s['rounds']} runs)"
                if s["rounds"]
                else "not run"
            )
            rows.append(f"| {client} | {what} | - | - | - | - | - | - |")
            continue
        rows.append(
            f"| {client} "
            f"| {s['rate_median']:,.0f} ({s['rate_min']:,.0f}-{s['rate_max']:,.0f}) "
            f"| {s['rate_median'] * value_size / 1e6:.2f} "
            f"| {s['cpu_us_per_record_median']:.1f} "
            f"| {s['cpu_per_wall_median']:.2f} "
            f"| {s['peak_rss_mib_max']:.0f} "
            f"| {_ratio(summary, client, _BASELINES[0])} "
            f"| {_ratio(summary, client, _BASELINES[1])} |"
        )
    return header + "\n".join(rows) + "\n"


def _versions(results: Sequence[RunResult]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for r in results:
        if r.report:
            versions[str(r.report["library"])] = str(r.report["library_version"])
    for dist in ("aioproducer", "aiokafka", "confluent-kafka", "kafka-python", "uvloop", "trio"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.setdefault(dist, importlib.metadata.version(dist))
    return dict(sorted(versions.items()))


def render_markdown(
    meta: dict[str, Any],
    summary: dict[str, dict[str, Any]],
    results: Sequence[RunResult],
    profile_text: str | None,
) -> str:
    """The whole report: setup, table, failures, and the profile if one was taken."""
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    out = [
        "# Producer throughput: aioproducer vs other Python Kafka producers",
        "",
        f"- Date: {meta['date']}; host: {meta['host']}",
        f"- Python {meta['python']}; {versions}",
        f"- Broker: {meta['broker']}",
        f"- Workload: {meta['records']:,} keyless records x {meta['value_size']} B values, "
        f"{meta['partitions']} partitions, a fresh topic per run; acks=all, idempotence on, "
        f"linger {LINGER_MS} ms, batch size {BATCH_SIZE} B (where the client has these settings)",
        f"- {meta['rounds']} interleaved round(s) in this order: {', '.join(meta['clients'])}. "
        "Every run is read back and checked; one that lost, duplicated or corrupted a "
        "record, or reported a failed delivery, is FAILED and gives no numbers.",
        f"- Warm-up: every client ran once with {meta['warmup_records']:,} records before "
        "round 1 (not measured)."
        if meta["warmup_records"] > 0
        else "- No warm-up.",
        "",
        render_table(summary, meta["value_size"]),
        "records/s: from the first send to the last acknowledgement checked, in the client's "
        "own process (start-up and connecting excluded). MB/s counts value bytes only. CPU: "
        "user+system time of the whole client process (all its threads) in that window. "
        "Peak RSS: the client process's own high-water mark (VmHWM on Linux; it includes the "
        "interpreter and imports), the largest over all rounds. Ratios compare medians.",
        "",
    ]
    failures = {c: s for c, s in summary.items() if not s["ok"]}
    if failures:
        out += ["## Failed runs", ""]
        for client, s in failures.items():
            for line in s["failures"]:
                first, _, rest = line.partition("\n")
                out.append(f"- {client}, {first}")
                if rest:
                    out += ["", "  ```", *("  " + x for x in rest.splitlines()), "  ```"]
        out.append("")
    if profile_text is not None:
        profiled = next((r for r in results if r.round == 0), None)
        status = "verified" if profiled and profiled.ok else "NOT verified"
        out += [
            f"## Where the time goes: {meta['profile_client']} under cProfile",
            "",
            f"One extra run ({status}; not part of the table: cProfile slows it down), "
            f"produce phase only, main thread, top {_PROFILE_TOP} functions by own time:",
            "",
            "```",
            profile_text.rstrip(),
            "```",
            "",
        ]
    return "\n".join(out)


def _profile_text(path: Path) -> str:
    stream = io.StringIO()
    stats = pstats.Stats(str(path), stream=stream)
    stats.strip_dirs().sort_stats(pstats.SortKey.TIME).print_stats(_PROFILE_TOP)
    # Drop pstats' preamble (date and file name) and blank lines; keep totals and table.
    lines = stream.getvalue().splitlines()
    return "\n".join(line for line in lines if line.strip() and path.name not in line)


# -- command line ----------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.producer_compare",
        description="Compare the throughput of Python Kafka producers; every run is verified "
        "by reading its topic back.",
    )
    parser.add_argument("--records", type=int, default=300_000, help="per run (default 300000)")
    parser.add_argument("--value-size", type=int, default=100, help="bytes (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--partitions", type=int, default=12, help="per topic (default 12)")
    parser.add_argument(
        "--clients",
        default=",".join(PYTHON_CLIENTS),
        help=f"comma-separated, in run order (default: all: {','.join(PYTHON_CLIENTS)})",
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="use this cluster instead of starting a single-node one (topics are created on it)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=_REPO_ROOT / "bench" / "results" / "producer_compare.md",
        help="Markdown report; raw JSON goes to <its dir>/raw/<its name>.json",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also run --profile-client once under cProfile and print the top functions",
    )
    parser.add_argument("--profile-client", default="aioproducer", choices=sorted(PYTHON_CLIENTS))
    parser.add_argument(
        "--chunk-size", type=int, default=10_000, help="records per send_many() (default 10000)"
    )
    parser.add_argument(
        "--warmup-records",
        type=int,
        default=50_000,
        help="before round 1, every client runs once with this many records, unmeasured, so "
        "the broker is warm (default 50000; 0 = no warm-up)",
    )
    parser.add_argument("--broker-heap", default="1g", help="heap of the broker we start")
    parser.add_argument(
        "--client-log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level inside the clients; the tail of their stderr goes to the raw JSON",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per run, seconds")
    args = parser.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in args.clients if c not in PYTHON_CLIENTS]
    if unknown:
        parser.error(
            f"unknown client(s) {', '.join(unknown)}; known: {', '.join(PYTHON_CLIENTS)} "
            "(the Java tool runs in `python -m bench --suite ...`)"
        )
    if len(set(args.clients)) != len(args.clients) or not args.clients:
        parser.error("--clients must name each client at most once, and at least one")
    if args.records < 1 or args.rounds < 1 or args.partitions < 1 or args.chunk_size < 1:
        parser.error("--records, --rounds, --partitions and --chunk-size must be positive")
    if args.value_size < SEQ_DIGITS:
        parser.error(f"--value-size must be at least {SEQ_DIGITS}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; returns 0 if every run verified, 1 otherwise."""
    args = _parse_args(argv)
    out_md: Path = args.out
    raw_path = out_md.parent / "raw" / f"{out_md.stem}.json"
    results: list[RunResult] = []
    profile_text: str | None = None
    started = datetime.datetime.now(datetime.timezone.utc)
    with _broker(args) as (broker, broker_text):
        _warm_up(broker, args)
        for round_no in range(1, args.rounds + 1):
            for client in args.clients:
                _log(f"round {round_no}/{args.rounds}: {client} ...")
                result = _run_and_verify(client, round_no, broker, args)
                results.append(result)
                if result.ok:
                    _log(
                        f"  {result.rate:,.0f} records/s, "
                        f"{result.cpu_us_per_record:.1f} CPU µs/record, verified"
                    )
                else:
                    _log(f"  FAILED: {result.failure}")
        if args.profile:
            raw_path.parent.mkdir(parents=True, exist_ok=True)
            prof_path = raw_path.with_suffix(".prof")
            _log(f"profiling {args.profile_client} ...")
            result = _run_and_verify(args.profile_client, 0, broker, args, prof_path)
            results.append(result)
            if result.report is not None and prof_path.exists():
                profile_text = _profile_text(prof_path)
            else:
                _log(f"  the profiled run failed: {result.failure}")

    summary = summarize(results, args.clients)
    meta = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "versions": _versions(results),
        "broker": broker_text,
        "records": args.records,
        "value_size": args.value_size,
        "partitions": args.partitions,
        "rounds": args.rounds,
        "clients": args.clients,
        "chunk_size": args.chunk_size,
        "warmup_records": args.warmup_records,
        "profile_client": args.profile_client if args.profile else None,
    }
    markdown = render_markdown(meta, summary, results, profile_text)
    print(markdown)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(markdown, encoding="utf-8")
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    raw = {
        "meta": meta,
        "summary": summary,
        "runs": [dataclasses.asdict(r) for r in results],
    }
    raw_path.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    _log(f"wrote {out_md} and {raw_path}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
