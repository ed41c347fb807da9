"""Producer.send_bulk against a real broker: content, partitions and order read back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from support import by_partition

from aioproducer import Producer, SerializationError
from aioproducer.partitioner import partition_for_key
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


async def test_send_bulk_keyed_records_arrive_in_key_partitions_in_order(
    kafka: KafkaCluster,
    new_topic: NewTopic,
) -> None:
    topic = new_topic(6)
    n = 5000
    keys = [f"k{i % 37}".encode() for i in range(n)]
    values: list[Any] = [f"v{i}".encode() * 3 for i in range(n)]
    values[10] = None  # a tombstone
    values[11] = b""
    headers: list[Any] = [None] * n
    headers[5] = [("h", b"1"), ("n", None)]
    async with Producer(kafka.bootstrap_servers, linger_ms=5, batch_size=2048) as producer:
        # One acknowledged record per partition first: on a topic created a moment ago,
        # a burst to every partition at once can meet a broker not yet leading them all.
        for p in range(6):
            await (await producer.send(topic, b"warm-up", partition=p))
        bulk = await producer.send_bulk(topic, values, keys=keys, headers=headers)
        await bulk
    assert (bulk.records, bulk.delivered, bulk.failed, bulk.first_error) == (n, n, 0, None)
    records = consume_all(kafka.bootstrap_servers, topic, expected=n + 6)
    records = [r for r in records if r.value != b"warm-up"]
    assert len(records) == n
    got = by_partition(records)
    for p, recs in got.items():
        expected = [i for i in range(n) if partition_for_key(keys[i], 6) == p]
        assert [(r.key, r.value) for r in recs] == [(keys[i], values[i]) for i in expected]
        assert [r.offset for r in recs] == list(range(1, len(recs) + 1))
    rec5 = next(r for r in records if r.value == values[5])
    assert list(rec5.headers) == [("h", b"1"), ("n", None)]
    md = bulk.metadata(1234)
    assert md.partition == partition_for_key(keys[1234], 6)
    assert next(r for r in got[md.partition] if r.offset == md.offset).value == values[1234]


async def test_send_bulk_explicit_and_sticky_partitions(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(4)
    n = 3000
    values = [i.to_bytes(4, "big") for i in range(n)]
    parts = [i % 3 if i % 5 else None for i in range(n)]
    async with Producer(kafka.bootstrap_servers, linger_ms=2, batch_size=1024) as producer:
        bulk = await producer.send_bulk(topic, values, partitions=parts, timestamp_ms=1234567)
        keyless = await producer.send_bulk(topic, [b"s%d" % i for i in range(2000)])
        await bulk
        await keyless
    assert bulk.failed == 0 and keyless.failed == 0
    records = consume_all(kafka.bootstrap_servers, topic, expected=n + 2000)
    assert len(records) == n + 2000
    where = {r.value: r for r in records}
    for i in range(n):
        rec = where[values[i]]
        if parts[i] is not None:
            assert rec.partition == parts[i]
        assert bulk.partition(i) == rec.partition
        assert bulk.metadata(i).offset == rec.offset
        assert rec.timestamp_ms == 1234567
    # Per partition, records given that partition keep their order, and so do those
    # the partitioner placed.
    for p, recs in by_partition(records).items():
        idx = [int.from_bytes(r.value, "big") for r in recs if r.value and r.value[:1] != b"s"]
        assert [i for i in idx if parts[i] == p] == sorted(i for i in idx if parts[i] == p)
        assert [i for i in idx if parts[i] is None] == sorted(i for i in idx if parts[i] is None)
        sticky = [int(r.value[1:]) for r in recs if r.value and r.value[:1] == b"s"]
        assert sticky == sorted(sticky)
    # Keyless records are spread over more than one partition (the sticky switch).
    assert len({where[b"s%d" % i].partition for i in range(2000)}) > 1


async def test_send_bulk_bad_record_raises_with_its_index_and_keeps_earlier(
    kafka: KafkaCluster,
    new_topic: NewTopic,
) -> None:
    topic = new_topic(2)
    async with Producer(kafka.bootstrap_servers) as producer:
        before = producer.metrics()["buffer_bytes_in_use"]
        with pytest.raises(SerializationError, match="record 2 "):
            await producer.send_bulk(topic, [b"a", "b", 3, b"d"], keys=[b"1", b"2", b"3", b"4"])
        await producer.flush()
        assert producer.metrics()["buffer_bytes_in_use"] == before == 0
        bulk = await producer.send_bulk(topic, [b"after"])
        await bulk
    records = consume_all(kafka.bootstrap_servers, topic, expected=3)
    assert sorted(r.value or b"" for r in records) == [b"a", b"after", b"b"]
