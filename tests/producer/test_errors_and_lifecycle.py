"""Bad input, cancellation and close: typed errors, nothing else harmed, nothing left behind."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from support import BAD_RECORDS, closed_port

from aioproducer import Producer
from aioproducer.errors import (
    BufferFullError,
    ConfigError,
    InvalidArgumentError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    MetadataNotReadyError,
    ProducerClosedError,
    ProducerNotStartedError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all
from bench.fence_check import run_scenario, violations

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


# -- configuration: rejected at construction ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"linger_msec": 5}, "unknown config key 'linger_msec'; did you mean 'linger_ms'"),
        ({"linger_ms": -1}, "linger_ms must be between 0"),
        ({"acks": 2}, "acks must be one of 0, 1, -1 or 'all'"),
        ({"acks": 1}, "acks must be 'all' when enable_idempotence=True"),
        ({"compression_type": "brotli"}, "brotli"),
        ({"compression_type": "zstd", "compression_level": 99}, "compression_level"),
        ({"batch_size": "big"}, "batch_size must be an integer"),
        ({"bootstrap_servers": "localhost"}, "must be 'host:port'"),
        ({"max_in_flight_requests_per_connection": 6}, "at most 5"),
        ({"delivery_timeout_ms": 1000}, "delivery_timeout_ms must be at least"),
        ({"key_serializer": "json"}, "key_serializer must be callable"),
        ({"security_protocol": "SASL_SSL"}, "sasl_mechanism must be one of"),
        (
            {"partitioner_adaptive_partitioning_enable": 1},
            "partitioner_adaptive_partitioning_enable must be True or False",
        ),
        ({"partitioner_availability_timeout_ms": -1}, "must be between 0"),
        (
            {
                "partitioner_availability_timeout_ms": 100,
                "partitioner_adaptive_partitioning_enable": False,
            },
            "no effect with partitioner_adaptive_partitioning_enable=False",
        ),
        (
            {"partitioner_availability_timeout_ms": 100, "partitioner": lambda *a: 0},
            "no effect with a custom partitioner",
        ),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Producer(**kwargs)
    assert message in str(info.value)


def test_secrets_stay_out_of_reprs() -> None:
    producer = Producer(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password="s3cr3t-value",
    )
    assert "s3cr3t-value" not in repr(producer)
    assert "s3cr3t-value" not in repr(producer.config)


# -- bad records: rejected at send(), nothing else harmed ---------------------------------------


@pytest.mark.parametrize(("record", "error", "message"), BAD_RECORDS)
async def test_bad_record_raises_at_send_and_harms_no_other_record(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    record: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    topic = new_topic(2)
    async with Producer(kafka.bootstrap_servers, linger_ms=50) as producer:
        before = await producer.send(topic, b"before", key=b"k")
        with pytest.raises(error) as info:
            await producer.send(topic, **record)
        assert message in str(info.value)
        after = await producer.send(topic, b"after", key=b"k")
        first, second = await before, await after
    assert second.offset == first.offset + 1
    records = consume_all(kafka.bootstrap_servers, topic, expected=2)
    assert [r.value for r in records] == [b"before", b"after"]


async def test_bad_record_in_send_many_fails_only_from_that_record(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers) as producer:
        with pytest.raises(SerializationError):
            await producer.send_many(topic, [b"a", b"b", 3, b"d"])
        await producer.flush()
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=2)] == [
        b"a",
        b"b",
    ]


async def test_serializers_are_applied(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers,
        key_serializer=lambda _t, k: k.upper(),
        value_serializer=lambda t, v: f"{t}:{v['n']}".encode(),
    ) as producer:
        await producer.send_and_wait(topic, {"n": 7}, key="abc")
        with pytest.raises(SerializationError, match="value_serializer failed"):
            await producer.send(topic, {"missing": 1})
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value) == (b"ABC", f"{topic}:7".encode())


async def test_unknown_topic_with_auto_create_off_fails_within_max_block(
    kafka: KafkaCluster,
) -> None:
    async with Producer(
        kafka.bootstrap_servers, allow_auto_create_topics=False, max_block_ms=2000
    ) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="allow_auto_create_topics=False"):
            await producer.send(f"missing-{uuid.uuid4().hex}", b"v")
        elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 6


async def test_first_send_to_an_auto_created_topic_is_delivered(kafka: KafkaCluster) -> None:
    # The first metadata answer says the topic is unknown while the broker creates it;
    # the producer must ask again rather than wait for the periodic refresh.
    topic = f"auto-{uuid.uuid4().hex}"
    async with Producer(
        kafka.bootstrap_servers, max_block_ms=15000, metadata_max_age_ms=600000
    ) as producer:
        meta = await producer.send_and_wait(topic, b"first", key=b"k")
    assert meta.topic == topic
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value, rec.offset) == (b"k", b"first", meta.offset)


async def test_no_reachable_broker_fails_within_max_block_without_hanging() -> None:
    async with Producer(f"127.0.0.1:{closed_port()}", max_block_ms=1500) as producer:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="no broker reachable"):
            await producer.send("any-topic", b"v")
        elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 5


async def test_broker_rejecting_a_record_gives_a_typed_error_for_it_alone(
    kafka: KafkaCluster,
    new_topic: NewTopic,
) -> None:
    topic = new_topic(config={"max.message.bytes": "10000"})
    async with Producer(kafka.bootstrap_servers) as producer:
        ok = await producer.send(topic, b"small")
        await producer.flush()
        big = await producer.send(topic, b"x" * 50_000)
        with pytest.raises(MessageSizeTooLargeError):
            await big
        assert (await ok).offset == 0
        again = await producer.send_and_wait(topic, b"small again")
    assert again.offset == 1


# -- lifecycle ----------------------------------------------------------------------------------


async def test_send_before_start_and_after_close_raise_typed_errors(kafka: KafkaCluster) -> None:
    producer = Producer(kafka.bootstrap_servers)
    with pytest.raises(ProducerNotStartedError):
        await producer.send("t", b"v")
    async with producer:
        pass
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"v")
    with pytest.raises(ProducerClosedError):
        producer.try_send("t", b"v")
    await producer.close()  # closing twice is fine


async def test_try_send_fails_fast_when_the_buffer_is_full(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers, buffer_memory=64 * 1024, linger_ms=60_000, batch_size=1 << 20
    ) as producer:
        with pytest.raises(MetadataNotReadyError):
            producer.try_send(f"not-loaded-{uuid.uuid4().hex}", b"v")
        await producer.partitions_for(topic)
        handles = []
        with pytest.raises(BufferFullError, match="buffer_memory"):
            for _ in range(10_000):
                handles.append(producer.try_send(topic, b"x" * 1000))
        assert 40 < len(handles) < 70
        await producer.flush()
        assert all(h.result().offset >= 0 for h in handles)
        # Space is back once the batch was delivered.
        producer.try_send(topic, b"x" * 1000)


async def test_send_blocks_for_memory_then_times_out(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers, buffer_memory=32 * 1024, batch_size=4096, max_block_ms=300
    ) as producer:
        await producer.partitions_for(topic)
        # A waiting sender makes every batch urgent, so memory only stays short while the
        # broker cannot answer.
        kafka.pause_broker(kafka.node_ids[0])
        try:
            handles = []
            while producer.metrics()["buffer_bytes_in_use"] < 31 * 1024:
                handles.append(producer.try_send(topic, b"x" * 500))
            started = time.monotonic()
            with pytest.raises(BufferFullError, match="max_block_ms"):
                await producer.send(topic, b"y" * 5000)
            assert time.monotonic() - started >= 0.25
        finally:
            kafka.resume_broker(kafka.node_ids[0])
        await producer.flush()
    assert [h.result().offset for h in handles] == list(range(len(handles)))


async def test_cancelled_send_leaves_the_record_out_entirely(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers, buffer_memory=32 * 1024, batch_size=4096
    ) as producer:
        await producer.partitions_for(topic)
        kafka.pause_broker(kafka.node_ids[0])
        try:
            handles = []
            while producer.metrics()["buffer_bytes_in_use"] < 31 * 1024:
                handles.append(producer.try_send(topic, b"x" * 500))
            used = producer.metrics()["buffer_bytes_in_use"]
            with anyio.move_on_after(0.2) as scope:
                await producer.send(topic, b"cancelled-record" * 100)
            assert scope.cancelled_caught
            assert producer.metrics()["buffer_bytes_in_use"] == used
        finally:
            kafka.resume_broker(kafka.node_ids[0])
        await producer.flush()
        final = await producer.send_and_wait(topic, b"last")
    assert final.offset == len(handles)
    values = [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=len(handles))]
    assert b"cancelled-record" * 100 not in values
    assert values[-1] == b"last"


async def test_cancelling_a_waiter_does_not_cancel_delivery(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, linger_ms=300) as producer:
        handle = await producer.send(topic, b"keep me")
        with anyio.move_on_after(0.05) as scope:
            await handle
        assert scope.cancelled_caught
        meta = await handle
    assert meta.offset == 0
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=1)] == [
        b"keep me"
    ]


async def test_flush_skips_the_linger(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers, linger_ms=60_000) as producer:
        handle = await producer.send(topic, b"v")
        await anyio.sleep(0.1)
        assert not handle.done()
        with anyio.fail_after(10):
            await producer.flush()
        assert handle.done() and handle.result().offset == 0


async def test_close_delivers_what_it_can_then_fails_the_rest(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    node = kafka.node_ids[0]
    async with Producer(kafka.bootstrap_servers, linger_ms=0, request_timeout_ms=2000) as producer:
        delivered = [await producer.send(topic, f"d{i}".encode()) for i in range(100)]
        await producer.flush()
        kafka.pause_broker(node)
        try:
            stuck = [await producer.send(topic, f"s{i}".encode()) for i in range(100)]
            started = time.monotonic()
            await producer.close(timeout=0.5)
            elapsed = time.monotonic() - started
        finally:
            kafka.resume_broker(node)
    assert elapsed < 3
    assert [h.result().offset for h in delivered] == list(range(100))
    for handle in stuck:
        assert isinstance(handle.exception(), ProducerClosedError)


async def test_close_without_timeout_waits_for_every_record(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    producer = Producer(kafka.bootstrap_servers, linger_ms=1000)
    await producer.start()
    handles = [await producer.send(topic, f"{i}".encode(), key=b"%d" % i) for i in range(5000)]
    await producer.close()
    assert all(h.done() for h in handles)
    assert sum(1 for h in handles if h.exception() is None) == 5000


async def test_no_background_task_outlives_the_producer(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    before = len(anyio.get_running_tasks())
    async with Producer(kafka.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"v")
        assert len(anyio.get_running_tasks()) > before
    assert len(anyio.get_running_tasks()) == before


async def test_undeliverable_records_fail_with_delivery_timeout(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    # The broker is frozen while 50 records time out, then resumed, then the application
    # sends again (bench/fence_check.py runs the same scenario many times per backend).
    topic = new_topic()
    out = await run_scenario(kafka, topic)
    assert len(out.timed_out) >= 50 and not out.delivered_late
    assert 2.0 <= out.failed_within_s < 2.5 + 5
    # A timed-out record is "not confirmed", not "not written": the broker may still
    # handle requests it held while frozen, but only before the epoch bump has written to
    # the partition, so never after a record the application sent after the failure.
    assert violations(out) == []
    assert out.epoch_bumps >= 1 and out.producer_id_resets == 0


# -- topic names: checked at send(), before any request -------------------------------------

BAD_TOPICS = [
    ("bad topic!", "characters Kafka does not allow: ' !'"),
    ("caf\u00e9", "characters Kafka does not allow"),
    (".", "cannot be '.'"),
    ("..", "cannot be '..'"),
    ("t" * 250, "longer than 249"),
    ("", "non-empty str"),
]


@pytest.mark.parametrize(("topic", "message"), BAD_TOPICS)
async def test_illegal_topic_names_raise_at_send(
    kafka: KafkaCluster, topic: str, message: str
) -> None:
    async with Producer(kafka.bootstrap_servers, max_block_ms=5000) as producer:
        started = time.monotonic()
        with pytest.raises(InvalidArgumentError, match="topic") as info:
            await producer.send(topic, b"v")
        assert message in str(info.value)
        with pytest.raises(InvalidArgumentError):
            producer.try_send(topic, b"v")
        # Refused here, not after a round trip to the broker.
        assert time.monotonic() - started < 1.0


def test_header_value_error_names_no_setting_that_does_not_exist() -> None:
    from aioproducer.errors import InvalidTopicError, error_class_for_code

    with pytest.raises(SerializationError) as info:
        Producer("127.0.0.1:9092").intake.record("t", None, b"v", [("h", 5)], None, None)
    assert "header 'h' value must be bytes" in str(info.value)
    assert "serializer" not in str(info.value)
    # The broker's INVALID_TOPIC_EXCEPTION (17) has a clean name.
    assert error_class_for_code(17) is InvalidTopicError
