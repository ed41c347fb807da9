"""With compression, ``batch_size`` counts bytes as sent: batches of data that compresses
well grow (up to ``max_request_size`` uncompressed) as the producer learns the ratio,
while data that does not compress keeps batches at ``batch_size``."""

from __future__ import annotations

import os

import pytest

from aioproducer import Producer
from aioproducer.protocol.compression import Codec
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio


async def _send(fake: FakeCluster, values: list[bytes], **config: object) -> None:
    # In waves, as a stream arrives: batches opened after some were sent use the ratio
    # learned from them.
    async with Producer(bootstrap_servers=fake.bootstrap_servers, **config) as p:
        for start in range(0, len(values), 500):
            handles = [await p.send("t", v, partition=0) for v in values[start : start + 500]]
            for h in handles:
                await h


async def test_compressible_batches_grow_past_batch_size(fake: FakeCluster) -> None:
    values = [f"{i:08d}".encode() + b"." * 992 for i in range(3000)]
    await _send(
        fake,
        values,
        compression_type="lz4",
        batch_size=2048,
        linger_ms=1,
        max_request_size=200_000,
    )
    batches = fake.batches("t", 0)
    assert [r.value for b in batches for r in b.records] == values
    assert all(b.codec == Codec.LZ4 for b in batches)
    counts = [len(b.records) for b in batches]
    # At first two 1-KB records fill 2 KB; once the ratio is learned (~100x here) a batch
    # holds up to max_request_size of them, its compressed size near batch_size or less.
    assert counts[0] <= 2
    assert max(counts) > 20, counts
    assert max(counts) <= 200


async def test_incompressible_batches_stay_at_batch_size(fake: FakeCluster) -> None:
    values = [os.urandom(1000) for _ in range(600)]
    await _send(fake, values, compression_type="lz4", batch_size=2048, linger_ms=1)
    batches = fake.batches("t", 0)
    assert [r.value for b in batches for r in b.records] == values
    assert max(len(b.records) for b in batches) <= 2
