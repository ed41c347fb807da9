"""Kafka frames and headers: size-prefixed frames, request and response headers.

A frame on the wire is an int32 big-endian size followed by that many bytes. A request frame
holds request header v1 (``api_key``, ``api_version``, ``correlation_id``, nullable int16
``client_id``) or, for flexible versions, v2 (the same plus a tagged-field section; the client
id stays an int16-length string). A response frame holds response header v0
(``correlation_id``) or, for flexible versions, v1 (plus tagged fields); ApiVersions responses
always use v0 so that a client can read them before knowing the broker's versions.

Everything here is sans-IO: bytes in, objects out, and back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from aioproducer.errors import ProtocolError, UnsupportedVersionError
from aioproducer.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES, Request, Response
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import CODEC_VERSIONS, ApiKey, is_flexible

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "CorrelationIds",
    "FrameReader",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "peek_correlation_id",
    "peek_request_header",
]

#: Default largest frame :class:`FrameReader` accepts (100 MiB, like Kafka's socket limit).
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

_RespT = TypeVar("_RespT", bound=Response)

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The header of a request frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _check_version(api_key: ApiKey, version: int) -> None:
    low, high = CODEC_VERSIONS[api_key]
    if not low <= version <= high:
        raise UnsupportedVersionError(
            f"{api_key.name} version {version} is not implemented (supported: {low}-{high})"
        )


def _response_header_is_flexible(api_key: ApiKey, version: int) -> bool:
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, version)


def encode_request(
    request: Request[Any], version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Encode ``request`` as a complete frame, including the 4-byte size prefix.

    Raises :class:`UnsupportedVersionError` if ``version`` is outside what the client
    implements for this API.
    """
    api_key = request.API_KEY
    _check_version(api_key, version)
    w = Writer()
    w.raw(_REQUEST_HEADER.pack(api_key, version, correlation_id))
    w.nullable_string(client_id)
    if is_flexible(api_key, version):
        w.tagged_fields()
    request.encode_body(w, version)
    return w.getvalue(size_prefix=True)


def _resolve_response_type(
    kind: ApiKey | int | type[Request[Any]] | type[Response],
) -> type[Response]:
    if isinstance(kind, type):
        if issubclass(kind, Response):
            return kind
        return kind.RESPONSE
    try:
        return RESPONSE_TYPES[ApiKey(kind)]
    except (ValueError, KeyError):
        raise UnsupportedVersionError(f"no response codec for API key {kind}") from None


@overload
def decode_response(
    api_key_or_request_class: type[Request[_RespT]],
    version: int,
    frame: bytes | bytearray | memoryview,
) -> tuple[int, _RespT]: ...
@overload
def decode_response(
    api_key_or_request_class: type[_RespT], version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, _RespT]: ...
@overload
def decode_response(
    api_key_or_request_class: ApiKey | int, version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Response]: ...
def decode_response(
    api_key_or_request_class: ApiKey | int | type[Request[Any]] | type[Response],
    version: int,
    frame: bytes | bytearray | memoryview,
) -> tuple[int, Response]:
    """Decode one response frame payload (without its size prefix).

    The first argument names the API: an :class:`ApiKey`, a request class or a response class
    (the latter two give a precisely typed result). ``version`` is the version the request was
    sent with. Returns ``(correlation_id, response)``. Raises :class:`ProtocolError` if the
    bytes are malformed or not fully consumed.
    """
    response_type = _resolve_response_type(api_key_or_request_class)
    api_key = response_type.API_KEY
    _check_version(api_key, version)
    r = Reader(frame)
    correlation_id = r.int32()
    if _response_header_is_flexible(api_key, version):
        r.skip_tagged_fields()
    response = response_type.decode_body(r, version)
    r.expect_end(f"{api_key.name} v{version} response")
    return correlation_id, response


def encode_response(response: Response, version: int, correlation_id: int) -> bytes:
    """Encode ``response`` as a complete frame with its size prefix (the broker side)."""
    api_key = response.API_KEY
    _check_version(api_key, version)
    w = Writer()
    w.int32(correlation_id)
    if _response_header_is_flexible(api_key, version):
        w.tagged_fields()
    response.encode_body(w, version)
    return w.getvalue(size_prefix=True)


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """Return the correlation id at the start of a response frame payload."""
    if len(frame) < 4:
        raise ProtocolError(f"frame of {len(frame)} bytes is too short for a correlation id")
    correlation_id: int = _SIZE.unpack_from(frame, 0)[0]
    return correlation_id


def _read_request_header(r: Reader) -> RequestHeader:
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string()
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def peek_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Read the v1 part of a request header, valid for any API and version.

    A broker uses this to answer requests it cannot decode (e.g. UNSUPPORTED_VERSION).
    """
    return _read_request_header(Reader(frame))


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Request[Any]]:
    """Decode one request frame payload (without its size prefix): the broker side.

    Raises :class:`UnsupportedVersionError` for an API or version without a codec and
    :class:`ProtocolError` for malformed bytes.
    """
    r = Reader(frame)
    header = _read_request_header(r)
    try:
        api_key = ApiKey(header.api_key)
        request_type = REQUEST_TYPES[api_key]
    except (ValueError, KeyError):
        raise UnsupportedVersionError(f"no request codec for API key {header.api_key}") from None
    _check_version(api_key, header.api_version)
    if is_flexible(api_key, header.api_version):
        r.skip_tagged_fields()
    request = request_type.decode_body(r, header.api_version)
    r.expect_end(f"{api_key.name} v{header.api_version} request")
    return header, request


class FrameReader:
    """Incremental deframer: feed it received bytes, get back complete frame payloads.

    Partial frames stay buffered. Consumed bytes are dropped from the front of the buffer
    once per :meth:`feed`, which CPython does in constant time for a ``bytearray``, so many
    small feeds cost linear time overall. A size below zero or above ``max_frame_size``
    raises :class:`ProtocolError`, after which the reader stays broken.
    """

    __slots__ = ("_buf", "_error", "_max", "_need", "refused_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = max_frame_size
        self._need = -1  # payload size of the frame being assembled, -1 until its prefix arrives
        self._error: ProtocolError | None = None
        #: The size a frame announced when it was refused (None until then).
        self.refused_size: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add received bytes; return the payloads of every frame now complete, in order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        need = self._need
        with memoryview(buf) as view:
            while True:
                if need < 0:
                    if end - pos < 4:
                        break
                    need = _SIZE.unpack_from(view, pos)[0]
                    if need < 0 or need > self._max:
                        self.refused_size = need
                        self._error = ProtocolError(
                            f"frame size {need} outside 0..{self._max} (is this a Kafka listener?)"
                        )
                        raise self._error
                    pos += 4
                if end - pos < need:
                    break
                frames.append(bytes(view[pos : pos + need]))
                pos += need
                need = -1
        self._need = need
        if pos:
            del buf[:pos]
        return frames


class CorrelationIds:
    """Hands out correlation ids 0, 1, 2, ... wrapping from 2**31 - 1 back to 0."""

    __slots__ = ("_next",)

    def __init__(self, start: int = 0) -> None:
        if not 0 <= start <= _INT32_MAX:
            raise ValueError(f"correlation id must be in 0..{_INT32_MAX}: {start}")
        self._next = start

    def next(self) -> int:
        """Return the next id."""
        value = self._next
        self._next = 0 if value == _INT32_MAX else value + 1
        return value

    def __next__(self) -> int:
        return self.next()

    def __iter__(self) -> CorrelationIds:
        return self
