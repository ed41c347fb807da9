"""A small blocking admin client on plain sockets, for :class:`KafkaCluster`.

It runs no event loop, so it works from synchronous code and from inside a running asyncio
or trio test alike. Each call opens a short-lived connection, negotiates API versions with
ApiVersions and sends one request; the encoding is the producer's own sans-IO protocol core.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..errors import ConnectionError as KafkaConnectionError
from ..errors import (
    KafkaError,
    ProtocolError,
    TopicAlreadyExistsError,
    error_for_code,
)
from ..protocol import framing
from ..protocol.error_codes import ErrorCode
from ..protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    Request,
    Response,
    TopicMetadata,
)
from ..protocol.versions import CLIENT_VERSIONS, CODEC_VERSIONS, ApiKey, negotiate_versions

__all__ = [
    "AdminConnection",
    "MetadataResponse",
    "cluster_view",
    "create_topic",
    "fetch_metadata",
    "list_offsets_errors",
    "raise_for_topic",
]

_CLIENT_ID = "aioproducer-testing"
_UNAVAILABLE = frozenset(
    {ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE}
)
_RespT = TypeVar("_RespT", bound=Response)


class AdminConnection:
    """One blocking connection to a broker, with API versions negotiated on connect.

    Every operation, including connecting, shares the deadline ``timeout`` seconds from
    construction. Socket failures raise :class:`aioproducer.errors.ConnectionError`,
    undecodable responses :class:`aioproducer.errors.ProtocolError`.
    """

    def __init__(self, host: str, port: int, *, timeout: float) -> None:
        self._address = (host, port)
        self._deadline = time.monotonic() + timeout
        self._correlation = framing.CorrelationIds()
        self._frames = framing.FrameReader()
        self._pending: list[bytes] = []
        try:
            self._sock = socket.create_connection(self._address, timeout=self._remaining())
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.versions = self._negotiate()
        except BaseException:
            self._sock.close()
            raise

    def __enter__(self) -> AdminConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise KafkaConnectionError(f"timed out talking to {self._peer()}")
        return left

    def _peer(self) -> str:
        return f"{self._address[0]}:{self._address[1]}"

    def _negotiate(self) -> dict[ApiKey, int]:
        version = CLIENT_VERSIONS[ApiKey.API_VERSIONS][1]
        response = self._exchange(ApiVersionsRequest(), ApiVersionsResponse, version)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The broker answered with its own ApiVersions range; retry inside it.
            low, high = response.api_keys.get(int(ApiKey.API_VERSIONS), (0, 0))
            version = max(low, min(high, version))
            response = self._exchange(ApiVersionsRequest(), ApiVersionsResponse, version)
        if response.error_code:
            raise error_for_code(response.error_code, f"ApiVersions from {self._peer()}")
        #: The broker's own version range of each API (for those a producer never sends).
        self.broker_ranges: dict[int, tuple[int, int]] = dict(response.api_keys)
        return negotiate_versions(response.api_keys)

    def send(self, request: Request[_RespT]) -> _RespT:
        """Send ``request`` at the negotiated version and return the broker's response.

        An API a producer never sends (ListOffsets) is not among the negotiated ones: it
        goes at the newest version this package's codec and the broker share.
        """
        api_key = request.API_KEY
        version = self.versions.get(api_key)
        if version is None:
            codec = CODEC_VERSIONS.get(api_key)
            broker = self.broker_ranges.get(int(api_key))
            if codec is None or broker is None:
                raise KafkaError(f"{self._peer()} does not support {api_key.name}")
            version = min(codec[1], broker[1])
            if version < max(codec[0], broker[0]):
                raise KafkaError(f"{self._peer()} has no {api_key.name} version in common")
        response_type: Any = request.RESPONSE
        result: _RespT = self._exchange(request, response_type, version)
        return result

    def _exchange(self, request: Request[Any], response_type: type[_RespT], version: int) -> _RespT:
        correlation_id = self._correlation.next()
        frame = framing.encode_request(request, version, correlation_id, _CLIENT_ID)
        try:
            self._sock.settimeout(self._remaining())
            self._sock.sendall(frame)
            while True:
                payload = self._next_frame()
                got, response = framing.decode_response(response_type, version, payload)
                if got == correlation_id:
                    return response
        except OSError as exc:
            raise KafkaConnectionError(f"connection to {self._peer()} failed: {exc}") from exc

    def _next_frame(self) -> bytes:
        while not self._pending:
            self._sock.settimeout(self._remaining())
            data = self._sock.recv(65536)
            if not data:
                raise KafkaConnectionError(f"{self._peer()} closed the connection")
            self._pending.extend(self._frames.feed(data))
        return self._pending.pop(0)


def fetch_metadata(
    host: str, port: int, topics: Sequence[str] | None = None, *, timeout: float
) -> MetadataResponse:
    """Metadata for ``topics`` (every topic if None) from one broker; never auto-creates."""
    with AdminConnection(host, port, timeout=timeout) as conn:
        request = MetadataRequest(
            None if topics is None else list(topics), allow_auto_topic_creation=False
        )
        return conn.send(request)


def list_offsets_errors(
    host: str, port: int, topic: str, partitions: Sequence[int], *, timeout: float
) -> dict[int, int]:
    """The error code of ListOffsets (latest offset) for each of ``topic``'s
    ``partitions`` on this broker: ``NONE`` where it leads the partition and serves it."""
    request = ListOffsetsRequest(
        topics=[(topic, [ListOffsetsPartition(p, -1) for p in partitions])]
    )
    with AdminConnection(host, port, timeout=timeout) as conn:
        response: ListOffsetsResponse = conn.send(request)
    out = {p: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions}
    for entry in response.topics:
        if entry.name == topic:
            for part in entry.partitions:
                out[part.partition_index] = part.error_code
    return out


def cluster_view(host: str, port: int, *, timeout: float) -> tuple[frozenset[int], int] | None:
    """The broker ids and the controller id one broker reports, or None if it cannot answer."""
    try:
        response = fetch_metadata(host, port, [], timeout=timeout)
    except (KafkaError, OSError):
        return None
    return frozenset(b.node_id for b in response.brokers), response.controller_id


def raise_for_topic(entry: TopicMetadata) -> None:
    """Raise the broker's error for a topic entry of a Metadata response, if it has one."""
    if entry.error_code:
        raise error_for_code(entry.error_code, f"topic {entry.name!r}")
    for partition in entry.partitions:
        # LEADER_NOT_AVAILABLE and REPLICA_NOT_AVAILABLE describe a broker being down, which
        # the leader id (-1) and replica lists already show; callers expect to see that.
        if partition.error_code not in _UNAVAILABLE:
            raise error_for_code(
                partition.error_code, f"topic {entry.name!r} partition {partition.partition}"
            )


def create_topic(
    host: str,
    port: int,
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
    *,
    timeout: float,
    already_attempted: bool = False,
) -> None:
    """Create one topic through a broker (which forwards to the active controller).

    Raises the broker's error as an :mod:`aioproducer.errors` exception. With
    ``already_attempted`` (a retry after a timeout) TOPIC_ALREADY_EXISTS counts as success,
    since the earlier attempt may have gone through.
    """
    request = CreateTopicsRequest(
        [CreatableTopic(name, partitions, replication_factor, configs=dict(config))],
        timeout_ms=max(1, int(timeout * 1000)),
    )
    with AdminConnection(host, port, timeout=timeout + 5.0) as conn:
        response: CreateTopicsResponse = conn.send(request)
    for result in response.topics:
        if result.name != name or not result.error_code:
            continue
        error = error_for_code(result.error_code, result.error_message or f"topic {name!r}")
        if isinstance(error, TopicAlreadyExistsError) and already_attempted:
            return
        raise error
    if not any(result.name == name for result in response.topics):
        raise ProtocolError(f"CreateTopics response does not mention {name!r}")
