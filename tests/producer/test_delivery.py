"""Delivery checks that reach into Producer's internals; the checks every producer must
pass are in tests/contract/test_delivery_contract.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from support import Sent, check_readback

from aioproducer import Producer
from aioproducer.errors import ConnectionError as KafkaConnectionError
from aioproducer.testing import KafkaCluster

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


async def test_dropped_connections_cause_no_loss_and_no_duplicates(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    """Connections are cut under load; idempotent retries must neither lose nor duplicate."""
    topic = new_topic(6)
    total = 150_000
    sent: Sent = {}
    async with Producer(kafka.bootstrap_servers, linger_ms=2, batch_size=8192) as producer:
        sending = True

        async def saboteur() -> None:
            # Cut every connection every 20 ms while records are being sent, and after
            # that until a cut has made the producer retry (at most 5 s): a fixed few cuts
            # could all land while nothing was in flight, and a fast machine sends the
            # records in a fraction of a second.
            with anyio.move_on_after(5):
                while sending or producer.metrics()["records_retried"] == 0:
                    await anyio.sleep(0.02)
                    for conn in list(producer._cluster._connections.values()):
                        conn.close_nowait(KafkaConnectionError("cut by test"))

        handles = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(saboteur)
            for i in range(total):
                value = f"v{i}".encode()
                key = f"k{i % 97}".encode()
                handles.append((value, key, await producer.send(topic, value, key=key)))
            sending = False
        for value, key, handle in handles:
            meta = await handle
            sent[value] = (meta.partition, meta.offset, key, [])
        metrics = producer.metrics()
    assert metrics["records_retried"] > 0, "the test did not manage to cut a connection"
    records = check_readback(kafka.bootstrap_servers, topic, sent)
    # Order per key survives the retries.
    last: dict[bytes | None, int] = {}
    for rec in records:
        assert rec.value is not None
        index = int(rec.value[1:])
        assert last.get(rec.key, -1) < index
        last[rec.key] = index
