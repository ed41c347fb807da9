"""Delivery against a real Kafka 4.3.1: content read back by confluent-kafka, on every backend."""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.errors import ConnectionError as KafkaConnectionError
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

pytestmark = pytest.mark.anyio


def new_topic(kafka: KafkaCluster, partitions: int, **config: str) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, partitions=partitions, config=config or None)
    return name


def check_readback(
    kafka: KafkaCluster, topic: str, sent: dict[bytes, tuple[int, int, Any, Any]]
) -> list[Any]:
    """Every sent value appears exactly once, where its handle said, with its content."""
    records = consume_all(kafka.bootstrap_servers, topic, expected=len(sent))
    seen: dict[bytes, Any] = {}
    for rec in records:
        assert rec.value not in seen, f"duplicate record {rec.value!r}"
        seen[rec.value] = rec
    assert len(records) == len(sent), f"read {len(records)} records, sent {len(sent)}"
    for value, (partition, offset, key, headers) in sent.items():
        rec = seen.get(value)
        assert rec is not None, f"record {value!r} was acknowledged but is missing"
        assert (rec.partition, rec.offset) == (partition, offset)
        assert rec.key == key
        assert list(rec.headers) == list(headers)
    # No gaps: offsets of each partition are 0..n-1.
    by_partition: dict[int, list[int]] = defaultdict(list)
    for rec in records:
        by_partition[rec.partition].append(rec.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    return records


@pytest.mark.slow
async def test_a_million_records_from_50_tasks_arrive_exactly_once_in_order(
    kafka: KafkaCluster,
) -> None:
    topic = new_topic(kafka, partitions=12)
    total, tasks = 1_000_000, 50
    sent: dict[bytes, tuple[int, int, Any, Any]] = {}
    per_key: dict[bytes, list[bytes]] = defaultdict(list)

    async with Producer(kafka.bootstrap_servers, acks="all", enable_idempotence=True) as producer:

        async def worker(w: int) -> None:
            handles = []
            for i in range(w, total, tasks):
                keyed = i % 3 != 0
                # Each key belongs to one task, so its send order is well defined.
                key = f"w{w}-k{i % 7}".encode() if keyed else None
                value = f"{i:08d}|".encode() + os.urandom(8)
                headers = [("seq", str(i).encode()), ("task", str(w).encode())]
                handle = await producer.send(topic, value, key=key, headers=headers)
                handles.append((value, key, headers, handle))
                if key is not None:
                    per_key[key].append(value)
            for value, key, headers, handle in handles:
                meta = await handle
                sent[value] = (meta.partition, meta.offset, key, headers)

        async with anyio.create_task_group() as tg:
            for w in range(tasks):
                tg.start_soon(worker, w)
        metrics = producer.metrics()

    assert len(sent) == total
    assert metrics["records_sent"] == total
    assert metrics["records_failed"] == 0
    records = check_readback(kafka, topic, sent)
    # Per-key order: a key's records appear in the order they were sent.
    order: dict[bytes, list[bytes]] = defaultdict(list)
    for rec in records:
        if rec.key is not None:
            order[rec.key].append(rec.value)
    assert order == per_key


async def test_send_many_delivers_every_record_with_headers(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=4)
    n = 20_000
    values = [f"bulk-{i}".encode() for i in range(n)]
    keys = [f"k{i % 13}".encode() if i % 2 else None for i in range(n)]
    headers = [[("i", str(i).encode())] for i in range(n)]
    async with Producer(kafka.bootstrap_servers) as producer:
        handles = await producer.send_many(topic, values, keys=keys, headers=headers)
        metas = [await h for h in handles]
    sent = {
        values[i]: (metas[i].partition, metas[i].offset, keys[i], [("i", str(i).encode())])
        for i in range(n)
    }
    check_readback(kafka, topic, sent)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_compression_codec_round_trips(kafka: KafkaCluster, compression: str) -> None:
    topic = new_topic(kafka, partitions=2)
    async with Producer(
        kafka.bootstrap_servers, compression_type=compression, linger_ms=20
    ) as producer:
        handles = []
        for i in range(3000):
            value = f"{compression}-{i}-".encode() + b"z" * (i % 200)
            key = str(i % 5).encode()
            handles.append((value, key, await producer.send(topic, value, key=key)))
        sent = {}
        for value, key, handle in handles:
            meta = await handle
            sent[value] = (meta.partition, meta.offset, key, [])
    check_readback(kafka, topic, sent)


async def test_large_batches_compress_on_worker_threads(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=3)
    async with Producer(
        kafka.bootstrap_servers,
        compression_type="zstd",
        batch_size=256 * 1024,
        linger_ms=20,
        compression_offload_bytes=64 * 1024,
    ) as producer:
        values = [b"%07d" % i + b"payload " * 40 for i in range(20_000)]
        handles = await producer.send_many(
            topic, values, keys=[b"%d" % (i % 11) for i in range(20_000)]
        )
        metas = [await h for h in handles]
        assert producer.metrics()["batches_compressed_off_loop"] > 0
    sent = {
        v: (m.partition, m.offset, b"%d" % (i % 11), [])
        for i, (v, m) in enumerate(zip(values, metas, strict=True))
    }
    check_readback(kafka, topic, sent)


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_settings(kafka: KafkaCluster, acks: Any) -> None:
    topic = new_topic(kafka, partitions=1)
    async with Producer(kafka.bootstrap_servers, acks=acks, enable_idempotence=False) as producer:
        handles = [await producer.send(topic, f"a{i}".encode()) for i in range(500)]
        metas = [await h for h in handles]
    if acks == 0:
        assert all(m.offset == -1 for m in metas)  # the broker does not answer acks=0
    else:
        assert [m.offset for m in metas] == list(range(500))
    records = consume_all(kafka.bootstrap_servers, topic, expected=500)
    assert [r.value for r in records] == [f"a{i}".encode() for i in range(500)]


async def test_metadata_timestamp_and_sizes(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=3)
    async with Producer(kafka.bootstrap_servers) as producer:
        meta = await producer.send_and_wait(
            topic, "héllo", key="clé", headers={"h": "v"}, partition=2, timestamp_ms=1234567
        )
        assert await producer.partitions_for(topic) == [0, 1, 2]
    assert (meta.topic, meta.partition, meta.timestamp_ms) == (topic, 2, 1234567)
    assert meta.serialized_key_size == len("clé".encode())
    assert meta.serialized_value_size == len("héllo".encode())
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value, rec.timestamp_ms) == ("clé".encode(), "héllo".encode(), 1234567)
    assert rec.headers == (("h", b"v"),)


