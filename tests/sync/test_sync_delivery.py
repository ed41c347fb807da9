"""What only SyncProducer has: its futures, pickling and fork; the delivery checks every
producer must pass are in tests/contract/test_delivery_contract.py."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import select
import threading
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import DeliveryFuture, SyncProducer
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic


def test_delivery_future_behaves_like_a_concurrent_future(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    with SyncProducer(kafka.bootstrap_servers, linger_ms=300) as producer:
        calls: list[tuple[str, Any]] = []
        seen = threading.Event()

        def on_done(future: DeliveryFuture) -> None:
            calls.append((threading.current_thread().name, future.result(0).offset))
            seen.set()

        first = producer.send(topic, b"first")
        first.add_done_callback(on_done)  # registered while pending
        assert not first.done() and first.running()
        assert first.cancel() is False and not first.cancelled()
        with pytest.raises(concurrent.futures.TimeoutError):
            first.result(timeout=0.01)
        real = [producer.send(topic, f"r{i}".encode()).as_future() for i in range(3)]
        _done, not_done = concurrent.futures.wait(real, timeout=30)
        assert not not_done and [f.result().offset for f in real] == [1, 2, 3]
        assert seen.wait(30)
        assert first.done() and first.exception() is None
        assert calls and calls[0][1] == 0
        # A callback added once done runs at once, in the caller's thread.
        first.add_done_callback(on_done)
        assert calls[-1] == (threading.current_thread().name, 0)


def test_a_pickled_producer_travels_as_its_settings(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    producer = SyncProducer(kafka.bootstrap_servers, linger_ms=7, client_id="pickled")
    try:
        producer.send_and_wait(topic, b"from the original")
        blob = pickle.dumps(producer)
        assert b"Thread" not in blob and b"Lock" not in blob
        copy = pickle.loads(blob)
        assert type(copy) is SyncProducer and copy is not producer
        assert copy.config == producer.config
        assert "not started" in repr(copy)
        try:
            assert copy.send_and_wait(topic, b"from the copy").offset == 1
        finally:
            copy.close()
        # Closures capture it by value too (as Spark does with cloudpickle).
        from pyspark import cloudpickle

        def job() -> str:
            return repr(producer)

        assert "not started" in cloudpickle.loads(cloudpickle.dumps(job))()
    finally:
        producer.close()
    values = [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=2)]
    assert values == [b"from the original", b"from the copy"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_sends_with_a_producer_of_its_own(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    with SyncProducer(kafka.bootstrap_servers) as producer:
        producer.send_and_wait(topic, b"parent-1")
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_fd)
                meta = producer.send_and_wait(topic, b"child", timeout=30)
                producer.close()
                os.write(write_fd, f"ok {meta.offset}".encode())
                code = 0
            except BaseException as exc:
                os.write(write_fd, repr(exc).encode())
            finally:
                os._exit(code)
        os.close(write_fd)
        ready, _, _ = select.select([read_fd], [], [], 60)
        assert ready, "the forked child did not finish within 60 s"
        answer = os.read(read_fd, 4096).decode()
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, answer
        assert answer == "ok 1"
        # The parent's producer carries on, unaffected.
        assert producer.send_and_wait(topic, b"parent-2", timeout=30).offset == 2
    values = [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected=3)]
    assert values == [b"parent-1", b"child", b"parent-2"]
