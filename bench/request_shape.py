"""``python -m bench.request_shape``: what a bulk send asks of the broker, in figures a busy
machine does not skew.

Sends ``--records`` 100-byte records (keyless, and keyed over the quick suite's keys) to
a 12-partition topic of a broker started as the quick suite starts it, once with
aioproducer's ``send_bulk()`` (chunks of 10,000, the suite's settings) and once with
confluent-kafka's ``Producer`` (the suite's settings), and reports per client:

- produce requests per 100,000 records and batches per request (confluent-kafka's from
  librdkafka's statistics: requests of every kind sent to the broker);
- the broker's CPU per record (``/proc/<pid>/stat`` of the broker process around the run);
- for aioproducer, the share of records not yet acknowledged when the last ``send_bulk()``
  returned: what the broker still had to take after the application was done.

The records are made before the clock starts, so the application's share is smaller than
in the quick suite, where the bench makes each record as it goes. Wall-clock rates are
printed for reference only: they follow the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import anyio

from aioproducer import Producer
from aioproducer.testing import KafkaCluster

from .clients import confluent_sync
from .clients._common import iter_records
from .clients.aioproducer_asyncio import CONFIG
from .suite import _BROKER_JVM_ARGS

PARTITIONS = 12
CHUNK = 10_000
_TICKS = os.sysconf("SC_CLK_TCK")


def _broker_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _records(n: int, keyed: bool) -> tuple[list[list[bytes]], list[list[bytes]] | None]:
    values: list[list[bytes]] = []
    keys: list[list[bytes]] | None = [] if keyed else None
    for start in range(0, n, CHUNK):
        chunk = list(iter_records(min(n, start + CHUNK), 100, keyed, start))
        values.append([v for v, _ in chunk])
        if keys is not None:
            keys.append([k for _, k in chunk if k is not None])
    return values, keys


async def _ours(bootstrap: str, topic: str, n: int, keyed: bool) -> dict[str, float]:
    values, keys = _records(n, keyed)
    async with Producer(bootstrap, **CONFIG) as producer:
        await producer.partitions_for(topic)
        before = producer.metrics()
        began = time.perf_counter()
        bulks = []
        for i, chunk in enumerate(values):
            bulks.append(await producer.send_bulk(topic, chunk, keys[i] if keys else None))
        at_last = producer.metrics()
        await producer.flush()
        elapsed = time.perf_counter() - began
        after = producer.metrics()
    failed = sum(bulk.failed for bulk in bulks)
    requests = after["requests_sent"] - before["requests_sent"]
    batches = after["batches_sent"] - before["batches_sent"]
    acked_then = at_last["records_sent"] - before["records_sent"]
    return {
        "requests per 100k": requests / n * 1e5,
        "batches per request": batches / requests,
        "unacked at last append": 1 - acked_then / n,
        "records/s": n / elapsed,
        "failed": failed,
    }


def _confluent(bootstrap: str, topic: str, n: int, keyed: bool) -> dict[str, float]:
    from confluent_kafka import Producer as CkProducer

    values, keys = _records(n, keyed)
    stats: list[str] = []
    failed = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    conf = confluent_sync.config(bootstrap)
    conf.update({"statistics.interval.ms": 50, "stats_cb": stats.append})
    producer = CkProducer(conf)
    producer.list_topics(topic, timeout=10)
    producer.poll(0.2)
    sent_before = _broker_requests(stats[-1]) if stats else 0
    began = time.perf_counter()
    for i, chunk in enumerate(values):
        for j, value in enumerate(chunk):
            key = keys[i][j] if keys else None
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(1.0)
            producer.poll(0)
    producer.flush()
    elapsed = time.perf_counter() - began
    producer.poll(0.2)  # one more statistics report, after the last answer
    requests = _broker_requests(stats[-1]) - sent_before
    return {
        "requests per 100k": requests / n * 1e5,
        "batches per request": float("nan"),
        "unacked at last append": float("nan"),
        "records/s": n / elapsed,
        "failed": failed[0],
    }


def _broker_requests(report: str) -> int:
    import json

    brokers = json.loads(report)["brokers"]
    return sum(b["tx"] for name, b in brokers.items() if not name.startswith("GroupCoordinator"))


def main() -> None:
    """Run the rounds and print one line per client, kind and round, then the medians."""
    parser = argparse.ArgumentParser(prog="python -m bench.request_shape", description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.records
    rows: list[tuple[str, str, dict[str, float]]] = []
    with KafkaCluster(nodes=1, heap="1g", jvm_args=_BROKER_JVM_ARGS) as kc:
        pid = kc.pid(kc.node_ids[0])
        assert pid is not None
        for round_no in range(args.rounds + 1):  # round 0 warms the broker up, unreported
            for keyed in (False, True):
                kind = "keyed" if keyed else "keyless"
                clients = ["aioproducer", "confluent-kafka"]
                if round_no % 2:
                    clients.reverse()  # neither always runs on the warmer broker
                for client in clients:
                    topic = f"shape-{kind}-{client}-{round_no}-{time.time_ns()}"
                    kc.create_topic(topic, PARTITIONS)
                    cpu = _broker_cpu(pid)
                    if client == "aioproducer":
                        row = anyio.run(_ours, kc.bootstrap_servers, topic, n, keyed)
                    else:
                        row = _confluent(kc.bootstrap_servers, topic, n, keyed)
                    row["broker CPU us/record"] = (_broker_cpu(pid) - cpu) / n * 1e6
                    if round_no:
                        rows.append((client, kind, row))
                        shown = ", ".join(f"{k} {v:,.2f}" for k, v in row.items())
                        print(f"round {round_no} {kind:7s} {client:15s} {shown}", flush=True)
    print(f"medians of {args.rounds} rounds, load {os.getloadavg()[0]:.1f}:")
    for kind in ("keyless", "keyed"):
        for client in ("aioproducer", "confluent-kafka"):
            mine = [r for c, k, r in rows if c == client and k == kind]
            shown = ", ".join(
                f"{key} {statistics.median(r[key] for r in mine):,.2f}" for key in mine[0]
            )
            print(f"  {kind:7s} {client:15s} {shown}")


if __name__ == "__main__":
    main()
