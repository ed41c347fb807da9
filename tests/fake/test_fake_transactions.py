"""Transactions against the fake's coordinator: its errors are retried, commits happen once.

The fake speaks transaction version 1 (AddPartitionsToTxn before a partition's first
batch; a transactional batch for a partition not in its transaction is refused), and
keeps every transaction it ended, so a test can tell that the producer committed exactly
once, with exactly the partitions it wrote, after the coordinator refused it on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import ProducerFencedError
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import EndedTransaction

pytestmark = pytest.mark.anyio

QUICK: dict[str, Any] = {"retry_backoff_ms": 10, "retry_backoff_max_ms": 20, "linger_ms": 0}


@pytest.fixture
def anyio_backend() -> Any:
    """asyncio only: the retries are the coordinator's, the same on every backend."""
    return "asyncio"


@pytest.fixture
def fc() -> Iterator[FakeCluster]:
    """Two brokers (the coordinator is node 1) and a topic with a partition on each."""
    with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", partitions=2, leaders=[1, 2])
        yield cluster


@pytest.mark.parametrize(
    ("api", "error"),
    [
        ("find_coordinator", "COORDINATOR_NOT_AVAILABLE"),
        ("init_producer_id", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("init_producer_id", "NOT_COORDINATOR"),
        ("init_producer_id", "CONCURRENT_TRANSACTIONS"),
        ("add_partitions_to_txn", "CONCURRENT_TRANSACTIONS"),
        ("add_partitions_to_txn", "NOT_COORDINATOR"),
        ("add_partitions_to_txn", "COORDINATOR_LOAD_IN_PROGRESS"),
        ("end_txn", "CONCURRENT_TRANSACTIONS"),
        ("end_txn", "NOT_COORDINATOR"),
        ("end_txn", "COORDINATOR_LOAD_IN_PROGRESS"),
    ],
)
async def test_coordinator_errors_are_retried_and_the_transaction_commits_once(
    fc: FakeCluster, api: str, error: str
) -> None:
    fc.inject_error(api, error, count=2)
    values = [b"v%d" % i for i in range(20)]
    async with Producer(fc.bootstrap_servers, transactional_id="tx", **QUICK) as p:
        async with p.transaction():
            handles = await p.send_many("t", values, keys=values)
        metas = [await h for h in handles]
    assert {m.partition for m in metas} == {0, 1}

    (ended,) = fc.transactions("tx")
    assert ended == EndedTransaction("tx", ended.producer_id, 0, True, (("t", 0), ("t", 1)))
    for partition in (0, 1):
        sent = [v for v, m in zip(values, metas, strict=True) if m.partition == partition]
        assert [r.value for r in fc.records("t", partition)] == sent
        for batch in fc.batches("t", partition):
            assert batch.is_transactional
            assert (batch.producer_id, batch.producer_epoch) == (ended.producer_id, 0)
    # The refused request was asked twice more (a partition that became new to the
    # transaction while AddPartitionsToTxn was being retried may follow in a request of
    # its own); NOT_COORDINATOR made the producer look the coordinator up again each time.
    asked = len(fc.requests(api))
    assert asked == 3 or (api == "add_partitions_to_txn" and asked == 4)
    lookups = len(fc.requests("find_coordinator"))
    assert lookups == (1 if error != "NOT_COORDINATOR" and api != "find_coordinator" else 3)


async def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(
    fc: FakeCluster,
) -> None:
    async with Producer(fc.bootstrap_servers, transactional_id="tx", **QUICK) as old:
        await old.begin_transaction()
        await (await old.send("t", b"old", partition=0))
        # CONCURRENT_TRANSACTIONS while the old transaction is being aborted, as a broker
        # answers until its markers are written.
        fc.inject_error("init_producer_id", "CONCURRENT_TRANSACTIONS", count=1)
        new = Producer(fc.bootstrap_servers, transactional_id="tx", **QUICK)
        async with new, new.transaction():
            await new.send("t", b"new", partition=0)
        with pytest.raises(ProducerFencedError):
            await old.commit_transaction()

    aborted, committed = fc.transactions("tx")
    assert (aborted.producer_epoch, aborted.committed, aborted.fenced) == (0, False, True)
    assert (committed.producer_epoch, committed.committed) == (1, True)
    assert aborted.partitions == committed.partitions == (("t", 0),)
    # The fake writes no markers: both batches are in the log, under their epochs.
    assert [(b.records[0].value, b.producer_epoch) for b in fc.batches("t", 0)] == [
        (b"old", 0),
        (b"new", 1),
    ]
