"""The Java producer, through Apache Kafka's own benchmark tool ``ProducerPerformance``.

``org.apache.kafka.tools.ProducerPerformance`` (``kafka-producer-perf-test``) from
``org.apache.kafka:kafka-tools`` is the reference ceiling: the Java ``KafkaProducer`` driven
by a tight Java loop. Its jars are fetched once with Maven into the aioproducer cache
(:func:`ensure_tools`). This module runs it as a child process with the same producer
settings as every other client and turns its summary line into the common JSON report:

- records/s and latencies are the tool's own (its window starts at its first send);
- CPU and peak RSS are the JVM process's, from ``wait4()``: the CPU therefore includes JVM
  start-up and JIT compilation, which the Python clients' windows exclude (noted in the
  report); peak RSS is the JVM's own high-water mark;
- payloads are ``--record-size`` bytes of random letters A-Z, new for every record, and
  keyless: the tool has no keys, so keyed workloads and several senders are not applicable.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._common import BATCH_SIZE, LINGER_MS, emit, latency_warmup, parse_args

__all__ = ["KAFKA_TOOLS_VERSION", "ensure_tools", "parse_summary", "tools_dir"]

KAFKA_TOOLS_VERSION = "4.3.1"
CLIENT = "java"
_MAIN_CLASS = "org.apache.kafka.tools.ProducerPerformance"
_POM = Path(__file__).resolve().parent.parent / "java" / "kafka-tools-pom.xml"
_COMPLETE = ".complete"
#: The heap kafka-producer-perf-test.sh gives the tool.
_HEAP = "-Xmx512M"

# "100000 records sent, 96246.390760 records/sec (9.18 MB/sec), 129.47 ms avg latency,
#  425.00 ms max latency, 122 ms 50th, 198 ms 95th, 204 ms 99th, 205 ms 99.9th."
_SUMMARY_RE = re.compile(
    r"^(?P<records>\d+) (?P<steady>steady state )?records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, "
    r"(?P<p999>\d+) ms 99\.9th\.\s*$"
)


def parse_summary(output: str, *, steady_state: bool = False) -> dict[str, float]:
    """A summary line of ProducerPerformance's stdout, as numbers.

    The whole run's, or with ``steady_state`` the one printed after it when
    ``--warmup-records`` was given ("N steady state records sent, ..."). Raises
    ``ValueError`` if there is none. Progress lines (every 5 s) look alike but end in
    "max latency." without percentiles, so only summaries match.
    """
    for line in reversed(output.strip().splitlines()):
        match = _SUMMARY_RE.match(line.strip())
        if match and bool(match.group("steady")) == steady_state:
            g = match.groupdict()
            return {
                "records": int(g["records"]),
                "records_per_s": float(g["rate"]),
                "mb_per_s": float(g["mb"]),
                "mean_ms": float(g["avg"]),
                "max_ms": float(g["max"]),
                "p50_ms": float(g["p50"]),
                "p95_ms": float(g["p95"]),
                "p99_ms": float(g["p99"]),
                "p999_ms": float(g["p999"]),
            }
    kind = "steady-state summary" if steady_state else "summary"
    raise ValueError(f"no ProducerPerformance {kind} line in its output")


def tools_dir(version: str = KAFKA_TOOLS_VERSION) -> Path:
    """Where the kafka-tools jars of ``version`` are cached."""
    from aioproducer.testing import default_cache_dir

    return default_cache_dir() / "bench" / f"java-tools-{version}"


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_tools(version: str = KAFKA_TOOLS_VERSION) -> Path:
    """Fetch ``kafka-tools`` and its runtime dependencies once; return the jar directory.

    Like the broker jars (:func:`aioproducer.testing.ensure_kafka`): Maven copies them into
    a temporary directory that is renamed into place when complete, under a file lock.
    """
    home = tools_dir(version)
    libs = home / "libs"
    if (home / _COMPLETE).is_file():
        return libs
    home.parent.mkdir(parents=True, exist_ok=True)
    with _lock(home.parent / f".java-tools-{version}.lock"):
        if (home / _COMPLETE).is_file():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("Apache Maven (`mvn`) is needed once to fetch kafka-tools")
        if home.exists():
            shutil.rmtree(home)
        staging = Path(tempfile.mkdtemp(prefix=f".java-tools-{version}-", dir=home.parent))
        try:
            command = [
                mvn,
                "-B",
                "--no-transfer-progress",
                "-f",
                str(_POM),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={staging / 'libs'}",
                f"-Dkafka.version={version}",
            ]
            proc = subprocess.run(
                command, cwd=staging, capture_output=True, text=True, timeout=900, check=False
            )
            (staging / "fetch.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
            if (
                proc.returncode != 0
                or not (staging / "libs" / f"kafka-tools-{version}.jar").is_file()
            ):
                tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
                raise RuntimeError(f"Maven could not fetch kafka-tools {version}:\n{tail}")
            (staging / _COMPLETE).write_text(f"kafka-tools {version}\n", encoding="utf-8")
            staging.chmod(0o755)
            os.replace(staging, home)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return libs


def _java() -> str:
    from aioproducer.testing import find_java

    return find_java().executable


def main(argv: list[str] | None = None) -> int:
    """Run ProducerPerformance once and print the common JSON report."""
    args = parse_args("java ProducerPerformance", argv)
    if args.keyed or args.senders != 1:
        emit(
            {"client": CLIENT, "unavailable": "ProducerPerformance is keyless and single-threaded"}
        )
        return 3
    libs = ensure_tools()
    command = [
        _java(),
        _HEAP,
        "-cp",
        f"{libs}/*",
        _MAIN_CLASS,
        "--bootstrap-server",
        args.bootstrap_servers,
        "--topic",
        args.topic,
        "--num-records",
        str(args.records),
        "--record-size",
        str(args.value_size),
        "--throughput",
        str(int(args.rate)) if args.rate else "-1",
        "--command-property",
        "acks=all",
        "enable.idempotence=true",
        f"linger.ms={LINGER_MS}",
        f"batch.size={BATCH_SIZE}",
        f"compression.type={args.compression}",
    ]
    warmup = latency_warmup(args.rate, args.records) if args.rate else 0
    if warmup:
        # Same first records left out of the latency figures as for the Python clients.
        command[command.index("--command-property") : command.index("--command-property")] = [
            "--warmup-records",
            str(warmup),
        ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    # communicate() reads both pipes; wait4() then reaps the JVM and returns its rusage.
    # Popen.wait() must not reap it first, so the output is read without waiting.
    out_b, err_b = _read_all(proc)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    stdout = out_b.decode(errors="replace")
    sys.stderr.write(err_b.decode(errors="replace"))
    if proc.returncode != 0:
        sys.stderr.write(stdout[-4000:])
        return proc.returncode or 1
    summary = parse_summary(stdout)
    report: dict[str, Any] = {
        "client": CLIENT,
        "library": "kafka-tools",
        "library_version": KAFKA_TOOLS_VERSION,
        "python": None,
        "loop": "java",
        "records": summary["records"],
        "value_size": args.value_size,
        "compression": args.compression,
        "keyed": False,
        "senders": 1,
        "rate": args.rate,
        "errors": 0,
        "error_samples": [],
        "notes": {
            "cpu_includes_jvm_startup": True,
            "process_wall_s": wall,
            "java_summary": summary,
        },
        "elapsed_s": summary["records"] / summary["records_per_s"],
        "cpu_user_s": usage.ru_utime,
        "cpu_sys_s": usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
    }
    if args.rate:
        report["latency"] = {
            "target_rate": args.rate,
            "achieved_rate": summary["records_per_s"],
            "kept_rate": summary["records_per_s"] >= args.rate * 0.95,
            "unacked": 0,
            **{
                k: summary[k]
                for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms")
            },
        }
    emit(report)
    return 0


def _read_all(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Both pipes to EOF without reaping the child (a thread drains stderr)."""
    import threading

    assert proc.stdout is not None and proc.stderr is not None
    err_chunks: list[bytes] = []
    stderr = proc.stderr
    reader = threading.Thread(target=lambda: err_chunks.append(stderr.read()))
    reader.start()
    out = proc.stdout.read()
    reader.join()
    return out, b"".join(err_chunks)


if __name__ == "__main__":
    raise SystemExit(main())
