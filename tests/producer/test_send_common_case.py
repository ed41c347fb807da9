"""``send()``'s common case, with no broker: a producer marked running whose metadata is set
by hand and that has no sender, so records only accumulate and the test reads where they
went. It checks what the send path keeps between records (the topic's metadata, the
sticky partition) against the metadata and the batches."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import groupby

import pytest

from aioproducer import Producer
from aioproducer import producer as producer_module
from aioproducer.cluster import ClusterSnapshot, TopicInfo
from aioproducer.errors import InvalidArgumentError

TOPIC = "t"


def snapshot(partitions: int) -> ClusterSnapshot:
    parts = tuple(range(partitions))
    info = TopicInfo(TOPIC, parts, dict.fromkeys(parts, 0), dict.fromkeys(parts, 0), parts)
    return ClusterSnapshot({0: ("127.0.0.1", 9)}, {TOPIC: info}, {})


@pytest.fixture
def producer() -> Iterator[Producer]:
    made = Producer("127.0.0.1:9", batch_size=1024, buffer_memory=1 << 24, max_block_ms=50)
    made._state = producer_module._RUNNING
    made.intake.accepting = True
    made._cluster.snapshot = snapshot(4)
    yield made
    made._state = producer_module._CLOSED


@pytest.mark.anyio
async def test_keyless_records_stick_to_a_partition_until_its_batch_fills(
    producer: Producer,
) -> None:
    handles = [await producer.send(TOPIC, b"x" * 100) for _ in range(200)]
    runs = [len(list(run)) for _, run in groupby(h.partition for h in handles)]
    # A 1,024-byte batch holds 9 such records: the partition changes only once the
    # batch it fills is full, so every run but the last fills at least one batch (the
    # next choice may draw the same partition again: runs of 16 then join). Twelve or
    # more draws over four partitions: more than one is used.
    assert len(runs) >= 2
    assert all(run >= 9 for run in runs[:-1])
    for handle in handles:
        batch, index = handle.position()
        assert (batch.topic, batch.partition) == (TOPIC, handle.partition)
        assert batch.builder.records()[index].value == b"x" * 100


@pytest.mark.anyio
async def test_a_new_metadata_snapshot_is_seen_by_the_next_record(producer: Producer) -> None:
    await producer.send(TOPIC, b"a")
    with pytest.raises(InvalidArgumentError):
        await producer.send(TOPIC, b"b", partition=5)
    producer._cluster.snapshot = snapshot(6)
    handle = await producer.send(TOPIC, b"c", partition=5)
    assert handle.partition == 5
    # Keyless records spread over the new partitions too once the old choice is dropped.
    producer.intake._sticky.forget([TOPIC])
    chosen = {(await producer.send(TOPIC, b"x" * 100)).partition for _ in range(600)}
    assert chosen == set(range(6))
