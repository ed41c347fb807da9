"""``await producer.send_bulk()`` lets the loop's other tasks run while it appends.

The sender and the connections run only when ``send_bulk`` yields. It yields every half
of what one request to the topic can carry (a batch per partition), so that requests
leave while a large bulk is appended, but not after every batch (a request per batch).
"""

from __future__ import annotations

import anyio
import pytest

from aioproducer import Producer
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

_BATCH = 16 * 1024
_PARTITIONS = 12


async def _passes_during(producer: Producer, topic: str, values: list[bytes]) -> int:
    """How many times a task that is always ready ran during one ``send_bulk``."""
    passes = 0
    running = True

    async def count() -> None:
        nonlocal passes
        while running:
            passes += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(count)
        await anyio.lowlevel.checkpoint()  # the counter is running
        before = passes
        bulk = await producer.send_bulk(topic, values)
        during = passes - before
        running = False
    await producer.flush()
    assert bulk.done() and bulk.failed == 0
    return during


async def test_send_bulk_yields_every_half_request_of_the_topic() -> None:
    with FakeCluster(brokers=1) as fake:
        fake.create_topic("wide", partitions=_PARTITIONS)
        fake.create_topic("narrow", partitions=1)
        async with Producer(
            fake.bootstrap_servers, linger_ms=30_000, batch_size=_BATCH
        ) as producer:
            # Both topics' metadata loaded (flush: the linger would hold a record 30 s).
            await producer.send("wide", b"warm")
            await producer.send("narrow", b"warm")
            await producer.flush()
            # 12,000 records of 100 B: 1.63 MB as the buffer counts them (136 B each).
            values = [b"%06d" % i + b"x" * 94 for i in range(12_000)]
            # A request to "wide" carries up to 12 batches of 16 KiB: a yield every 96 KiB,
            # 17 in all. At half of max_request_size (512 KiB) it was 4; after every
            # full batch it would be 82.
            wide = await _passes_during(producer, "wide", values)
            assert 14 <= wide <= 20
            # One partition: a request carries one batch, but a yield costs more than
            # what it lets out, so yields stay at least 64 KiB apart: about 21, not 82.
            narrow = await _passes_during(producer, "narrow", values)
            assert 16 <= narrow <= 26


async def test_compressed_batches_hold_more_so_send_bulk_yields_less_often() -> None:
    # Runs are counted in uncompressed bytes; a compressed batch holds more of them once
    # the topic's ratio is known (after one bulk, these batches hold about 1.7 times
    # their batch_size), and so does a request: 9 yields, not 17.
    with FakeCluster(brokers=1) as fake:
        fake.create_topic("wide", partitions=_PARTITIONS)
        values = [b"%06d" % i + b"x" * 94 for i in range(12_000)]
        passes = {}
        for codec in ("none", "lz4"):
            async with Producer(
                fake.bootstrap_servers,
                linger_ms=30_000,
                batch_size=_BATCH,
                compression_type=codec,
            ) as producer:
                await _passes_during(producer, "wide", values)  # learns the ratio
                passes[codec] = await _passes_during(producer, "wide", values)
        assert 14 <= passes["none"] <= 20
        assert passes["lz4"] <= 12
