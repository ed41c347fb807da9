"""A producer that wanders over ten thousand topics forgets the idle ones.

``metadata_max_idle_ms`` takes a topic out of the metadata once no batch of it was drained
for that long and nothing of it is left unsent; the producer's per-partition state goes
with it (sequence numbers, the sticky partition), so memory follows the topics in use,
not every topic ever used. A topic that comes back is fetched anew and its records go out
under a bumped epoch: exactly once, in order.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

TOPICS = 10_000
WAVE = 1000
# metadata_max_idle_ms of the wandering producer, in seconds.
IDLE_S = 3.0


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


async def _send_to_every_topic(
    producer: Producer, names: list[str], wave: int = 1000
) -> list[tuple[float, int]]:
    """Send one record to each topic, ``wave`` topics at a time; return, per wave, when it
    was flushed and how many topics the producer tracked then."""
    # Concurrent first sends to new topics share metadata requests (partial refreshes
    # for the new topics only); one at a time, each would cost a round trip.
    marks: list[tuple[float, int]] = []
    for start in range(0, len(names), wave):
        async with anyio.create_task_group() as tg:
            for name in names[start : start + wave]:
                tg.start_soon(producer.send, name, name.encode())
        await producer.flush()
        marks.append((time.monotonic(), int(producer.metrics()["topics_tracked"])))
    return marks


@pytest.mark.slow
async def test_ten_thousand_topics_leave_the_metadata_once_idle() -> None:
    names = [f"wander-{i}" for i in range(TOPICS)]
    with FakeCluster(brokers=2) as fc:
        fc.create_topic("live", partitions=2)
        async with Producer(
            fc.bootstrap_servers,
            metadata_max_idle_ms=int(IDLE_S * 1000),
            metadata_max_age_ms=300,
            linger_ms=2,
        ) as p:
            started = time.monotonic()
            marks = await _send_to_every_topic(p, names, WAVE)
            spread = time.monotonic() - started
            busy = p.metrics()
            # No topic is forgotten before it has been idle for metadata_max_idle_ms: after
            # each wave, every wave flushed less than that ago (less a second's slack for
            # the sender's and the metadata refresh's rounds) is still tracked. On an idle
            # machine all ten waves take under two seconds, so every topic is tracked at
            # the end; on a loaded one the first waves may rightly have gone already.
            for k, (when, tracked) in enumerate(marks):
                recent = sum(WAVE for done, _ in marks[: k + 1] if when - done < IDLE_S - 1.0)
                assert recent <= tracked <= WAVE * (k + 1), (k, tracked, marks)
            if spread < IDLE_S - 1.0:
                assert busy["topics_tracked"] == TOPICS
                assert busy["partitions_tracked"] == TOPICS
            else:
                # Forgotten sequence numbers bump the epoch, which starts every partition
                # afresh: fewer partitions than topics are tracked after that.
                assert busy["partitions_tracked"] <= busy["topics_tracked"]
            metadata_requests = len(fc.requests("metadata"))

            # Only "live" is used from now on: the others go idle and must be forgotten.
            deadline = time.monotonic() + 10
            i = 0
            while p.metrics()["topics_tracked"] > 1:
                assert time.monotonic() < deadline, p.metrics()["topics_tracked"]
                await p.send_and_wait("live", b"%d" % i, key=b"k")
                i += 1
                await anyio.sleep(0.05)
            idle = p.metrics()
            # The one topic still used, its partition the key maps to, nothing else.
            assert idle["topics_tracked"] == 1
            assert idle["partitions_tracked"] == 1
            assert set(p._cluster.snapshot.topics) == {"live"}
            assert p._cluster.snapshot.topic_errors == {}
            assert set(p.intake._sticky.states) <= {"live"}
            assert not p._acc.batches and not p._acc.incomplete

            # An expired topic used again: fetched anew, written once after its first record.
            # Its partition's sequence numbers were forgotten under the current epoch, so the
            # epoch is bumped first. Unless an earlier bump (for topics that went idle while
            # the others were still being spread, on a loaded machine) had already started
            # every partition afresh: then nothing under this epoch was forgotten.
            bumps = idle["producer_epoch_bumps"]
            forgotten = p._sender._sequences_forgotten
            assert forgotten or spread >= IDLE_S - 1.0
            meta = await p.send_and_wait(names[7], b"again")
            assert p.metrics()["producer_epoch_bumps"] == bumps + (1 if forgotten else 0)
            assert p.metrics()["topics_tracked"] == 2
    assert [(r.offset, r.value) for r in fc.records(names[7], 0)] == [
        (0, names[7].encode()),
        (1, b"again"),
    ]
    assert meta.offset == 1
    # Every wandering topic got its one record, once.
    for name in names[:: TOPICS // 50]:
        assert [r.value for r in fc.records(name, 0)] == [name.encode()]
    # Each wave of 1000 new topics cost a few metadata requests, not one per topic.
    assert metadata_requests < TOPICS // 20, metadata_requests
    print(
        f"\n[10k topics] spread over {TOPICS} topics in {spread:.1f} s with "
        f"{metadata_requests} metadata requests; tracked {busy['topics_tracked']:.0f} topics "
        f"-> {idle['topics_tracked']:.0f} after idling"
    )


async def test_a_new_topic_after_the_last_one_expired_goes_out_at_once() -> None:
    # With the default metadata_max_age_ms (5 minutes) no periodic refresh comes to the
    # rescue: the record for the new topic waits for the epoch bump that forgotten
    # sequences call for, and the sender must do it without being woken again.
    with FakeCluster(brokers=1) as fc:
        for name in ("a", "b"):
            fc.create_topic(name, partitions=1)
        async with Producer(fc.bootstrap_servers, metadata_max_idle_ms=1000) as producer:
            await (await producer.send("a", b"first"))
            await anyio.sleep(1.5)  # "a" idle past metadata_max_idle_ms
            with anyio.fail_after(10):
                # Its refresh (for "b" alone) expires "a" and forgets its sequences.
                meta = await (await producer.send("b", b"second"))
            assert meta.offset == 0
            assert producer.metrics()["topics_tracked"] == 1
            assert producer.metrics()["producer_epoch_bumps"] == 1
        assert [r.value for r in fc.records("b", 0)] == [b"second"]


async def test_an_expired_topic_leaves_no_compression_estimate_behind() -> None:
    with FakeCluster(brokers=1) as fc:
        for name in ("a", "b"):
            fc.create_topic(name, partitions=1)
        async with Producer(
            fc.bootstrap_servers, metadata_max_idle_ms=1000, compression_type="lz4"
        ) as producer:
            await (await producer.send("a", b"." * 1000))
            estimates = producer._acc.ratios  # what the accumulator learned per topic
            assert set(estimates) == {"a"}
            await anyio.sleep(1.5)  # "a" idle past metadata_max_idle_ms
            with anyio.fail_after(10):
                await (await producer.send("b", b"." * 1000))
            assert set(estimates) == {"b"}
