"""aioproducer: an asyncio-native Kafka producer that speaks the Kafka wire protocol itself.

>>> async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:   # doctest: +SKIP
...     metadata = await producer.send_and_wait("events", b"hello")

How it fits together, for maintainers (the path of one record, module by module):

1. ``producer.py`` (or ``sync.py`` through ``handoff.py`` from another thread) takes the
   record and asks ``intake.py`` to check it: serializers, bytes, headers, size.
2. ``budget.py`` admits its bytes (waiting for room up to ``max_block_ms``).
3. ``intake.py`` picks the partition (``partitioner.py``; metadata from ``cluster.py``)
   and appends it to the partition's open batch in ``accumulator.py``, which encodes it at
   once with ``protocol/records.py``; the caller gets a handle from ``results.py``.
4. ``sender.py``, the one task that changes batch state, drains ready batches per leader,
   stamps producer id, epoch and sequence, and builds the Produce request
   (``protocol/messages/produce.py``; compression in ``protocol/compression.py``).
5. ``connection.py`` frames and writes it (``protocol/framing.py``), reads the answer and
   hands it back to the sender's inbox; the sender completes, retries, splits or fails
   each batch, and one completion per batch settles every handle in it.
"""

from __future__ import annotations

# First of all: importing it chooses compiled or pure Python for every hot module at once.
from . import speedups  # noqa: F401

# isort: split
from .__about__ import __version__
from .config import ProducerConfig
from .errors import (
    BufferFullError,
    ConfigError,
    DeliveryTimeoutError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from .producer import Producer
from .results import BulkDelivery, DeliveryHandle, RecordMetadata
from .runner import LoopRunner
from .sync import BulkFuture, DeliveryFuture, SyncProducer

__all__ = [
    "BufferFullError",
    "BulkDelivery",
    "BulkFuture",
    "ConfigError",
    "DeliveryFuture",
    "DeliveryHandle",
    "DeliveryTimeoutError",
    "KafkaError",
    "KafkaTimeoutError",
    "LoopRunner",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordMetadata",
    "RecordTooLargeError",
    "SerializationError",
    "SyncProducer",
    "__version__",
]
