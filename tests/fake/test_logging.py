"""What the producer logs: one ``aioproducer`` hierarchy, nothing per record."""

from __future__ import annotations

import logging

import pytest

from aioproducer import Producer
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio


async def test_sending_logs_nothing_per_record(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Small batches: a line per batch or per request would show as well.
    async with Producer(fake.bootstrap_servers, linger_ms=2, batch_size=1000) as producer:
        for i in range(5000):
            await producer.send("t", b"%d" % i)
        await producer.flush()
        batches = producer.metrics()["batches_sent"]
    ours = [r for r in caplog.records if r.name.split(".")[0] == "aioproducer"]
    assert all(r.name == "aioproducer" or r.name.startswith("aioproducer.") for r in ours)
    # Start-up and shutdown lines, and nothing that grows with the records or batches.
    assert [r for r in ours if r.levelno >= logging.INFO] == []
    assert len(ours) < 20 < batches, [r.getMessage() for r in ours]
