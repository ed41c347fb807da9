"""Every request completes exactly once, however a connection ends (no broker needed)."""

from __future__ import annotations

from typing import Any

from aioproducer.accumulator import Accumulator, MemoryBudget
from aioproducer.cluster import Cluster
from aioproducer.config import ProducerConfig
from aioproducer.connection import BrokerConnection
from aioproducer.errors import ConnectionError as KafkaConnectionError
from aioproducer.metrics import Metrics
from aioproducer.produce_call import ProduceCall
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.messages import MetadataRequest
from aioproducer.sender import Sender


def test_shutdown_empties_the_queues_the_connection_tasks_hold() -> None:
    conn = BrokerConnection("127.0.0.1", 1, node_id=1, client_id="t", request_timeout=30.0)
    outcomes: list[tuple[Any, Any]] = []
    for _ in range(3):
        conn.submit(MetadataRequest([]), 1, lambda r, e: outcomes.append((r, e)))
    # The writer and reader keep references to these very deques.
    outbox, pending = conn._outbox, conn._pending
    conn.close_nowait(KafkaConnectionError("cut"))
    conn.close_nowait(KafkaConnectionError("cut again"))
    assert len(outbox) == 0 and len(pending) == 0
    assert len(outcomes) == 3
    assert all(isinstance(e, KafkaConnectionError) and str(e) == "cut" for _, e in outcomes)
    # After close, a new request fails at once, and only once.
    conn.submit(MetadataRequest([]), 1, lambda r, e: outcomes.append((r, e)))
    assert len(outcomes) == 4


def test_sender_settles_a_produce_call_only_once() -> None:
    config = ProducerConfig()
    budget = MemoryBudget(config.buffer_memory)
    acc = Accumulator(
        batch_size=1000,
        linger=0.0,
        delivery_timeout=120.0,
        codec=Codec.NONE,
        compression_level=None,
        budget=budget,
    )
    sender = Sender(config, acc, Cluster(config), Metrics())
    call = ProduceCall(1, -1, 30000, [], 0, Metrics())
    sender._in_flight_calls = 1
    error = KafkaConnectionError("cut")
    sender._on_response(call, None, error)
    sender._on_response(call, None, error)
    assert len(sender._inbox) == 1
    sender._process_inbox(0.0)
    assert sender._in_flight_calls == 0


def test_a_batch_compressed_already_is_built_on_the_loop_not_on_a_worker_thread() -> None:
    # Batches encoded and compressed by the sending thread only need a header and a CRC:
    # not worth a worker thread. A batch that still needs compressing goes to one.
    import anyio

    from aioproducer.accumulator import ProducerBatch
    from aioproducer.protocol.records import RecordBatchBuilder, decode_batches

    def batch(values: list[bytes]) -> ProducerBatch:
        builder = RecordBatchBuilder(Codec.LZ4)
        for v in values:
            builder.append(0, None, v)
        return ProducerBatch("t", 0, builder, 0.0, 120.0)

    done, fresh = batch([b"a" * 1000] * 20), batch([b"b" * 1000] * 20)
    done.builder.build()  # compressed once: kept while no record is added
    assert done.builder.holds_compression and not fresh.builder.holds_compression
    metrics = Metrics()
    call = ProduceCall(1, -1, 30000, [done, fresh], 1024, metrics)
    anyio.run(call.prepare)
    assert metrics.batches_compressed_off_loop == 1
    assert fresh.builder.holds_compression
    ((_, built),) = call.topics
    values = [[r.value for r in b.records] for b in decode_batches(built[0][1] + built[1][1])]
    assert values == [[b"a" * 1000] * 20, [b"b" * 1000] * 20]
    done.builder.append(1, None, b"c")
    assert not done.builder.holds_compression
