"""Delivery against a real Kafka 4.4.0, the same checks for Producer and SyncProducer.

Content is read back with confluent-kafka. Each test runs once per flavour (see
``conftest.py``): Producer on asyncio, uvloop and trio, and SyncProducer, whose blocking
calls run in worker threads, so concurrent senders there are concurrent threads.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from support import OpenProducer, Sent, check_readback, values_by_key

from aioproducer import RecordMetadata
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


async def test_records_from_concurrent_senders_arrive_exactly_once_in_order(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer
) -> None:
    await _concurrent_senders(kafka, new_topic, open_producer, 120_000, 8, 6)


# Many records from 50 senders: a million on one asyncio loop, the async intake's worst
# case, and 300,000 on SyncProducer's threads, whose own intake (the hand-off to the loop)
# is exercised as hard by a third of it. uvloop and trio drive the same engine as asyncio,
# and the 120k case above covers them; running the million on every flavour cost three
# minutes of suite.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("flavour", "total"),
    [
        pytest.param(("async", ("asyncio", {})), 1_000_000, id="asyncio"),
        pytest.param(("sync", ("asyncio", {})), 100_000, id="sync"),
    ],
    indirect=["flavour"],
)
async def test_many_records_from_fifty_senders_arrive_exactly_once_in_order(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer, total: int
) -> None:
    await _concurrent_senders(kafka, new_topic, open_producer, total, 50, 12)


async def _concurrent_senders(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    open_producer: OpenProducer,
    total: int,
    senders: int,
    partitions: int,
) -> None:
    topic = new_topic(partitions)
    sent: Sent = {}
    per_key: dict[bytes, list[bytes | None]] = defaultdict(list)

    async with open_producer(acks="all", enable_idempotence=True) as producer:

        async def sender(w: int) -> None:
            records = []
            for i in range(w, total, senders):
                # Each key belongs to one sender, so its send order is well defined.
                key = f"w{w}-k{i % 7}".encode() if i % 3 else None
                value = f"{i:08d}|".encode() + os.urandom(8)
                headers = [("seq", str(i).encode()), ("sender", str(w).encode())]
                records.append((value, key, headers))
            handles = await producer.send_each(topic, records)
            metas = await producer.results(handles)
            for (value, key, headers), meta in zip(records, metas, strict=True):
                sent[value] = (meta.partition, meta.offset, key, headers)
                if key is not None:
                    per_key[key].append(value)

        async with anyio.create_task_group() as tg:
            for w in range(senders):
                tg.start_soon(sender, w)
        metrics = await producer.metrics()

    assert len(sent) == total
    assert metrics["records_sent"] == total
    assert metrics["records_failed"] == 0
    records = check_readback(kafka.bootstrap_servers, topic, sent)
    assert values_by_key(records) == per_key


@pytest.mark.parametrize(
    ("senders", "per_sender"),
    [pytest.param(1, 20_000, id="one-call"), pytest.param(4, 10_000, id="4-concurrent-calls")],
)
async def test_send_many_delivers_every_record_with_headers(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    open_producer: OpenProducer,
    senders: int,
    per_sender: int,
) -> None:
    topic = new_topic(4)
    calls: list[tuple[list[bytes], list[Any], list[Any], list[Any]]] = []
    async with open_producer() as producer:

        async def sender(w: int) -> None:
            values = [f"bulk-{w}-{i}".encode() for i in range(per_sender)]
            keys = [f"k{i % 13}".encode() if i % 2 else None for i in range(per_sender)]
            headers = [[("i", str(i).encode())] for i in range(per_sender)]
            handles = await producer.send_many(topic, values, keys=keys, headers=headers)
            calls.append((values, keys, headers, handles))

        async with anyio.create_task_group() as tg:
            for w in range(senders):
                tg.start_soon(sender, w)
        await producer.flush()
        assert all(h.done() for *_, handles in calls for h in handles)
        sent: Sent = {}
        for values, keys, headers, handles in calls:
            metas = await producer.results(handles)
            for value, key, hdrs, meta in zip(values, keys, headers, metas, strict=True):
                sent[value] = (meta.partition, meta.offset, key, hdrs)
    assert len(sent) == senders * per_sender
    check_readback(kafka.bootstrap_servers, topic, sent)


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_compression_codec_round_trips(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer, compression: str
) -> None:
    topic = new_topic(2)
    records = []
    for i in range(3000):
        value = f"{compression}-{i}-".encode() + b"z" * (i % 200)
        # Every other key is a str, which the producer encodes as UTF-8.
        key: str | bytes = str(i % 5) if i % 2 else str(i % 5).encode()
        records.append((value, key, None))
    async with open_producer(compression_type=compression, linger_ms=20) as producer:
        metas = await producer.results(await producer.send_each(topic, records))
    sent: Sent = {
        value: (meta.partition, meta.offset, str(key).encode() if isinstance(key, str) else key, [])
        for (value, key, _h), meta in zip(records, metas, strict=True)
    }
    check_readback(kafka.bootstrap_servers, topic, sent)


async def test_large_batches_compress_on_worker_threads(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer
) -> None:
    topic = new_topic(3)
    values = [b"%07d" % i + b"payload " * 40 for i in range(20_000)]
    keys = [b"%d" % (i % 11) for i in range(20_000)]
    async with open_producer(
        compression_type="zstd",
        batch_size=256 * 1024,
        linger_ms=20,
        compression_offload_bytes=64 * 1024,
    ) as producer:
        metas = await producer.results(await producer.send_many(topic, values, keys=keys))
        assert (await producer.metrics())["batches_compressed_off_loop"] > 0
    sent: Sent = {
        v: (m.partition, m.offset, k, []) for v, k, m in zip(values, keys, metas, strict=True)
    }
    check_readback(kafka.bootstrap_servers, topic, sent)


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_settings(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer, acks: Any
) -> None:
    topic = new_topic(1)
    expected = [f"a{i}".encode() for i in range(500)]
    if acks == 0:
        # A new topic's partition can be in the broker's metadata a moment before its log
        # takes writes. The broker refuses a produce request then, and with acks=0 nobody
        # hears of it: by design, not a loss this test could see. One acknowledged record
        # first makes sure the log is there.
        async with open_producer(acks=1, enable_idempotence=False) as warm:
            await warm.results(await warm.send_each(topic, [(b"warm", None, None)]))
        expected.insert(0, b"warm")
    records = [(f"a{i}".encode(), None, None) for i in range(500)]
    async with open_producer(acks=acks, enable_idempotence=False) as producer:
        metas = await producer.results(await producer.send_each(topic, records))
    if acks == 0:
        assert all(m.offset == -1 for m in metas)  # the broker does not answer acks=0
    else:
        assert [m.offset for m in metas] == list(range(500))
    read = consume_all(kafka.bootstrap_servers, topic, expected=len(expected))
    assert [r.value for r in read] == expected


async def test_metadata_timestamp_sizes_and_partitions(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer
) -> None:
    topic = new_topic(3)
    async with open_producer() as producer:
        meta = await producer.send_and_wait(
            topic, "héllo", key="clé", headers={"h": "v"}, partition=2, timestamp_ms=1234567
        )
        assert await producer.partitions_for(topic) == [0, 1, 2]
    assert isinstance(meta, RecordMetadata)
    assert (meta.topic, meta.partition, meta.offset, meta.timestamp_ms) == (topic, 2, 0, 1234567)
    assert meta.serialized_key_size == len("clé".encode())
    assert meta.serialized_value_size == len("héllo".encode())
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value, rec.timestamp_ms) == ("clé".encode(), "héllo".encode(), 1234567)
    assert rec.headers == (("h", b"v"),)


async def test_batches_the_broker_finds_too_large_are_split(
    kafka: KafkaCluster, new_topic: NewTopic, open_producer: OpenProducer
) -> None:
    topic = new_topic(1, config={"max.message.bytes": "20000"})
    records = [(b"%06d" % i + b"x" * 500, None, None) for i in range(400)]
    async with open_producer(batch_size=200_000, linger_ms=50, max_request_size=1_000_000) as p:
        metas = await p.results(await p.send_each(topic, records))
        assert (await p.metrics())["batches_split"] > 0
    assert [m.offset for m in metas] == list(range(400))
    read = consume_all(kafka.bootstrap_servers, topic, expected=400)
    assert [(r.value or b"")[:6] for r in read] == [b"%06d" % i for i in range(400)]
