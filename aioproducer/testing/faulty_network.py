"""A slow, lossy network between a client and a Kafka cluster, in user space.

:class:`FaultyNetwork` is a TCP proxy with one listener per broker, on its own thread and
event loop like :class:`~aioproducer.testing.FakeCluster`. It forwards the Kafka protocol
a frame at a time and can:

- add latency and jitter to every frame, in each direction, keeping each connection's byte
  order (a late frame holds back the ones behind it, as TCP does);
- blackhole one broker for a while: nothing is forwarded either way and nothing is closed,
  so a client sees silence, not an error, until its own timeouts fire; new connections
  are accepted and hear nothing either. When it ends, what was held back flows again, as
  a healed partition's retransmissions would;
- reset connections at random (the user-space stand-in for packet loss, which TCP turns
  into either delay or, past its patience, a broken connection): each frame has a chance
  to close both sides abruptly, before a request reaches the broker or after the broker
  handled it, the answer then being lost.

The client must reach every broker through the proxy, so Metadata responses are rewritten
to name the proxy's listeners (one is opened for each broker a response names): no broker
setting changes, and any cluster, a shared test fixture included, can be put behind it::

    with KafkaCluster(nodes=3) as kc, FaultyNetwork(kc.bootstrap_servers,
                                                    latency_ms=20, jitter_ms=10) as net:
        producer = Producer(net.bootstrap_servers)
        net.blackhole(2, seconds=5)

FindCoordinator answers are not rewritten, so a transactional producer would reach its
coordinator directly. Addresses are loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import KafkaError
from ..protocol.framing import FrameReader, decode_response, encode_response, peek_request_header
from ..protocol.messages import BrokerMetadata, MetadataResponse
from ..protocol.versions import ApiKey
from ..runner import LoopRunner

__all__ = ["FaultyNetwork", "NetworkStats"]

_T = TypeVar("_T")
_CHUNK = 256 * 1024


@dataclass
class NetworkStats:
    """What the proxy did so far."""

    connections: int = 0
    frames: int = 0
    bytes: int = 0
    #: Connections closed on purpose by ``reset_probability``.
    resets: int = 0
    #: Times a direction of a connection stopped for a blackhole (before reading or
    #: before writing a frame).
    blackhole_waits: int = 0


@dataclass
class _Listener:
    upstream: tuple[str, int]
    server: asyncio.base_events.Server | None = None
    port: int = 0
    node_ids: set[int] = field(default_factory=set)
    # Cleared while the broker is blackholed; every pump of its connections waits on it.
    open: asyncio.Event = field(default_factory=asyncio.Event)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)


class _Reset(Exception):
    """A connection picked for a random reset."""


class FaultyNetwork:
    """A proxy in front of the brokers of ``bootstrap_servers`` (see the module doc).

    ``latency_ms`` delays every frame in each direction, plus a uniform ``jitter_ms`` either
    way (never below zero); ``reset_probability`` is each frame's chance to reset its
    connection. All three can be changed while running with :meth:`configure`. ``seed``
    makes the random choices repeatable.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        latency_ms: float = 0.0,
        jitter_ms: float = 0.0,
        reset_probability: float = 0.0,
        seed: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._bootstrap: list[tuple[str, int]] = []
        for item in bootstrap_servers.split(","):
            name, _, port = item.strip().rpartition(":")
            self._bootstrap.append((name.strip("[]"), int(port)))
        self.host = host
        self._rng = random.Random(seed)
        self._latency = 0.0
        self._jitter = 0.0
        self._reset_probability = 0.0
        self.configure(
            latency_ms=latency_ms, jitter_ms=jitter_ms, reset_probability=reset_probability
        )
        #: Counters, updated on the proxy's thread.
        self.stats = NetworkStats()
        self._listeners: dict[tuple[str, int], _Listener] = {}
        # The proxy's event loop and its thread, while started.
        self._runner: LoopRunner | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultyNetwork:
        """Open a listener for each bootstrap server; returns ``self``."""
        # Its thread starts with the first call.
        self._runner = LoopRunner(use_uvloop=False, name="faulty-network")
        for address in self._bootstrap:
            self._call(lambda address=address: self._listen(address))  # type: ignore[misc]
        return self

    def close(self) -> None:
        """Close every listener and connection and stop the proxy's thread."""
        runner = self._runner
        if runner is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown, timeout=10)
        runner.close(10)
        self._runner = None

    def __enter__(self) -> FaultyNetwork:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, func: Callable[[], Coroutine[Any, Any, _T]], timeout: float = 30) -> _T:
        assert self._runner is not None, "FaultyNetwork is not started"
        return self._runner.submit(func).result(timeout)

    # -- what tests use ----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """The proxy's addresses for the bootstrap servers it was given."""
        return ",".join(f"{self.host}:{self._listeners[a].port}" for a in self._bootstrap)

    @property
    def node_ids(self) -> list[int]:
        """The broker ids seen in Metadata responses so far."""
        return sorted(n for listener in self._listeners.values() for n in listener.node_ids)

    def configure(
        self,
        *,
        latency_ms: float | None = None,
        jitter_ms: float | None = None,
        reset_probability: float | None = None,
    ) -> None:
        """Change the latency, jitter or reset probability from now on."""
        if latency_ms is not None:
            if latency_ms < 0:
                raise ValueError(f"latency_ms must not be negative, got {latency_ms}")
            self._latency = latency_ms / 1000
        if jitter_ms is not None:
            if jitter_ms < 0:
                raise ValueError(f"jitter_ms must not be negative, got {jitter_ms}")
            self._jitter = jitter_ms / 1000
        if reset_probability is not None:
            if not 0.0 <= reset_probability <= 1.0:
                raise ValueError(f"reset_probability must be in [0, 1], got {reset_probability}")
            self._reset_probability = reset_probability

    def blackhole(self, node_id: int, seconds: float) -> None:
        """Forward nothing to or from broker ``node_id`` for ``seconds`` from now (without
        closing anything); returns at once."""
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")

        async def begin() -> None:
            listener = self._listener_of(node_id)
            listener.open.clear()
            loop = asyncio.get_running_loop()
            self._timers.append(loop.call_later(seconds, listener.open.set))

        self._call(begin)

    def blackholed(self, node_id: int) -> bool:
        """Whether broker ``node_id`` is blackholed now."""
        return not self._listener_of(node_id).open.is_set()

    def heal(self) -> None:
        """End every blackhole now."""

        async def heal() -> None:
            for listener in self._listeners.values():
                listener.open.set()

        self._call(heal)

    def _listener_of(self, node_id: int) -> _Listener:
        for listener in self._listeners.values():
            if node_id in listener.node_ids:
                return listener
        raise KeyError(f"no broker {node_id} seen in metadata yet (known: {self.node_ids})")

    # -- the proxy (on its own loop) ---------------------------------------------------------

    async def _listen(self, upstream: tuple[str, int]) -> _Listener:
        listener = self._listeners.get(upstream)
        if listener is not None:
            return listener
        listener = self._listeners[upstream] = _Listener(upstream)
        listener.open.set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await self._serve(listener, reader, writer)
            finally:
                self._tasks.discard(task)

        listener.server = await asyncio.start_server(accept, self.host, 0)
        listener.port = listener.server.sockets[0].getsockname()[1]
        return listener

    async def _shutdown(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for listener in self._listeners.values():
            listener.open.set()
            if listener.server is not None:
                listener.server.close()
            for writer in list(listener.writers):
                writer.transport.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for listener in self._listeners.values():
            if listener.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(listener.server.wait_closed(), 2)

    async def _serve(
        self,
        listener: _Listener,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        self.stats.connections += 1
        listener.writers.add(client_writer)
        broker_writer: asyncio.StreamWriter | None = None
        try:
            await listener.open.wait()
            broker_reader, broker_writer = await asyncio.open_connection(*listener.upstream)
            listener.writers.add(broker_writer)
            # correlation id -> request version, for the Metadata requests of this connection
            asked: dict[int, int] = {}
            upward = self._pump(listener, client_reader, broker_writer, asked, None)
            downward = self._pump(listener, broker_reader, client_writer, None, asked)
            tasks = [asyncio.ensure_future(upward), asyncio.ensure_future(downward)]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_writer, broker_writer):
                if writer is not None:
                    listener.writers.discard(writer)
                    writer.transport.abort()

    async def _pump(
        self,
        listener: _Listener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        record_requests: dict[int, int] | None,
        rewrite_responses: dict[int, int] | None,
    ) -> None:
        """Forward frames from ``reader`` to ``writer`` with the faults, until either ends."""
        frames = FrameReader(max_frame_size=2**31 - 1)
        # Frames wait here for their delivery time; a later frame never overtakes one ahead.
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        released = 0.0

        async def deliver() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    return
                due, frame = item
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if not listener.open.is_set():
                    self.stats.blackhole_waits += 1
                    await listener.open.wait()
                writer.write(frame)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                if not listener.open.is_set():
                    self.stats.blackhole_waits += 1
                    await listener.open.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    return
                for payload in frames.feed(data):
                    if self._reset_probability and self._rng.random() < self._reset_probability:
                        self.stats.resets += 1
                        raise _Reset()
                    if record_requests is not None:
                        header = peek_request_header(payload)
                        if header.api_key == ApiKey.METADATA:
                            record_requests[header.correlation_id] = header.api_version
                        frame = len(payload).to_bytes(4, "big") + payload
                    else:
                        frame = await self._rewrite(listener, payload, rewrite_responses or {})
                    self.stats.frames += 1
                    self.stats.bytes += len(frame)
                    delay = self._latency
                    if self._jitter:
                        delay += self._rng.uniform(-self._jitter, self._jitter)
                    released = max(released, time.monotonic() + max(0.0, delay))
                    queue.put_nowait((released, frame))
                if sender.done():
                    return
        except _Reset:
            return
        finally:
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender

    async def _rewrite(self, listener: _Listener, payload: bytes, asked: dict[int, int]) -> bytes:
        """The response frame to forward: Metadata answers name the proxy's listeners."""
        correlation_id = int.from_bytes(payload[:4], "big", signed=True)
        version = asked.pop(correlation_id, None)
        if version is None:
            return len(payload).to_bytes(4, "big") + payload
        try:
            _, response = decode_response(MetadataResponse, version, payload)
        except KafkaError:
            return len(payload).to_bytes(4, "big") + payload
        brokers: list[BrokerMetadata] = []
        for broker in response.brokers:
            proxied = await self._listen((broker.host, broker.port))
            proxied.node_ids.add(broker.node_id)
            brokers.append(BrokerMetadata(broker.node_id, self.host, proxied.port, broker.rack))
        response.brokers = brokers
        return encode_response(response, version, correlation_id)
