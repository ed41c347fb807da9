"""Keyed records land where Java's default partitioner puts them; keyless ones stick evenly."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioproducer import Producer
from aioproducer.partitioner import StickyPartitioner, murmur2, partition_for_key
from aioproducer.testing import KafkaCluster

# From the Java client's UtilsTest.testMurmur2.
UPSTREAM_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), UPSTREAM_VECTORS)
def test_murmur2_matches_the_java_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=300))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    from kafka.partitioner.default import murmur2 as oracle

    # kafka-python returns the unsigned-masked value; compare as 32-bit patterns.
    assert murmur2(data) & 0xFFFFFFFF == oracle(data) & 0xFFFFFFFF


def test_partition_uses_to_positive_not_abs() -> None:
    # murmur2 is negative here: Java masks the sign bit (abs() would give another partition).
    assert murmur2(b"21") < 0
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_sticky_partitioner_switches_after_batch_size_bytes() -> None:
    sticky = StickyPartitioner(batch_size=1000, rng=random.Random(1))
    available = list(range(6))
    first = sticky.partition("t", available, 6)
    for _ in range(9):  # 900 bytes: stays
        sticky.on_append("t", first, 100, batch_full=False, available=available, num_partitions=6)
    assert sticky.partition("t", available, 6) == first
    # batch_size reached but the batch is not full yet: stays until 2 * batch_size.
    sticky.on_append("t", first, 100, batch_full=False, available=available, num_partitions=6)
    assert sticky.partition("t", available, 6) == first
    sticky.on_append("t", first, 100, batch_full=True, available=available, num_partitions=6)
    second = sticky.partition("t", available, 6)
    assert second != first


def test_sticky_partitioner_spreads_load_uniformly() -> None:
    sticky = StickyPartitioner(batch_size=100, rng=random.Random(7))
    available = list(range(4))
    counts: Counter[int] = Counter()
    for _ in range(40_000):
        p = sticky.partition("t", available, 4)
        counts[p] += 10
        sticky.on_append("t", p, 10, batch_full=False, available=available, num_partitions=4)
    assert set(counts) == set(available)
    assert max(counts.values()) / min(counts.values()) < 1.2


def test_sticky_partitioner_only_picks_partitions_with_a_leader() -> None:
    sticky = StickyPartitioner(batch_size=10, rng=random.Random(3))
    seen = set()
    for _ in range(500):
        p = sticky.partition("t", [1, 3], 5)
        seen.add(p)
        sticky.on_append("t", p, 25, batch_full=True, available=[1, 3], num_partitions=5)
    assert seen == {1, 3}


@pytest.mark.anyio
async def test_keyed_records_land_where_librdkafka_murmur2_puts_them(
    kafka: KafkaCluster,
) -> None:
    """Cross-check on a real topic against librdkafka's Java-compatible partitioner."""
    import confluent_kafka

    topic = f"p-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=7)
    keys = [f"user-{i}".encode() for i in range(300)] + [b"", b"\x00\xff" * 9]
    ours: dict[bytes, int] = {}
    async with Producer(kafka.bootstrap_servers) as producer:
        for key in keys:
            meta = await producer.send_and_wait(topic, b"v", key=key)
            ours[key] = meta.partition

    theirs: dict[bytes, int] = {}

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        assert err is None
        theirs[msg.key()] = msg.partition()

    rdk = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    for key in keys:
        rdk.produce(topic, b"v", key=key, on_delivery=on_delivery)
    assert rdk.flush(30) == 0
    assert ours == theirs
    assert ours == {k: partition_for_key(k, 7) for k in keys}
    assert len(set(ours.values())) == 7
