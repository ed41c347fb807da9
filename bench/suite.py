"""The benchmark suites: every client on the same workloads, interleaved, every run verified.

::

    python -m bench --suite quick|full [--clients a,b] [--rounds N] [--workloads SUBSTR]

Starts a single-node Apache Kafka (the package's default version, which the report names)
with :class:`aioproducer.testing.KafkaCluster`
(or uses ``--bootstrap-servers``), and for each workload runs every client once per round,
in interleaved rounds (A B C ... A B C ...), each in its own process
(:mod:`bench.clients`). After every run the topic is read back with librdkafka and checked
(:func:`verify_sequenced` / :func:`verify_random`); a run that lost, duplicated, corrupted or
misplaced a record is FAILED and contributes no number. Writes ``bench/results/<suite>.md``,
PNG charts next to it, and every run's raw JSON under ``bench/raw/``. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .clients import CLIENTS
from .clients._common import (
    BATCH_SIZE,
    EXIT_UNAVAILABLE,
    LINGER_MS,
    NUM_KEYS,
    SEQ_DIGITS,
    key_for,
    latency_figures,
    make_value,
)

__all__ = [
    "SUITES",
    "RunResult",
    "Workload",
    "check_end_offsets",
    "fmt_median_range",
    "main",
    "summarize",
    "verify_random",
    "verify_sequenced",
]

_REPO_ROOT = Path(__file__).resolve().parent.parent
_KAFKA_VERSION = "4.3.1"
_BASELINES = ("aiokafka", "confluent-sync", "java")
_STDERR_TAIL = 20
#: The clients the warm-up prefers: fast, so warming the broker costs little time.
_WARMUP_PREFERENCE = ("confluent-sync", "aioproducer-bulk", "aioproducer-sendbulk", "aioproducer")

#: Same JVM flags as the test cluster minus ``-XX:TieredStopAtLevel=1``, which speeds up a
#: short-lived test broker's start but keeps the C2 compiler off for the whole benchmark.
_BROKER_JVM_ARGS = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


# -- workloads -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """One cell of the matrix: what every client produces, to a fresh topic per run."""

    value_size: int
    compression: str
    keyed: bool
    partitions: int
    senders: int
    records: int
    #: records/s for a latency run; 0 = as fast as possible (a throughput run).
    rate: int = 0
    rounds: int | None = None  # None: the suite's default

    @property
    def name(self) -> str:
        """A short unique label, also used in file names."""
        size = f"{self.value_size // 1000}KB" if self.value_size >= 1000 else f"{self.value_size}B"
        parts = [
            f"lat{self.rate // 1000}k" if self.rate else "tput",
            size,
            "keyed" if self.keyed else "keyless",
            f"p{self.partitions}",
            self.compression,
            f"s{self.senders}",
        ]
        return "-".join(parts)

    @property
    def title(self) -> str:
        """A readable description for the report."""
        size = (
            f"{self.value_size // 1000} KB" if self.value_size >= 1000 else f"{self.value_size} B"
        )
        senders = "1 sender" if self.senders == 1 else f"{self.senders} concurrent senders"
        head = f"Latency at {self.rate:,} records/s" if self.rate else "Throughput"
        return (
            f"{head}: {size} values, {'keyed' if self.keyed else 'keyless'}, "
            f"{self.partitions} partition{'s' if self.partitions > 1 else ''}, "
            f"compression {self.compression}, {senders}, {self.records:,} records"
        )


def _tput(size: int, comp: str, keyed: bool, parts: int, senders: int, n: int) -> Workload:
    return Workload(size, comp, keyed, parts, senders, n)


def _lat(rate: int, seconds: float, rounds: int) -> Workload:
    return Workload(100, "none", False, 12, 1, int(rate * seconds), rate=rate, rounds=rounds)


#: quick: three throughput shapes and one latency rate, all clients, 3 rounds (latency 1).
#: full: one factor at a time around the two base shapes (100 B keyless none and 1 KB
#: keyless none, 12 partitions, 1 sender), so every factor of the matrix (value size,
#: compression, keys, partitions, senders) is covered without the full cartesian product,
#: which would take days; plus latency at 1k, 5k and 20k records/s.
SUITES: dict[str, dict[str, Any]] = {
    "quick": {
        "rounds": 3,
        "warmup_records": 30_000,
        "workloads": [
            _tput(100, "none", False, 12, 1, 200_000),
            _tput(1000, "lz4", True, 12, 1, 50_000),
            # The same without keys: the Java tool cannot send keys, so this is the 1 KB
            # comparison with the Java producer.
            _tput(1000, "lz4", False, 12, 1, 50_000),
            _lat(5000, 5.0, rounds=1),
        ],
    },
    "full": {
        "rounds": 3,
        "warmup_records": 50_000,
        "workloads": [
            _tput(100, "none", False, 12, 1, 300_000),
            _tput(100, "lz4", False, 12, 1, 300_000),
            _tput(100, "zstd", False, 12, 1, 300_000),
            _tput(100, "none", True, 12, 1, 300_000),
            _tput(100, "none", False, 1, 1, 300_000),
            _tput(100, "none", False, 12, 50, 300_000),
            _tput(1000, "none", False, 12, 1, 80_000),
            _tput(1000, "lz4", False, 12, 1, 80_000),
            _tput(1000, "zstd", False, 12, 1, 80_000),
            _tput(1000, "lz4", True, 12, 1, 80_000),
            _tput(1000, "none", False, 1, 1, 80_000),
            _tput(1000, "lz4", True, 12, 50, 80_000),
            _lat(1000, 10.0, rounds=2),
            _lat(5000, 8.0, rounds=2),
            _lat(20000, 6.0, rounds=2),
        ],
    },
}


# -- verification ----------------------------------------------------------------------------


def check_end_offsets(ends: dict[int, int], expected: int) -> str | None:
    """The topic is fresh, so its end offsets must add up to exactly the records sent.

    With idempotence on, a retried batch must not be appended twice: a sum above
    ``expected`` is a duplicate even before the content is read.
    """
    total = sum(ends.values())
    if total == expected:
        return None
    kind = "more" if total > expected else "fewer"
    return f"end offsets add up to {total}, {kind} than the {expected} records sent"


def verify_sequenced(
    records: Sequence[Any], expected: int, value_size: int, keyed: bool
) -> dict[str, Any]:
    """Check a Python client's topic: every sequence number exactly once, byte for byte.

    ``records`` are :class:`aioproducer.testing.verify.ConsumedRecord`. Each value must be
    exactly what the clients send for its sequence number, with the right key (or none), and
    every key must have gone to a single partition (the point of keys).
    """
    seen = bytearray(expected)
    duplicates = malformed = 0
    key_partitions: dict[bytes, set[int]] = defaultdict(set)
    for record in records:
        value = record.value
        if value is None or len(value) != value_size:
            malformed += 1
            continue
        try:
            seq = int(value[:SEQ_DIGITS])
        except ValueError:
            malformed += 1
            continue
        if not 0 <= seq < expected or value != make_value(seq, value_size):
            malformed += 1
            continue
        want_key = key_for(seq) if keyed else None
        if record.key != want_key:
            malformed += 1
            continue
        if want_key is not None:
            key_partitions[want_key].add(record.partition)
        if seen[seq]:
            duplicates += 1
        else:
            seen[seq] = 1
    missing = expected - sum(seen)
    split_keys = sum(1 for parts in key_partitions.values() if len(parts) > 1)
    partitions = Counter(record.partition for record in records)
    return {
        "ok": len(records) == expected and not (duplicates or missing or malformed or split_keys),
        "read": len(records),
        "missing": missing,
        "duplicates": duplicates,
        "malformed": malformed,
        "keys_in_several_partitions": split_keys,
        "distinct_keys": len(key_partitions),
        "partitions_used": len(partitions),
        "largest_partition_share": max(partitions.values()) / len(records) if records else 0.0,
    }


def verify_random(records: Sequence[Any], expected: int, value_size: int) -> dict[str, Any]:
    """Check the Java tool's topic: ``expected`` distinct keyless A-Z values of the right size.

    ProducerPerformance's payloads carry no sequence number: each is ``value_size`` random
    letters, new per record. Two equal values by chance are practically impossible
    (26^100 possibilities for 100 B), so a repeated value is a duplicated record, and with
    the count exact, nothing is missing either.
    """
    malformed = 0
    distinct: set[bytes] = set()
    for record in records:
        value = record.value
        if (
            record.key is not None
            or value is None
            or len(value) != value_size
            or not value.isalpha()
            or not value.isupper()
        ):
            malformed += 1
            continue
        distinct.add(value)
    duplicates = len(records) - malformed - len(distinct)
    missing = max(0, expected - len(distinct))
    partitions = Counter(record.partition for record in records)
    return {
        "ok": len(records) == expected and not (duplicates or missing or malformed),
        "read": len(records),
        "missing": missing,
        "duplicates": duplicates,
        "malformed": malformed,
        "partitions_used": len(partitions),
        "largest_partition_share": max(partitions.values()) / len(records) if records else 0.0,
    }


# -- one run ---------------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
    """One client's run of one workload in one round.

    ``status`` is ``ok``, ``failed`` (crashed, timed out, reported delivery errors or did not
    verify), ``unavailable`` (the client's library is missing) or ``n/a`` (the client cannot
    run this workload, e.g. keys for the Java tool).
    """

    workload: str
    client: str
    round: int
    topic: str
    status: str = "failed"
    reason: str | None = None
    report: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    end_offsets: dict[int, int] | None = None
    stderr_tail: str = ""
    harness_wall_s: float = 0.0

    @property
    def rate(self) -> float:
        """Records per second in the client's measuring window."""
        assert self.report is not None
        return float(self.report["records"]) / float(self.report["elapsed_s"])

    @property
    def cpu_s_per_million(self) -> float:
        """User+system CPU seconds per million records (all threads of the client process)."""
        assert self.report is not None
        cpu = float(self.report["cpu_user_s"]) + float(self.report["cpu_sys_s"])
        return cpu * 1e6 / float(self.report["records"])


