"""SyncProducer transactions against a real broker (transaction versions 1 and 2)."""

from __future__ import annotations

import threading
import uuid

import pytest
from txn_support import new_topic, read_committed

from aioproducer import SyncProducer
from aioproducer.errors import TransactionAbortedError, TransactionStateError
from aioproducer.testing import KafkaCluster

pytestmark = pytest.mark.broker


def test_sync_commit_abort_and_context_manager(txn_cluster: KafkaCluster) -> None:
    topic = new_topic(txn_cluster, 3)
    with SyncProducer(
        txn_cluster.bootstrap_servers,
        transactional_id=f"sync-{uuid.uuid4().hex[:8]}",
        linger_ms=2000,
    ) as producer:
        with pytest.raises(TransactionStateError):
            producer.send(topic, b"outside")

        # Records from several threads, all in one committed transaction.
        producer.begin_transaction()

        def worker(n: int) -> None:
            for i in range(20):
                producer.send(topic, f"t{n}-{i}".encode(), partition=n)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        producer.commit_transaction()

        producer.begin_transaction()
        unsent = producer.send(topic, b"aborted", partition=0)
        producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            unsent.result(timeout=10)

        with pytest.raises(ZeroDivisionError), producer.transaction():
            producer.send(topic, b"raised", partition=1)
            producer.flush()
            _ = 1 / 0

        with producer.transaction():
            producer.send(topic, b"last", partition=2)

    assert read_committed(txn_cluster.bootstrap_servers, [topic]) == {
        (topic, 0): [f"t0-{i}".encode() for i in range(20)],
        (topic, 1): [f"t1-{i}".encode() for i in range(20)],
        (topic, 2): [f"t2-{i}".encode() for i in range(20)] + [b"last"],
    }
