"""send_bulk with Arrow columns and tables against a real broker: content, partitions,
headers and order read back; bad columns refused before anything is buffered."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from support import by_partition

from aioproducer import Producer, RecordTooLargeError, SerializationError, SyncProducer
from aioproducer.errors import InvalidArgumentError
from aioproducer.partitioner import partition_for_key
from aioproducer.protocol import columnar
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

pa = pytest.importorskip("pyarrow")

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> Any:
    # The columnar path is the same code on every backend; test_send_bulk.py covers them.
    return "asyncio"


HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


async def _warm_up(producer: Producer, topic: str, partitions: int) -> None:
    # One acknowledged record per partition first: on a topic created a moment ago, a
    # burst to every partition at once can meet a broker not yet leading them all.
    for p in range(partitions):
        await (await producer.send(topic, b"warm-up", partition=p))


class _CountingCodec:
    """The compiled column encoder, counting its calls."""

    def __init__(self, codec: Any) -> None:
        self.codec = codec
        self.calls = 0

    def encode_run(self, *args: Any) -> Any:
        self.calls += 1
        return self.codec.encode_run(*args)

    def encode_batches(self, *args: Any) -> Any:
        self.calls += 1
        return self.codec.encode_batches(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.codec, name)  # its other functions (hashing, grouping)


async def test_table_with_keys_headers_and_nulls_lands_in_key_partitions_in_order(
    kafka: KafkaCluster, new_topic: NewTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read back by confluent-kafka (consume_all): the compiled column encoder's batches
    # where it is installed, else the numpy encoder's.
    counting = _CountingCodec(columnar.CODEC) if columnar.CODEC is not None else None
    if counting is not None:
        monkeypatch.setattr(columnar, "CODEC", counting)
    topic = new_topic(6)
    n = 3000
    keys = [f"k{i % 41}" for i in range(n)]
    values: list[Any] = [f"value-{i}".encode() * (1 + i % 4) for i in range(n)]
    values[7] = None  # a tombstone
    values[8] = b""
    values[9] = b"x" * 20000  # length varints of three bytes
    headers: list[Any] = [None] * n
    headers[5] = [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    headers[2500] = [{"key": "trace", "value": b"abc"}]
    table = pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, HEADER_TYPE),
        }
    )
    async with Producer(kafka.bootstrap_servers, linger_ms=5, batch_size=4096) as producer:
        await _warm_up(producer, topic, 6)
        bulk = await producer.send_bulk(topic, table)
        await bulk
    assert (bulk.records, bulk.delivered, bulk.failed, bulk.first_error) == (n, n, 0, None)
    records = [r for r in consume_all(kafka.bootstrap_servers, topic, expected=n + 6)]
    records = [r for r in records if r.value != b"warm-up"]
    assert len(records) == n
    got = by_partition(records)
    for p, recs in got.items():
        expected = [i for i in range(n) if partition_for_key(keys[i].encode(), 6) == p]
        assert [(r.key, r.value) for r in recs] == [(keys[i].encode(), values[i]) for i in expected]
    by_value = {r.value: r for r in records if r.value}
    assert list(by_value[values[5]].headers) == [("h", b"1"), ("n", None)]
    assert list(by_value[values[2500]].headers) == [("trace", b"abc")]
    assert list(by_value[values[6]].headers) == []
    md = bulk.metadata(1234)
    assert md.partition == partition_for_key(keys[1234].encode(), 6)
    assert next(r for r in got[md.partition] if r.offset == md.offset).value == values[1234]
    assert counting is None or counting.calls >= 6


async def test_keyless_chunked_and_sliced_columns_spread_over_partitions(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    values = [b"s%05d" % i for i in range(4000)]
    whole = pa.array([b"pad", *values], pa.binary()).slice(1)
    chunked = pa.chunked_array([whole.slice(0, 1500), whole.slice(1500)])
    texts = [f"t{i:05d}" for i in range(500)]
    strings = pa.array(texts, pa.large_string())
    async with Producer(kafka.bootstrap_servers, linger_ms=2, batch_size=1024) as producer:
        await _warm_up(producer, topic, 3)
        bulk = await producer.send_bulk(topic, chunked, timestamp_ms=1234567)
        text = await producer.send_bulk(topic, strings, keys=pa.array([None] * 500, pa.binary()))
        await bulk
        await text
    assert (bulk.failed, text.failed) == (0, 0)
    records = consume_all(kafka.bootstrap_servers, topic, expected=4500 + 3)
    records = [r for r in records if r.value != b"warm-up"]
    assert sorted(r.value or b"" for r in records) == sorted(values + [t.encode() for t in texts])
    assert all(r.key is None for r in records)
    assert {r.timestamp_ms for r in records if r.value and r.value[:1] == b"s"} == {1234567}
    # Sticky placement moves on batch by batch, and keeps each bulk's order per partition.
    assert len({r.partition for r in records}) > 1
    for recs in by_partition(records).values():
        for prefix in (b"s", b"t"):
            seen = [int(r.value[1:]) for r in recs if r.value and r.value[:1] == prefix]
            assert seen == sorted(seen)
    for i in (0, 1499, 1500, 3999):
        rec = next(r for r in records if r.value == values[i])
        assert (rec.partition, rec.offset) == (bulk.partition(i), bulk.metadata(i).offset)


def test_sync_producer_table_with_partitions_and_null_keys(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(4)
    n = 2000
    keys: list[Any] = [f"key-{i % 17}".encode() if i % 3 else None for i in range(n)]
    parts: list[Any] = [i % 4 if i % 5 == 0 else None for i in range(n)]
    values = [b"%06d" % i for i in range(n)]
    table = pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "key": pa.array(keys, pa.large_binary()),
            "partition": pa.array(parts, pa.int32()),
        }
    )
    with SyncProducer(kafka.bootstrap_servers, linger_ms=5, batch_size=2048) as producer:
        for p in range(4):
            producer.send(topic, b"warm-up", partition=p).result(30)
        bulk = producer.send_bulk(topic, table).result(60)
    assert (bulk.records, bulk.failed) == (n, 0)
    records = [r for r in consume_all(kafka.bootstrap_servers, topic, expected=n + 4)]
    where = {r.value: r for r in records if r.value != b"warm-up"}
    assert len(where) == n
    for i in range(n):
        rec = where[values[i]]
        assert rec.key == keys[i]
        if parts[i] is not None:
            assert rec.partition == parts[i]
        elif keys[i] is not None:
            assert rec.partition == partition_for_key(keys[i], 4)
        assert (bulk.partition(i), bulk.metadata(i).offset) == (rec.partition, rec.offset)
    # Records with the same key keep their order.
    for recs in by_partition(list(where.values())).values():
        for key in {r.key for r in recs if r.key is not None}:
            mine = [r for r in recs if r.key == key]
            ordered = sorted(mine, key=lambda r: r.offset)
            assert [r.value for r in ordered] == sorted(r.value for r in mine)


async def test_bad_columns_are_refused_before_anything_is_buffered(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(2)
    async with Producer(kafka.bootstrap_servers, max_request_size=10_000) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
        with pytest.raises(SerializationError, match=r"value must be a binary or string.*int64"):
            await producer.send_bulk(topic, pa.array([1, 2, 3]))
        with pytest.raises(SerializationError, match="key must be a binary or string"):
            await producer.send_bulk(topic, pa.array([b"a"]), keys=pa.array([1.5]))
        with pytest.raises(InvalidArgumentError, match="partition column must hold integers"):
            await producer.send_bulk(
                topic, pa.table({"value": pa.array([b"a"]), "partition": pa.array(["0"])})
            )
        with pytest.raises(InvalidArgumentError, match=r"unknown column.*'payload'"):
            await producer.send_bulk(topic, pa.table({"value": [b"a"], "payload": [b"b"]}))
        with pytest.raises(InvalidArgumentError, match="keys has 1 items but values has 2"):
            await producer.send_bulk(topic, pa.array([b"a", b"b"]), keys=pa.array([b"k"]))
        assert producer.metrics()["buffer_bytes_in_use"] == 0
        # A bad record (too large, a bad partition) keeps the ones before it.
        with pytest.raises(RecordTooLargeError, match="record 2 "):
            await producer.send_bulk(topic, pa.array([b"ok0", b"ok1", b"x" * 20_000, b"no"]))
        with pytest.raises(InvalidArgumentError, match=r"record 1 .*partition 7"):
            await producer.send_bulk(
                topic, pa.array([b"p0", b"p7", b"p1"]), partitions=pa.array([0, 7, 1])
            )
        await producer.flush()
    records = consume_all(kafka.bootstrap_servers, topic, expected=4)
    assert sorted(r.value or b"" for r in records) == [b"first", b"ok0", b"ok1", b"p0"]


def test_sending_sequences_imports_neither_numpy_nor_pyarrow() -> None:
    code = (
        "import sys, anyio\n"
        "from aioproducer import Producer\n"
        "from aioproducer.testing import FakeCluster\n"
        "async def main(bs):\n"
        "    async with Producer(bs) as p:\n"
        "        await (await p.send_bulk('t', [b'a', b'b'], keys=[b'k', None]))\n"
        "with FakeCluster(brokers=1) as fc:\n"
        "    fc.create_topic('t', partitions=2)\n"
        "    anyio.run(main, fc.bootstrap_servers)\n"
        "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