async def test_dropped_connections_cause_no_loss_and_no_duplicates(kafka: KafkaCluster) -> None:
    """Connections are cut under load; idempotent retries must neither lose nor duplicate."""
    topic = new_topic(kafka, partitions=6)
    total = 150_000
    sent: dict[bytes, tuple[int, int, Any, Any]] = {}
    async with Producer(kafka.bootstrap_servers, linger_ms=2, batch_size=8192) as producer:

        async def saboteur() -> None:
            for _ in range(8):
                await anyio.sleep(0.15)
                for conn in list(producer._cluster._connections.values()):
                    conn.close_nowait(KafkaConnectionError("cut by test"))

        handles = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(saboteur)
            for i in range(total):
                value = f"v{i}".encode()
                key = f"k{i % 97}".encode()
                handles.append((value, key, await producer.send(topic, value, key=key)))
        for value, key, handle in handles:
            meta = await handle
            sent[value] = (meta.partition, meta.offset, key, [])
        metrics = producer.metrics()
    assert metrics["records_retried"] > 0, "the test did not manage to cut a connection"
    records = check_readback(kafka, topic, sent)
    # Order per key survives the retries.
    last: dict[bytes, int] = {}
    for rec in records:
        index = int(rec.value[1:])
        assert last.get(rec.key, -1) < index
        last[rec.key] = index


async def test_batches_the_broker_finds_too_large_are_split(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=1, **{"max.message.bytes": "20000"})
    async with Producer(
        kafka.bootstrap_servers, batch_size=200_000, linger_ms=50, max_request_size=1_000_000
    ) as producer:
        handles = [await producer.send(topic, b"%06d" % i + b"x" * 500) for i in range(400)]
        metas = [await h for h in handles]
        assert producer.metrics()["batches_split"] > 0
    assert [m.offset for m in metas] == list(range(400))
    records = consume_all(kafka.bootstrap_servers, topic, expected=400)
    assert [r.value[:6] for r in records] == [b"%06d" % i for i in range(400)]
