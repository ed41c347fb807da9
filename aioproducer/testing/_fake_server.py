"""The fake cluster's network side: listeners, connections and the request log.

Package-internal: :class:`Server`, :class:`Broker`, :class:`Held`, :class:`BatchInfo` and
:class:`RequestRecord` are its interface, for :mod:`aioproducer.testing.fake` (which
re-exports the last two) and its other internal modules.

Each connection reads frames as they come, logs every request at once, and handles them
one at a time in order, as a broker does: fault rules decide whether a request is held,
dropped, answered with an error, delayed, throttled, sent with a forged size or trickled
a few bytes at a time, and
:class:`~aioproducer.testing._fake_apis.Apis`
answers it. Everything here runs on the cluster's event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProtocolError, UnsupportedVersionError
from ..protocol.error_codes import ErrorCode
from ..protocol.framing import (
    FrameReader,
    RequestHeader,
    decode_request,
    encode_response,
    peek_request_header,
)
from ..protocol.messages import (
    BrokerMetadata,
    ProduceRequest,
    ProduceResponse,
    Request,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from ..protocol.versions import ApiKey
from ._fake_apis import Apis, Drop, Settings
from ._fake_faults import Faults, Rule, request_names
from ._fake_log import Log, producer_fields
from ._fake_sasl import SaslGate, SessionState

__all__ = ["BatchInfo", "Broker", "Held", "RequestRecord", "Server"]


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


# A decoded request frame, or why it could not be decoded.
_Decoded = tuple[RequestHeader, Request[Any]] | UnsupportedVersionError | ProtocolError

# What handling a request gives: (frame, delay, throttle_ms); no frame for no answer.
_Outcome = tuple[bytes | None, float, int]


class _Connection:
    __slots__ = ("broker", "id", "in_flight", "session", "tasks", "writer")

    def __init__(self, broker: int, conn_id: int, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.id = conn_id
        self.writer = writer
        self.session = SessionState()
        self.in_flight: Counter[int] = Counter()
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        transport = self.writer.transport
        if not transport.is_closing():
            transport.abort()
        for task in self.tasks:
            task.cancel()


class Broker:
    """One broker: its node id, its port (kept across restarts) and its connections."""

    __slots__ = ("connections", "node_id", "port", "server")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.port = 0
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[_Connection] = set()

    @property
    def running(self) -> bool:
        """Whether it listens."""
        return self.server is not None


class Held:
    """A request received and not handled until :meth:`Server.release`."""

    __slots__ = ("conn", "decoded", "done", "outcome", "record")

    def __init__(self, conn: _Connection, decoded: _Decoded, record: RequestRecord) -> None:
        self.conn = conn
        self.decoded = decoded
        self.record = record
        self.done = asyncio.Event()
        # None if handling dropped the connection.
        self.outcome: _Outcome | None = None


class Server:
    """The brokers ``broker_ids``, answering from ``log`` with the faults of ``faults``.

    ``lock`` is the cluster lock, a condition notified whenever the request log, a
    request's answer or a partition changes; ``requests`` (the request log) and ``held``
    are read under it. The brokers listen on ``settings.host``.
    """

    def __init__(
        self,
        log: Log,
        faults: Faults,
        lock: threading.Condition,
        broker_ids: Iterable[int],
        settings: Settings,
    ) -> None:
        self.brokers = {node: Broker(node) for node in broker_ids}
        self.requests: list[RequestRecord] = []
        self.held: list[Held] = []
        self.apis = Apis(log, lock, self.endpoints, settings)
        #: SASL: none unless the cluster was made with mechanisms to accept.
        self.sasl = SaslGate({}, 0)
        self._settings = settings
        self._faults = faults
        self._lock = lock
        self._conn_ids = itertools.count(1)

    def endpoints(self) -> dict[int, BrokerMetadata]:
        """The running brokers by node id, in node order."""
        return {
            b.node_id: BrokerMetadata(b.node_id, self._settings.host, b.port, None)
            for b in self.brokers.values()
            if b.running
        }

    # -- lifecycle (on the loop) ----------------------------------------------------------

    async def start(self) -> None:
        """Start every broker's listener."""
        self.apis.start()
        for broker in self.brokers.values():
            await self.listen(broker)

    async def stop(self) -> None:
        """Stop every broker."""
        for broker in self.brokers.values():
            await self.shutdown(broker)

    async def listen(self, broker: Broker) -> None:
        """Start one broker's listener, on its former port if it had one."""

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(broker, reader, writer)

        broker.server = await asyncio.start_server(
            on_connect, self._settings.host, broker.port, reuse_address=True
        )
        broker.port = broker.server.sockets[0].getsockname()[1]

    async def shutdown(self, broker: Broker) -> None:
        """Close one broker's listener and connections."""
        server, broker.server = broker.server, None
        if server is not None:
            server.close()
        for conn in list(broker.connections):
            conn.abort()
        broker.connections.clear()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def drop_connections(self, broker: int | None) -> None:
        """Close every client connection of ``broker`` (of all brokers if ``None``)."""
        for b in self.brokers.values():
            if broker is None or b.node_id == broker:
                for conn in list(b.connections):
                    conn.abort()

    async def release(self) -> int:
        """Handle every held request now, oldest first; returns how many there were."""
        with self._lock:
            held, self.held = self.held, []
        for item in held:
            try:
                item.outcome = await self._handle(item.conn, item.decoded, item.record)
            except Drop:
                item.outcome = None
            item.done.set()
        return len(held)

    def _notify(self) -> None:
        with self._lock:
            self._lock.notify_all()

    # -- serving --------------------------------------------------------------------------

    async def _serve(
        self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
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
                    self.requests.append(record)
                    self._lock.notify_all()
                queue.put_nowait((decoded, record))

    async def _handle_frames(
        self, conn: _Connection, queue: asyncio.Queue[tuple[_Decoded, RequestRecord]]
    ) -> None:
        # One request at a time per connection, answered in order, as a broker does.
        while True:
            decoded, record = await queue.get()
            names = None if isinstance(decoded, Exception) else request_names(decoded[1])
            if self._faults.take("hold", record.api_key, record.broker, names) is not None:
                item = Held(conn, decoded, record)
                with self._lock:
                    self.held.append(item)
                self._notify()
                # Cancelled if the client closes the connection; the item stays held.
                await item.done.wait()
                if item.outcome is None:
                    return
                frame, delay, throttle_ms = item.outcome
            else:
                try:
                    frame, delay, throttle_ms = await self._handle(conn, decoded, record)
                except Drop:
                    return
            if delay > 0:
                await asyncio.sleep(delay)
            conn.in_flight[record.api_key] -= 1
            if frame is not None:
                oversize = self._faults.take("oversize", record.api_key, record.broker, names)
                if oversize is not None:
                    # The answer follows a size prefix that claims far more: a client that
                    # believes it waits (or allocates) for bytes that never come.
                    frame = struct.pack(">i", oversize.size) + frame[4:]
                trickle = self._faults.take("trickle", record.api_key, record.broker, names)
                # Logged before writing: a client may read the answer (and a test inspect
                # the log) before this task runs again after drain().
                record.answered = True
                record.answered_at = time.monotonic()
                self._notify()
                if trickle is not None:
                    await _trickle(conn.writer, frame, trickle.seconds)
                else:
                    conn.writer.write(frame)
                    await conn.writer.drain()
            if throttle_ms > 0:
                # Muted for the throttle time, like a broker enforcing a quota (KIP-219).
                await asyncio.sleep(throttle_ms / 1000)

    async def _handle(
        self, conn: _Connection, decoded: _Decoded, record: RequestRecord
    ) -> _Outcome:
        if isinstance(decoded, Exception):
            if isinstance(decoded, UnsupportedVersionError) and (
                record.api_key == ApiKey.API_VERSIONS
            ):
                # A newer client asks with a version we lack: answer in v0, error 35, with
                # our ranges, so it retries with one of them.
                refusal = self.apis.api_versions(ErrorCode.UNSUPPORTED_VERSION)
                return encode_response(refusal, 0, record.correlation_id), 0.0, 0
            # Like a broker that cannot parse a request: close the connection.
            raise Drop()
        header, request = decoded
        names = request_names(request)

        def take(kind: str) -> Rule | None:
            return self._faults.take(kind, record.api_key, record.broker, names)

        if take("drop_before") is not None:
            raise Drop()
        if isinstance(request, SaslHandshakeRequest | SaslAuthenticateRequest):
            if not self.sasl.enabled:
                raise Drop()
            answer, accepted = self.sasl.answer(conn.broker, conn.id, conn.session, request)
            if accepted is not None:
                with self._lock:
                    self.sasl.accepted.append(accepted)
                    self._lock.notify_all()
            return encode_response(answer, header.api_version, header.correlation_id), 0.0, 0
        if not self.sasl.admits(conn.session, request):
            # A broker closes a connection that sends requests unauthenticated or after
            # its session ended (KIP-368).
            raise Drop()
        error_rule = take("error")
        response = await self.apis.answer(conn.broker, request, error_rule)
        if take("drop_after") is not None:
            raise Drop()
        delay_rule = take("delay")
        throttle_rule = take("throttle")
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


async def _trickle(writer: asyncio.StreamWriter, frame: bytes, seconds: float) -> None:
    """Write ``frame`` in about 20 pieces spread evenly over ``seconds``."""
    pieces = min(20, len(frame))
    step = -(-len(frame) // pieces)
    for start in range(0, len(frame), step):
        writer.write(frame[start : start + step])
        await writer.drain()
        if start + step < len(frame):
            await asyncio.sleep(seconds / pieces)


def _batch_infos(request: ProduceRequest) -> Iterable[BatchInfo]:
    for name, partitions in request.topics:
        for index, data in partitions:
            fields = producer_fields(data)
            if fields is not None:
                yield BatchInfo(name, index, *fields)
