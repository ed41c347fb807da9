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
