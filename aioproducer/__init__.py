"""aioproducer: an asyncio-native Kafka producer that speaks the Kafka wire protocol itself.

>>> async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:   # doctest: +SKIP
...     metadata = await producer.send_and_wait("events", b"hello")

How it is built, module by module: the Design page of the documentation
(``docs/design.md``).
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
