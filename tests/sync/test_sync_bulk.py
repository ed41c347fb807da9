"""SyncProducer.send_bulk against a real broker, from several threads at once."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import RecordTooLargeError, SyncProducer
from aioproducer.partitioner import partition_for_key
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic


def test_send_bulk_from_threads_delivers_everything_in_key_order(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(5)
    threads, per_thread = 4, 6000
    futures: list[Any] = []
    with SyncProducer(kafka.bootstrap_servers, linger_ms=5, buffer_memory=200_000) as producer:

        def run(t: int) -> None:
            for start in range(0, per_thread, 1500):
                keys = [f"t{t}-k{i % 11}".encode() for i in range(start, start + 1500)]
                values = [f"t{t}-{i}".encode() for i in range(start, start + 1500)]
                hdrs = [[("t", str(t).encode())] for _ in range(1500)]
                futures.append(producer.send_bulk(topic, values, keys=keys, headers=hdrs))

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        results = [f.result(timeout=60) for f in futures]
    assert sum(r.records for r in results) == threads * per_thread
    assert all(r.failed == 0 for r in results)
    records = consume_all(kafka.bootstrap_servers, topic, expected=threads * per_thread)
    assert len(records) == threads * per_thread
    order: dict[bytes, list[int]] = defaultdict(list)
    for rec in records:
        assert rec.value is not None
        t, i = rec.value.decode().split("-")
        assert rec.key == f"{t}-k{int(i) % 11}".encode()
        assert rec.partition == partition_for_key(rec.key, 5)
        assert list(rec.headers) == [("t", t[1:].encode())]
        order[rec.key].append(int(i))
    for seq in order.values():
        assert seq == sorted(seq)


def test_sync_send_bulk_too_large_record_names_index(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    with SyncProducer(kafka.bootstrap_servers, max_request_size=10_000) as producer:
        values = [b"a", b"b", b"x" * 20_000, b"d"]
        with pytest.raises(RecordTooLargeError, match="record 2 "):
            producer.send_bulk(topic, values)
        result = producer.send_bulk(topic, [b"e"], partitions=[0]).result(timeout=30)
        assert result.delivered == 1 and result.metadata(0).partition == 0
        producer.flush()
        assert producer.metrics()["buffer_bytes_in_use"] == 0
    records = consume_all(kafka.bootstrap_servers, topic, expected=3)
    assert [r.value for r in records] == [b"a", b"b", b"e"]
