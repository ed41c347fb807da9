"""The transaction codecs against a real broker: find a transaction coordinator, then
initialise a transactional producer id there."""

from __future__ import annotations

import time
import uuid

from aioproducer.protocol.messages import (
    KEY_TYPE_TRANSACTION,
    Coordinator,
    FindCoordinatorRequest,
    InitProducerIdRequest,
)
from aioproducer.protocol.versions import ApiKey
from aioproducer.testing import KafkaCluster
from aioproducer.testing._admin import AdminConnection

# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: what a broker
# answers while the transaction-state topic is created and its partitions are loaded.
_RETRIABLE = (14, 15, 16)


def _find_transaction_coordinator(host: str, port: int, transactional_id: str) -> Coordinator:
    # The first lookup creates the transaction-state topic; until its partitions have
    # leaders the broker answers COORDINATOR_NOT_AVAILABLE.
    deadline = time.monotonic() + 30
    while True:
        with AdminConnection(host, port, timeout=10) as conn:
            version = conn.versions[ApiKey.FIND_COORDINATOR]
            assert version == 6
            response = conn.send(
                FindCoordinatorRequest(
                    key_type=KEY_TYPE_TRANSACTION, coordinator_keys=[transactional_id]
                )
            )
        (coordinator,) = response.coordinators
        assert coordinator.key == transactional_id
        if coordinator.error_code not in _RETRIABLE or time.monotonic() > deadline:
            return coordinator
        time.sleep(0.2)


def test_find_coordinator_then_init_transactional_producer_id(kafka: KafkaCluster) -> None:
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    transactional_id = f"t-{uuid.uuid4()}"
    deadline = time.monotonic() + 30
    while True:
        coordinator = _find_transaction_coordinator(host, int(port), transactional_id)
        assert coordinator.error_code == 0, coordinator
        assert coordinator.node_id in kafka.node_ids
        assert coordinator.port > 0 and coordinator.host
        with AdminConnection(coordinator.host, coordinator.port, timeout=10) as conn:
            assert conn.versions[ApiKey.INIT_PRODUCER_ID] == 5
            response = conn.send(InitProducerIdRequest(transactional_id, 60_000))
        # Like the Java producer, look the coordinator up again if it was not ready yet.
        if response.error_code not in _RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert response.error_code == 0, response
    assert response.producer_id >= 0
    assert response.producer_epoch == 0


def test_the_broker_advertises_every_transaction_api_version(kafka: KafkaCluster) -> None:
    host, port = kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with AdminConnection(host, int(port), timeout=10) as conn:
        versions = conn.versions
    assert versions[ApiKey.FIND_COORDINATOR] == 6
    assert versions[ApiKey.ADD_PARTITIONS_TO_TXN] == 3  # v4+ is broker-to-broker
    assert versions[ApiKey.ADD_OFFSETS_TO_TXN] == 4
    assert versions[ApiKey.END_TXN] == 5
    assert versions[ApiKey.TXN_OFFSET_COMMIT] == 5
