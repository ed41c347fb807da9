"""Transactional throughput: aioproducer against confluent-kafka's transactional producer.

    python -m bench.txn_compare [--transactions 20] [--records 5000] [--size 100] [--rounds 3]

Starts a single-node Kafka 4.3.1 (``KafkaCluster``), then for each client writes
``--transactions`` transactions of ``--records`` records of ``--size`` bytes to a fresh
3-partition topic, committing each, and prints records per second (from the first send to
the last commit) and the mean commit time. Both clients run in this process, one after
the other; every topic is read back with a read_committed consumer and checked.

A fresh broker is slow for its first transactions (its JIT and its transaction state
log warm up), so each client first runs one untimed round, and the timed rounds
alternate which client goes first; the median round of each client is reported.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import anyio

from aioproducer import Producer
from aioproducer.testing import KafkaCluster


async def _aioproducer(servers: str, topic: str, txns: int, records: int, value: bytes) -> Any:
    commits = 0.0
    async with Producer(servers, transactional_id=f"bench-{uuid.uuid4().hex[:8]}") as p:
        start = time.perf_counter()
        for _ in range(txns):
            await p.begin_transaction()
            await p.send_bulk(topic, [value] * records)
            t = time.perf_counter()
            await p.commit_transaction()
            commits += time.perf_counter() - t
        elapsed = time.perf_counter() - start
    return elapsed, commits / txns


def _confluent(servers: str, topic: str, txns: int, records: int, value: bytes) -> Any:
    import confluent_kafka as ck

    p = ck.Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": f"bench-ck-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    p.init_transactions()
    commits = 0.0
    start = time.perf_counter()
    for _ in range(txns):
        p.begin_transaction()
        for _ in range(records):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        t = time.perf_counter()
        p.commit_transaction()
        commits += time.perf_counter() - t
    return time.perf_counter() - start, commits / txns


def _committed_count(servers: str, topic: str) -> int:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(3)])
    count, deadline = 0, time.monotonic() + 120
    eof: set[int] = set()
    while len(eof) < 3 and time.monotonic() < deadline:
        for msg in c.consume(10000, 0.5):
            err = msg.error()
            if err is None:
                count += 1
            elif err.code() == ck.KafkaError._PARTITION_EOF:
                eof.add(int(msg.partition() or 0))
    c.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    value = b"x" * args.size
    total = args.transactions * args.records
    names = ("aioproducer", "confluent-kafka")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}

    def run(name: str, servers: str, topic: str) -> tuple[float, float]:
        if name == "aioproducer":
            result: tuple[float, float] = anyio.run(
                _aioproducer, servers, topic, args.transactions, args.records, value
            )
            return result
        return _confluent(servers, topic, args.transactions, args.records, value)  # type: ignore[no-any-return]

    with KafkaCluster() as kafka:
        servers = kafka.bootstrap_servers
        order: list[tuple[int | None, str]] = [(None, name) for name in names]  # warm-up
        for i in range(args.rounds):
            order += [(i, name) for name in (names if i % 2 else names[::-1])]
        for round_, name in order:
            topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
            kafka.create_topic(topic, 3)
            elapsed, commit = run(name, servers, topic)
            seen = _committed_count(servers, topic)
            assert seen == total, f"{name}: read back {seen} of {total} records"
            label = "warm-up" if round_ is None else f"round {round_ + 1}"
            print(
                f"  {label:8} {name:16} {total / elapsed:>10,.0f} records/s  "
                f"mean commit {commit * 1000:6.1f} ms"
            )
            if round_ is not None:
                results[name].append((elapsed, commit))
    print(f"median of {args.rounds} rounds, {args.transactions} x {args.records} records:")
    for name in names:
        elapsed, commit = sorted(results[name])[len(results[name]) // 2]
        print(f"{name:16} {total / elapsed:>10,.0f} records/s  mean commit {commit * 1000:6.1f} ms")


if __name__ == "__main__":
    main()
