"""Real clients against the fake: our producer, confluent-kafka and kafka-python.

Each test checks content (keys, values, headers, offsets, timestamps), not just counts,
and that clients negotiated versions the fake advertises.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.errors import UnknownTopicOrPartitionError
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import ADVERTISED_VERSIONS

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")


def check_versions(fc: FakeCluster) -> set[tuple[str, int]]:
    """Every request used an advertised version (ApiVersions may probe higher)."""
    used = {(r.api, r.api_version) for r in fc.requests()}
    for req in fc.requests():
        if req.api != "api_versions":
            low, high = ADVERTISED_VERSIONS[req.api_key]  # type: ignore[index]
            assert low <= req.api_version <= high, (req.api, req.api_version)
    return used


def confluent_read(fc: FakeCluster, topic: str, partitions: int, expected: int) -> list[Any]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": fc.bootstrap_servers,
            "group.id": "readback",  # required by the client; no group API is used with assign()
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        return got
    finally:
        consumer.close()


def test_confluent_kafka_produces_and_consumes() -> None:
    with FakeCluster(brokers=3) as fc:
        fc.create_topic("c", partitions=3)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": fc.bootstrap_servers, "enable.idempotence": True, "linger.ms": 2}
        )
        reports: list[Any] = []
        sent = {}
        for i in range(60):
            key, value = f"k{i}".encode(), f"value-{i}".encode()
            sent[value] = key
            producer.produce(
                "c",
                value=value,
                key=key,
                headers=[("n", str(i).encode())],
                timestamp=1_700_000_000_000 + i,
                on_delivery=lambda err, msg: reports.append((err, msg)),
            )
        assert producer.flush(15) == 0
        del producer
        assert [err for err, _ in reports] == [None] * 60

        # What the fake stored is what was sent, where the delivery reports said.
        reported = {msg.value(): (msg.partition(), msg.offset()) for _, msg in reports}
        for partition in range(3):
            records = fc.records("c", partition)
            assert [r.offset for r in records] == list(range(len(records)))
            for r in records:
                assert r.value is not None
                assert reported[r.value] == (partition, r.offset)
                assert r.key == sent[r.value]
                i = int(r.value.split(b"-")[1])
                assert r.headers == [("n", str(i).encode())]
                assert r.timestamp_ms == 1_700_000_000_000 + i
            # Idempotent: one producer id, sequences continuous per partition.
            batches = fc.batches("c", partition)
            assert {b.producer_id for b in batches} == {1000}
            assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]

        got = confluent_read(fc, "c", 3, 60)
        assert sorted((m.partition(), m.offset(), m.key(), m.value()) for m in got) == sorted(
            (p, o, sent[v], v) for v, (p, o) in reported.items()
        )
        assert all(m.headers() == [("n", m.value().split(b"-")[1])] for m in got)
        used = check_versions(fc)
        assert {"produce", "fetch", "list_offsets", "init_producer_id"} <= {a for a, _ in used}


async def _produce_with_ours(bootstrap: str, topic: str, count: int) -> list[Any]:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        handles = [
            await p.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), headers=[("i", b"%d" % i)])
            for i in range(count)
        ]
        return [await h for h in handles]


def test_kafka_python_consumes_what_our_producer_wrote() -> None:
    with FakeCluster(brokers=2) as fc:
        fc.create_topic("k", partitions=4)
        metas = anyio.run(_produce_with_ours, fc.bootstrap_servers, "k", 40)
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=fc.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
        )
        try:
            consumer.assign([kafka.TopicPartition("k", p) for p in range(4)])
            got = []
            for msg in consumer:
                got.append(msg)
                if len(got) == 40:
                    break
        finally:
            consumer.close()
        expected = sorted(
            (m.partition, m.offset, f"k{i}".encode(), f"v{i}".encode(), [("i", b"%d" % i)])
            for i, m in enumerate(metas)
        )
        assert sorted((m.partition, m.offset, m.key, m.value, m.headers) for m in got) == expected
        used = check_versions(fc)
        assert ("fetch", 12) in used
        assert any(api == "list_offsets" for api, _ in used)


@pytest.mark.anyio
async def test_our_producer_on_every_backend(anyio_backend: Any) -> None:
    async with FakeCluster(brokers=3) as fc:
        fc.create_topic("o", partitions=6)
        metas = await _produce_with_ours(fc.bootstrap_servers, "o", 30)
        for i, meta in enumerate(metas):
            (record,) = [r for r in fc.records("o", meta.partition) if r.offset == meta.offset]
            assert (record.key, record.value) == (f"k{i}".encode(), f"v{i}".encode())
            assert record.headers == [("i", b"%d" % i)]
            assert record.timestamp_ms == meta.timestamp_ms
        # Leaders are spread over the brokers, and each got produce requests.
        assert {fc.leader("o", p) for p in range(6)} == {1, 2, 3}
        assert {r.broker for r in fc.requests("produce")} == {1, 2, 3}


@pytest.mark.anyio
async def test_log_append_time_topic(anyio_backend: Any) -> None:
    async with FakeCluster() as fc:
        fc.create_topic("lat", config={"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        async with Producer(bootstrap_servers=fc.bootstrap_servers) as p:
            meta = await p.send_and_wait("lat", b"x", timestamp_ms=1000)
        after = int(time.time() * 1000)
        assert before <= meta.timestamp_ms <= after
        (batch,) = fc.batches("lat", 0)
        assert batch.timestamp_type == 1
        assert batch.records[0].timestamp_ms == meta.timestamp_ms


@pytest.mark.anyio
async def test_auto_creation_on_and_off(anyio_backend: Any) -> None:
    async with FakeCluster(num_partitions=2) as fc:
        async with Producer(bootstrap_servers=fc.bootstrap_servers) as p:
            meta = await p.send_and_wait("fresh", b"v", key=b"key")
        assert fc.topics() == ["fresh"]
        assert fc.records("fresh", meta.partition)[0].value == b"v"
    async with FakeCluster(auto_create_topics=False) as fc:
        async with Producer(bootstrap_servers=fc.bootstrap_servers, max_block_ms=300) as p:
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send("missing", b"v")
        assert fc.topics() == []
