"""Produce synthetic load at a steady rate and watch throughput and latency live.

    python examples/loadgen.py --rate 20000 --duration 30             # starts a local broker
    python examples/loadgen.py --rate 5000 --size 512 --keys 100 --senders 8 \\
        --topic load --bootstrap-servers host:9092

Sends ``rate * duration`` records of ``--size`` bytes from ``--senders`` concurrent tasks,
keyed ``key-0`` .. ``key-{N-1}`` with ``--keys N`` (keyless by default). Each value starts
with ``<sender>:<sequence>`` so a consumer can check that nothing was lost or reordered.
Once a second a line on stderr shows records sent and acknowledged per second and the
p50/p99 latency from send() to the broker's acknowledgement; a summary follows at the end.
The exit status is 1 if any record failed.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import anyio
from _local import add_broker_argument, kafka

from aioproducer import DeliveryHandle, KafkaError, Producer


class TokenBucket:
    """Hands out send permits at ``rate`` per second, in groups.

    Permits accrue from the monotonic clock rather than by counting sleeps, so late wake-ups
    do not lower the rate; at most ``burst`` accrue while the sender is busy, so catching up
    never turns into a flood.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = max(1.0, burst)
        self.tokens = 0.0
        self.last = time.monotonic()

    async def take(self) -> int:
        """Wait for at least one permit and take all that are available."""
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                granted = int(self.tokens)
                self.tokens -= granted
                return granted
            # Sleeping at least 5 ms lets permits pile up, so records go out in groups.
            await anyio.sleep(max((1 - self.tokens) / self.rate, 0.005))


class Histogram:
    """Latencies in buckets 2% wide: percentiles of any number of samples in little memory."""

    _WIDTH = math.log(1.02)

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0

    def add(self, seconds: float) -> None:
        self.buckets[math.floor(math.log(max(seconds, 1e-6)) / self._WIDTH)] += 1
        self.count += 1

    def merge(self, other: Histogram) -> None:
        self.buckets.update(other.buckets)
        self.count += other.count

    def percentile_ms(self, q: float) -> float:
        rank, seen = q * self.count, 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                return 1000 * math.exp((bucket + 0.5) * self._WIDTH)
        return math.nan


@dataclass
class Stats:
    sent: int = 0
    delivered: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None
    window: Histogram = field(default_factory=Histogram)
    total: Histogram = field(default_factory=Histogram)

    def on_done(self, sent_at: float, handle: DeliveryHandle) -> None:
        """Called when the record's batch completes: one call per record, no task each."""
        error = handle.exception()
        if error is None:
            self.delivered += 1
            self.window.add(time.monotonic() - sent_at)
        else:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        self.failed[type(error).__name__] += 1
        self.first_error = self.first_error or f"{type(error).__name__}: {error}"


async def sender(
    producer: Producer, args: argparse.Namespace, stats: Stats, number: int, quota: int
) -> None:
    """Send ``quota`` records at this sender's share of the rate."""
    rate = args.rate / args.senders
    bucket = TokenBucket(rate, burst=rate / 10)
    filler = os.urandom(args.size)  # random bytes, so that compression is not flattered
    seq = 0
    while seq < quota:
        for _ in range(min(await bucket.take(), quota - seq)):
            value = (b"%d:%d " % (number, seq) + filler)[: args.size]
            key = f"key-{seq % args.keys}" if args.keys else None
            sent_at = time.monotonic()
            try:
                handle = await producer.send(args.topic, value, key=key)
            except KafkaError as exc:  # e.g. no buffer space freed within max_block_ms
                stats.fail(exc)
            else:
                handle.add_done_callback(functools.partial(stats.on_done, sent_at))
            stats.sent += 1
            seq += 1


async def report(stats: Stats) -> None:
    """Print one line a second: the rates and latencies of that second alone."""
    sent = delivered = 0
    for second in itertools.count(1):
        await anyio.sleep(1)
        window, stats.window = stats.window, Histogram()
        stats.total.merge(window)
        print(
            f"{second:4d}s  sent {stats.sent - sent:8,}/s  acked {stats.delivered - delivered:8,}/s"
            f"  p50 {window.percentile_ms(0.5):7.1f} ms  p99 {window.percentile_ms(0.99):7.1f} ms"
            f"  failed {sum(stats.failed.values()):,}",
            file=sys.stderr,
            flush=True,
        )
        sent, delivered = stats.sent, stats.delivered


async def run(args: argparse.Namespace, bootstrap_servers: str) -> Stats:
    stats = Stats()
    total = round(args.rate * args.duration)
    async with Producer(bootstrap_servers, client_id="loadgen") as producer:
        await producer.partitions_for(args.topic)  # metadata first: not part of the load
        started = time.monotonic()
        async with anyio.create_task_group() as reporting:
            reporting.start_soon(report, stats)
            async with anyio.create_task_group() as senders:
                for number in range(args.senders):
                    quota = total // args.senders + int(number < total % args.senders)
                    senders.start_soon(sender, producer, args, stats, number, quota)
            await producer.flush()
            reporting.cancel_scope.cancel()
        elapsed = time.monotonic() - started
    stats.total.merge(stats.window)
    failed = sum(stats.failed.values())
    print(f"records     {stats.sent:,} x {args.size} B in {elapsed:.2f} s")
    print(f"rate        {stats.sent / elapsed:,.0f}/s (target {args.rate:,.0f}/s)")
    print(f"delivered   {stats.delivered:,}")
    print(f"failed      {failed:,}")
    if stats.first_error:
        print(f"errors      {dict(stats.failed)}, the first: {stats.first_error}")
    print(
        f"latency     p50 {stats.total.percentile_ms(0.5):.1f} ms, "
        f"p99 {stats.total.percentile_ms(0.99):.1f} ms (send to acknowledgement)"
    )
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topic", default="load")
    parser.add_argument("--rate", type=float, default=10_000, help="records per second")
    parser.add_argument("--duration", type=float, default=10, help="seconds")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (0: keyless)")
    parser.add_argument("--senders", type=int, default=4, help="concurrent sending tasks")
    add_broker_argument(parser)
    args = parser.parse_args()
    if args.rate <= 0 or args.duration <= 0 or args.size < 0 or args.keys < 0:
        parser.error("--rate and --duration must be positive, --size and --keys not negative")
    if args.senders < 1:
        parser.error("--senders must be at least 1")
    with kafka(args.bootstrap_servers, args.topic, partitions=6) as bootstrap_servers:
        try:
            stats = anyio.run(run, args, bootstrap_servers)
        except KafkaError as exc:  # no broker reachable, the topic does not exist, ...
            sys.exit(f"error: {exc}")
    sys.exit(1 if stats.failed else 0)


if __name__ == "__main__":
    main()
