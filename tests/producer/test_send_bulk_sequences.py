"""send_bulk of Python lists without headers: the rows grouped and encoded whole runs at
a time (compiled where it runs, record by record in pure Python), read back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import Producer
from aioproducer.partitioner import partition_for_key
from aioproducer.testing import FakeCluster, KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


def _rows(n: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Values of varying size (a tombstone, an empty one), keys (some null: the sticky
    partitioner's) and a few explicit partitions."""
    values: list[Any] = [b"%06d:" % i + b"v" * (i % 150) for i in range(n)]
    values[7] = None
    values[8] = b""
    keys: list[Any] = [None if i % 11 == 0 else b"key-%d" % (i % 41) for i in range(n)]
    parts: list[Any] = [i % 3 if i % 17 == 0 else None for i in range(n)]
    return values, keys, parts


def _expected_partition(i: int, keys: list[Any], parts: list[Any], count: int) -> int | None:
    if parts[i] is not None:
        return int(parts[i])
    return None if keys[i] is None else partition_for_key(keys[i], count)


def _check(
    bulk: Any,
    at: dict[tuple[int, int], Any],
    rows: tuple[list[Any], ...],
    count: int,
    marker: bytes = b":",
) -> None:
    """Each record of ``bulk`` is where its metadata says (``at``: the records read back
    by partition and offset), on its key's or given partition; per partition, those
    placed by key or given it keep their input order, and so do the sticky ones (the
    bulk's values carry ``marker`` after their index)."""
    values, keys, parts = rows
    for i in range(len(values)):
        md = bulk.metadata(i)
        rec = at[(md.partition, md.offset)]
        assert (rec.key, rec.value) == (keys[i], values[i])
        want = _expected_partition(i, keys, parts, count)
        if want is not None:
            assert md.partition == want
    by_part: dict[int, list[int]] = {}
    for (p, _offset), rec in sorted(at.items()):
        if rec.value and rec.value[6:7] == marker:
            by_part.setdefault(p, []).append(int(rec.value[:6]))
    for mine in by_part.values():
        placed = [i for i in mine if _expected_partition(i, keys, parts, count) is not None]
        assert placed == sorted(placed)
        free = [i for i in mine if _expected_partition(i, keys, parts, count) is None]
        assert free == sorted(free)


# One event loop: the path under test is the same on each.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_keyed_lists_land_in_order_with_exact_memory_under_back_pressure() -> None:
    n = 6000
    values, keys, parts = _rows(n)
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=5)
        # ~0.5 MB of records through 64 KiB of buffer: send_bulk waits for space often.
        async with Producer(
            fc.bootstrap_servers, linger_ms=1, batch_size=4096, buffer_memory=65536
        ) as producer:
            bulk = await producer.send_bulk("t", values, keys=keys, partitions=parts)
            keyless = await producer.send_bulk("t", [b"s%d" % i for i in range(3000)])
            await bulk
            await keyless
            assert producer.metrics()["buffer_bytes_in_use"] == 0
        assert (bulk.records, bulk.delivered, bulk.failed) == (n, n, 0)
        assert (keyless.records, keyless.failed) == (3000, 0)
        stored = {p: fc.records("t", p) for p in range(5)}
    at: dict[tuple[int, int], Any] = {}
    for p, recs in stored.items():
        for offset, rec in enumerate(recs):
            at[(p, offset)] = rec
    assert len(at) == n + 3000
    _check(bulk, at, (values, keys, parts), 5)
    for recs in stored.values():
        sticky = [int(r.value[1:]) for r in recs if r.value and r.value[:1] == b"s"]
        assert sticky == sorted(sticky)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_keyed_lists_compressed_read_back_by_another_client(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(6)
    n = 8000
    values, keys, parts = _rows(n)
    async with Producer(
        kafka.bootstrap_servers, linger_ms=5, batch_size=8192, compression_type="lz4"
    ) as producer:
        for p in range(6):
            await (await producer.send(topic, b"warm-up", partition=p))
        bulk = await producer.send_bulk(topic, values, keys=keys, partitions=parts)
        await bulk
        # No partitions and no headers: the one-pass compiled scan and grouping, and
        # open batches (the first bulk's) filled by the compiled encoder.
        m = 3000
        values2 = [b"%06d;" % i + b"w" * (i % 90) for i in range(m)]
        free = [None] * m
        bulk2 = await producer.send_bulk(topic, values2, keys=keys[:m])
        await bulk2
    assert (bulk.records, bulk.delivered, bulk.failed) == (n, n, 0)
    assert (bulk2.records, bulk2.delivered, bulk2.failed) == (m, m, 0)
    records = [r for r in consume_all(kafka.bootstrap_servers, topic, expected=n + m + 6)]
    records = [r for r in records if r.value != b"warm-up"]
    assert len(records) == n + m
    at = {(r.partition, r.offset): r for r in records}
    _check(bulk, at, (values, keys, parts), 6)
    _check(bulk2, at, (values2, keys[:m], free), 6, b";")
