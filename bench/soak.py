"""Soak test: a steady produce rate against a 3-node cluster whose leaders keep dying.

``python -m bench.soak --minutes 10 --rate 50000`` starts a local 3-node Kafka (replication
3, min.insync.replicas 2), produces at the target rate with acks=all and idempotence,
SIGKILLs the leader of a partition every ``--kill-every`` seconds (the first half-way
through the first period) and starts it again, and samples the process's RSS every few
seconds. At the end it reads every partition back with an independent client and reports:
records sent, acknowledged, failed, lost, duplicated, out of order; the recovery time of
each kill; RSS over time and whether it stayed flat. The exit status is 1 if anything was
lost, duplicated or reordered, or if RSS kept growing.

Each value is ``b"<partition>:<sequence>:"`` plus padding, so the read-back is checked as
it streams by, without holding the topic in memory.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.to_thread

from aioproducer import Producer
from aioproducer.results import DeliveryHandle
from aioproducer.testing import KafkaCluster, KafkaSetupError
from aioproducer.testing.verify import topic_end_offsets

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _malloc_trim() -> Callable[[], object]:
    """glibc's malloc_trim(0), or a no-op elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0)


trim_heap = _malloc_trim()


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE / (1 << 20)
    except OSError:
        return 0.0


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.partitions: int = args.partitions
        self.pad = b"p" * max(0, args.value_bytes - 16)
        self.next_seq = [0] * self.partitions
        self.failed: list[set[int]] = [set() for _ in range(self.partitions)]
        self.failures: collections.Counter[str] = collections.Counter()
        self.acked = 0
        self.window: collections.deque[tuple[int, int, DeliveryHandle]] = collections.deque()
        # (seconds since start, RSS MiB, RSS MiB after returning free heap to the OS)
        self.rss: list[tuple[float, float, float]] = []
        self.kills: list[dict[str, Any]] = []
        # While a kill is being measured: partition -> (first sequence sent after the
        # kill, when the first of those was acknowledged or 0.0).
        self.recovering: dict[int, tuple[int, float]] = {}
        self.started = 0.0
        self.stop = threading.Event()

    # -- producing ------------------------------------------------------------------------

    def _settle(self) -> None:
        """Account for the handles at the front of the window that are done."""
        window = self.window
        now = time.monotonic()
        while window and window[0][2].done():
            p, seq, handle = window.popleft()
            exc = handle.exception()
            if exc is None:
                self.acked += 1
                watch = self.recovering.get(p)
                if watch is not None and not watch[1] and seq >= watch[0]:
                    self.recovering[p] = (watch[0], now)
            else:
                self.failed[p].add(seq)
                self.failures[type(exc).__name__] += 1

    async def produce(self, producer: Producer, topic: str, seconds: float) -> None:
        rate = self.args.rate
        self.started = start = time.monotonic()
        sent = 0
        p = 0
        while True:
            now = time.monotonic()
            elapsed = now - start
            if elapsed >= seconds:
                break
            target = min(int(rate * elapsed) + 1, int(rate * seconds))
            while sent < target:
                p = (p + 1) % self.partitions
                seq = self.next_seq[p]
                self.next_seq[p] = seq + 1
                value = b"%d:%d:" % (p, seq) + self.pad
                handle = await producer.send(topic, value, partition=p)
                self.window.append((p, seq, handle))
                sent += 1
                if not sent % 2000:
                    self._settle()
            self._settle()
            await anyio.sleep(0.005)

    async def sample_rss(self) -> None:
        while not self.stop.is_set():
            # The allocator keeps the high-water mark of an outage (buffer_memory full)
            # mapped; trimming shows what is really still in use, which is what a leak
            # would grow.
            raw = rss_mib()
            trim_heap()
            self.rss.append((time.monotonic() - self.started, raw, rss_mib()))
            await anyio.sleep(self.args.rss_every)

    # -- faults ---------------------------------------------------------------------------

    def saboteur(self, cluster: KafkaCluster, topic: str) -> None:
        period = self.args.kill_every
        next_kill = self.started + period / 2
        partition = 0
        while not self.stop.wait(max(0.0, next_kill - time.monotonic())):
            leaders = cluster.partition_leaders(topic)
            victim = leaders[partition]
            led = [q for q, n in leaders.items() if n == victim]
            self.recovering = {q: (self.next_seq[q], 0.0) for q in led}
            killed_at = time.monotonic()
            cluster.kill_broker(victim)
            failover = self._wait_new_leader(cluster, topic, partition, victim) - killed_at
            cluster.start_broker(victim)
            restarted = time.monotonic() - killed_at
            # Recovery: the first record sent to each partition the victim led after the
            # kill is acknowledged (the slowest partition counts).
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not self.stop.is_set():
                if all(at for _seq, at in self.recovering.values()):
                    break
                time.sleep(0.05)
            times = [at for _seq, at in self.recovering.values()]
            recovered = max(times) - killed_at if all(times) else float("inf")
            self.kills.append(
                {
                    "at_s": killed_at - self.started,
                    "broker": victim,
                    "partitions": led,
                    "failover_s": failover,
                    "restart_s": restarted,
                    "recovery_s": recovered,
                }
            )
            print(
                f"  kill #{len(self.kills)} at {killed_at - self.started:5.0f} s: broker {victim} "
                f"(led {led}); new leader after {failover:.1f} s, restarted after "
                f"{restarted:.1f} s, producer recovered after {recovered:.1f} s",
                flush=True,
            )
            partition = (partition + 1) % self.partitions
            next_kill += period

    @staticmethod
    def _wait_new_leader(cluster: KafkaCluster, topic: str, partition: int, old: int) -> float:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if cluster.leader_for(topic, partition) not in (old, -1):
                    break
            time.sleep(0.1)
        return time.monotonic()

    # -- checking -------------------------------------------------------------------------

    def verify(self, bootstrap: str, topic: str) -> dict[str, int]:
        """Stream the topic back, comparing each partition with what was sent."""
        import confluent_kafka as ck

        ends = topic_end_offsets(bootstrap, topic)
        consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"soak-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 64 * 1024 * 1024,
                "check.crcs": True,
            }
        )
        expect = [0] * self.partitions  # next sequence each partition should show
        seen_max = [-1] * self.partitions
        counts = collections.Counter[str]()
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + 600
        try:
            while todo and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=10000, timeout=0.5):
                    if msg.error() is not None:
                        raise RuntimeError(f"consumer error: {msg.error()}")
                    p, offset, value = (
                        int(msg.partition() or 0),
                        int(msg.offset() or 0),
                        msg.value(),
                    )
                    if offset >= ends[p]:
                        continue
                    if offset == ends[p] - 1:
                        todo.discard(p)
                    counts["read_back"] += 1
                    seq = int((value or b"-:-1:").split(b":", 2)[1])
                    if seq <= seen_max[p]:
                        # At or below one already seen: written twice, or out of order.
                        counts["duplicated_or_reordered"] += 1
                        continue
                    seen_max[p] = seq
                    # Everything skipped between the last one and this must have failed.
                    for missing in range(expect[p], seq):
                        if missing in self.failed[p]:
                            counts["failed_not_written"] += 1
                        else:
                            counts["lost"] += 1
                    if seq in self.failed[p]:
                        counts["failed_but_written"] += 1
                    expect[p] = seq + 1
        finally:
            consumer.close()
        if todo:
            raise TimeoutError(f"partitions {sorted(todo)} were not read to the end")
        for p in range(self.partitions):
            for missing in range(expect[p], self.next_seq[p]):
                counts["failed_not_written" if missing in self.failed[p] else "lost"] += 1
        return dict(counts)


