"""Helpers shared by test modules: read-back checks, the table of bad records, and one
driver over ``Producer`` and ``SyncProducer`` so a check is written once for both.

``tests/`` is on ``sys.path`` (pytest's default import mode puts the directory of the root
``conftest.py`` there), so test modules import this as ``support``.
"""

from __future__ import annotations

import abc
import functools
import socket
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeAlias

import anyio.to_thread

from aioproducer import (
    DeliveryFuture,
    DeliveryHandle,
    Producer,
    RecordMetadata,
    SyncProducer,
)
from aioproducer.errors import InvalidArgumentError, RecordTooLargeError, SerializationError
from aioproducer.testing.verify import ConsumedRecord, consume_all

__all__ = [
    "BAD_RECORDS",
    "AsyncDriver",
    "Kind",
    "OpenProducer",
    "ProducerDriver",
    "Sent",
    "SyncDriver",
    "by_partition",
    "check_readback",
    "closed_port",
    "open_driver",
    "values_by_key",
]

HeaderList: TypeAlias = Sequence[tuple[str, bytes | None]]

# What a producer reported for each record, by value: (partition, offset, key, headers).
Sent: TypeAlias = dict[bytes, tuple[int, int, bytes | None, HeaderList]]

# Bad input for send(): the record's arguments, the error it must raise, a part of its text.
BAD_RECORDS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"value": 12345}, SerializationError, "value must be bytes"),
    ({"value": {"a": 1}}, SerializationError, "got dict"),
    ({"value": b"v", "key": 3.5}, SerializationError, "key must be bytes"),
    ({"value": b"v", "headers": [(1, b"x")]}, SerializationError, "header keys must be str"),
    ({"value": b"v", "headers": [("h", 5)]}, SerializationError, "header 'h' value"),
    ({"value": b"v", "headers": ["nope"]}, SerializationError, "pairs"),
    ({"value": b"x" * 2_000_000}, RecordTooLargeError, "max_request_size"),
    ({"value": b"v", "partition": 7}, InvalidArgumentError, "partition 7 is not valid"),
    ({"value": b"v", "partition": -1}, InvalidArgumentError, "partition -1"),
    ({"value": b"v", "timestamp_ms": -5}, InvalidArgumentError, "timestamp_ms"),
    ({"value": b"v", "timestamp_ms": "now"}, InvalidArgumentError, "timestamp_ms"),
]


# -- reading a topic back -------------------------------------------------------------------


def check_readback(bootstrap_servers: str, topic: str, sent: Sent) -> list[ConsumedRecord]:
    """Read ``topic`` back with an independent client and check it holds exactly ``sent``.

    Every sent value appears once, at the partition and offset its producer reported, with
    its key and headers; nothing else is there, and each partition's offsets have no gap.
    Returns the records in (partition, offset) order.
    """
    records = consume_all(bootstrap_servers, topic, expected=len(sent))
    seen: dict[bytes | None, ConsumedRecord] = {}
    for rec in records:
        assert rec.value not in seen, f"duplicate record {rec.value!r}"
        seen[rec.value] = rec
    assert len(records) == len(sent), f"read {len(records)} records, sent {len(sent)}"
    for value, (partition, offset, key, headers) in sent.items():
        found = seen.get(value)
        assert found is not None, f"record {value!r} was acknowledged but is missing"
        assert (found.partition, found.offset) == (partition, offset)
        assert found.key == key
        assert list(found.headers) == list(headers)
    for partition, recs in by_partition(records).items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"
    return records


def by_partition(records: Sequence[ConsumedRecord]) -> dict[int, list[ConsumedRecord]]:
    """The records of each partition, in the order given."""
    out: dict[int, list[ConsumedRecord]] = defaultdict(list)
    for rec in records:
        out[rec.partition].append(rec)
    return out


def values_by_key(records: Sequence[ConsumedRecord]) -> dict[bytes, list[bytes | None]]:
    """The values of each keyed record in read order, which is send order per key (a key
    lives in one partition and ``consume_all`` returns each partition in offset order)."""
    out: dict[bytes, list[bytes | None]] = defaultdict(list)
    for rec in records:
        if rec.key is not None:
            out[rec.key].append(rec.value)
    return out


def closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- one driver over both producers ---------------------------------------------------------

Kind: TypeAlias = Literal["async", "sync"]
Pending: TypeAlias = DeliveryHandle | DeliveryFuture
Record: TypeAlias = tuple[Any, Any, HeaderList | None]  # (value, key, headers)

# How long a SyncProducer future may take to settle before the test fails.
_RESULT_TIMEOUT = 120.0


