"""One module per benchmarked producer, each run in its own process.

Every module is started as ``python -m bench.clients.<module> --bootstrap-servers ... --topic
... --records N --value-size S`` and prints one JSON line (see :mod:`bench.clients._common`).
:data:`CLIENTS` maps the names used on the command line of :mod:`bench.producer_compare` to
those modules. Importing this package imports no Kafka client library.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLIENTS", "PYTHON_CLIENTS", "ClientSpec"]


@dataclass(frozen=True)
class ClientSpec:
    """A benchmarked client: its module and a one-line description of how it produces.

    ``kind`` is ``"async"`` (several senders are tasks), ``"sync"`` (several senders are
    threads) or ``"java"`` (Apache Kafka's ProducerPerformance: keyless, one sender).
    ``per_record_outcome`` is False for a client that gets one outcome per call for many
    records, so that no record's send-to-ack latency can be observed (fixed-rate workloads).
    """

    module: str
    how: str
    kind: str = "async"
    per_record_outcome: bool = True

    def not_applicable(self, *, keyed: bool, senders: int, rate: float = 0) -> str | None:
        """Why this client cannot run a workload, or None if it can."""
        if self.kind == "java" and keyed:
            return "ProducerPerformance sends keyless records"
        if self.kind == "java" and senders > 1:
            return "ProducerPerformance has one sending thread"
        if rate and not self.per_record_outcome:
            return "one outcome per call: no per-record send-to-ack latency"
        return None


#: In the order the comparison runs them within a round.
CLIENTS: dict[str, ClientSpec] = {
    "aioproducer": ClientSpec(
        "bench.clients.aioproducer_asyncio",
        "`await producer.send()` per record, one task, asyncio loop",
    ),
    "aioproducer-uvloop": ClientSpec(
        "bench.clients.aioproducer_uvloop",
        "same as aioproducer, on uvloop",
    ),
    "aioproducer-trio": ClientSpec(
        "bench.clients.aioproducer_trio",
        "same as aioproducer, under trio",
    ),
    "aioproducer-otel": ClientSpec(
        "bench.clients.aioproducer_otel",
        "same as aioproducer, with OpenTelemetry tracing and metrics on (SDK, spans dropped)",
    ),
    "aioproducer-bulk": ClientSpec(
        "bench.clients.aioproducer_bulk",
        "`await producer.send_many()` (a handle per record) in chunks of 10,000 records",
    ),
    "aioproducer-sendbulk": ClientSpec(
        "bench.clients.aioproducer_sendbulk",
        "`await producer.send_bulk()` (one outcome per call) in chunks of 10,000 records",
        per_record_outcome=False,
    ),
    "aioproducer-sync": ClientSpec(
        "bench.clients.aioproducer_sync",
        "`aioproducer.SyncProducer.send()` per record (returns a future), one thread",
        "sync",
    ),
    "aiokafka": ClientSpec(
        "bench.clients.aiokafka_producer",
        "`await producer.send()` per record (returns a future), one task",
    ),
    "aiokafka-uvloop": ClientSpec(
        "bench.clients.aiokafka_uvloop",
        "same as aiokafka, on uvloop",
    ),
    "confluent-sync": ClientSpec(
        "bench.clients.confluent_sync",
        "`produce()` + `poll(0)` per record, `BufferError` -> poll and retry",
        "sync",
    ),
    "confluent-aio": ClientSpec(
        "bench.clients.confluent_aio",
        "`await AIOProducer.produce()` per record (returns a future), one task",
    ),
    "kafka-python": ClientSpec(
        "bench.clients.kafka_python",
        "`producer.send()` per record (returns a future), one thread",
        "sync",
    ),
    "java": ClientSpec(
        "bench.clients.java_perf",
        "Apache Kafka's `ProducerPerformance` (Java `KafkaProducer`), the reference ceiling",
        "java",
    ),
}

#: The clients :mod:`bench.producer_compare` knows how to verify (sequence-numbered values).
PYTHON_CLIENTS = [name for name, spec in CLIENTS.items() if spec.kind != "java"]
