"""An in-process fake Kafka cluster that speaks the real wire protocol.

:class:`FakeCluster` runs N brokers, each with its own listening socket on loopback, on
a thread of its own with its own event loop, so any client can use it: this package's
producer on asyncio, uvloop or trio, and third-party clients such as confluent-kafka or
kafka-python. It stores record batches per partition (the bytes as sent, with the base
offset and partition leader epoch filled in), keeps idempotent-producer state like a real
broker, serves Fetch and ListOffsets so consumers can read back, and injects the faults a
real broker will not produce on demand::

    from aioproducer.testing import FakeCluster

    with FakeCluster(brokers=3) as fc:
        fc.create_topic("events", partitions=6)
        fc.inject_error("produce", "NOT_LEADER_OR_FOLLOWER", count=1, skip=2)
        ...  # produce to fc.bootstrap_servers
        assert [r.value for r in fc.records("events", 0)] == [b"a", b"b"]

It advertises only the API versions it implements (Produce 3-12, Fetch 4-12, ListOffsets
1-11, Metadata 0-12, ApiVersions 0-4, CreateTopics 2-7, InitProducerId 0-5), so clients
negotiate down to them. There is no replication, no consumer groups, no transactions and
no authentication: every partition has exactly one replica, its leader.

Tests wait for what they expect instead of sleeping: :meth:`FakeCluster.wait_for_requests`
and :meth:`FakeCluster.wait_for_records` block (their ``async`` twins
:meth:`~FakeCluster.requests_received` and :meth:`~FakeCluster.records_stored` await)
until the request log or a partition reaches a count. :meth:`FakeCluster.hold` freezes
requests the way a stopped broker does, and :meth:`FakeCluster.release` lets them be
handled later, even after the client gave up on them and closed the connection.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import itertools
import struct
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from crc32c import crc32c

from ..errors import BrokerResponseError, ProtocolError, UnsupportedVersionError
from ..protocol.error_codes import ErrorCode
from ..protocol.framing import (
    FrameReader,
    RequestHeader,
    decode_request,
    encode_response,
    peek_request_header,
)
from ..protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerMetadata,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
    Request,
    Response,
    TopicMetadata,
)
from ..protocol.records import Record, RecordBatch, decode_batches
from ..protocol.versions import CODEC_VERSIONS, ApiKey

__all__ = ["BatchInfo", "ErrorCode", "FakeCluster", "RequestRecord"]

_T = TypeVar("_T")


#: Versions the fake implements and advertises (SASL is not served).
ADVERTISED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    key: CODEC_VERSIONS[key]
    for key in (
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.METADATA,
        ApiKey.API_VERSIONS,
        ApiKey.CREATE_TOPICS,
        ApiKey.INIT_PRODUCER_ID,
    )
}

# Record batch header layout (message format v2).
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_HEADER_SIZE = 61
_CRC_START = 21
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_TIMESTAMP_TYPE_FLAG = 0x08
_INT32_MAX = (1 << 31) - 1
_DEFAULT_MAX_MESSAGE_BYTES = 1048588
# A real broker remembers the last five batches of each producer for duplicate detection.
_PRODUCER_BATCH_CACHE = 5


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The producer state of one record batch in a produce request."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


@dataclass(slots=True)
class RequestRecord:
    """One request a broker received, for assertions.

    ``in_flight`` counts the requests of the same API on the same connection that had been
    received and not yet answered when this one arrived (itself included): with a client
    that pipelines five produce requests it reaches 5. ``errors`` maps (topic, partition) to
    the error code answered for produce requests (filled in once handled); ``answered`` is
    false for requests dropped without a response and for acks=0 produce requests.
    """

    broker: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    received_at: float
    connection: int
    in_flight: int
    batches: tuple[BatchInfo, ...] = ()
    errors: dict[tuple[str, int], int] = field(default_factory=dict)
    answered: bool = False
    answered_at: float | None = None

    @property
    def api(self) -> str:
        """The API's name in lower case, e.g. ``"produce"``."""
        try:
            return ApiKey(self.api_key).name.lower()
        except ValueError:
            return f"api_{self.api_key}"


@dataclass(slots=True)
class _StoredBatch:
    base_offset: int
    last_offset: int
    data: bytes
    max_timestamp: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    last_sequence: int
    # (first sequence, last sequence, base offset, log append time)
    recent: collections.deque[tuple[int, int, int, int]]


@dataclass(slots=True)
class _Partition:
    index: int
    leader: int
    leader_epoch: int = 0
    batches: list[_StoredBatch] = field(default_factory=list)
    last_offsets: list[int] = field(default_factory=list)
    next_offset: int = 0
    producers: dict[int, _ProducerEntry] = field(default_factory=dict)


@dataclass(slots=True)
class _Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[_Partition]
    configs: dict[str, str]

    @property
    def log_append_time(self) -> bool:
        return self.configs.get("message.timestamp.type", "CreateTime") == "LogAppendTime"

    @property
    def max_message_bytes(self) -> int:
        return int(self.configs.get("max.message.bytes", _DEFAULT_MAX_MESSAGE_BYTES))


