"""A broker that answers with absurd sizes or at a trickle costs bounded memory and time.

A response frame starts with its size; a client that trusts it would try to buffer
whatever it claims. ``receive_message_max_bytes`` refuses a larger claim on reading the
prefix, before buffering anything, and a response that arrives a few bytes at a time
still counts against ``request_timeout_ms`` from the moment the request was written.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import DeliveryTimeoutError, KafkaTimeoutError, ResponseTooLargeError
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

FAST_RETRIES: dict[str, Any] = {"linger_ms": 0, "retry_backoff_ms": 10, "retry_backoff_max_ms": 50}


async def test_a_response_claiming_two_gib_is_refused_before_it_is_buffered(
    fake: FakeCluster,
) -> None:
    async with Producer(fake.bootstrap_servers, **FAST_RETRIES) as p:
        await p.send_and_wait("t", b"warm")
        # The broker writes the record, then answers behind a prefix that claims 2 GiB - 1.
        fake.oversize_response("produce")
        tracemalloc.start()
        try:
            meta = await p.send_and_wait("t", b"answered-too-large")
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # The refusal closed the connection; the retry found the record already written
    # (a duplicate sequence) and reported its offset: once, not twice.
    assert [r.value for r in fake.records("t", 0)] == [b"warm", b"answered-too-large"]
    assert meta.offset == 1
    assert len(fake.requests("produce")) == 3
    # Nothing near the claimed size was allocated (the fake runs in this process and
    # counts too).
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes while refusing a 2 GiB frame"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_broker_that_always_answers_too_large_fails_records_with_the_cause(
    fake: FakeCluster,
) -> None:
    async with Producer(
        fake.bootstrap_servers,
        request_timeout_ms=1000,
        delivery_timeout_ms=1500,
        **FAST_RETRIES,
    ) as p:
        await p.send_and_wait("t", b"warm")
        fake.oversize_response("produce", size=100 * 1024 * 1024, count=1000)
        handle = await p.send("t", b"never-acknowledged")
        with pytest.raises(DeliveryTimeoutError) as caught:
            await handle
    assert isinstance(caught.value.__cause__, ResponseTooLargeError)
    message = str(caught.value)
    assert "receive_message_max_bytes (67108864)" in message
    assert "104857600 bytes" in message


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_metadata_too_large_for_the_limit_fails_send_with_the_setting_named() -> None:
    with FakeCluster() as fc:
        fc.create_topic("t")
        fc.oversize_response("metadata", size=1 << 20, count=1000)
        async with Producer(
            fc.bootstrap_servers, receive_message_max_bytes=512 * 1024, max_block_ms=1500
        ) as p:
            with pytest.raises(KafkaTimeoutError, match=r"receive_message_max_bytes \(524288\)"):
                await p.send("t", b"x")


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_trickled_answer_times_out_at_request_timeout_ms(fake: FakeCluster) -> None:
    async with Producer(fake.bootstrap_servers, request_timeout_ms=1000, **FAST_RETRIES) as p:
        await p.send_and_wait("t", b"warm")
        # The answer arrives a few bytes every 200 ms for 4 s: never silent for long,
        # but far slower than the request timeout.
        fake.trickle("produce", seconds=4.0)
        started = time.monotonic()
        meta = await p.send_and_wait("t", b"slow-answer")
        took = time.monotonic() - started
    first, retry = fake.requests("produce")[1:]
    # The retry went out once request_timeout_ms had passed, not after the 4 s trickle.
    assert 0.9 < retry.received_at - first.received_at < 3.0
    assert took < 3.5
    assert [r.value for r in fake.records("t", 0)] == [b"warm", b"slow-answer"]
    assert meta.offset == 1