def _client_command(client: str, w: Workload, bootstrap: str, topic: str) -> list[str]:
    command = [
        sys.executable,
        "-m",
        CLIENTS[client].module,
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--records",
        str(w.records),
        "--value-size",
        str(w.value_size),
        "--compression",
        w.compression,
        "--senders",
        str(w.senders),
    ]
    if w.keyed:
        command.append("--keyed")
    if w.rate:
        command += ["--rate", str(w.rate)]
    return command


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-_STDERR_TAIL:])


def _partitions_by_seq(records: Sequence[Any], n: int) -> list[int]:
    """The partition each of ``n`` sequence numbers was read back from (-1: not read)."""
    partition_of = [-1] * n
    for record in records:
        with contextlib.suppress(TypeError, ValueError, IndexError):
            partition_of[int(record.value[:SEQ_DIGITS])] = record.partition
    return partition_of


def steady_latency(times: dict[str, Any], partition_of: Sequence[int]) -> dict[str, Any]:
    """Percentiles of a paced run's steady state, from the client's per-record times
    (``--latency-out``) and the partition each record was read back from.

    The window opens once the client's first visit to every partition (its first records
    there, up to the first record that went elsewhere) has been acknowledged, and not
    before its first second (``warmup_records``). A broker that has served a few hundred
    topics can take 40-50 ms over a fresh partition's first index entries (written once
    4 KB have reached it, so in a first visit's second or third request), and
    partitioners reach the last partition at different times: librdkafka's moves on every
    10 ms and has visited 12 partitions within 0.4-0.7 s; one that keeps a partition for
    a whole batch (KIP-794, as Java's and ours) takes 1-2.5 s at 5,000 records/s. A window
    that opens at a fixed second compares those start-ups, not the producers: the figures
    from the first second on are reported beside these, and ``startup_max_ms`` is the
    slowest record before the window.
    """
    sent: list[float] = times["sent"]
    acked: list[float | None] = times["acked"]
    n = len(sent)
    first_visit_acked: dict[int, float] = {}  # partition: its first visit's last ack
    i = 0
    while i < n:
        p = partition_of[i]
        j = i
        while j < n and partition_of[j] == p:
            j += 1
        if p not in first_visit_acked:
            # A visit that lasts to the end (one partition) is over at its first answer.
            visit = acked[i : i + 1] if j == n else acked[i:j]
            first_visit_acked[p] = max(float("inf") if a is None else a for a in visit)
        i = j
    every_partition = max(first_visit_acked.values(), default=float("inf"))
    # ``sent`` is in send order, so ascending.
    start = bisect.bisect_left(sent, every_partition, lo=min(int(times["warmup_records"]), n))
    lat = sorted(
        (a - s) * 1000.0 for s, a in zip(sent[start:], acked[start:], strict=True) if a is not None
    )
    before = [
        (a - s) * 1000.0 for s, a in zip(sent[:start], acked[:start], strict=True) if a is not None
    ]
    return {
        "all_partitions_acked_s": every_partition,
        "window_start_s": sent[start] if start < n else float("nan"),
        "window_records": len(lat),
        "startup_max_ms": max(before, default=float("nan")),
        **latency_figures(lat),
    }