def rss_verdict(
    samples: list[tuple[float, float, float]], kills: list[float], settle: float = 20.0
) -> tuple[bool, str]:
    """Flat if the trimmed RSS of the last third of steady-state samples (outside the
    ``settle`` seconds after each kill, when buffers fill) is within 15% (or 16 MiB) of the
    second quarter's (after warm-up)."""
    values = [
        trimmed for t, _raw, trimmed in samples if not any(0 <= t - k < settle for k in kills)
    ]
    if len(values) < 8:
        return True, "too few steady-state samples to judge"
    n = len(values)
    early = statistics.median(values[n // 4 : n // 2])
    late = statistics.median(values[-(n // 3) :])
    growth = late - early
    flat = growth <= max(16.0, 0.15 * early)
    return flat, f"median {early:.1f} MiB after warm-up, {late:.1f} MiB at the end ({growth:+.1f})"


async def run(args: argparse.Namespace) -> int:
    soak = Soak(args)
    print(f"starting a 3-node Kafka cluster ({time.strftime('%H:%M:%S')})", flush=True)
    with KafkaCluster(nodes=3) as cluster:
        topic = f"soak-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, args.partitions, 3, {"min.insync.replicas": "2"})
        seconds = args.minutes * 60
        print(
            f"producing {args.rate}/s for {seconds:.0f} s to {args.partitions} partitions, "
            f"a leader SIGKILLed every {args.kill_every:.0f} s",
            flush=True,
        )
        async with Producer(cluster.bootstrap_servers, linger_ms=5) as producer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(soak.sample_rss)
                soak.started = time.monotonic()
                tg.start_soon(
                    lambda: anyio.to_thread.run_sync(
                        soak.saboteur, cluster, topic, abandon_on_cancel=True
                    )
                )
                try:
                    await soak.produce(producer, topic, seconds)
                    await producer.flush()
                finally:
                    soak.stop.set()
            metrics = producer.metrics()
        wall = time.monotonic() - soak.started
        soak._settle()
        # Bring back any broker a late kill left down before reading back.
        for node in cluster.node_ids:
            with contextlib.suppress(KafkaSetupError):
                cluster.start_broker(node)
        print("reading everything back ...", flush=True)
        counts = await anyio.to_thread.run_sync(soak.verify, cluster.bootstrap_servers, topic)
    sent = sum(soak.next_seq)
    flat, rss_text = rss_verdict(soak.rss, [k["at_s"] for k in soak.kills])
    print()
    print(f"records sent        {sent:>12,}  ({sent / wall:,.0f}/s over {wall:.0f} s)")
    print(f"acknowledged        {soak.acked:>12,}")
    print(f"failed              {sum(len(f) for f in soak.failed):>12,}  {dict(soak.failures)}")
    print(f"read back           {counts.get('read_back', 0):>12,}")
    print(f"lost                {counts.get('lost', 0):>12,}")
    print(f"duplicated/reorder  {counts.get('duplicated_or_reordered', 0):>12,}")
    print(f"failed but written  {counts.get('failed_but_written', 0):>12,}")
    print(f"retried records     {int(metrics['records_retried']):>12,}")
    for i, kill in enumerate(soak.kills, 1):
        print(
            f"kill #{i}: broker {kill['broker']} at {kill['at_s']:.0f} s, leader moved after "
            f"{kill['failover_s']:.1f} s, producer recovered after {kill['recovery_s']:.1f} s"
        )
    print(
        "RSS MiB (s: raw/after trim): "
        + ", ".join(f"{t:.0f}: {r:.0f}/{m:.0f}" for t, r, m in soak.rss)
    )
    print(f"RSS {'flat' if flat else 'GROWING'}: {rss_text}")
    ok = (
        counts.get("lost", 0) == 0
        and counts.get("duplicated_or_reordered", 0) == 0
        and soak.acked + sum(len(f) for f in soak.failed) == sent
        and flat
    )
    print("RESULT:", "OK" if ok else "FAILED")
    return 0 if ok else 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to produce")
    parser.add_argument("--rate", type=int, default=50_000, help="records per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    parser.add_argument("--rss-every", type=float, default=5.0, help="seconds between samples")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return anyio.run(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
