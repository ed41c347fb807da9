"""SIGKILL of the transaction coordinator mid-transaction on the 3-node cluster: the
transaction commits or aborts as a whole, and the producer says which."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from txn_support import read_committed

from aioproducer import Producer
from aioproducer.errors import KafkaError
from aioproducer.protocol.messages import KEY_TYPE_TRANSACTION, FindCoordinatorRequest
from aioproducer.testing import KafkaCluster
from aioproducer.testing._admin import AdminConnection

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def _coordinator_of(kafka: KafkaCluster, transactional_id: str) -> int:
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    deadline = time.monotonic() + 30
    while True:
        with AdminConnection(host, int(port), timeout=10) as conn:
            response = conn.send(
                FindCoordinatorRequest(
                    key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[transactional_id]
                )
            )
        (found,) = response.coordinators
        if found.error_code == 0 or time.monotonic() > deadline:
            assert found.error_code == 0, found
            return found.node_id
        time.sleep(0.2)


async def test_killing_the_coordinator_mid_transaction_commits_or_aborts_it_whole(
    kafka3: KafkaCluster,
) -> None:
    topic = f"txn-failover-{uuid.uuid4().hex[:8]}"
    kafka3.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    transactional_id = f"failover-{uuid.uuid4().hex[:8]}"
    values = [f"v{i}".encode() for i in range(60)]
    async with Producer(
        kafka3.bootstrap_servers, transactional_id=transactional_id, request_timeout_ms=5000
    ) as producer:
        async with producer.transaction():
            await producer.send(topic, b"warm-up")
        await producer.begin_transaction()
        for i, value in enumerate(values[:30]):
            await producer.send(topic, value, partition=i % 3)
        await producer.flush()
        victim = _coordinator_of(kafka3, transactional_id)
        kafka3.kill_broker(victim)
        try:
            for i, value in enumerate(values[30:], 30):
                await producer.send(topic, value, partition=i % 3)
            try:
                await producer.commit_transaction()
                committed = True
            except KafkaError:
                committed = False
                await producer.abort_transaction()
        finally:
            kafka3.start_broker(victim)
    seen = read_committed(kafka3.bootstrap_servers, [topic], timeout=60)
    visible = sorted(v for part in seen.values() for v in part if v != b"warm-up")
    assert visible == (sorted(values) if committed else []), committed
