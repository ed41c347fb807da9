"""``python -m bench.sender_profile``: where the event loop's time goes in a ``send_bulk``.

Sends ``--records`` 100-byte records (keyed by ``--keys`` distinct keys, or keyless) to a
12-partition topic with ``send_bulk`` in chunks of 10,000, against a real broker
(:class:`~aioproducer.testing.KafkaCluster`, or ``--bootstrap``) or, with ``--fake``, an
in-process :class:`~aioproducer.testing.FakeCluster` (whose brokers run on a thread of
their own). Reports the event-loop thread's CPU time per record from the first call until
every record is acknowledged, and with ``--profile`` a cProfile of that thread (the
sender's per-batch and per-request work: draining, request encoding, response decoding,
completion), sorted by ``--sort``.

Run it once per tree (``PYTHONPATH`` pointing at each) and compare the loop's CPU per
record of the same run; note the machine's load with every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Iterator

import anyio

from aioproducer import Producer
from aioproducer.testing import FakeCluster, KafkaCluster

TOPIC = "sender-profile"
PARTITIONS = 12
CHUNK = 10_000


async def _run(bootstrap: str, records: int, keys: int, profile: cProfile.Profile | None) -> float:
    values = [b"v" * 100] * CHUNK
    key_list = [f"key-{i % keys:04d}".encode() for i in range(CHUNK)] if keys else None
    async with Producer(bootstrap, linger_ms=5, acks="all") as producer:
        await producer.partitions_for(TOPIC)
        await producer.send_bulk(TOPIC, values[:100], key_list[:100] if key_list else None)
        await producer.flush()
        start = time.thread_time()
        if profile is not None:
            profile.enable()
        bulks = []
        for _ in range(records // CHUNK):
            bulks.append(await producer.send_bulk(TOPIC, values, key_list))
        await producer.flush()
        if profile is not None:
            profile.disable()
        spent = time.thread_time() - start
        failed = 0
        for bulk in bulks:
            await bulk
            failed += bulk.failed
        if failed:
            raise SystemExit(f"{failed} records failed")
    return spent


@contextlib.contextmanager
def _cluster(ns: argparse.Namespace) -> Iterator[str]:
    if ns.bootstrap:
        yield ns.bootstrap
    elif ns.fake:
        with FakeCluster(brokers=1) as fake:
            fake.create_topic(TOPIC, PARTITIONS)
            yield fake.bootstrap_servers
    else:
        with KafkaCluster() as kc:
            kc.create_topic(TOPIC, PARTITIONS)
            yield kc.bootstrap_servers


def main() -> None:
    """Run the rounds and print the loop's CPU per record (and the profile, if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=50, help="distinct keys; 0: keyless")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fake", action="store_true", help="in-process FakeCluster")
    parser.add_argument("--bootstrap", help="an existing cluster instead of starting one")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--dump", help="also write the profile to this file (pstats)")
    ns = parser.parse_args()
    # CPU time of this thread, not wall time: the machine is shared, and a wall clock would
    # charge whatever ran on the other cores meanwhile (the broker above all) to the call
    # that happened to be waiting.
    profile = cProfile.Profile(time.thread_time) if ns.profile else None
    with _cluster(ns) as bootstrap:
        spent = [anyio.run(_run, bootstrap, ns.records, ns.keys, profile) for _ in range(ns.rounds)]
    per_record = [s / ns.records * 1e6 for s in spent]
    print(
        f"loop CPU per record: median {statistics.median(per_record):.3f} us "
        f"(rounds {', '.join(f'{p:.3f}' for p in per_record)}); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    if profile is not None:
        if ns.dump:
            profile.dump_stats(ns.dump)
        pstats.Stats(profile).sort_stats(ns.sort).print_stats(ns.top)


if __name__ == "__main__":
    main()
