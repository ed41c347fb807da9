"""``python -m bench.fence_check``: timed-out records never land after later records.

The scenario, on a real single-node Kafka: deliver ``warm-up``; freeze the broker with
SIGSTOP; send 50 records, which all fail with ``DeliveryTimeoutError`` while the broker
still holds some of their requests in its socket buffers; resume the broker; send
``after-0`` (then ``after-1``, ... if an attempt itself times out) until one is
acknowledged. Reading the topic back with confluent-kafka, no record whose send failed
with ``DeliveryTimeoutError`` may stand after the acknowledged one: the producer bumped
its epoch, so the broker refuses the old requests once the new epoch has written.

Each repetition uses a fresh topic and a fresh producer, on asyncio, uvloop and trio.
A repetition that breaks the guarantee is printed with the log it read, and the exit
status is 1. The tests run the same scenario once per backend
(``tests/producer/test_errors_and_lifecycle.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from aioproducer import DeliveryTimeoutError, Producer
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

BACKENDS: dict[str, tuple[str, dict[str, object]]] = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}
LATE_RECORDS = 50
PRODUCER_SETTINGS: dict[str, int] = {
    "linger_ms": 0,
    "request_timeout_ms": 800,
    "delivery_timeout_ms": 2500,
    "retry_backoff_ms": 50,
    "retry_backoff_max_ms": 200,
}


@dataclass
class Outcome:
    """What one run of the scenario sent, what failed, and what the topic holds."""

    values: list[bytes] = field(default_factory=list)  # the topic's log, in offset order
    timed_out: list[bytes] = field(default_factory=list)  # failed with DeliveryTimeoutError
    delivered_late: list[bytes] = field(default_factory=list)  # late records acknowledged
    acknowledged: bytes = b""  # the after-N record that was acknowledged
    acknowledged_offset: int = -1
    failed_within_s: float = 0.0  # from the first late send to the last late failure
    epoch_bumps: int = 0
    producer_id_resets: int = 0


async def run_scenario(cluster: KafkaCluster, topic: str) -> Outcome:
    """Run the pause / time out / resume / send-again scenario once on ``topic``."""
    out = Outcome()
    node = cluster.node_ids[0]
    async with Producer(cluster.bootstrap_servers, **PRODUCER_SETTINGS) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        cluster.pause_broker(node)  # a hang, not a crash: requests just get no answer
        try:
            started = time.monotonic()
            late = [f"late-{i}".encode() for i in range(LATE_RECORDS)]
            handles = [await producer.send(topic, value) for value in late]
            for value, handle in zip(late, handles, strict=True):
                try:
                    await handle
                except DeliveryTimeoutError:
                    out.timed_out.append(value)
                else:
                    out.delivered_late.append(value)
            out.failed_within_s = time.monotonic() - started
        finally:
            cluster.resume_broker(node)
        attempt = 0
        with anyio.fail_after(60):
            while not out.acknowledged:
                value = f"after-{attempt}".encode()
                try:
                    meta = await producer.send_and_wait(topic, value)
                except DeliveryTimeoutError:
                    out.timed_out.append(value)
                    attempt += 1
                else:
                    out.acknowledged, out.acknowledged_offset = value, meta.offset
        metrics = producer.metrics()
        out.epoch_bumps = int(metrics["producer_epoch_bumps"])
        out.producer_id_resets = int(metrics["producer_id_resets"])
    out.values = [r.value or b"" for r in consume_all(cluster.bootstrap_servers, topic)]
    return out


def violations(out: Outcome) -> list[str]:
    """Every way ``out`` breaks the guarantee (empty if it holds)."""
    problems = []
    values = out.values
    if not values or values[0] != b"warm-up":
        problems.append("warm-up is not the first record")
    if len(values) != len(set(values)):
        problems.append("a record was written twice")
    if values.count(out.acknowledged) != 1:
        problems.append(f"{out.acknowledged!r} is not in the log exactly once")
    elif values.index(out.acknowledged) != out.acknowledged_offset:
        problems.append(f"{out.acknowledged!r} is not at its acknowledged offset")
    else:
        after = values[values.index(out.acknowledged) + 1 :]
        landed_late = [v for v in after if v in set(out.timed_out)]
        if landed_late:
            problems.append(
                f"{len(landed_late)} timed-out record(s) landed after {out.acknowledged!r}: "
                f"{landed_late[:5]!r}"
            )
        if after:
            problems.append(f"records after the acknowledged one: {after[:5]!r}")
    unknown = set(values) - {b"warm-up", out.acknowledged, *out.timed_out, *out.delivered_late}
    if unknown:
        problems.append(f"records nobody sent: {sorted(unknown)[:5]!r}")
    return problems


def _run_one(cluster: KafkaCluster, backend: str) -> Outcome:
    name, options = BACKENDS[backend]
    topic = f"fence-{uuid.uuid4().hex[:12]}"
    cluster.create_topic(topic, partitions=1)
    return anyio.run(run_scenario, cluster, topic, backend=name, backend_options=options)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scenario ``--reps`` times per backend and report every violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20, help="repetitions per backend")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: asyncio,uvloop,trio"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "fence_check.md"
    )
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    rows = []
    failures = 0
    with KafkaCluster(nodes=1) as cluster:
        for rep in range(args.reps):
            for backend in backends:
                out = _run_one(cluster, backend)
                problems = violations(out)
                failures += bool(problems)
                landed_before = sum(v in set(out.timed_out) for v in out.values)
                rows.append(
                    (backend, rep, len(out.timed_out), landed_before, out.epoch_bumps, problems)
                )
                status = "ok" if not problems else "VIOLATION: " + "; ".join(problems)
                print(
                    f"{backend:8} rep {rep:2}: {len(out.timed_out)} timed out, "
                    f"{landed_before} of them written before the acknowledged record, "
                    f"{out.epoch_bumps} epoch bump(s), {out.producer_id_resets} id reset(s), "
                    f"failed within {out.failed_within_s:.2f} s: {status}",
                    flush=True,
                )
                if problems:
                    print("  log:", out.values, flush=True)
    lines = [
        "# Timed-out records never land after later records",
        "",
        f"`python -m bench.fence_check --reps {args.reps}`: single-node Kafka 4.3.1, broker "
        f"frozen with SIGSTOP while {LATE_RECORDS} records time out, then resumed; "
        f"settings {PRODUCER_SETTINGS}.",
        "",
        "| backend | runs | violations | timed-out records written before the later one "
        "(min-max per run) | epoch bumps per run |",
        "|---|---:|---:|---|---|",
    ]
    for backend in backends:
        mine = [r for r in rows if r[0] == backend]
        written = [r[3] for r in mine]
        bumps = [r[4] for r in mine]
        lines.append(
            f"| {backend} | {len(mine)} | {sum(bool(r[5]) for r in mine)} | "
            f"{min(written)}-{max(written)} | {min(bumps)}-{max(bumps)} |"
        )
    with contextlib.suppress(OSError):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
