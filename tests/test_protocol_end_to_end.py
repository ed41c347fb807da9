"""The protocol core against a real broker, with no producer logic in between.

ApiVersions -> Metadata -> Produce (one hand-built batch per codec, acks=-1), then two
independent consumers (confluent-kafka and kafka-python) must read back exactly the keys,
values, headers, timestamps and offsets that were written.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from aioproducer.connection import BrokerConnection
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.messages import MetadataRequest, ProduceRequest
from aioproducer.protocol.records import RecordBatchBuilder
from aioproducer.protocol.versions import ApiKey
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
BASE_TS = 1_700_000_000_000

Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def rows_for(codec: Codec) -> list[Row]:
    rows: list[Row] = []
    for i in range(40):
        key = None if i % 4 == 0 else f"key-{i % 7}".encode()
        value = f"{codec.name}-{i}-".encode() + bytes(range(i % 50)) * 3
        headers: list[tuple[str, bytes | None]] = [("i", str(i).encode())]
        if i % 5 == 0:
            headers.append(("ünïcode", "wärt".encode()))
        # Timestamps move both ways around the first one: deltas may be negative.
        ts = BASE_TS + (i * 37 % 11) * 1000 - 5000
        rows.append((key, value, headers, ts))
    rows.append((b"null-value", None, [], BASE_TS))
    return rows


async def produce_raw(bootstrap: str, topic: str) -> dict[Codec, int]:
    """Send one batch per codec to partition 0; returns each batch's base offset."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    offsets: dict[Codec, int] = {}
    async with anyio.create_task_group() as tg:
        conn = BrokerConnection(host, int(port), node_id=-1, client_id="e2e", request_timeout=30.0)
        await conn.open(tg, timeout=30.0)
        assert conn.versions[ApiKey.PRODUCE] == 12
        assert conn.versions[ApiKey.METADATA] == 12
        metadata = await conn.request(MetadataRequest([topic]))
        (topic_meta,) = metadata.topics
        assert topic_meta.name == topic and topic_meta.error_code == 0
        assert [p.partition for p in topic_meta.partitions] == [0]
        for codec in CODECS:
            builder = RecordBatchBuilder(codec)
            for key, value, headers, ts in rows_for(codec):
                builder.append(ts, key, value, headers)
            batch = builder.build()
            response = await conn.request(ProduceRequest(-1, 30000, [(topic, [(0, batch)])]))
            (topic_resp,) = response.topics
            (part,) = topic_resp.partitions
            assert part.error_code == 0, part
            offsets[codec] = part.base_offset
        await conn.aclose()
        tg.cancel_scope.cancel()
    return offsets


def expected_records(offsets: dict[Codec, int]) -> list[tuple[Any, ...]]:
    out = []
    for codec in CODECS:
        for i, (key, value, headers, ts) in enumerate(rows_for(codec)):
            out.append((offsets[codec] + i, key, value, tuple(headers), ts))
    return out


def read_with_kafka_python(bootstrap: str, topic: str, count: int) -> list[tuple[Any, ...]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
        check_crcs=True,
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out = []
        for msg in consumer:
            out.append((msg.offset, msg.key, msg.value, tuple(msg.headers or ()), msg.timestamp))
            if len(out) == count:
                break
        return out
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def raw_topic(kafka: KafkaCluster) -> tuple[str, list[tuple[Any, ...]]]:
    topic = f"raw-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=1)
    offsets = anyio.run(produce_raw, kafka.bootstrap_servers, topic)
    # Batches land back to back: each codec's base offset follows the previous batch.
    sizes = [len(rows_for(c)) for c in CODECS]
    assert [offsets[c] for c in CODECS] == [sum(sizes[:i]) for i in range(len(CODECS))]
    return topic, expected_records(offsets)


def test_confluent_kafka_reads_back_every_codec(
    kafka: KafkaCluster, raw_topic: tuple[str, list[tuple[Any, ...]]]
) -> None:
    topic, expected = raw_topic
    records = consume_all(kafka.bootstrap_servers, topic, expected=len(expected))
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in records]
    assert got == expected


def test_kafka_python_reads_back_every_codec(
    kafka: KafkaCluster, raw_topic: tuple[str, list[tuple[Any, ...]]]
) -> None:
    topic, expected = raw_topic
    got = read_with_kafka_python(kafka.bootstrap_servers, topic, len(expected))
    assert got == expected
