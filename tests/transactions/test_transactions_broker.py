"""Transactions against a real broker, read back with a read_committed consumer.

Every test runs on a cluster of transaction version 1 (AddPartitionsToTxn before the first
batch of a partition) and one of version 2 (Produce adds partitions, every EndTxn bumps
the epoch): see ``conftest.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from txn_support import new_topic, read_committed

from aioproducer import Producer
from aioproducer.errors import (
    ProducerFencedError,
    TransactionAbortedError,
    TransactionFailedError,
    TransactionStateError,
)
from aioproducer.testing import KafkaCluster

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

_ALL_BACKENDS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("trio", {}), id="trio"),
    ],
)


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def _producer(
    cluster: KafkaCluster, transactional_id: str | None = None, **config: Any
) -> Producer:
    return Producer(
        cluster.bootstrap_servers,
        transactional_id=transactional_id or f"txn-{uuid.uuid4().hex[:12]}",
        **config,
    )


@_ALL_BACKENDS
async def test_committed_records_are_visible_and_aborted_ones_are_not(
    txn_cluster: KafkaCluster,
) -> None:
    topics = [new_topic(txn_cluster, 3), new_topic(txn_cluster, 3)]
    expected: dict[tuple[str, int], list[bytes]] = {(t, p): [] for t in topics for p in range(3)}

    async def send_round(producer: Producer, tag: str, count: int) -> list[Any]:
        handles = []
        for i in range(count):
            topic, partition = topics[i % 2], i % 3
            value = f"{tag}-{i}".encode()
            handles.append(
                (topic, partition, value, await producer.send(topic, value, partition=partition))
            )
        return handles

    # A long linger: records of the aborted transaction sent after the flush are still
    # lingering when it aborts, so both kinds are covered (written, then not yet sent).
    async with _producer(txn_cluster, linger_ms=2000) as producer:
        async with producer.transaction():
            first = await send_round(producer, "commit1", 30)
        for topic, partition, value, handle in first:
            meta = await handle
            assert (meta.topic, meta.partition) == (topic, partition)
            expected[(topic, partition)].append(value)

        await producer.begin_transaction()
        written = await send_round(producer, "abort-written", 12)
        await producer.flush()
        unsent = await send_round(producer, "abort-unsent", 12)
        await producer.abort_transaction()
        for *_, handle in written:
            await handle  # written to the log, then aborted by the marker
        for *_, handle in unsent:
            with pytest.raises(TransactionAbortedError):
                await handle

        await producer.begin_transaction()
        last = await send_round(producer, "commit2", 18)
        await producer.commit_transaction()
        for topic, partition, value, _handle in last:
            expected[(topic, partition)].append(value)

    assert read_committed(txn_cluster.bootstrap_servers, topics) == expected


async def test_send_outside_a_transaction_raises_at_send(txn_cluster: KafkaCluster) -> None:
    topic = new_topic(txn_cluster, 1)
    async with _producer(txn_cluster) as producer:
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            await producer.send(topic, b"x")
        with pytest.raises(TransactionStateError):
            await producer.send_many(topic, [b"x"])
        with pytest.raises(TransactionStateError):
            await producer.send_bulk(topic, [b"x"])
        with pytest.raises(TransactionStateError):
            await producer.commit_transaction()
        with pytest.raises(TransactionStateError):
            await producer.abort_transaction()
        await producer.begin_transaction()
        with pytest.raises(TransactionStateError):
            await producer.begin_transaction()
        await producer.send(topic, b"in")
        await producer.commit_transaction()
    assert read_committed(txn_cluster.bootstrap_servers, [topic]) == {(topic, 0): [b"in"]}


async def test_a_second_producer_with_the_same_id_fences_the_first(
    txn_cluster: KafkaCluster,
) -> None:
    topic = new_topic(txn_cluster, 2)
    transactional_id = f"fence-{uuid.uuid4().hex[:8]}"
    async with _producer(txn_cluster, transactional_id) as first:
        await first.begin_transaction()
        before = await first.send(topic, b"first-before", partition=0)
        await first.flush()
        await before
        async with _producer(txn_cluster, transactional_id) as second:
            # The second producer's start fenced the first and aborted its transaction.
            after = [
                await first.send(topic, b"first-after-0", partition=0),
                await first.send(topic, b"first-after-1", partition=1),
            ]
            for handle in after:
                with pytest.raises(ProducerFencedError):
                    await handle
            with pytest.raises(ProducerFencedError):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"first-later", partition=0)
            with pytest.raises(ProducerFencedError):
                await first.begin_transaction()
            async with second.transaction():
                await second.send(topic, b"second", partition=1)
    assert read_committed(txn_cluster.bootstrap_servers, [topic]) == {
        (topic, 0): [],
        (topic, 1): [b"second"],
    }


class _Boom(Exception):
    pass


@_ALL_BACKENDS
async def test_an_exception_inside_the_transaction_block_aborts_it(
    txn_cluster: KafkaCluster,
) -> None:
    topic = new_topic(txn_cluster, 2)
    async with _producer(txn_cluster) as producer:
        with pytest.raises(_Boom):
            async with producer.transaction():
                handle = await producer.send(topic, b"aborted", partition=0)
                await producer.flush()
                await handle
                raise _Boom
        async with producer.transaction():
            await producer.send(topic, b"committed", partition=1)
    assert read_committed(txn_cluster.bootstrap_servers, [topic]) == {
        (topic, 0): [],
        (topic, 1): [b"committed"],
    }


@_ALL_BACKENDS
async def test_cancelling_the_task_aborts_the_transaction(txn_cluster: KafkaCluster) -> None:
    topic = new_topic(txn_cluster, 2)
    async with _producer(txn_cluster) as producer:
        inside = anyio.Event()

        async def work() -> None:
            async with producer.transaction():
                await producer.send(topic, b"written-then-aborted", partition=0)
                await producer.flush()
                await producer.send(topic, b"never-sent", partition=1)
                inside.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(work)
            await inside.wait()
            tg.cancel_scope.cancel()
        # The abort finished before the task did: the producer is ready for another.
        async with producer.transaction():
            await producer.send(topic, b"committed", partition=1)
    assert read_committed(txn_cluster.bootstrap_servers, [topic]) == {
        (topic, 0): [],
        (topic, 1): [b"committed"],
    }


async def test_a_failed_record_makes_the_commit_fail_and_the_abort_carries_on(
    txn_cluster: KafkaCluster,
) -> None:
    topic = new_topic(txn_cluster, 1)
    # The broker refuses the batch (larger than the topic allows): the transaction
    # can no longer commit, and abort makes the producer usable again.
    small = f"small-{uuid.uuid4().hex[:8]}"
    txn_cluster.create_topic(small, 1, config={"max.message.bytes": "2000"})
    async with _producer(txn_cluster) as producer:
        await producer.begin_transaction()
        good = await producer.send(topic, b"good")
        bad = await producer.send(small, b"x" * 5000)
        with pytest.raises(TransactionFailedError):
            await producer.commit_transaction()
        with pytest.raises(Exception):  # noqa: B017 - the broker's own error
            await bad
        await good
        with pytest.raises(TransactionFailedError):
            await producer.send(topic, b"refused")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(topic, b"after")
    assert read_committed(txn_cluster.bootstrap_servers, [topic, small]) == {
        (topic, 0): [b"after"],
        (small, 0): [],
    }


def _committed_offset(bootstrap_servers: str, group_id: str, topic: str, partition: int) -> int:
    import confluent_kafka as ck

    consumer: Any = ck.Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        (tp,) = consumer.committed([ck.TopicPartition(topic, partition)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


async def test_offsets_sent_to_a_transaction_commit_and_abort_with_it(
    txn_cluster: KafkaCluster,
) -> None:
    source = new_topic(txn_cluster, 2)
    sink = new_topic(txn_cluster, 1)
    group = f"group-{uuid.uuid4().hex[:8]}"
    servers = txn_cluster.bootstrap_servers
    async with _producer(txn_cluster) as producer:
        async with producer.transaction():
            await producer.send(sink, b"out-1")
            await producer.send_offsets_to_transaction({(source, 0): 5, (source, 1): 7}, group)
        assert await anyio.to_thread.run_sync(_committed_offset, servers, group, source, 0) == 5
        assert await anyio.to_thread.run_sync(_committed_offset, servers, group, source, 1) == 7

        await producer.begin_transaction()
        await producer.send(sink, b"out-2")
        await producer.send_offsets_to_transaction({(source, 0): 9}, group)
        await producer.abort_transaction()
        assert await anyio.to_thread.run_sync(_committed_offset, servers, group, source, 0) == 5

        # Offsets alone make a transaction too.
        async with producer.transaction():
            await producer.send_offsets_to_transaction({(source, 1): 11}, group)
        assert await anyio.to_thread.run_sync(_committed_offset, servers, group, source, 1) == 11
    assert read_committed(servers, [sink]) == {(sink, 0): [b"out-1"]}
