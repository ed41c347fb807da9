"""SyncProducer: bad input, buffer limits and close, while other threads keep sending."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from support import BAD_RECORDS, closed_port

from aioproducer import SyncProducer
from aioproducer.errors import (
    BufferFullError,
    ConfigError,
    InvalidArgumentError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerClosedError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic


def test_bad_configuration_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match="did you mean 'linger_ms'"):
        SyncProducer(linger_msec=5)
    with pytest.raises(ConfigError, match="acks must be 'all' when enable_idempotence"):
        SyncProducer(acks=1)


def test_bad_records_raise_in_the_sending_thread_and_harm_no_other_record(
    kafka: KafkaCluster,
    new_topic: NewTopic,
) -> None:
    topic = new_topic(2)
    good_per_thread = 3000
    with SyncProducer(kafka.bootstrap_servers, linger_ms=20) as producer:
        raised: list[tuple[int, BaseException]] = []
        stop = threading.Event()
        good: dict[int, list[Any]] = {}

        def good_sender(w: int) -> None:
            good[w] = [
                producer.send(topic, f"good-{w}-{i}".encode(), key=f"g{w}".encode())
                for i in range(good_per_thread)
            ]

        def bad_sender() -> None:
            for i, (record, _error, _message) in enumerate(BAD_RECORDS):
                try:
                    producer.send(topic, **record)
                except Exception as exc:
                    raised.append((i, exc))
            stop.set()

        threads = [threading.Thread(target=good_sender, args=(w,)) for w in range(3)]
        threads.append(threading.Thread(target=bad_sender))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert stop.is_set()
        before = producer.send(topic, b"before", key=b"k")
        after = producer.send(topic, b"after", key=b"k")
        assert after.result(30).offset == before.result(30).offset + 1
        for futures in good.values():
            assert [f.exception(30) for f in futures] == [None] * good_per_thread
    assert [i for i, _ in raised] == list(range(len(BAD_RECORDS)))
    for i, exc in raised:
        _record, error, message = BAD_RECORDS[i]
        assert isinstance(exc, error) and message in str(exc), (i, exc)
    records = consume_all(kafka.bootstrap_servers, topic, expected=3 * good_per_thread + 2)
    assert len(records) == 3 * good_per_thread + 2
    for w in range(3):
        mine = [r.value for r in records if r.key == f"g{w}".encode()]
        assert mine == [f"good-{w}-{i}".encode() for i in range(good_per_thread)]


def test_bad_record_in_send_many_fails_only_from_that_record(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    with SyncProducer(kafka.bootstrap_servers) as producer:
        with pytest.raises(SerializationError):
            producer.send_many(topic, [b"a", b"b", 3, b"d"])
        with pytest.raises(InvalidArgumentError, match="keys has 1 items"):
            producer.send_many(topic, [b"x", b"y"], keys=[b"k"])
        producer.flush()
    values = [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=2)]
    assert values == [b"a", b"b"]


def test_serializers_run_in_the_calling_thread(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic()
    threads: set[str] = set()

    def value_serializer(t: str, v: dict[str, int]) -> bytes:
        threads.add(threading.current_thread().name)
        return f"{t}:{v['n']}".encode()

    with SyncProducer(
        kafka.bootstrap_servers,
        key_serializer=lambda _t, k: k.upper(),
        value_serializer=value_serializer,
    ) as producer:
        producer.send_and_wait(topic, {"n": 7}, key="abc")
        with pytest.raises(SerializationError, match="value_serializer failed"):
            producer.send(topic, {"missing": 1})
    assert threads == {threading.current_thread().name}
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value) == (b"ABC", f"{topic}:7".encode())


def test_unknown_topic_with_auto_create_off_fails_within_max_block(kafka: KafkaCluster) -> None:
    with SyncProducer(
        kafka.bootstrap_servers, allow_auto_create_topics=False, max_block_ms=1500
    ) as producer:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send(f"missing-{uuid.uuid4().hex}", b"v")
        assert 1.0 <= time.monotonic() - started < 6


def test_no_reachable_broker_fails_within_max_block() -> None:
    with SyncProducer(f"127.0.0.1:{closed_port()}", max_block_ms=1000) as producer:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="no broker reachable"):
            producer.send("any-topic", b"v")
        assert 0.8 <= time.monotonic() - started < 5


def test_broker_rejecting_a_record_fails_its_future_alone(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(config={"max.message.bytes": "10000"})
    with SyncProducer(kafka.bootstrap_servers) as producer:
        ok = producer.send(topic, b"small")
        producer.flush()
        big = producer.send(topic, b"x" * 50_000)
        with pytest.raises(MessageSizeTooLargeError):
            big.result(30)
        assert isinstance(big.exception(), MessageSizeTooLargeError)
        assert ok.result(0).offset == 0
        assert producer.send_and_wait(topic, b"small again").offset == 1


def test_send_blocks_for_buffer_space_then_raises_buffer_full(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    with SyncProducer(
        kafka.bootstrap_servers, buffer_memory=32 * 1024, batch_size=4096, max_block_ms=400
    ) as producer:
        producer.partitions_for(topic)
        kafka.pause_broker(kafka.node_ids[0])
        try:
            futures = []
            with pytest.raises(BufferFullError, match="max_block_ms"):
                for _ in range(200):
                    started = time.monotonic()
                    futures.append(producer.send(topic, b"x" * 500))
            waited = time.monotonic() - started
            assert 0.35 <= waited < 3
            assert 40 <= len(futures) < 70
        finally:
            kafka.resume_broker(kafka.node_ids[0])
        producer.flush()
        # Space comes back once batches are delivered; a blocked send then goes through.
        assert producer.send_and_wait(topic, b"y" * 5000).offset == len(futures)
    assert [f.result(0).offset for f in futures] == list(range(len(futures)))


def test_a_blocked_sender_resumes_when_space_frees_up(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    with SyncProducer(
        kafka.bootstrap_servers, buffer_memory=32 * 1024, batch_size=4096, max_block_ms=20_000
    ) as producer:
        producer.partitions_for(topic)
        node = kafka.node_ids[0]
        kafka.pause_broker(node)
        timer = threading.Timer(1.0, kafka.resume_broker, args=(node,))
        timer.start()
        try:
            started = time.monotonic()
            futures = [producer.send(topic, b"%04d" % i + b"x" * 496) for i in range(300)]
            blocked_for = time.monotonic() - started
        finally:
            timer.join()
        producer.flush()
    assert blocked_for >= 0.8
    assert [f.result(0).offset for f in futures] == list(range(300))


def test_flush_skips_the_linger(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic()
    with SyncProducer(kafka.bootstrap_servers, linger_ms=60_000) as producer:
        future = producer.send(topic, b"v")
        time.sleep(0.1)
        assert not future.done()
        started = time.monotonic()
        producer.flush(timeout=10)
        assert time.monotonic() - started < 5
        assert future.done() and future.result(0).offset == 0


def test_close_delivers_what_it_can_then_fails_the_rest(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic()
    node = kafka.node_ids[0]
    producer = SyncProducer(kafka.bootstrap_servers, linger_ms=0, request_timeout_ms=2000)
    delivered = [producer.send(topic, f"d{i}".encode()) for i in range(100)]
    producer.flush()
    kafka.pause_broker(node)
    try:
        stuck = [producer.send(topic, f"s{i}".encode()) for i in range(100)]
        started = time.monotonic()
        producer.close(timeout=0.5)
        elapsed = time.monotonic() - started
    finally:
        kafka.resume_broker(node)
    assert elapsed < 3
    assert [f.result(0).offset for f in delivered] == list(range(100))
    for future in stuck:
        assert isinstance(future.exception(0), ProducerClosedError)
    with pytest.raises(ProducerClosedError):
        producer.send(topic, b"late")
    producer.close()  # closing twice is fine


def test_close_without_timeout_waits_for_records_from_every_thread(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    producer = SyncProducer(kafka.bootstrap_servers, linger_ms=1000)
    futures: list[Any] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        mine = [producer.send(topic, f"{w}-{i}".encode(), key=b"%d" % i) for i in range(1500)]
        with lock:
            futures.extend(mine)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    producer.close()
    assert len(futures) == 6000
    assert all(f.done() for f in futures)
    assert sum(1 for f in futures if f.exception(0) is None) == 6000


def test_close_from_one_thread_while_others_send(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    """Every send either raises ProducerClosedError or gets a definite outcome."""
    topic = new_topic(2)
    producer = SyncProducer(kafka.bootstrap_servers)
    producer.partitions_for(topic)
    accepted: list[Any] = []
    refused = [0]
    lock = threading.Lock()

    def worker(w: int) -> None:
        for i in range(20_000):
            try:
                future = producer.send(topic, f"{w}-{i}".encode())
            except ProducerClosedError:
                with lock:
                    refused[0] += 1
                return
            with lock:
                accepted.append(future)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    producer.close()
    for t in threads:
        t.join(60)
    assert all(f.done() for f in accepted)
    delivered = [f for f in accepted if f.exception(0) is None]
    assert len(delivered) == len(accepted)
    values = {r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=len(accepted))}
    assert len(values) == len(accepted)
    assert refused[0] + len(accepted) >= 3  # each thread ended one way or the other


def test_the_loop_task_does_not_outlive_close(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic()
    producer = SyncProducer(kafka.bootstrap_servers)
    producer.send_and_wait(topic, b"v")
    engine = producer._engine
    assert engine is not None and engine.main_future is not None
    assert not engine.main_future.done()
    producer.close()
    assert engine.main_future.done() and engine.main_future.exception() is None
    assert "closed" in repr(producer)


@pytest.mark.parametrize("topic", ["bad topic!", ".", "t" * 250])
def test_illegal_topic_names_raise_in_the_calling_thread(kafka: KafkaCluster, topic: str) -> None:
    with SyncProducer(kafka.bootstrap_servers, max_block_ms=5000) as producer:
        with pytest.raises(InvalidArgumentError, match="topic"):
            producer.send(topic, b"v")
        with pytest.raises(InvalidArgumentError, match="topic"):
            producer.partitions_for(topic)