def run_one(
    client: str, w: Workload, round_no: int, broker: _Broker, timeout: float, verify: bool = True
) -> RunResult:
    """Run ``client`` on a fresh topic, then read the topic back and judge the run."""
    topic = f"bench-{broker.run_id}-{w.name}-{client}-r{round_no}"
    result = RunResult(w.name, client, round_no, topic)
    why_not = CLIENTS[client].not_applicable(keyed=w.keyed, senders=w.senders, rate=w.rate)
    if why_not is not None:
        result.status, result.reason = "n/a", why_not
        return result
    broker.create_topic(topic, w.partitions)
    command = _client_command(client, w, broker.bootstrap, topic)
    times_path: Path | None = None
    if w.rate and CLIENTS[client].kind != "java":
        fd, name = tempfile.mkstemp(prefix="bench-latency-", suffix=".json")
        os.close(fd)
        times_path = Path(name)
        command += ["--latency-out", name]
    try:
        return _run_client(w, broker, timeout, verify, result, command, times_path)
    finally:
        if times_path is not None:
            times_path.unlink(missing_ok=True)


def _run_client(
    w: Workload,
    broker: _Broker,
    timeout: float,
    verify: bool,
    result: RunResult,
    command: list[str],
    times_path: Path | None,
) -> RunResult:
    started = time.perf_counter()
    # Its own session, so that a timeout kills the whole process group: the Java client is
    # a Python process with a JVM child, which killing the parent alone would leave running.
    proc = subprocess.Popen(
        command,
        cwd=_REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _stdout, stderr = proc.communicate()
        result.stderr_tail = _tail(stderr or "")
        result.reason = f"the client did not finish within {timeout:.0f} s (killed)"
        return result
    except BaseException:
        # E.g. Ctrl-C: in its own session the client did not get the SIGINT; stop it too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        result.harness_wall_s = time.perf_counter() - started
    result.stderr_tail = _tail(stderr)
    lines = stdout.strip().splitlines()
    report: dict[str, Any] | None = None
    if lines:
        with contextlib.suppress(json.JSONDecodeError):
            report = json.loads(lines[-1])
    if proc.returncode == EXIT_UNAVAILABLE and report and "unavailable" in report:
        result.status, result.reason = "unavailable", str(report["unavailable"])
        return result
    if proc.returncode != 0 or report is None:
        result.reason = f"the client exited with status {proc.returncode}:\n{result.stderr_tail}"
        return result
    result.report = report
    if not verify:
        result.status = "ok"
        return result
    problems = _judge(result, w, broker, times_path)
    result.status = "failed" if problems else "ok"
    result.reason = "; ".join(problems) or None
    return result


def _judge(
    result: RunResult, w: Workload, broker: _Broker, times_path: Path | None = None
) -> list[str]:
    from aioproducer.testing.verify import consume_all, topic_end_offsets

    report = result.report
    assert report is not None
    problems = []
    if report.get("errors"):
        samples = "; ".join(report.get("error_samples") or [])
        problems.append(f"the client reported {report['errors']} failed deliveries ({samples})")
    if report.get("records") != w.records:
        problems.append(f"the client reported {report.get('records')} records")
    latency = report.get("latency")
    if latency and latency.get("unacked"):
        problems.append(f"{latency['unacked']} records never got an acknowledgement callback")
    try:
        result.end_offsets = ends = topic_end_offsets(broker.bootstrap, result.topic)
        if (problem := check_end_offsets(ends, w.records)) is not None:
            problems.append(problem)
        records = consume_all(broker.bootstrap, result.topic, expected=w.records, timeout=300)
    except (TimeoutError, RuntimeError) as exc:
        problems.append(f"reading the topic back failed: {exc}")
        return problems
    if CLIENTS[result.client].kind == "java":
        verification = verify_random(records, w.records, w.value_size)
    else:
        verification = verify_sequenced(records, w.records, w.value_size, w.keyed)
        if times_path is not None:
            try:
                times = json.loads(times_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                problems.append(f"the client's per-record times could not be read: {exc}")
            else:
                partition_of = _partitions_by_seq(records, len(times["sent"]))
                report["latency_steady"] = steady_latency(times, partition_of)
                if where := os.environ.get("BENCH_LATENCY_DUMP"):
                    # For looking into a run: its times with each record's partition.
                    times["partition"] = partition_of
                    times["client"], times["round"] = result.client, result.round
                    Path(where, f"{result.topic}.json").write_text(json.dumps(times))
    result.verification = verification
    if not verification["ok"]:
        problems.append(
            f"read back {verification['read']} of {w.records} records: "
            f"{verification['missing']} missing, {verification['duplicates']} duplicated, "
            f"{verification['malformed']} malformed"
            + (
                f", {verification['keys_in_several_partitions']} keys split across partitions"
                if verification.get("keys_in_several_partitions")
                else ""
            )
        )
    return problems


# -- the broker ------------------------------------------------------------------------------


class _Broker:
    def __init__(self, bootstrap: str, create: Callable[[str, int], None], text: str) -> None:
        self.bootstrap = bootstrap
        self.create_topic = create
        self.text = text
        self.run_id = uuid.uuid4().hex[:6]


@contextlib.contextmanager
def _broker(args: argparse.Namespace) -> Iterator[_Broker]:
    if args.bootstrap_servers:
        from .producer_compare import _create_topic_external

        bootstrap = args.bootstrap_servers
        yield _Broker(
            bootstrap,
            lambda name, n: _create_topic_external(bootstrap, name, n),
            f"external cluster at {bootstrap}",
        )
        return
    from aioproducer.testing import KafkaCluster

    with KafkaCluster(nodes=1, heap=args.broker_heap, jvm_args=_BROKER_JVM_ARGS) as kc:

        def create(name: str, partitions: int) -> None:
            kc.create_topic(name, partitions=partitions)

        yield _Broker(
            kc.bootstrap_servers,
            create,
            f"Apache Kafka {kc.version}, one combined broker/controller node "
            f"(KafkaCluster, -Xmx{args.broker_heap}, serial GC), on the same machine",
        )


# -- summary ---------------------------------------------------------------------------------


def fmt_median_range(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``median (min-max)`` of ``values``, or just the value if there is one."""
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def summarize(results: Sequence[RunResult], workload: str, client: str) -> dict[str, Any]:
    """One client's figures for one workload: medians over its verified rounds.

    Any failed round makes the whole cell FAILED: a client that lost or duplicated a record
    once is not given a number from its other rounds.
    """
    runs = [r for r in results if r.workload == workload and r.client == client]
    if not runs:
        return {"status": "not run"}
    for status in ("n/a", "unavailable"):
        if all(r.status == status for r in runs):
            return {"status": status, "reason": runs[0].reason}
    failed = [r for r in runs if r.status != "ok"]
    if failed:
        return {
            "status": "FAILED",
            "rounds": len(runs),
            "failed_rounds": len(failed),
            "reasons": [f"round {r.round}: {r.reason}" for r in failed],
        }
    rates = [r.rate for r in runs]
    out: dict[str, Any] = {
        "status": "ok",
        "rounds": len(runs),
        "rates": rates,
        "rate_median": statistics.median(rates),
        "mb_per_s_median": statistics.median(
            r.rate * float(r.report["value_size"]) / 1e6 for r in runs if r.report
        ),
        "cpu_s_per_million_median": statistics.median(r.cpu_s_per_million for r in runs),
        "peak_rss_mib_max": max(float(r.report["peak_rss_mib"]) for r in runs if r.report),
        "cpu_includes_startup": any(
            (r.report or {}).get("notes", {}).get("cpu_includes_jvm_startup") for r in runs
        ),
    }
    lat = [r.report["latency"] for r in runs if r.report and r.report.get("latency")]
    if lat:
        # The steady-state window where the harness computed one (see steady_latency),
        # else the client's own figures (the Java tool).
        steady = [r.report.get("latency_steady") or r.report["latency"] for r in runs if r.report]
        for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
            out[key] = [float(x[key]) for x in steady]
        out["p99_from_1s_ms"] = [float(x["p99_ms"]) for x in lat]
        out["window_start_s"] = [float(x.get("window_start_s", float("nan"))) for x in steady]
        out["startup_max_ms"] = [float(x.get("startup_max_ms", float("nan"))) for x in steady]
        out["achieved_rate"] = [float(x["achieved_rate"]) for x in lat]
        out["kept_rate"] = all(x["kept_rate"] for x in lat)
    return out


def _ratio(cells: dict[str, dict[str, Any]], client: str, base: str) -> str:
    mine, other = cells[client], cells.get(base)
    if other is None or other.get("status") != "ok" or mine.get("status") != "ok":
        return "-"
    return f"{mine['rate_median'] / other['rate_median']:.2f}x"


def _status_row(s: dict[str, Any], columns: int) -> str:
    if s["status"] == "FAILED":
        text = f"**FAILED** ({s['failed_rounds']}/{s['rounds']} runs)"
    elif s["status"] in ("n/a", "unavailable"):
        text = f"{s['status']}: {s.get('reason') or ''}".strip()
    else:
        text = s["status"]
    return f" | {text}" + " | -" * (columns - 1) + " |"


def render_throughput(cells: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of one throughput workload."""
    out = [
        "| client | records/s, median (min-max) | MB/s | CPU s / M records | peak RSS MiB "
        "| vs aiokafka | vs confluent-sync | vs Java |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client, s in cells.items():
        if s["status"] != "ok":
            out.append(f"| {client}" + _status_row(s, 7))
            continue
        star = "*" if s["cpu_includes_startup"] else ""
        out.append(
            f"| {client} | {fmt_median_range(s['rates'])} | {s['mb_per_s_median']:.2f} "
            f"| {s['cpu_s_per_million_median']:.1f}{star} | {s['peak_rss_mib_max']:.0f} | "
            + " | ".join(_ratio(cells, client, b) for b in _BASELINES)
            + " |"
        )
    return "\n".join(out)


def render_latency(cells: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of one fixed-rate workload."""
    out = [
        "| client | achieved records/s | p50 ms | p99 ms | p99.9 ms | max ms "
        "| window opens, s | slowest before it, ms | p99 ms from 1 s | CPU s / M records "
        "| peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client, s in cells.items():
        if s["status"] != "ok":
            out.append(f"| {client}" + _status_row(s, 10))
            continue
        star = "*" if s["cpu_includes_startup"] else ""
        behind = "" if s.get("kept_rate", True) else " (fell behind)"
        opens = [x for x in s["window_start_s"] if not math.isnan(x)]
        startup = [x for x in s["startup_max_ms"] if not math.isnan(x)]
        out.append(
            f"| {client} | {fmt_median_range(s['achieved_rate'])}{behind} "
            f"| {fmt_median_range(s['p50_ms'], '.1f')} | {fmt_median_range(s['p99_ms'], '.1f')} "
            f"| {fmt_median_range(s['p999_ms'], '.1f')} | {statistics.median(s['max_ms']):.1f} "
            f"| {fmt_median_range(opens, '.1f') if opens else '-'} "
            f"| {fmt_median_range(startup, '.0f') if startup else '-'} "
            f"| {fmt_median_range(s['p99_from_1s_ms'], '.1f')} "
            f"| {s['cpu_s_per_million_median']:.1f}{star} | {s['peak_rss_mib_max']:.0f} |"
        )
    return "\n".join(out)


# -- the machine -----------------------------------------------------------------------------


def machine_description() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, Python and Java: the context every number needs."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    java = "?"
    with contextlib.suppress(Exception):
        from aioproducer.testing import find_java

        java = find_java().version_line
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram": ram,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "java": java,
        "kafka": _KAFKA_VERSION,
    }


def _loadavg() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "?"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def _versions() -> dict[str, str]:
    import importlib.metadata

    out = {}
    for dist in (
        "aioproducer",
        "aiokafka",
        "confluent-kafka",
        "kafka-python",
        "crc32c",
        "uvloop",
        "trio",
        "anyio",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    out["kafka-tools (Java)"] = _KAFKA_VERSION
    return out


# -- report ----------------------------------------------------------------------------------


def render_markdown(meta: dict[str, Any], tables: list[tuple[Workload, dict[str, Any]]]) -> str:
    """The whole report: machine, settings, one table per workload, failures, charts."""
    m = meta["machine"]
    out = [
        f"# Producer benchmark, `{meta['suite']}` suite",
        "",
        f"- Date: {meta['date']}; duration {meta['duration_s'] / 60:.1f} min",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram']} RAM; {m['os']}",
        f"- Load average (1/5/15 min) at start: {meta['load_start']}; at end: {meta['load_end']}",
        f"- {m['python']}; {m['java']}",
        f"- Broker: {meta['broker']}",
        "- Libraries: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- Every client: acks=all, idempotence on, linger {LINGER_MS} ms, batch size "
        f"{BATCH_SIZE} B (where it has these settings), everything else at its defaults. "
        f"Keyed workloads use {NUM_KEYS} distinct keys.",
        f"- Rounds: {meta['rounds_text']}, interleaved (every client once per round, in the "
        "order of the tables). Figures are medians over rounds; min-max in parentheses.",
        "- Every run was read back and checked (end offsets, then every record's content); "
        "a run that lost, duplicated, corrupted or misplaced a record, or reported a failed "
        "delivery, is **FAILED** and gives no numbers.",
        "",
        "records/s: from the first send to the last acknowledgement checked, inside the "
        "client's process (start-up and connecting excluded). MB/s: value bytes only. "
        "CPU s / M records: user+system CPU of the whole client process (all its threads) "
        "in that window, per million records. Peak RSS: the client process's high-water "
        "mark, the largest over rounds. Ratios compare median records/s. "
        "`*`: the Java tool's CPU is that of its whole JVM process, including JVM start-up "
        "and JIT compilation, so it is overstated, most for small runs. "
        "Latency: send call to acknowledgement callback, per record, in the steady state: "
        "from the first record sent after the client's first visit to every partition (its "
        "first records there, up to one that went elsewhere) was acknowledged, and not before "
        "its first second of records (at most a quarter of the run; start-up, e.g. librdkafka's asynchronous producer-id "
        "set-up). A broker that has served a few hundred topics can take 40-50 ms over a "
        "fresh partition's first index entries, and partitioners reach the last partition at "
        "different times (librdkafka's within 0.4-0.7 s at 5,000 records/s; KIP-794's, as "
        "Java's and ours, in 1-2.5 s). 'window opens': when that was, seconds after the first "
        "send; 'slowest before it': the largest latency before the window; 'p99 ms from 1 s': "
        "the p99 of every record after the first second, first visits included. The Java "
        "tool reports its own percentiles with the same "
        "definition and the same number of warm-up records (`--warmup-records`). `n/a`: the client cannot run that "
        "workload; `unavailable`: its library is not installed.",
        "",
    ]
    for chart in meta["charts"]:
        out += [f"![{chart}]({chart})", ""]
    failures: list[str] = []
    for w, cells in tables:
        out += [f"## {w.title}", ""]
        out.append(render_latency(cells) if w.rate else render_throughput(cells))
        out.append("")
        for client, s in cells.items():
            for reason in s.get("reasons", []):
                first = reason.splitlines()[0] if reason else ""
                failures.append(f"- `{w.name}` {client}, {first}")
    if failures:
        out += ["## Failed runs", "", *failures, ""]
    return "\n".join(out)


# -- command line ----------------------------------------------------------------------------


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark aioproducer against other Kafka producers (and the Java "
        "producer); every run is verified by reading its topic back.",
    )
    parser.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default="quick",
        help="quick (default; a few minutes) or full (the whole matrix; under 45 min)",
    )
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated, in run order (default: all: {','.join(CLIENTS)})",
    )
    parser.add_argument("--rounds", type=int, help="override the suite's rounds")
    parser.add_argument(
        "--workloads",
        help="comma-separated substrings; run only workloads whose name contains one (see --list)",
    )
    parser.add_argument("--list", action="store_true", help="list the suite's workloads")
    parser.add_argument(
        "--records-scale",
        type=float,
        default=1.0,
        help="multiply every workload's record count (e.g. 0.1 for a smoke run)",
    )
    parser.add_argument("--bootstrap-servers", help="use this cluster instead of starting one")
    parser.add_argument("--broker-heap", default="1g", help="heap of the broker we start")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=_REPO_ROOT / "bench" / "results",
        help="where <suite>.md and the charts go (default bench/results)",
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=_REPO_ROOT / "bench" / "raw",
        help="raw JSON per run goes to <raw-dir>/<suite>-<UTC time>/ (default bench/raw)",
    )
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds a single run may take before it is killed and FAILED (default 180; "
        "the slowest client needs about 10 s for the largest workload on 2 cores)",
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the unmeasured run before each workload that keeps the broker warm",
    )
    args = parser.parse_args(argv)
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in args.clients if c not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {', '.join(unknown)}; known: {', '.join(CLIENTS)}")
    if not args.clients or len(set(args.clients)) != len(args.clients):
        parser.error("--clients must name each client at most once, and at least one")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def _selected_workloads(args: argparse.Namespace) -> list[Workload]:
    workloads: list[Workload] = list(SUITES[args.suite]["workloads"])
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
        workloads = [w for w in workloads if any(x in w.name for x in wanted)]
    if args.records_scale != 1.0:
        workloads = [
            dataclasses.replace(w, records=max(100, int(w.records * args.records_scale)))
            for w in workloads
        ]
    return workloads


def _rounds(args: argparse.Namespace, w: Workload) -> int:
    if args.rounds is not None:
        return int(args.rounds)
    return w.rounds or int(SUITES[args.suite]["rounds"])


def _write_raw(raw_dir: Path, result: RunResult) -> None:
    path = raw_dir / f"{result.workload}__{result.client}__r{result.round}.json"
    path.write_text(
        json.dumps(dataclasses.asdict(result), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def _warm_up(args: argparse.Namespace, w: Workload, broker: _Broker) -> None:
    """One unmeasured run before a workload, so no client meets a cold broker or codec path.

    A freshly started broker JVM is several times slower for its first seconds of load
    (JIT compilation), and each compression codec has its own broker path to compile; that
    would penalise whichever client runs first. A paced (latency) workload is warmed by a
    paced run too: its small, frequent requests are their own broker path, and without it
    the first client of the first round met a broker whose tail was still 1-2 ms longer.
    """
    if args.no_warmup:
        return
    pick = next((c for c in _WARMUP_PREFERENCE if c in args.clients), args.clients[0])
    if CLIENTS[pick].not_applicable(keyed=w.keyed, senders=w.senders, rate=w.rate):
        return
    warm = dataclasses.replace(w, records=min(w.records, int(SUITES[args.suite]["warmup_records"])))
    result = run_one(pick, warm, 0, broker, args.timeout, verify=False)
    if result.status != "ok":
        _log(f"  warm-up with {pick} did not succeed (ignored): {result.reason}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run a suite; 0 if no run failed (unavailable and n/a clients do not count)."""
    args = _parse_args(argv)
    workloads = _selected_workloads(args)
    if args.list or not workloads:
        for w in workloads:
            print(f"{w.name:40} {_rounds(args, w)} round(s)  {w.title}")
        return 0 if workloads else 2
    started_at = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    load_start = _loadavg()
    runs = sum(_rounds(args, w) * len(args.clients) for w in workloads)
    _log(f"suite {args.suite}: {len(workloads)} workloads, up to {runs} runs")
    stamp = started_at.strftime("%Y%m%d-%H%M%S")
    raw_dir = args.raw_dir / f"{args.suite}-{stamp}"
    raw_dir.mkdir(parents=True, exist_ok=True)

    if "java" in args.clients:
        from .clients.java_perf import ensure_tools, tools_dir

        if not (tools_dir() / ".complete").exists():
            _log("fetching org.apache.kafka:kafka-tools with Maven (first time only) ...")
        t0 = time.monotonic()
        ensure_tools()
        _log(f"  kafka-tools jars ready ({time.monotonic() - t0:.1f} s)")

    results: list[RunResult] = []
    done = 0
    _log("starting Kafka ..." if not args.bootstrap_servers else "using the given cluster")
    with _broker(args) as broker:
        _log(f"  broker ready after {time.monotonic() - t_start:.0f} s: {broker.bootstrap}")
        for w in workloads:
            _log(f"workload {w.name}: {w.title}")
            _warm_up(args, w, broker)
            for round_no in range(1, _rounds(args, w) + 1):
                for client in args.clients:
                    done += 1
                    result = run_one(client, w, round_no, broker, args.timeout)
                    results.append(result)
                    _write_raw(raw_dir, result)
                    elapsed = time.monotonic() - t_start
                    head = f"  [{done}/{runs} {elapsed / 60:4.1f} min] r{round_no} {client:20}"
                    if result.status == "ok":
                        extra = ""
                        lat = (result.report or {}).get("latency")
                        steady = (result.report or {}).get("latency_steady")
                        if lat and steady:
                            extra = (
                                f", p99 {steady['p99_ms']:.1f} ms from "
                                f"{steady['window_start_s']:.1f} s ({lat['p99_ms']:.1f} from 1 s)"
                            )
                        elif lat:
                            extra = f", p99 {lat['p99_ms']:.1f} ms"
                        _log(f"{head} {result.rate:>10,.0f} rec/s{extra}, verified")
                    else:
                        first = (result.reason or "").splitlines()[0] if result.reason else ""
                        _log(f"{head} {result.status.upper()}: {first}")
        broker_text = broker.text

    tables = [(w, {c: summarize(results, w.name, c) for c in args.clients}) for w in workloads]
    duration = time.monotonic() - t_start
    rounds_set = sorted({_rounds(args, w) for w in workloads})
    meta: dict[str, Any] = {
        "suite": args.suite,
        "date": started_at.strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": duration,
        "machine": machine_description(),
        "load_start": load_start,
        "load_end": _loadavg(),
        "broker": broker_text,
        "versions": _versions(),
        "rounds_text": " or ".join(str(r) for r in rounds_set) + " per workload",
        "clients": args.clients,
        "workloads": [dataclasses.asdict(w) | {"name": w.name} for w in workloads],
        "charts": [],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    if not args.no_charts:
        from .charts import draw_charts

        meta["charts"] = draw_charts(args.suite, tables, args.results_dir)
    markdown = render_markdown(meta, tables)
    out_md = args.results_dir / f"{args.suite}.md"
    out_md.write_text(markdown, encoding="utf-8")
    summary = {
        "meta": meta,
        "tables": {w.name: cells for w, cells in tables},
        "runs": [dataclasses.asdict(r) for r in results],
    }
    (raw_dir / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    print(markdown)
    _log(f"wrote {out_md} and {raw_dir}/ in {duration / 60:.1f} min")
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