class ProducerDriver(abc.ABC):
    """The producer API as coroutines, so one test body drives either producer.

    Handles (``DeliveryHandle`` or ``DeliveryFuture``) are returned as the producer made
    them; both have ``done()``, and :meth:`results` waits for them.
    """

    kind: Kind

    async def __aenter__(self) -> ProducerDriver:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Deliver what is buffered, then stop."""

    @abc.abstractmethod
    async def send(self, topic: str, value: Any, **kwargs: Any) -> Pending:
        """One ``send`` call."""

    @abc.abstractmethod
    async def send_each(self, topic: str, records: Sequence[Record]) -> list[Pending]:
        """``send`` for each record in turn, from one task (or, for SyncProducer, from one
        thread), so records of one sender go out in a well-defined order."""

    @abc.abstractmethod
    async def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[HeaderList | None] | None = None,
    ) -> list[Pending]:
        """One ``send_many`` call."""

    @abc.abstractmethod
    async def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        """One ``send_and_wait`` call."""

    @abc.abstractmethod
    async def results(self, pending: Sequence[Pending]) -> list[RecordMetadata]:
        """Wait for every handle and return its metadata (raising the first failure)."""

    @abc.abstractmethod
    async def flush(self) -> None:
        """Deliver everything buffered so far."""

    @abc.abstractmethod
    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``."""

    @abc.abstractmethod
    async def metrics(self) -> dict[str, float]:
        """The producer's counters."""


class AsyncDriver(ProducerDriver):
    """Drives a :class:`Producer` on the test's own event loop."""

    kind: Kind = "async"

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        self.producer = Producer(bootstrap_servers, **config)

    async def start(self) -> None:
        await self.producer.start()

    async def close(self) -> None:
        await self.producer.close()

    async def send(self, topic: str, value: Any, **kwargs: Any) -> Pending:
        return await self.producer.send(topic, value, **kwargs)

    async def send_each(self, topic: str, records: Sequence[Record]) -> list[Pending]:
        return [
            await self.producer.send(topic, value, key=key, headers=headers)
            for value, key, headers in records
        ]

    async def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[HeaderList | None] | None = None,
    ) -> list[Pending]:
        return list(await self.producer.send_many(topic, values, keys=keys, headers=headers))

    async def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        return await self.producer.send_and_wait(topic, value, **kwargs)

    async def results(self, pending: Sequence[Pending]) -> list[RecordMetadata]:
        out = []
        for handle in pending:
            assert isinstance(handle, DeliveryHandle)
            out.append(await handle)
        return out

    async def flush(self) -> None:
        await self.producer.flush()

    async def partitions_for(self, topic: str) -> list[int]:
        return await self.producer.partitions_for(topic)

    async def metrics(self) -> dict[str, float]:
        return self.producer.metrics()


class SyncDriver(ProducerDriver):
    """Drives a :class:`SyncProducer` by calling its blocking API in worker threads."""

    kind: Kind = "sync"

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any]) -> None:
        self.producer = SyncProducer(bootstrap_servers, **config)

    async def start(self) -> None:
        await anyio.to_thread.run_sync(self.producer.start)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.producer.close)

    async def send(self, topic: str, value: Any, **kwargs: Any) -> Pending:
        return await anyio.to_thread.run_sync(
            functools.partial(self.producer.send, topic, value, **kwargs)
        )

    async def send_each(self, topic: str, records: Sequence[Record]) -> list[Pending]:
        def run() -> list[Pending]:
            return [
                self.producer.send(topic, value, key=key, headers=headers)
                for value, key, headers in records
            ]

        return await anyio.to_thread.run_sync(run)

    async def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        headers: Sequence[HeaderList | None] | None = None,
    ) -> list[Pending]:
        futures = await anyio.to_thread.run_sync(
            functools.partial(self.producer.send_many, topic, values, keys=keys, headers=headers)
        )
        return list(futures)

    async def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        return await anyio.to_thread.run_sync(
            functools.partial(self.producer.send_and_wait, topic, value, **kwargs)
        )

    async def results(self, pending: Sequence[Pending]) -> list[RecordMetadata]:
        def run() -> list[RecordMetadata]:
            out = []
            for future in pending:
                assert isinstance(future, DeliveryFuture)
                out.append(future.result(_RESULT_TIMEOUT))
            return out

        return await anyio.to_thread.run_sync(run)

    async def flush(self) -> None:
        await anyio.to_thread.run_sync(self.producer.flush)

    async def partitions_for(self, topic: str) -> list[int]:
        return await anyio.to_thread.run_sync(self.producer.partitions_for, topic)

    async def metrics(self) -> dict[str, float]:
        return await anyio.to_thread.run_sync(self.producer.metrics)


# The contract fixture ``open_producer(**config)``: a driver for the test's producer flavour.
OpenProducer: TypeAlias = Callable[..., ProducerDriver]


def open_driver(kind: Kind, bootstrap_servers: str, **config: Any) -> ProducerDriver:
    """A driver for a new, not yet started producer of ``kind``; use it with ``async with``."""
    if kind == "async":
        return AsyncDriver(bootstrap_servers, config)
    return SyncDriver(bootstrap_servers, config)