@dataclass(slots=True)
class _Rule:
    kind: str  # "error", "delay", "drop_before", "drop_after", "throttle", "hold"
    api: int
    remaining: int
    skip: int
    broker: int | None
    topic: str | None
    partition: int | None
    error: int = 0
    seconds: float = 0.0
    throttle_ms: int = 0

    def matches_partition(self, topic: str, partition: int) -> bool:
        return (self.topic is None or self.topic == topic) and (
            self.partition is None or self.partition == partition
        )


class _Held:
    """A request received and not handled until :meth:`FakeCluster.release`."""

    __slots__ = ("conn", "decoded", "done", "outcome", "record")

    def __init__(self, conn: _Connection, decoded: _Decoded, record: RequestRecord) -> None:
        self.conn = conn
        self.decoded = decoded
        self.record = record
        self.done = asyncio.Event()
        # (frame, delay, throttle_ms), or None if handling dropped the connection.
        self.outcome: tuple[bytes | None, float, int] | None = None


class _Connection:
    __slots__ = ("broker", "id", "in_flight", "tasks", "writer")

    def __init__(self, broker: int, conn_id: int, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.id = conn_id
        self.writer = writer
        self.in_flight: collections.Counter[int] = collections.Counter()
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()
        for task in self.tasks:
            task.cancel()


class _Broker:
    __slots__ = ("connections", "node_id", "port", "server")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.port = 0
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[_Connection] = set()

    @property
    def running(self) -> bool:
        return self.server is not None


# A decoded request frame, or why it could not be decoded.
_Decoded = tuple[RequestHeader, Request[Any]] | UnsupportedVersionError | ProtocolError


class _Drop(Exception):
    """Close the connection without answering."""


def _api_key(api: str | int | ApiKey) -> int:
    if isinstance(api, str):
        try:
            return int(ApiKey[api.upper().replace("-", "_")])
        except KeyError:
            raise ValueError(f"unknown API name {api!r}") from None
    return int(api)


def _error_code(error: int | str | BrokerResponseError | type[BrokerResponseError]) -> int:
    if isinstance(error, str):
        return int(ErrorCode[error.upper()])
    if isinstance(error, BrokerResponseError) or (
        isinstance(error, type) and issubclass(error, BrokerResponseError)
    ):
        return int(error.code)
    return int(error)


class FakeCluster:
    """An in-process Kafka cluster of ``brokers`` nodes on 127.0.0.1 (see the module doc).

    Node ids are 1..N. Topics are created with :meth:`create_topic`, by CreateTopics
    requests, or on first Metadata request when ``auto_create_topics`` is true (with
    ``num_partitions`` partitions). Partition leaders are spread round-robin over the
    brokers. Use it as a context manager (sync or async) or call :meth:`start` and
    :meth:`close`. Every method is thread-safe and may be called from any thread except
    the fake's own.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        auto_create_topics: bool = True,
        num_partitions: int = 1,
        cluster_id: str = "fake-cluster",
        host: str = "127.0.0.1",
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.host = host
        self.cluster_id = cluster_id
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self._brokers = {node: _Broker(node) for node in range(1, brokers + 1)}
        self._topics: dict[str, _Topic] = {}
        self._rules: list[_Rule] = []
        self._log: list[RequestRecord] = []
        self._lock = threading.RLock()
        # Notified whenever the request log, a request's answer or a partition changes.
        self._changed = threading.Condition(self._lock)
        self._held: list[_Held] = []
        self._next_producer_id = 1000
        self._leader_cursor = 0
        self._conn_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._appended: asyncio.Event | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeCluster:
        """Start the event-loop thread and every broker's listener; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("FakeCluster is already started")
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="aioproducer-fake-cluster", daemon=True)
        self._thread.start()
        ready.wait()
        try:
            self._call(self._start_all)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every broker and the loop thread. Calling it again does nothing."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._stop_all)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = None
        self._thread = None

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> FakeCluster:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.close)

    def _call(self, func: Callable[[], Coroutine[Any, Any, _T]], timeout: float = 30) -> _T:
        loop = self._loop
        if loop is None:
            raise RuntimeError("FakeCluster is not started")
        if self._thread is threading.current_thread():
            raise RuntimeError("FakeCluster methods cannot be called from its own thread")
        return asyncio.run_coroutine_threadsafe(func(), loop).result(timeout)

    async def _start_all(self) -> None:
        self._appended = asyncio.Event()
        for broker in self._brokers.values():
            await self._listen(broker)

    async def _stop_all(self) -> None:
        for broker in self._brokers.values():
            await self._shutdown(broker)

    async def _listen(self, broker: _Broker) -> None:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(broker, reader, writer)

        broker.server = await asyncio.start_server(
            on_connect, self.host, broker.port, reuse_address=True
        )
        broker.port = broker.server.sockets[0].getsockname()[1]

    async def _shutdown(self, broker: _Broker) -> None:
        server, broker.server = broker.server, None
        if server is not None:
            server.close()
        for conn in list(broker.connections):
            conn.abort()
        broker.connections.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    # -- cluster layout ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every running broker."""
        return ",".join(
            f"{self.host}:{b.port}" for b in self._brokers.values() if b.running and b.port
        )

    @property
    def broker_ids(self) -> list[int]:
        """The node ids of every broker, running or not."""
        return list(self._brokers)

    def address(self, broker: int) -> tuple[str, int]:
        """``(host, port)`` of one broker."""
        return self.host, self._brokers[broker].port

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        leaders: Iterable[int] | None = None,
        config: dict[str, str] | None = None,
    ) -> None:
        """Create a topic; ``leaders`` gives each partition's leader (default: round-robin).

        ``config`` supports ``message.timestamp.type`` (``CreateTime`` or
        ``LogAppendTime``) and ``max.message.bytes``. Raises ``ValueError`` if it exists.
        """
        with self._lock:
            if name in self._topics:
                raise ValueError(f"topic {name!r} already exists")
            self._create(name, partitions, list(leaders) if leaders is not None else None, config)

    def _create(
        self,
        name: str,
        partitions: int,
        leaders: list[int] | None = None,
        config: dict[str, str] | None = None,
    ) -> _Topic:
        if partitions < 1:
            raise ValueError("a topic needs at least one partition")
        if leaders is None:
            nodes = list(self._brokers)
            leaders = []
            for _ in range(partitions):
                leaders.append(nodes[self._leader_cursor % len(nodes)])
                self._leader_cursor += 1
        if len(leaders) != partitions or any(n not in self._brokers for n in leaders):
            raise ValueError(f"leaders must name {partitions} brokers out of {list(self._brokers)}")
        topic = _Topic(
            name,
            uuid.uuid4(),
            [_Partition(i, leader) for i, leader in enumerate(leaders)],
            dict(config or {}),
        )
        self._topics[name] = topic
        return topic

    def topics(self) -> list[str]:
        """Names of every topic."""
        with self._lock:
            return list(self._topics)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading a partition."""
        with self._lock:
            return self._partition(topic, partition).leader

    def move_leader(self, topic: str, partition: int, to_broker: int) -> None:
        """Make ``to_broker`` the partition's leader (and bump the leader epoch).

        Metadata shows the new leader at once; the old leader answers Produce, Fetch and
        ListOffsets for it with NOT_LEADER_OR_FOLLOWER. Data and producer state move along,
        as they would with replication.
        """
        if to_broker not in self._brokers:
            raise ValueError(f"no broker {to_broker}")
        with self._lock:
            p = self._partition(topic, partition)
            p.leader = to_broker
            p.leader_epoch += 1

    def _partition(self, topic: str, partition: int) -> _Partition:
        try:
            return self._topics[topic].partitions[partition]
        except (KeyError, IndexError):
            raise KeyError(f"no partition {topic}-{partition}") from None

    # -- reading back ------------------------------------------------------------------------

    def batches(self, topic: str, partition: int) -> list[RecordBatch]:
        """Every stored batch of a partition, decoded, in offset order."""
        with self._lock:
            data = b"".join(b.data for b in self._partition(topic, partition).batches)
        return decode_batches(data)

    def records(self, topic: str, partition: int) -> list[Record]:
        """Every stored record of a partition (offset, timestamp, key, value, headers)."""
        return [record for batch in self.batches(topic, partition) for record in batch.records]

    def end_offset(self, topic: str, partition: int) -> int:
        """The next offset the partition will assign (its high watermark)."""
        with self._lock:
            return self._partition(topic, partition).next_offset

    # -- fault injection ---------------------------------------------------------------------

    def _add_rule(
        self,
        kind: str,
        api: str | int | ApiKey,
        count: int,
        broker: int | None,
        topic: str | None,
        partition: int | None,
        skip: int,
        **values: Any,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        if broker is not None and broker not in self._brokers:
            raise ValueError(f"no broker {broker}")
        rule = _Rule(kind, _api_key(api), count, skip, broker, topic, partition, **values)
        with self._lock:
            self._rules.append(rule)

    def inject_error(
        self,
        api: str | int | ApiKey,
        error: int | str | BrokerResponseError | type[BrokerResponseError],
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Answer the next ``count`` matching requests with ``error``, after ``skip`` of them.

        A request matches if it is for ``api`` (``"produce"``, ``ApiKey.FETCH``, 0, ...) on
        ``broker`` (any if ``None``) and, when given, names ``topic``/``partition``. Produce,
        Fetch and ListOffsets get the error on each matching partition (nothing is written);
        Metadata and CreateTopics on each matching topic; other APIs in their error code.
        ``error`` is a code, an :class:`ErrorCode` name or an error class of
        :mod:`aioproducer.errors`.
        """
        self._add_rule(
            "error", api, count, broker, topic, partition, skip, error=_error_code(error)
        )

    def delay(
        self,
        api: str | int | ApiKey,
        seconds: float,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Hold the response of the next ``count`` matching requests for ``seconds``.

        The request is handled first (a produce request is written), then the answer waits;
        as with a real broker, later requests of that connection wait behind it.
        """
        self._add_rule("delay", api, count, broker, topic, partition, skip, seconds=seconds)

    def drop_connections(self, broker: int | None = None) -> None:
        """Close every client connection of ``broker`` (of all brokers if ``None``) now."""

        async def drop() -> None:
            for b in self._brokers.values():
                if broker is None or b.node_id == broker:
                    for conn in list(b.connections):
                        conn.abort()

        self._call(drop)

    def drop_connection_on(
        self,
        api: str | int | ApiKey,
        count: int = 1,
        *,
        after_handling: bool = True,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Close the connection on the next ``count`` matching requests without answering.

        With ``after_handling`` (the default) the request is handled first, so a produce
        request is *written* and then its answer is lost; otherwise it is dropped unread.
        """
        kind = "drop_after" if after_handling else "drop_before"
        self._add_rule(kind, api, count, broker, topic, partition, skip)

    def throttle(
        self,
        api: str | int | ApiKey,
        throttle_ms: int,
        count: int = 1,
        *,
        broker: int | None = None,
        skip: int = 0,
    ) -> None:
        """Put ``throttle_ms`` in the next ``count`` matching responses, as a quota would.

        Like a real broker, the answer goes out at once and the connection then reads
        nothing more for ``throttle_ms``.
        """
        self._add_rule("throttle", api, count, broker, None, None, skip, throttle_ms=throttle_ms)

    def hold(
        self,
        api: str | int | ApiKey,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Receive the next ``count`` matching requests but handle none until :meth:`release`.

        Like a broker stopped with SIGSTOP: the request waits unhandled and later requests
        of its connection wait behind it. A client that times out and closes the
        connection does not take the request back: on :meth:`release` it is still
        handled (a produce request is written, or refused, as the log then stands), as a
        real broker handles what was in its socket buffer when it wakes; the answer goes
        nowhere if the connection is gone.
        """
        self._add_rule("hold", api, count, broker, topic, partition, skip)

    def release(self) -> int:
        """Handle every held request now, oldest first; returns how many there were."""

        async def release_all() -> int:
            with self._lock:
                held, self._held = self._held, []
            for item in held:
                try:
                    item.outcome = await self._handle(item.conn, item.decoded, item.record)
                except _Drop:
                    item.outcome = None
                item.done.set()
            return len(held)

        return self._call(release_all)

    def held(self) -> list[RequestRecord]:
        """The requests held by :meth:`hold` and not yet released, oldest first."""
        with self._lock:
            return [item.record for item in self._held]

    def clear_faults(self) -> None:
        """Forget every pending injected fault."""
        with self._lock:
            self._rules.clear()

    def stop_broker(self, broker: int) -> None:
        """Stop a broker: close its listener and connections. Its partitions lose their leader.

        Metadata from the other brokers shows them with leader -1 (LEADER_NOT_AVAILABLE)
        until :meth:`start_broker` or :meth:`move_leader`. Stored data is kept.
        """
        target = self._brokers[broker]
        self._call(lambda: self._shutdown(target))

    def start_broker(self, broker: int) -> None:
        """Start a stopped broker again on the same port."""
        target = self._brokers[broker]
        if not target.running:
            self._call(lambda: self._listen(target))

    # -- request log -------------------------------------------------------------------------

    def requests(
        self, api: str | int | ApiKey | None = None, *, broker: int | None = None
    ) -> list[RequestRecord]:
        """Requests received so far, oldest first, optionally of one API and/or broker."""
        key = None if api is None else _api_key(api)
        with self._lock:
            return [
                r
                for r in self._log
                if (key is None or r.api_key == key) and (broker is None or r.broker == broker)
            ]

    def max_in_flight(
        self, api: str | int | ApiKey = "produce", *, broker: int | None = None
    ) -> int:
        """The most requests of ``api`` one connection had unanswered at once."""
        return max((r.in_flight for r in self.requests(api, broker=broker)), default=0)

    def clear_requests(self) -> None:
        """Empty the request log."""
        with self._lock:
            self._log.clear()

    def wait_for_requests(
        self,
        api: str | int | ApiKey | None = None,
        count: int = 1,
        *,
        broker: int | None = None,
        answered: bool = False,
        held: bool = False,
        timeout: float = 30.0,
    ) -> list[RequestRecord]:
        """Block until ``count`` matching requests are in the log; return the log's matches.

        ``answered`` counts only requests already answered; ``held`` only requests that
        :meth:`hold` is holding. Raises :class:`TimeoutError` after ``timeout`` seconds.
        """

        def matching() -> list[RequestRecord]:
            if held:
                key = None if api is None else _api_key(api)
                found = [
                    item.record
                    for item in self._held
                    if (key is None or item.record.api_key == key)
                    and (broker is None or item.record.broker == broker)
                ]
            else:
                found = self.requests(api, broker=broker)
            return [r for r in found if r.answered] if answered else found

        with self._changed:
            if not self._changed.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(
                    f"{len(matching())} of {count} {api or 'any'} request(s) within {timeout} s"
                )
            return matching()

    async def requests_received(
        self,
        api: str | int | ApiKey | None = None,
        count: int = 1,
        *,
        broker: int | None = None,
        answered: bool = False,
        held: bool = False,
        timeout: float = 30.0,
    ) -> list[RequestRecord]:
        """:meth:`wait_for_requests` for async code (asyncio or trio): waits on a thread."""
        return await anyio.to_thread.run_sync(
            lambda: self.wait_for_requests(
                api, count, broker=broker, answered=answered, held=held, timeout=timeout
            )
        )

    def wait_for_records(
        self, topic: str, partition: int, count: int, *, timeout: float = 30.0
    ) -> list[Record]:
        """Block until the partition holds at least ``count`` records; return them all.

        Raises :class:`TimeoutError` after ``timeout`` seconds.
        """

        def stored() -> int:
            topic_ = self._topics.get(topic)
            if topic_ is None or not 0 <= partition < len(topic_.partitions):
                return 0  # not created yet: auto-creation may still make it
            return topic_.partitions[partition].next_offset

        with self._changed:
            if not self._changed.wait_for(lambda: stored() >= count, timeout):
                raise TimeoutError(
                    f"{topic}-{partition} holds {stored()} of {count} record(s) after {timeout} s"
                )
        return self.records(topic, partition)

    async def records_stored(
        self, topic: str, partition: int, count: int, *, timeout: float = 30.0
    ) -> list[Record]:
        """:meth:`wait_for_records` for async code (asyncio or trio): waits on a thread."""
        return await anyio.to_thread.run_sync(
            lambda: self.wait_for_records(topic, partition, count, timeout=timeout)
        )

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- serving -----------------------------------------------------------------------------

    async def _serve(
        self, broker: _Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        conn = _Connection(broker.node_id, next(self._conn_ids), writer)
        if not broker.running:
            writer.transport.abort()
            return
        broker.connections.add(conn)
        queue: asyncio.Queue[tuple[_Decoded, RequestRecord]] = asyncio.Queue()
        read_task = asyncio.ensure_future(self._read_frames(conn, reader, queue))
        handle_task = asyncio.ensure_future(self._handle_frames(conn, queue))
        conn.tasks = [read_task, handle_task]
        try:
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            conn.abort()
            broker.connections.discard(conn)
            with contextlib.suppress(BaseException):
                await asyncio.gather(*conn.tasks, return_exceptions=True)

    async def _read_frames(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        queue: asyncio.Queue[tuple[_Decoded, RequestRecord]],
    ) -> None:
        frames = FrameReader()
        while True:
            data = await reader.read(256 * 1024)
            if not data:
                return
            try:
                payloads = frames.feed(data)
            except ProtocolError:
                return
            for payload in payloads:
                try:
                    header = peek_request_header(payload)
                except ProtocolError:
                    return
                conn.in_flight[header.api_key] += 1
                record = RequestRecord(
                    broker=conn.broker,
                    api_key=header.api_key,
                    api_version=header.api_version,
                    correlation_id=header.correlation_id,
                    client_id=header.client_id,
                    received_at=time.monotonic(),
                    connection=conn.id,
                    in_flight=conn.in_flight[header.api_key],
                )
                decoded: _Decoded
                try:
                    decoded = decode_request(payload)
                except (UnsupportedVersionError, ProtocolError) as exc:
                    decoded = exc
                else:
                    if isinstance(decoded[1], ProduceRequest):
                        record.batches = tuple(_batch_infos(decoded[1]))
                with self._lock:
                    self._log.append(record)
                    self._changed.notify_all()
                queue.put_nowait((decoded, record))

    async def _handle_frames(
        self, conn: _Connection, queue: asyncio.Queue[tuple[_Decoded, RequestRecord]]
    ) -> None:
        # One request at a time per connection, answered in order, as a broker does.
        while True:
            decoded, record = await queue.get()
            names = None if isinstance(decoded, Exception) else _request_names(decoded[1])
            if self._take_rule("hold", record, names) is not None:
                item = _Held(conn, decoded, record)
                with self._lock:
                    self._held.append(item)
                self._notify()
                # Cancelled if the client closes the connection; the item stays held.
                await item.done.wait()
                if item.outcome is None:
                    return
                frame, delay, throttle_ms = item.outcome
            else:
                try:
                    frame, delay, throttle_ms = await self._handle(conn, decoded, record)
                except _Drop:
                    return
            if delay > 0:
                await asyncio.sleep(delay)
            conn.in_flight[record.api_key] -= 1
            if frame is not None:
                # Logged before writing: a client may read the answer (and a test inspect
                # the log) before this task runs again after drain().
                record.answered = True
                record.answered_at = time.monotonic()
                self._notify()
                conn.writer.write(frame)
                await conn.writer.drain()
            if throttle_ms > 0:
                # Muted for the throttle time, like a broker enforcing a quota (KIP-219).
                await asyncio.sleep(throttle_ms / 1000)

    def _take_rule(
        self,
        kind: str,
        record: RequestRecord,
        names: list[tuple[str, int | None]] | None = None,
    ) -> _Rule | None:
        """Find, count and return the first fault of ``kind`` that applies to this request."""
        with self._lock:
            for rule in self._rules:
                if rule.kind != kind or rule.api != record.api_key:
                    continue
                if rule.broker is not None and rule.broker != record.broker:
                    continue
                if (rule.topic is not None or rule.partition is not None) and not any(
                    (rule.topic is None or rule.topic == t)
                    and (rule.partition is None or p is None or rule.partition == p)
                    for t, p in names or ()
                ):
                    continue
                if rule.skip > 0:
                    rule.skip -= 1
                    continue
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                return rule
        return None

    async def _handle(
        self, conn: _Connection, decoded: _Decoded, record: RequestRecord
    ) -> tuple[bytes | None, float, int]:
        if isinstance(decoded, Exception):
            if isinstance(decoded, UnsupportedVersionError) and (
                record.api_key == ApiKey.API_VERSIONS
            ):
                # A newer client asks with a version we lack: answer in v0, error 35, with
                # our ranges, so it retries with one of them.
                refusal = self._api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
                return encode_response(refusal, 0, record.correlation_id), 0.0, 0
            # Like a broker that cannot parse a request: close the connection.
            raise _Drop()
        header, request = decoded
        names = _request_names(request)
        if self._take_rule("drop_before", record, names) is not None:
            raise _Drop()
        error_rule = self._take_rule("error", record, names)
        response = await self._dispatch(conn, header, request, error_rule)
        if self._take_rule("drop_after", record, names) is not None:
            raise _Drop()
        delay_rule = self._take_rule("delay", record, names)
        throttle_rule = self._take_rule("throttle", record, names)
        throttle_ms = throttle_rule.throttle_ms if throttle_rule is not None else 0
        if isinstance(response, ProduceResponse):
            record.errors = {
                (t.name, p.index): p.error_code for t in response.topics for p in t.partitions
            }
        if response is None:
            return None, 0.0, 0
        if throttle_ms and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle_ms
        frame = encode_response(response, header.api_version, header.correlation_id)
        return frame, delay_rule.seconds if delay_rule is not None else 0.0, throttle_ms

    async def _dispatch(
        self,
        conn: _Connection,
        header: RequestHeader,
        request: Request[Any],
        rule: _Rule | None,
    ) -> Response | None:
        version = header.api_version
        if isinstance(request, ApiVersionsRequest):
            return self._api_versions_response(rule.error if rule else 0)
        if isinstance(request, MetadataRequest):
            return self._metadata(request, version, rule)
        if isinstance(request, ProduceRequest):
            return self._produce(conn.broker, request, version, rule)
        if isinstance(request, FetchRequest):
            return await self._fetch(conn.broker, request, rule)
        if isinstance(request, ListOffsetsRequest):
            return self._list_offsets(conn.broker, request, rule)
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request, rule)
        if isinstance(request, CreateTopicsRequest):
            return self._create_topics(request, rule)
        raise _Drop()

    # -- APIs --------------------------------------------------------------------------------

    def _api_versions_response(self, error: int) -> ApiVersionsResponse:
        return ApiVersionsResponse(error, {int(k): v for k, v in ADVERTISED_VERSIONS.items()}, 0)

    def _broker_list(self) -> list[BrokerMetadata]:
        return [
            BrokerMetadata(b.node_id, self.host, b.port, None)
            for b in self._brokers.values()
            if b.running
        ]

    def _metadata(self, request: MetadataRequest, version: int, rule: _Rule | None) -> Response:
        with self._lock:
            names = list(self._topics) if request.topics is None else request.topics
            topics: list[TopicMetadata] = []
            for name in names:
                if rule is not None and (rule.topic is None or rule.topic == name):
                    topics.append(TopicMetadata(rule.error, name))
                    continue
                topic = self._topics.get(name)
                if topic is None and self.auto_create_topics and request.allow_auto_topic_creation:
                    topic = self._create(name, self.num_partitions)
                if topic is None:
                    topics.append(TopicMetadata(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
                    continue
                topics.append(
                    TopicMetadata(
                        0,
                        name,
                        topic.topic_id,
                        False,
                        [self._partition_metadata(p) for p in topic.partitions],
                    )
                )
            brokers = self._broker_list()
        controller = brokers[0].node_id if brokers else -1
        return MetadataResponse(brokers, self.cluster_id, controller, topics)

    def _partition_metadata(self, p: _Partition) -> PartitionMetadata:
        if self._brokers[p.leader].running:
            return PartitionMetadata(0, p.index, p.leader, p.leader_epoch, [p.leader], [p.leader])
        return PartitionMetadata(
            ErrorCode.LEADER_NOT_AVAILABLE, p.index, -1, p.leader_epoch, [p.leader], [], [p.leader]
        )

    def _init_producer_id(
        self, request: InitProducerIdRequest, rule: _Rule | None
    ) -> InitProducerIdResponse:
        if rule is not None:
            return InitProducerIdResponse(0, rule.error)
        # Like Kafka for a producer without a transactional id: always a fresh id at
        # epoch 0, whatever id and epoch the request carries (an idempotent producer
        # bumps its epoch itself).
        with self._lock:
            producer_id = self._next_producer_id
            self._next_producer_id += 1
        return InitProducerIdResponse(0, 0, producer_id, 0)

    def _create_topics(
        self, request: CreateTopicsRequest, rule: _Rule | None
    ) -> CreateTopicsResponse:
        results: list[CreatableTopicResult] = []
        with self._lock:
            for t in request.topics:
                result = CreatableTopicResult(t.name, configs=[])
                if rule is not None and (rule.topic is None or rule.topic == t.name):
                    result.error_code = rule.error
                elif t.name in self._topics:
                    result.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                    result.error_message = f"Topic '{t.name}' already exists."
                else:
                    count = t.num_partitions if t.num_partitions > 0 else self.num_partitions
                    leaders = None
                    if t.assignments:
                        leaders = [t.assignments[i][0] for i in sorted(t.assignments)]
                        count = len(leaders)
                    try:
                        if request.validate_only:
                            topic_id = None
                        else:
                            configs = {k: v for k, v in t.configs.items() if v is not None}
                            topic_id = self._create(t.name, count, leaders, configs).topic_id
                    except ValueError as exc:
                        result.error_code = ErrorCode.INVALID_PARTITIONS
                        result.error_message = str(exc)
                    else:
                        result.topic_id = topic_id
                        result.num_partitions = count
                        result.replication_factor = 1
                results.append(result)
        return CreateTopicsResponse(0, results)

    def _produce(
        self, node: int, request: ProduceRequest, version: int, rule: _Rule | None
    ) -> ProduceResponse | None:
        topics: list[ProduceTopicResponse] = []
        endpoints: dict[int, BrokerMetadata] = {}
        failed = False
        with self._lock:
            for name, partitions in request.topics:
                answers: list[ProducePartitionResponse] = []
                for index, data in partitions:
                    if rule is not None and rule.matches_partition(name, index):
                        answer = ProducePartitionResponse(index, rule.error)
                    elif request.acks not in (0, 1, -1):
                        answer = ProducePartitionResponse(index, ErrorCode.INVALID_REQUIRED_ACKS)
                    else:
                        answer = self._append(node, name, index, data)
                    if answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        self._add_current_leader(answer, name, index, endpoints)
                    failed = failed or answer.error_code != ErrorCode.NONE
                    answers.append(answer)
                topics.append(ProduceTopicResponse(name, answers))
            if topics and any(p for _, p in request.topics):
                self._notify_appended()
                self._changed.notify_all()
        if request.acks == 0:
            if failed:
                # A broker cannot report errors to an acks=0 producer: it closes the
                # connection so the client notices and refreshes its metadata.
                raise _Drop()
            return None
        return ProduceResponse(topics, 0, list(endpoints.values()))

    def _add_current_leader(
        self,
        answer: ProducePartitionResponse,
        topic: str,
        index: int,
        endpoints: dict[int, BrokerMetadata],
    ) -> None:
        try:
            p = self._partition(topic, index)
        except KeyError:
            return
        leader = self._brokers[p.leader]
        if leader.running:
            answer.current_leader = (p.leader, p.leader_epoch)
            endpoints[p.leader] = BrokerMetadata(p.leader, self.host, leader.port, None)

    def _append(
        self, node: int, topic_name: str, index: int, data: bytes
    ) -> ProducePartitionResponse:
        topic = self._topics.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return ProducePartitionResponse(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        p = topic.partitions[index]
        if p.leader != node:
            return ProducePartitionResponse(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if len(data) > topic.max_message_bytes:
            return ProducePartitionResponse(index, ErrorCode.MESSAGE_TOO_LARGE)
        if len(data) < _BATCH_HEADER_SIZE:
            return ProducePartitionResponse(index, ErrorCode.CORRUPT_MESSAGE)
        (
            _base,
            batch_length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            _base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _BATCH_HEADER.unpack_from(data)
        # Exactly one v2 batch per partition, intact.
        if (
            magic != 2
            or batch_length + 12 != len(data)
            or crc32c(memoryview(data)[_CRC_START:]) != crc
            or count != last_delta + 1
            or count < 1
        ):
            return ProducePartitionResponse(index, ErrorCode.CORRUPT_MESSAGE)
        append_time = int(time.time() * 1000) if topic.log_append_time else -1
        entry: _ProducerEntry | None = None
        last_sequence = -1
        if producer_id >= 0:
            entry = p.producers.get(producer_id)
            last_sequence = (base_sequence + last_delta) % (_INT32_MAX + 1)
            if entry is not None and producer_epoch < entry.epoch:
                return ProducePartitionResponse(index, ErrorCode.INVALID_PRODUCER_EPOCH)
            if entry is not None and producer_epoch == entry.epoch:
                for first, last, offset, appended_at in entry.recent:
                    if first == base_sequence and last == last_sequence:
                        # A retry of a batch already written: answer as the first time.
                        return ProducePartitionResponse(index, 0, offset, appended_at, 0)
                expected = (entry.last_sequence + 1) % (_INT32_MAX + 1)
                if base_sequence != expected:
                    return ProducePartitionResponse(
                        index,
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        error_message=f"expected sequence {expected}, got {base_sequence}",
                    )
            elif base_sequence != 0:
                code = (
                    ErrorCode.UNKNOWN_PRODUCER_ID
                    if entry is None
                    else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                )
                return ProducePartitionResponse(
                    index,
                    code,
                    error_message=f"a new producer epoch must start at 0, got {base_sequence}",
                )
        base_offset = p.next_offset
        stored = bytearray(data)
        _INT64.pack_into(stored, 0, base_offset)
        _INT32.pack_into(stored, 12, p.leader_epoch)
        if append_time >= 0:
            _INT16.pack_into(stored, 21, attributes | _TIMESTAMP_TYPE_FLAG)
            _INT64.pack_into(stored, 35, append_time)
            _UINT32.pack_into(stored, 17, crc32c(memoryview(stored)[_CRC_START:]))
            max_ts = append_time
        p.batches.append(_StoredBatch(base_offset, base_offset + last_delta, bytes(stored), max_ts))
        p.last_offsets.append(base_offset + last_delta)
        p.next_offset = base_offset + count
        if producer_id >= 0:
            if entry is None or producer_epoch != entry.epoch:
                entry = _ProducerEntry(
                    producer_epoch, -1, collections.deque(maxlen=_PRODUCER_BATCH_CACHE)
                )
                p.producers[producer_id] = entry
            entry.last_sequence = last_sequence
            entry.recent.append((base_sequence, last_sequence, base_offset, append_time))
        return ProducePartitionResponse(index, 0, base_offset, append_time, 0)

    def _notify_appended(self) -> None:
        # Wakes long-polling fetches; called on the loop thread only.
        event = self._appended
        if event is not None:
            self._appended = asyncio.Event()
            event.set()

    async def _fetch(self, node: int, request: FetchRequest, rule: _Rule | None) -> FetchResponse:
        deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
        while True:
            waiter = self._appended
            response, size = self._fetch_once(node, request, rule)
            remaining = deadline - time.monotonic()
            if size >= max(1, request.min_bytes) or remaining <= 0 or waiter is None:
                return response
            if any(p.error_code for t in response.responses for p in t.partitions):
                return response
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter.wait(), remaining)

    def _fetch_once(
        self, node: int, request: FetchRequest, rule: _Rule | None
    ) -> tuple[FetchResponse, int]:
        budget = request.max_bytes if request.max_bytes > 0 else _INT32_MAX
        total = 0
        topics: list[FetchTopicResponse] = []
        with self._lock:
            for t in request.topics:
                answers: list[FetchPartitionResponse] = []
                for fp in t.partitions:
                    answer = FetchPartitionResponse(fp.partition, 0, -1, -1, -1)
                    answers.append(answer)
                    if rule is not None and rule.matches_partition(t.topic, fp.partition):
                        answer.error_code = rule.error
                        continue
                    topic = self._topics.get(t.topic)
                    if topic is None or not 0 <= fp.partition < len(topic.partitions):
                        answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        continue
                    p = topic.partitions[fp.partition]
                    if p.leader != node:
                        answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                        leader = self._brokers[p.leader]
                        if leader.running:
                            answer.current_leader = (p.leader, p.leader_epoch)
                        continue
                    answer.high_watermark = answer.last_stable_offset = p.next_offset
                    answer.log_start_offset = 0
                    if not 0 <= fp.fetch_offset <= p.next_offset:
                        answer.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                        continue
                    chunks: list[bytes] = []
                    size = 0
                    start = bisect.bisect_left(p.last_offsets, fp.fetch_offset)
                    for batch in p.batches[start:]:
                        n = len(batch.data)
                        # The first batch always goes, so a big batch cannot stall a reader.
                        if (size and size + n > fp.partition_max_bytes) or (
                            total and total + n > budget
                        ):
                            break
                        chunks.append(batch.data)
                        size += n
                        total += n
                    answer.records = b"".join(chunks)
                topics.append(FetchTopicResponse(t.topic, answers))
        return FetchResponse(topics), total

    def _list_offsets(
        self, node: int, request: ListOffsetsRequest, rule: _Rule | None
    ) -> ListOffsetsResponse:
        topics: list[ListOffsetsTopicResponse] = []
        with self._lock:
            for name, partitions in request.topics:
                answers: list[ListOffsetsPartitionResponse] = []
                for lp in partitions:
                    answer = ListOffsetsPartitionResponse(lp.partition_index)
                    answers.append(answer)
                    if rule is not None and rule.matches_partition(name, lp.partition_index):
                        answer.error_code = rule.error
                        continue
                    topic = self._topics.get(name)
                    if topic is None or not 0 <= lp.partition_index < len(topic.partitions):
                        answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        continue
                    p = topic.partitions[lp.partition_index]
                    if p.leader != node:
                        answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                        continue
                    answer.leader_epoch = p.leader_epoch
                    answer.offset, answer.timestamp = self._offset_for(p, lp.timestamp)
                topics.append(ListOffsetsTopicResponse(name, answers))
        return ListOffsetsResponse(topics)

    def _offset_for(self, p: _Partition, timestamp: int) -> tuple[int, int]:
        if timestamp == -2:  # earliest
            return 0, -1
        if timestamp == -1:  # latest
            return p.next_offset, -1
        records = [
            r for b in decode_batches(b"".join(s.data for s in p.batches)) for r in b.records
        ]
        if timestamp == -3:  # the record with the largest timestamp
            if not records:
                return -1, -1
            best = max(records, key=lambda r: (r.timestamp_ms, -r.offset))
            return best.offset, best.timestamp_ms
        for r in records:
            if r.timestamp_ms >= timestamp:
                return r.offset, r.timestamp_ms
        return -1, -1


def _request_names(request: Request[Any]) -> list[tuple[str, int | None]] | None:
    """The (topic, partition) pairs a request names, for fault matching."""
    if isinstance(request, ProduceRequest):
        return [(name, index) for name, parts in request.topics for index, _ in parts]
    if isinstance(request, FetchRequest):
        return [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    if isinstance(request, ListOffsetsRequest):
        return [(name, p.partition_index) for name, parts in request.topics for p in parts]
    if isinstance(request, MetadataRequest):
        return None if request.topics is None else [(name, None) for name in request.topics]
    if isinstance(request, CreateTopicsRequest):
        return [(t.name, None) for t in request.topics]
    return None


def _batch_infos(request: ProduceRequest) -> Iterable[BatchInfo]:
    for name, partitions in request.topics:
        for index, data in partitions:
            if len(data) >= _BATCH_HEADER_SIZE:
                fields = _BATCH_HEADER.unpack_from(data)
                yield BatchInfo(name, index, fields[9], fields[10], fields[11], fields[12])
