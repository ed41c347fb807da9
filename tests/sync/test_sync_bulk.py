"""SyncProducer.send_bulk against a real broker, from several threads at once."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer import RecordTooLargeError, SyncProducer
from aioproducer.partitioner import partition_for_key
from aioproducer.protocol import columnar
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


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_keyed_columns_encoded_in_the_calling_thread_arrive_in_key_order(
    kafka: KafkaCluster, new_topic: NewTopic, compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keyed runs of a compressed bulk send of columns are encoded and compressed by the
    # sending thread (Intake.encode_ahead); single records sent between the bulk sends go
    # into the partitions' open batches. Read back by confluent-kafka.
    pa = pytest.importorskip("pyarrow")
    topic = new_topic(4)
    rounds, rows = 3, 6000
    expected: list[tuple[bytes, bytes]] = []
    results = []
    with SyncProducer(
        kafka.bootstrap_servers, linger_ms=5, batch_size=4096, compression_type=compression
    ) as producer:
        # The encoder's calls made by this (the sending) thread, not the loop's.
        caller = threading.current_thread()
        encoded_ahead = 0
        # The batch-size limits the sending thread encoded with, per round.
        limits: list[list[int]] = [[] for _ in range(rounds)]
        r = 0

        def counting(function: Any) -> Any:
            def call(*args: Any) -> Any:
                nonlocal encoded_ahead
                if threading.current_thread() is caller:
                    encoded_ahead += 1
                    # encode_batches' max_bytes (the numpy encoder's calls have none).
                    limits[r].append(args[7] if len(args) > 7 else 0)
                    # Each batch is compressed as soon as it is encoded, in the same call.
                    assert len(args) < 3 or callable(args[8])
                return function(*args)

            return call

        if columnar.CODEC is not None:
            monkeypatch.setattr(columnar, "CODEC", _Codec(columnar.CODEC, counting))
        else:
            numpy_encoder = counting(columnar.encode_run_numpy)
            monkeypatch.setattr(columnar, "encode_run_numpy", numpy_encoder)
        for r in range(rounds):
            keys = [f"k{i % 13}".encode() for i in range(rows)]
            values = [f"r{r}-{i}-".encode() * (1 + i % 7) for i in range(rows)]
            results.append(
                producer.send_bulk(topic, pa.array(values, pa.binary()), keys=pa.array(keys))
            )
            expected += zip(keys, values, strict=True)
            single = (b"k3", f"single-{r}".encode())
            producer.send(topic, single[1], key=single[0])
            expected.append(single)
        done = [f.result(timeout=60) for f in results]
        producer.flush()
    assert encoded_ahead > 0
    if columnar.CODEC is not None:
        # Once a run's first batch is compressed, the rest of the run is cut where its
        # records compress to about batch_size (these values compress to 0.2-0.4): far
        # past what the topic's slowly learnt estimate allows in the first round (at most
        # ~40 batches built, each lowering it by 0.005: a limit under 5,100 bytes).
        assert max(limits[0]) > 6000, limits[0]
    assert [(d.delivered, d.failed) for d in done] == [(rows, 0)] * rounds
    records = consume_all(kafka.bootstrap_servers, topic, expected=len(expected))
    assert len(records) == len(expected)
    got: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for rec in records:
        got[rec.partition].append((rec.key, rec.value))
    for p in range(4):
        assert got[p] == [kv for kv in expected if partition_for_key(kv[0], 4) == p]


class _Codec:
    """The compiled column encoder with its encode_batches wrapped."""

    def __init__(self, codec: Any, wrap: Any) -> None:
        self.codec = codec
        self.encode_batches = wrap(codec.encode_batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.codec, name)
