"""One module per benchmarked producer, each run in its own process.

Every module is started as ``python -m bench.clients.<module> --bootstrap-servers ... --topic
... --records N --value-size S`` and prints one JSON line (see :mod:`bench.clients._common`).
:data:`CLIENTS` maps the names used on the command line of :mod:`bench.producer_compare` to
those modules. Importing this package imports no Kafka client library.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLIENTS", "ClientSpec"]


@dataclass(frozen=True)
class ClientSpec:
    """A benchmarked client: its module and a one-line description of how it produces."""

    module: str
    how: str


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
    "aioproducer-bulk": ClientSpec(
        "bench.clients.aioproducer_bulk",
        "`await producer.send_many()` in chunks of 10,000 records",
    ),
    "aiokafka": ClientSpec(
        "bench.clients.aiokafka_producer",
        "`await producer.send()` per record (returns a future), one task",
    ),
    "confluent-sync": ClientSpec(
        "bench.clients.confluent_sync",
        "`produce()` + `poll(0)` per record, `BufferError` -> poll and retry",
    ),
    "confluent-aio": ClientSpec(
        "bench.clients.confluent_aio",
        "`await AIOProducer.produce()` per record (returns a future), one task",
    ),
    "kafka-python": ClientSpec(
        "bench.clients.kafka_python",
        "`producer.send()` per record (returns a future), one thread",
    ),
}
