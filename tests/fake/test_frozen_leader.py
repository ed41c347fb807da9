"""A leader that takes connections but never answers, while the controller moves its
partitions elsewhere: batches must follow the new leader, not wait out the handshake."""

from __future__ import annotations

import anyio
import pytest

from aioproducer import Producer
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio


async def test_batches_follow_a_new_leader_while_the_old_one_hangs_on_connect(
    fake2: FakeCluster,
) -> None:
    # request_timeout_ms also bounds the handshake: 60 s here, far beyond the test's own
    # 20 s limit, so only a metadata refresh during the hung handshake can deliver in time.
    async with Producer(
        fake2.bootstrap_servers, request_timeout_ms=60_000, delivery_timeout_ms=120_000
    ) as producer:
        await (await producer.send("t", b"warm"))
        # Broker 1 now accepts a new connection but never answers its handshake, like a
        # broker stopped with SIGSTOP.
        fake2.hold("api_versions", count=1, broker=1)
        fake2.drop_connections(broker=1)
        handle = await producer.send("t", b"after")
        await anyio.to_thread.run_sync(
            lambda: fake2.wait_for_requests("api_versions", broker=1, held=True, timeout=10)
        )
        fake2.move_leader("t", 0, 2)
        with anyio.fail_after(20):
            meta = await handle
        assert meta.offset == 1
        assert [r.value for r in fake2.records("t", 0)] == [b"warm", b"after"]
        fake2.release()


async def test_a_metadata_refresh_does_not_wait_out_a_broker_that_never_answers(
    fake2: FakeCluster,
) -> None:
    # The producer knows both brokers but is connected to broker 1 only, so a refresh asks
    # broker 1 first. Broker 1 stops answering metadata; the refresh must ask broker 2
    # after retry_backoff_max_ms rather than wait out the 60 s request timeout.
    fake2.create_topic("u", partitions=1, leaders=[2])
    host, port = fake2.address(1)
    async with Producer(
        f"{host}:{port}",
        request_timeout_ms=60_000,
        delivery_timeout_ms=120_000,
        max_block_ms=60_000,
    ) as producer:
        await (await producer.send("t", b"warm"))
        assert not fake2.requests(broker=2), "broker 2 was asked before the freeze"
        fake2.hold("metadata", count=100, broker=1)
        with anyio.fail_after(20):
            meta = await (await producer.send("u", b"new topic"))
        assert (meta.topic, meta.offset) == ("u", 0)
        assert [r.value for r in fake2.records("u", 0)] == [b"new topic"]
        assert fake2.held(), "broker 1 was never asked: the test proves nothing"
        fake2.release()
