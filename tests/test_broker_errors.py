"""Errors a broker returns read as clearly as the client's own: typed, and naming the topic,
the partition, the batch's size, the limit and the setting to change.

Against the real broker wherever it can produce the error on demand (a topic config makes
it refuse); against :class:`FakeCluster` for the answers it will not give a test.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING

import anyio
import pytest

from aioproducer import Producer
from aioproducer.errors import (
    BrokerResponseError,
    DeliveryTimeoutError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    error_class_for_code,
)
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.testing import FakeCluster, KafkaCluster

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """The messages do not depend on the event loop: asyncio alone keeps these quick."""
    return "asyncio"


async def test_message_too_large_names_partition_batch_size_and_limits(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    # Within the client's max_request_size, beyond the topic's max.message.bytes.
    topic = new_topic(1, config={"max.message.bytes": "20000"})
    async with Producer(kafka.bootstrap_servers, max_request_size=4_000_000) as producer:
        handle = await producer.send(topic, b"x" * 100_000)
        with pytest.raises(MessageSizeTooLargeError) as caught:
            await handle
        ok = await producer.send_and_wait(topic, b"small")  # the producer carries on
    err = caught.value
    assert (err.topic, err.partition, err.retriable) == (topic, 0, False)
    text = str(err)
    assert text.startswith("MESSAGE_TOO_LARGE: ")
    assert f"{topic}-0: a batch of 1 record, " in text
    size = int(re.search(r"1 record, (\d+) bytes", text).group(1))  # type: ignore[union-attr]
    assert 100_000 < size < 100_200  # the batch as sent: the value plus framing
    assert "max_request_size (4000000)" in text
    assert "max.message.bytes" in text and "compression_type" in text
    assert ok.offset == 0


async def test_invalid_timestamp_names_the_topic_settings(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1, config={"message.timestamp.before.max.ms": "3600000"})
    two_days_ago = int(time.time() * 1000) - 2 * 86_400_000
    async with Producer(kafka.bootstrap_servers) as producer:
        handle = await producer.send(topic, b"old", timestamp_ms=two_days_ago)
        with pytest.raises(error_class_for_code(ErrorCode.INVALID_TIMESTAMP)) as caught:
            await handle
    text = str(caught.value)
    assert f"INVALID_TIMESTAMP: {topic}-0: a batch of 1 record, " in text
    assert "message.timestamp.before.max.ms" in text
    assert caught.value.retriable is False


async def test_not_enough_replicas_times_out_naming_min_insync_replicas() -> None:
    # Retriable: retried until delivery_timeout_ms, then the last refusal is the cause.
    # (A one-node Kafka 4 accepts acks=all even with min.insync.replicas above the
    # replication factor, so the fake gives this answer.)
    with FakeCluster() as fc:
        fc.create_topic("t")
        fc.inject_error("produce", ErrorCode.NOT_ENOUGH_REPLICAS, count=1000)
        config = {"request_timeout_ms": 1000, "delivery_timeout_ms": 1500, "linger_ms": 0}
        async with Producer(fc.bootstrap_servers, **config) as producer:
            handle = await producer.send("t", b"v")
            with pytest.raises(DeliveryTimeoutError) as caught:
                await handle
        attempts = len(fc.requests("produce"))
    cause = caught.value.__cause__
    assert isinstance(cause, NotEnoughReplicasError)
    assert (cause.topic, cause.partition, cause.retriable) == ("t", 0, True)
    assert "t-0" in str(caught.value)
    assert "min.insync.replicas" in str(caught.value)  # the last error, quoted
    assert attempts > 1  # it was retried


async def test_missing_topic_without_auto_create_fails_early_naming_the_setting(
    kafka: KafkaCluster,
) -> None:
    topic = "no-such-topic-for-the-error-test"
    config = {"allow_auto_create_topics": False, "max_block_ms": 30_000}
    async with Producer(kafka.bootstrap_servers, **config) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as caught:
            await producer.send(topic, b"v")
        waited = time.monotonic() - started
    assert waited < 15, waited  # the metadata's answer, not the whole max_block_ms
    text = str(caught.value)
    assert f"topic {topic!r} does not exist" in text
    assert "allow_auto_create_topics=False keeps this producer from having it created" in text
    assert caught.value.topic == topic
    [described] = kafka.metadata([topic]).topics  # and nothing created it
    assert described.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_topic_created_while_send_waits_is_used(kafka: KafkaCluster) -> None:
    # Unknown at first, created a moment later: within the grace the send goes through.
    topic = f"created-while-waiting-{uuid.uuid4().hex[:10]}"

    async def create_soon() -> None:
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(kafka.create_topic, topic)

    async with (
        Producer(kafka.bootstrap_servers, allow_auto_create_topics=False) as producer,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(create_soon)
        meta = await producer.send_and_wait(topic, b"v")
    assert (meta.topic, meta.partition, meta.offset) == (topic, 0, 0)


async def test_missing_topic_the_broker_will_not_create_names_the_broker_setting() -> None:
    with FakeCluster(auto_create_topics=False) as fc:
        async with Producer(fc.bootstrap_servers, max_block_ms=800) as producer:
            with pytest.raises(UnknownTopicOrPartitionError) as caught:
                await producer.send("absent", b"v")
    assert "topic 'absent' does not exist" in str(caught.value)
    assert "auto.create.topics.enable" in str(caught.value)
    assert "allow_auto_create_topics" not in str(caught.value)  # not the client's doing


@pytest.mark.parametrize(
    ("code", "expected_type", "config", "hint"),
    [
        (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            TopicAuthorizationFailedError,
            {},
            "grant it WRITE on the topic",
        ),
        (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            error_class_for_code(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
            {"compression_type": "zstd"},
            "change compression_type (compression_type='zstd')",
        ),
        (
            ErrorCode.INVALID_REQUIRED_ACKS,
            error_class_for_code(ErrorCode.INVALID_REQUIRED_ACKS),
            {"acks": 1, "enable_idempotence": False},
            "refuses the acks setting (acks=1)",
        ),
    ],
)
async def test_refusals_a_broker_gives_rarely_carry_context(
    code: ErrorCode,
    expected_type: type[BrokerResponseError],
    config: dict[str, object],
    hint: str,
) -> None:
    with FakeCluster() as fc:
        fc.create_topic("t", partitions=2)
        fc.inject_error("produce", code, topic="t", partition=1)
        async with Producer(fc.bootstrap_servers, linger_ms=0, **config) as producer:
            handle = await producer.send("t", b"abc", partition=1)
            with pytest.raises(expected_type) as caught:
                await handle
    text = str(caught.value)
    assert text.startswith(f"{code.name}: t-1: a batch of 1 record, ")
    assert hint in text
    assert (caught.value.topic, caught.value.partition) == ("t", 1)


async def test_other_refusals_name_the_partition_and_batch() -> None:
    with FakeCluster() as fc:
        fc.create_topic("t")
        fc.inject_error("produce", ErrorCode.POLICY_VIOLATION, topic="t")
        async with Producer(fc.bootstrap_servers, linger_ms=0) as producer:
            handle = await producer.send("t", b"abc")
            with pytest.raises(BrokerResponseError) as caught:
                await handle
    assert str(caught.value).startswith("POLICY_VIOLATION: t-0: a batch of 1 record, ")


async def test_a_topic_the_metadata_refuses_names_the_acl() -> None:
    with FakeCluster() as fc:
        fc.create_topic("secret")
        fc.inject_error("metadata", ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic="secret")
        async with Producer(fc.bootstrap_servers, max_block_ms=5000) as producer:
            with pytest.raises(TopicAuthorizationFailedError) as caught:
                await producer.send("secret", b"v")
    assert str(caught.value) == (
        "TOPIC_AUTHORIZATION_FAILED: topic 'secret': this client's principal may not use "
        "it; grant it DESCRIBE and WRITE on the topic"
    )
    assert caught.value.topic == "secret"
