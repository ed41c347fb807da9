"""``python -m bench.send_cpu``: CPU per record of ``await Producer.send()``, no real broker.

Sends 100-byte keyless records (or keyed ones with ``--keyed``) to a 12-partition topic of
an in-process :class:`~aioproducer.testing.FakeCluster` and reports the CPU time of the
thread running the producer's event loop (the fake brokers run on a thread of their own
and are left out) per record: ``send`` for the loop of ``send()`` calls alone (the
sender's per-batch work that runs in between included), ``total`` until every record is
acknowledged. ``--profile`` prints a cProfile of the send loop instead.

For an A/B comparison of two trees, run it once per tree with ``PYTHONPATH`` pointing at
each, alternating, and compare the medians; ``--rounds`` repeats inside one process.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from typing import Any

import anyio

from aioproducer import Producer
from aioproducer.testing import FakeCluster

TOPIC = "cpu"


async def _run(bootstrap: str, records: int, keyed: bool, profile: bool) -> tuple[float, float]:
    value = b"x" * 100
    keys = [f"key-{i:06d}".encode() for i in range(1000)] if keyed else None
    async with Producer(bootstrap, linger_ms=5, batch_size=16384) as producer:
        await producer.send_and_wait(TOPIC, b"warm")
        send = producer.send
        profiler = cProfile.Profile() if profile else None
        start = time.thread_time()
        if profiler is not None:
            profiler.enable()
        if keys is None:
            for _ in range(records):
                await send(TOPIC, value)
        else:
            for i in range(records):
                await send(TOPIC, value, key=keys[i % 1000])
        if profiler is not None:
            profiler.disable()
        sent = time.thread_time()
        await producer.flush()
        done = time.thread_time()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return (sent - start) / records * 1e6, (done - start) / records * 1e6


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints one line per round and the medians."""
    parser = argparse.ArgumentParser(prog="python -m bench.send_cpu", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    args = parser.parse_args(argv)
    results: list[tuple[float, float]] = []
    with FakeCluster(brokers=1) as fc:
        fc.create_topic(TOPIC, partitions=12)
        for _ in range(1 if args.profile else args.rounds):
            options: dict[str, Any] = {}
            result = anyio.run(
                _run,
                fc.bootstrap_servers,
                args.records,
                args.keyed,
                args.profile,
                backend=args.backend,
                backend_options=options,
            )
            print(f"send {result[0]:.3f} us/record, total {result[1]:.3f} us/record")
            results.append(result)
    if len(results) > 1:
        print(
            f"median: send {statistics.median(r[0] for r in results):.3f} us/record, "
            f"total {statistics.median(r[1] for r in results):.3f} us/record"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
