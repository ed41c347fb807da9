"""SyncProducer delivery from many threads at once, read back with confluent-kafka."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import select
import threading
import uuid
from collections import defaultdict
from typing import Any

import pytest

from aioproducer import DeliveryFuture, RecordMetadata, SyncProducer
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all


def new_topic(kafka: KafkaCluster, partitions: int, **config: str) -> str:
    name = f"sync-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(name, partitions=partitions, config=config or None)
    return name


def check_readback(
    kafka: KafkaCluster, topic: str, sent: dict[bytes, tuple[int, int, Any, Any]]
) -> list[Any]:
    """Every sent value appears exactly once, where its future said, with its content."""
    records = consume_all(kafka.bootstrap_servers, topic, expected=len(sent))
    seen: dict[bytes, Any] = {}
    for rec in records:
        assert rec.value not in seen, f"duplicate record {rec.value!r}"
        seen[rec.value] = rec
    assert len(records) == len(sent), f"read {len(records)} records, sent {len(sent)}"
    for value, (partition, offset, key, headers) in sent.items():
        rec = seen.get(value)
        assert rec is not None, f"record {value!r} was acknowledged but is missing"
        assert (rec.partition, rec.offset) == (partition, offset)
        assert rec.key == key
        assert list(rec.headers) == list(headers)
    by_partition: dict[int, list[int]] = defaultdict(list)
    for rec in records:
        by_partition[rec.partition].append(rec.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    return records


def run_threads(count: int, target: Any) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_records_from_eight_threads_arrive_exactly_once_in_order(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=6)
    total, workers = 120_000, 8
    sent: dict[bytes, tuple[int, int, Any, Any]] = {}
    per_key: dict[bytes, list[bytes]] = defaultdict(list)
    lock = threading.Lock()
    with SyncProducer(kafka.bootstrap_servers, linger_ms=5) as producer:

        def worker(w: int) -> None:
            futures = []
            for i in range(w, total, workers):
                # Each key belongs to one thread, so its send order is well defined.
                key = f"w{w}-k{i % 7}".encode() if i % 3 else None
                value = f"{i:08d}|".encode() + os.urandom(6)
                headers = [("seq", str(i).encode()), ("thread", str(w).encode())]
                futures.append((value, key, headers, producer.send(topic, value, key, headers)))
            local = {}
            for value, key, headers, future in futures:
                meta = future.result(60)
                local[value] = (meta.partition, meta.offset, key, headers)
            with lock:
                sent.update(local)
                for value, key, _h, _f in futures:
                    if key is not None:
                        per_key[key].append(value)

        run_threads(workers, worker)
        metrics = producer.metrics()
    assert len(sent) == total
    assert metrics["records_sent"] == total and metrics["records_failed"] == 0
    records = check_readback(kafka, topic, sent)
    order: dict[bytes, list[bytes]] = defaultdict(list)
    for rec in records:
        if rec.key is not None:
            order[rec.key].append(rec.value)
    assert order == per_key


def test_send_many_from_threads_delivers_every_record_with_headers(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=4)
    n, workers = 10_000, 4
    results: dict[int, list[tuple[bytes, Any, Any, DeliveryFuture]]] = {}
    with SyncProducer(kafka.bootstrap_servers) as producer:

        def worker(w: int) -> None:
            values = [f"bulk-{w}-{i}".encode() for i in range(n)]
            keys = [f"k{i % 13}".encode() if i % 2 else None for i in range(n)]
            headers = [[("i", str(i).encode())] for i in range(n)]
            futures = producer.send_many(topic, values, keys=keys, headers=headers)
            results[w] = list(zip(values, keys, headers, futures, strict=True))

        run_threads(workers, worker)
        producer.flush()
    sent = {}
    for entries in results.values():
        for value, key, headers, future in entries:
            assert future.done()
            meta = future.result(0)
            sent[value] = (meta.partition, meta.offset, key, headers)
    assert len(sent) == n * workers
    check_readback(kafka, topic, sent)


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_records_round_trip(kafka: KafkaCluster, compression: str) -> None:
    topic = new_topic(kafka, partitions=2)
    with SyncProducer(kafka.bootstrap_servers, compression_type=compression) as producer:
        futures = []
        for i in range(2000):
            value = f"{compression}-{i}-".encode() + b"z" * (i % 200)
            futures.append((value, str(i % 5).encode(), producer.send(topic, value, str(i % 5))))
        sent = {}
        for value, key, future in futures:
            meta = future.result(30)
            sent[value] = (meta.partition, meta.offset, key, [])
    check_readback(kafka, topic, sent)


def test_metadata_timestamp_sizes_and_partitions(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=3)
    with SyncProducer(kafka.bootstrap_servers) as producer:
        meta = producer.send_and_wait(
            topic, "héllo", key="clé", headers={"h": "v"}, partition=2, timestamp_ms=1234567
        )
        assert producer.partitions_for(topic) == [0, 1, 2]
    assert isinstance(meta, RecordMetadata)
    assert (meta.topic, meta.partition, meta.offset, meta.timestamp_ms) == (topic, 2, 0, 1234567)
    assert meta.serialized_key_size == len("clé".encode())
    assert meta.serialized_value_size == len("héllo".encode())
    (rec,) = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (rec.key, rec.value, rec.timestamp_ms) == ("clé".encode(), "héllo".encode(), 1234567)
    assert rec.headers == (("h", b"v"),)


def test_delivery_future_behaves_like_a_concurrent_future(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=1)
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


def test_a_pickled_producer_travels_as_its_settings(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=1)
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
def test_a_forked_child_sends_with_a_producer_of_its_own(kafka: KafkaCluster) -> None:
    topic = new_topic(kafka, partitions=1)
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
