"""One broker connection on anyio streams: handshake, pipelining, per-request timeouts.

Kafka answers the requests of one connection in the order they were sent, so in-flight
requests are a FIFO and a response must match the oldest one. The connection owns two
tasks (a writer that encodes and writes queued requests in order, and a reader that
deframes responses); both live in the task group given to :meth:`BrokerConnection.open`.
Completions are delivered through plain callbacks that must not block.

Re-authentication (KIP-368): when SASL authentication grants a session lifetime, a third
task authenticates again on the same connection at a random point between 85% and 95% of
it. Requests already queued go out ahead of the SaslHandshake and their answers are
matched as usual; requests submitted while the exchange runs are held back and written,
in order, once it is done, so no other request interleaves with the SASL exchange.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import random
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from .errors import (
    AuthenticationError,
    ConnectionError,
    KafkaError,
    ProtocolError,
    RequestTimedOutError,
    ResponseTooLargeError,
)
from .protocol import framing
from .protocol.error_codes import ErrorCode
from .protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from .protocol.versions import ApiKey, negotiate_versions

if sys.version_info < (3, 11):  # anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["DEFAULT_MAX_RESPONSE_SIZE", "BrokerConnection", "Callback"]

log = logging.getLogger("aioproducer.connection")

#: ``callback(response_or_None, error_or_None)``
Callback = Callable[[Any, "BaseException | None"], None]

#: The default of ``max_response_size``: ``receive_message_max_bytes``'s default.
DEFAULT_MAX_RESPONSE_SIZE = 64 * 1024 * 1024
# Set, in the re-authenticating task only, to the connection it re-authenticates: its
# requests skip the hold that keeps every other task's requests out of the SASL exchange.
_reauthenticating: contextvars.ContextVar[BrokerConnection | None] = contextvars.ContextVar(
    "aioproducer_reauthenticating", default=None
)
# Java's window (KIP-368): early enough for network latency and clock drift, spread out so
# that many connections opened together do not all re-authenticate at once.
_REAUTH_WINDOW = (0.85, 0.95)
_RECEIVE_CHUNK = 256 * 1024


class _Pending:
    __slots__ = (
        "api_key",
        "callback",
        "correlation_id",
        "deadline",
        "finished",
        "request",
        "version",
    )

    def __init__(
        self,
        request: Any,
        version: int,
        correlation_id: int,
        callback: Callback,
        deadline: float,
    ) -> None:
        self.request = request
        self.api_key: int = request.API_KEY
        self.version = version
        self.correlation_id = correlation_id
        self.callback = callback
        self.deadline = deadline
        self.finished = False

    def finish(self, response: Any, error: BaseException | None) -> None:
        """Deliver the outcome, once: a request may be reachable from more than one path."""
        if self.finished:
            return
        self.finished = True
        _safe_callback(self.callback, response, error)


class BrokerConnection:
    """A pipelined connection to one broker.

    ``versions`` holds the negotiated API versions once :meth:`open` returns.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int,
        client_id: str,
        request_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Callable[[BrokerConnection], Any] | None = None,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout
        #: Responses announcing more bytes than this close the connection unread.
        self.max_response_size = max_response_size
        self._ssl_context = ssl_context
        self._authenticator = authenticator
        self.versions: dict[ApiKey, int] = {}
        #: Feature name -> (min, max) finalized level, from the ApiVersions handshake (e.g.
        #: ``transaction.version``); empty if the broker reports none.
        self.finalized_features: dict[str, tuple[int, int]] = {}
        self._stream: anyio.abc.ByteStream | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        # Requests accepted but not yet written: (pending entry, prebuilt frame or None).
        self._outbox: collections.deque[tuple[_Pending, bytes | None, bool]] = collections.deque()
        self._outbox_ready = anyio.Event()
        # Requests submitted during a re-authentication; they join the outbox after it.
        # Written by submit() and the re-authentication task only.
        self._held: collections.deque[tuple[_Pending, bytes | None, bool]] = collections.deque()
        self._holding = False
        #: Completed re-authentications on this connection (KIP-368).
        self.reauthentications = 0
        self._tasks: anyio.abc.TaskGroup | None = None
        self._correlation = 0
        self._scope: anyio.CancelScope | None = None
        self.closed = False
        self.close_reason: BaseException | None = None
        self.last_used = time.monotonic()
        # True once open() finished: TLS, ApiVersions and SASL all succeeded.
        self._established = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port} {state}>"

    def _closing(self) -> bool:
        # A call, not an attribute read, so type narrowing does not assume it cannot
        # change while the task is suspended.
        return self.closed

    @property
    def in_flight(self) -> int:
        """Requests written or queued that still await a response."""
        return len(self._pending) + len(self._outbox) + len(self._held)

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self, task_group: anyio.abc.TaskGroup, timeout: float) -> None:
        """Connect, start the reader/writer tasks, negotiate API versions (and authenticate)."""
        try:
            with anyio.fail_after(timeout):
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(self.host, self.port)
                if self._ssl_context is not None:
                    stream = await TLSStream.wrap(
                        stream,
                        hostname=self.host,
                        ssl_context=self._ssl_context,
                        standard_compatible=False,
                    )
        except TimeoutError:
            raise ConnectionError(
                f"timed out connecting to {self.host}:{self.port} (node {self.node_id})"
            ) from None
        except ssl.SSLError as exc:
            # A certificate the client does not trust, a name mismatch, or an alert from
            # the broker: retrying cannot help, so it is fatal like a rejected password.
            raise AuthenticationError(
                f"TLS handshake with {self.host}:{self.port} failed: {exc}"
            ) from None
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            # The peer hung up mid-handshake: a broker going away, or a listener that does
            # not speak TLS (it reads the ClientHello as an oversized request and closes).
            raise ConnectionError(
                f"{self.host}:{self.port} (node {self.node_id}) closed the connection during "
                "the TLS handshake (is it a TLS listener?)"
            ) from None
        except OSError as exc:
            raise ConnectionError(
                f"cannot connect to {self.host}:{self.port} (node {self.node_id}): {exc}"
            ) from None
        self._stream = stream
        ready = anyio.Event()
        task_group.start_soon(self._run, ready)
        await ready.wait()
        try:
            with anyio.fail_after(timeout):
                await self._handshake()
                if self._authenticator is not None:
                    began = time.monotonic()
                    lifetime_ms = await self._authenticator(self)
                    if isinstance(lifetime_ms, int) and lifetime_ms > 0 and self._tasks:
                        self._tasks.start_soon(
                            self._reauthenticate_periodically, began, lifetime_ms
                        )
            self._established = True
        except TimeoutError:
            # Accepted the TCP connection but never answered: a hung broker.
            error = ConnectionError(
                f"node {self.node_id} ({self.host}:{self.port}) did not answer the "
                f"handshake within {timeout * 1000:.0f} ms"
            )
            await self.aclose(error)
            raise error from None
        except BaseException:
            await self.aclose()
            raise

    async def _handshake(self) -> None:
        # Ask with the newest version we know; an older broker answers UNSUPPORTED_VERSION
        # in a v0 body listing what it does support, and we retry with v0.
        response: ApiVersionsResponse = await self.request(ApiVersionsRequest(), 3)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            response = await self.request(ApiVersionsRequest(), 0)
        if response.error_code:
            from .errors import error_for_code

            raise error_for_code(response.error_code, "ApiVersions handshake failed")
        self.versions = negotiate_versions(response.api_keys)
        self.finalized_features = dict(response.finalized_features)

    async def _run(self, ready: anyio.Event) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            ready.set()
            try:
                async with anyio.create_task_group() as tg:
                    self._tasks = tg
                    tg.start_soon(self._writer)
                    tg.start_soon(self._watchdog)
                    await self._reader()
            except BaseException as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    self._shutdown(self.close_reason or ConnectionError("connection closed"))
                    raise
                self._shutdown(_as_connection_error(exc, self))
        self._shutdown(self.close_reason or ConnectionError("connection closed"))

    async def aclose(self, reason: BaseException | None = None) -> None:
        """Close the connection; everything in flight fails with ``reason``."""
        self._shutdown(reason or ConnectionError(f"connection to node {self.node_id} closed"))
        stream = self._stream
        if stream is not None:
            self._stream = None
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await stream.aclose()

    def close_nowait(self, reason: BaseException) -> None:
        """Close without awaiting (tasks are cancelled; the socket closes as they unwind)."""
        self._shutdown(reason)

    def _shutdown(self, reason: BaseException) -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            log.debug("closing %r: %s", self, reason)
        if self._scope is not None:
            self._scope.cancel()
        # Emptied in place: the reader and writer hold these same deques, and may run a
        # little longer before their cancellation lands.
        pending = list(self._pending)
        self._pending.clear()
        outbox = list(self._outbox) + list(self._held)
        self._outbox.clear()
        self._held.clear()
        for entry in pending:
            entry.finish(None, self.close_reason)
        for entry, _frame, _expect in outbox:
            entry.finish(None, self.close_reason)

    # -- requests --------------------------------------------------------------------------

    def submit(
        self,
        request: Any,
        version: int,
        callback: Callback,
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Queue ``request`` to be written in order; ``callback`` runs on its outcome.

        Never blocks. With ``expect_response=False`` (produce with acks=0) the callback runs
        with ``(None, None)`` once the request is written.
        """
        if self.closed:
            _safe_callback(callback, None, self.close_reason)
            return
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        deadline = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        entry = _Pending(request, version, self._correlation, callback, deadline)
        if self._holding and _reauthenticating.get() is not self:
            self._held.append((entry, None, expect_response))
        else:
            self._outbox.append((entry, None, expect_response))
            self._outbox_ready.set()
        self.last_used = time.monotonic()

    async def request(self, request: Any, version: int | None = None) -> Any:
        """Send ``request`` and wait for its response (for control-plane requests)."""
        if version is None:
            version = self.versions[request.API_KEY]
        done = anyio.Event()
        outcome: list[Any] = [None, None]

        def on_done(response: Any, error: BaseException | None) -> None:
            outcome[0] = response
            outcome[1] = error
            done.set()

        self.submit(request, version, on_done)
        await done.wait()
        if outcome[1] is not None:
            raise outcome[1]
        return outcome[0]

    async def _reauthenticate_periodically(self, began: float, lifetime_ms: int) -> None:
        """Re-authenticate before each granted session ends (KIP-368), until one is
        granted without a lifetime or the connection closes."""
        assert self._authenticator is not None
        _reauthenticating.set(self)
        while lifetime_ms > 0 and not self._closing():
            # Measured from when the previous exchange began, not ended: the broker's clock
            # started somewhere in between.
            due = began + lifetime_ms / 1000 * random.uniform(*_REAUTH_WINDOW)
            await anyio.sleep(max(0.0, due - time.monotonic()))
            if self._closing():
                return
            began = time.monotonic()
            self._holding = True
            try:
                with anyio.fail_after(self.request_timeout):
                    lifetime = await self._authenticator(self)
            except Exception as exc:
                # Retriable for what was in flight: the new connection those requests move
                # to authenticates from scratch and reports a real rejection itself.
                reason = "timed out" if isinstance(exc, TimeoutError) else str(exc)
                self._shutdown(
                    ConnectionError(
                        f"re-authentication with node {self.node_id} "
                        f"({self.host}:{self.port}) failed: {reason}"
                    )
                )
                return
            finally:
                self._holding = False
                if self._held:
                    self._outbox.extend(self._held)
                    self._held.clear()
                    self._outbox_ready.set()
            lifetime_ms = lifetime if isinstance(lifetime, int) else 0
            self.reauthentications += 1
            log.debug(
                "re-authenticated %r in %.0f ms (session lifetime %d ms)",
                self,
                (time.monotonic() - began) * 1000,
                lifetime_ms,
            )

    async def _writer(self) -> None:
        stream = self._stream
        assert stream is not None
        outbox = self._outbox
        while not self._closing():
            if not outbox:
                self._outbox_ready = anyio.Event()
                await self._outbox_ready.wait()
                continue
            entry, frame, expect_response = outbox.popleft()
            if expect_response:
                # Tracked before anything can fail or suspend, so a connection that dies
                # from here on still completes this request.
                self._pending.append(entry)
            try:
                if frame is None:
                    frame = await _encode(entry, self.client_id)
            except Exception as exc:
                if expect_response and entry in self._pending:
                    self._pending.remove(entry)
                entry.finish(None, exc)
                continue
            if self._closing():
                return
            await stream.send(frame)
            if not expect_response:
                entry.finish(None, None)

    async def _watchdog(self) -> None:
        # Fails the connection when its oldest request has had no answer within its
        # timeout. Kafka answers in order, so only the oldest needs watching; it sleeps
        # until that one's deadline, or a whole request timeout while nothing is pending
        # (a request submitted meanwhile with a shorter timeout is noticed at the next
        # check, as it was when the reader checked between receives).
        pending = self._pending
        while not self._closing():
            if pending:
                head = pending[0]
                wait = head.deadline - time.monotonic()
                if wait <= 0:
                    raise RequestTimedOutError(
                        f"no response from node {self.node_id} within "
                        f"{self.request_timeout * 1000:.0f} ms (api {head.api_key})"
                    )
            else:
                wait = self.request_timeout
            await anyio.sleep(min(wait, self.request_timeout))

    async def _reader(self) -> None:
        stream = self._stream
        assert stream is not None
        # The size prefix is checked before anything of the frame is buffered, so a broker
        # (or anything posing as one) that announces gigabytes costs nothing but this
        # connection; below the limit the buffer grows only as bytes really arrive.
        deframer = framing.FrameReader(max_frame_size=self.max_response_size)
        while not self._closing():
            # No timeout here: the watchdog fails the connection when the oldest request
            # has waited too long (one timer per connection, not one per receive).
            try:
                data = await stream.receive(_RECEIVE_CHUNK)
            except ssl.SSLError as exc:
                # With TLS 1.3 the client finishes its handshake before the broker has
                # checked the client certificate; the broker's verdict (e.g. "bad
                # certificate" when mutual TLS is required) arrives as an alert on the
                # first read. Before the connection is established that is a rejection.
                if not self._established:
                    raise AuthenticationError(
                        f"{self.host}:{self.port} (node {self.node_id}) rejected the TLS "
                        f"connection: {exc.reason or exc} (does the listener require a "
                        "client certificate?)"
                    ) from None
                raise ConnectionError(
                    f"TLS error on the connection to node {self.node_id} "
                    f"({self.host}:{self.port}): {exc}"
                ) from None
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
                raise ConnectionError(
                    f"node {self.node_id} ({self.host}:{self.port}) closed the connection"
                ) from exc
            try:
                frames = deframer.feed(data)
            except ProtocolError:
                if (deframer.refused_size or 0) <= self.max_response_size:
                    raise  # a negative size: not Kafka at all
                raise ResponseTooLargeError(
                    f"node {self.node_id} ({self.host}:{self.port}) announced a response "
                    f"of {deframer.refused_size} bytes, more than receive_message_max_bytes "
                    f"({self.max_response_size}); the connection was closed unread"
                ) from None
            for frame in frames:
                if self._closing():
                    return
                self._dispatch(frame)

    def _dispatch(self, frame: bytes) -> None:
        if not self._pending:
            raise ProtocolError(f"node {self.node_id} sent a response nobody asked for")
        entry = self._pending.popleft()
        try:
            correlation_id, response = framing.decode_response(
                type(entry.request), entry.version, frame
            )
        except BaseException as exc:
            # The connection is about to close; this request must still get an outcome.
            entry.finish(None, _as_connection_error(exc, self))
            raise
        if correlation_id != entry.correlation_id:
            error = ProtocolError(
                f"node {self.node_id} answered correlation id {correlation_id}, "
                f"expected {entry.correlation_id}"
            )
            # Already taken off the pending queue, so closing the connection would not
            # reach it: without this its caller would wait forever.
            entry.finish(None, error)
            raise error
        entry.finish(response, None)


async def _encode(entry: _Pending, client_id: str) -> bytes:
    # Produce requests may carry batches that still need building/compressing.
    prepare = getattr(entry.request, "prepare", None)
    if prepare is not None:
        await prepare()
    return framing.encode_request(entry.request, entry.version, entry.correlation_id, client_id)


def _safe_callback(callback: Callback, response: Any, error: BaseException | None) -> None:
    try:
        callback(response, error)
    except Exception:
        log.exception("error in a request completion callback")


def _as_connection_error(exc: BaseException, conn: BrokerConnection) -> BaseException:
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _as_connection_error(inner, conn)
    return ConnectionError(f"connection to node {conn.node_id} failed: {exc!r}")
