"""``committed_offsets``: a group's offsets as committed transactions left them (OffsetFetch
with ``require_stable``), on a real broker, checked against confluent-kafka's reading."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from txn_support import new_topic

from aioproducer import Producer, SyncProducer
from aioproducer.errors import TransactionStateError
from aioproducer.testing import KafkaCluster

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


def _id() -> str:
    return f"marker-{uuid.uuid4().hex[:12]}"


def _confluent_committed(servers: str, group_id: str, topic: str, partition: int) -> int:
    import confluent_kafka as ck

    consumer: Any = ck.Consumer({"bootstrap.servers": servers, "group.id": group_id})
    try:
        [tp] = consumer.committed([ck.TopicPartition(topic, partition)], timeout=15)
        return int(tp.offset)
    finally:
        consumer.close()


async def test_offsets_read_back_as_the_last_committed_transaction_left_them(
    kafka: KafkaCluster,
) -> None:
    topic = new_topic(kafka, 2)
    group, txn_id = _id(), _id()
    wanted = [(topic, 0), (topic, 1)]
    async with Producer(kafka.bootstrap_servers, transactional_id=txn_id) as producer:
        assert await producer.committed_offsets(wanted, group) == {
            (topic, 0): (-1, ""),
            (topic, 1): (-1, ""),
        }
        async with producer.transaction():
            await producer.send(topic, b"v", partition=0)
            await producer.send_offsets_to_transaction({(topic, 0): 7}, group)
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({(topic, 0): 9, (topic, 1): 3}, group)
        await producer.abort_transaction()
        found = await producer.committed_offsets(wanted, group)
    assert found[(topic, 0)][0] == 7
    assert found[(topic, 1)][0] == -1
    assert _confluent_committed(kafka.bootstrap_servers, group, topic, 0) == 7


async def test_an_open_transaction_is_waited_for_and_a_new_holder_sees_it_aborted(
    kafka: KafkaCluster,
) -> None:
    topic = new_topic(kafka, 1)
    group, txn_id = _id(), _id()
    tp = (topic, 0)
    async with Producer(kafka.bootstrap_servers, transactional_id=txn_id) as first:
        async with first.transaction():
            await first.send_offsets_to_transaction({tp: 4}, group)
        # An open transaction holds offset 5: another producer's read waits until it ends.
        await first.begin_transaction()
        await first.send_offsets_to_transaction({tp: 5}, group)
        async with Producer(kafka.bootstrap_servers, transactional_id=_id()) as other:
            async with anyio.create_task_group() as tg:

                async def commit_later() -> None:
                    await anyio.sleep(0.5)
                    await first.commit_transaction()

                tg.start_soon(commit_later)
                with anyio.fail_after(15):
                    found = await other.committed_offsets([tp], group)
            assert found[tp][0] == 5
        # A transaction left open: the next holder of the id aborts it when it starts, and
        # reads the offset the last committed one left.
        await first.begin_transaction()
        await first.send_offsets_to_transaction({tp: 6}, group)
        async with Producer(kafka.bootstrap_servers, transactional_id=txn_id) as successor:
            found = await successor.committed_offsets([tp], group)
        assert found[tp][0] == 5


async def test_an_offset_s_metadata_is_committed_with_it(kafka: KafkaCluster) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KpTopicPartition

    topic = new_topic(kafka, 2)
    group = _id()
    async with Producer(kafka.bootstrap_servers, transactional_id=_id()) as producer:
        async with producer.transaction():
            await producer.send_offsets_to_transaction(
                {(topic, 0): 3, (topic, 1): 4}, group, metadata={(topic, 0): "rows=120"}
            )
        found = await producer.committed_offsets([(topic, 0), (topic, 1)], group)
        with pytest.raises(TransactionStateError, match="without an offset"):
            await producer.send_offsets_to_transaction({}, group, metadata={(topic, 0): "x"})
    assert found[(topic, 0)] == (3, "rows=120")
    assert found[(topic, 1)][0] == 4 and not found[(topic, 1)][1]
    # The independent reader is kafka-python: confluent-kafka's TopicPartition takes the
    # metadata as a C string, but librdkafka's bytes have a length and no terminating
    # NUL, so it sometimes read on past "rows=120" into other memory.
    consumer: Any = KafkaConsumer(
        bootstrap_servers=kafka.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        committed = [
            consumer.committed(KpTopicPartition(topic, p), metadata=True, timeout_ms=15_000)
            for p in (0, 1)
        ]
    finally:
        consumer.close()
    assert [(c.offset, c.metadata) for c in committed] == [(3, "rows=120"), (4, "")]


def test_the_sync_facade_reads_them_too(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, 1)
    group = _id()
    with SyncProducer(kafka.bootstrap_servers, transactional_id=_id()) as producer:
        with producer.transaction():
            producer.send_offsets_to_transaction({(topic, 0): 11}, group)
        assert producer.committed_offsets([(topic, 0)], group) == {(topic, 0): (11, "")}


async def test_a_non_transactional_producer_is_refused(kafka: KafkaCluster) -> None:
    async with Producer(kafka.bootstrap_servers) as producer:
        with pytest.raises(TransactionStateError, match="committed_offsets"):
            await producer.committed_offsets([("t", 0)], "g")
