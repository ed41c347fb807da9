"""Resource bounds under abuse, on the real single-node broker.

- Thousands of partitions: memory stays within ``buffer_memory`` plus a per-partition
  constant, measured with tracemalloc.
- A thousand topics used once: ``metadata_max_idle_ms`` forgets them (ten thousand run
  against FakeCluster in ``tests/fake/test_idle_topics.py``; creating that many on the real
  broker takes longer than the suite can spend).
- Records at exactly ``max_request_size`` are delivered; one byte more is refused at
  ``send()`` and harms no other record.

Each reads the topic back with confluent-kafka and checks content and order.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

from aioproducer import Producer, RecordTooLargeError
from aioproducer.partitioner import partition_for_key
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BOUND
from aioproducer.results import DeliveryHandle
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


async def _read_back(kafka: KafkaCluster, topic: str, expected: int) -> list[Any]:
    return await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=expected, timeout=120)
    )


PARTITIONS = 2000
# The stated bound (docs/guarantees.md): the records' bytes twice (the open batches, and
# the encoded copy a batch keeps from its first attempt until acknowledged), a request
# being written plus the in-flight requests' copies, and a constant per partition.
PER_PARTITION_BYTES = 1536


async def test_two_thousand_partitions_stay_within_buffer_memory(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    created = time.monotonic()
    topic = new_topic(PARTITIONS)
    created = time.monotonic() - created
    buffer_memory = 4 * 1024 * 1024
    # One and a half times the budget, with a long linger: every partition holds an open
    # batch while the budget is full and send() has to wait for room.
    records, value_size = 6000, 1000
    # A key per partition, so every partition gets records and open batches at once.
    keys: list[bytes] = [b""] * PARTITIONS
    found = 0
    i = 0
    while found < PARTITIONS:
        key = b"key-%d" % i
        p = partition_for_key(key, PARTITIONS)
        if not keys[p]:
            keys[p] = key
            found += 1
        i += 1
    outcomes = {"ok": 0, "failed": 0}

    def settled(handle: DeliveryHandle) -> None:
        outcomes["failed" if handle.exception() is not None else "ok"] += 1

    pad = b"v" * (value_size - 16)
    seq = [0] * PARTITIONS
    async with Producer(
        kafka.bootstrap_servers, buffer_memory=buffer_memory, linger_ms=5000
    ) as producer:
        # The broker creates the partitions' logs after it announces their leader and
        # answers NOT_LEADER_OR_FOLLOWER until then: a first record to each waits for that.
        warm = time.monotonic()
        for p in range(PARTITIONS):
            await producer.send(topic, b"%05d:%08d:warm" % (p, 0), key=keys[p])
            seq[p] = 1
        await producer.flush()
        warm = time.monotonic() - warm
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            started = time.monotonic()
            max_in_use = 0.0
            for n in range(records):
                p = (n * 7919) % PARTITIONS  # every partition, interleaved
                value = b"%05d:%08d:" % (p, seq[p]) + pad
                seq[p] += 1
                handle = await producer.send(topic, value, key=keys[p])
                # The handle is not kept: what stays is the producer's, not the test's.
                handle.add_done_callback(settled)
                if n % 100 == 0:
                    max_in_use = max(max_in_use, producer.metrics()["buffer_bytes_in_use"])
            await producer.flush()
            took = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
        metrics = producer.metrics()
    max_request_size, in_flight = 1024 * 1024, 5  # the defaults
    bound = (
        2 * buffer_memory + (in_flight + 1) * max_request_size + PER_PARTITION_BYTES * PARTITIONS
    )
    print(
        f"\n[{PARTITIONS} partitions] created in {created:.1f} s, writable after {warm:.1f} s; "
        f"{records} records in "
        f"{took:.1f} s; tracemalloc peak {peak / 2**20:.2f} MiB above baseline, buffer in use "
        f"at most {max_in_use / 2**20:.2f} MiB of {buffer_memory / 2**20:.0f} MiB; stated bound "
        f"{bound / 2**20:.2f} MiB; {metrics['batches_sent']:.0f} batches"
    )
    assert outcomes == {"ok": records, "failed": 0}
    assert max_in_use <= buffer_memory
    assert peak <= bound, f"peak {peak} above the stated bound {bound}"
    read = await _read_back(kafka, topic, records + PARTITIONS)
    assert len(read) == records + PARTITIONS
    last = [-1] * PARTITIONS
    for rec in read:
        p_text, seq_text, _ = rec.value.split(b":", 2)
        assert int(p_text) == rec.partition and rec.key == keys[rec.partition]
        assert int(seq_text) == last[rec.partition] + 1, "lost, duplicated or reordered"
        last[rec.partition] += 1


async def test_a_thousand_topics_used_once_are_forgotten(kafka: KafkaCluster) -> None:
    stamp = time.monotonic_ns()
    names = [f"idle-{stamp}-{i}" for i in range(1000)]
    live = f"idle-live-{stamp}"
    kafka.create_topic(live)
    async with Producer(
        kafka.bootstrap_servers, metadata_max_idle_ms=3000, metadata_max_age_ms=500, linger_ms=5
    ) as producer:
        started = time.monotonic()
        handles: list[DeliveryHandle] = []

        async def first_send(name: str) -> None:
            handles.append(await producer.send(name, name.encode()))

        # The broker creates each topic on the producer's first metadata request for it.
        for start in range(0, len(names), 250):
            async with anyio.create_task_group() as tg:
                for name in names[start : start + 250]:
                    tg.start_soon(first_send, name)
        await producer.flush()
        spread = time.monotonic() - started
        assert all(h.exception() is None for h in handles)
        peak = producer.metrics()["topics_tracked"]
        deadline = time.monotonic() + 30
        i = 0
        while producer.metrics()["topics_tracked"] > 1:
            assert time.monotonic() < deadline, producer.metrics()["topics_tracked"]
            await producer.send_and_wait(live, b"%d" % i)
            i += 1
            await anyio.sleep(0.1)
        idle = producer.metrics()
        forgotten_after = time.monotonic() - started
        # Back to one topic of state; one expired topic used again still works.
        again = await producer.send_and_wait(names[3], b"again")
    assert idle["topics_tracked"] == 1 and idle["partitions_tracked"] == 1
    assert again.offset == 1
    back = await _read_back(kafka, names[3], 2)
    assert [r.value for r in back] == [names[3].encode(), b"again"]
    print(
        f"\n[1000 topics] auto-created and sent in {spread:.1f} s; tracked {peak:.0f} topics, "
        f"1 after {forgotten_after:.1f} s (metadata_max_idle_ms=3000)"
    )


async def test_records_at_max_request_size_go_and_one_byte_more_is_refused(
    kafka: KafkaCluster, topic: str
) -> None:
    limit = 1024 * 1024  # the default max_request_size
    exact = b"x" * (limit - RECORD_BATCH_OVERHEAD - RECORD_FRAMING_BOUND)
    over = exact + b"y"
    async with Producer(kafka.bootstrap_servers, linger_ms=50) as producer:
        before = await producer.send(topic, b"before", partition=0)
        at_limit = await producer.send(topic, exact, partition=0)
        with pytest.raises(RecordTooLargeError, match=f"{limit + 1} bytes.*max_request_size"):
            await producer.send(topic, over, partition=0)
        with pytest.raises(RecordTooLargeError):
            await producer.send(topic, over[:-1], key=b"k", partition=0)
        after = await producer.send(topic, b"after", partition=0)
        metas = [await h for h in (before, at_limit, after)]
    assert [m.offset for m in metas] == [0, 1, 2]
    read = await _read_back(kafka, topic, 3)
    assert [r.value for r in read] == [b"before", exact, b"after"]
