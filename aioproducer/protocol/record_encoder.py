"""One v2 record's encoding (and a run of them), appended to a batch's buffer.

:class:`~aioproducer.protocol.records.RecordBatchBuilder` owns a batch's bytes and
counters; the per-record work of its ``append`` and ``append_many`` is here, in a module
of its own so that it can be compiled with mypyc (``aioproducer/speedups.py``) while the
builder stays plain Python. The compiled and the pure-Python module write the same bytes.

Layout of a record (all varints zig-zag): length, attributes (0), timestamp delta, offset
delta, key length and key, value length and value, header count and headers.

Everything here is pure computation on bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

from aioproducer._mypyc import mypyc_attr
from aioproducer.errors import SerializationError

__all__ = [
    "ATTRS",
    "ATTRS_DELTA",
    "EMPTY_HEADERS",
    "INT64_MAX",
    "INT64_MIN",
    "NULL",
    "TABLE_LIMIT",
    "ZZ",
    "ZZ_LEN",
    "BatchState",
    "append_record",
    "append_stamped",
    "as_bytes_like",
    "encode_headers",
    "encode_record",
    "encode_records",
    "stamp",
    "timestamp_delta",
    "zigzag",
]

Header = tuple[str, bytes | None]
BytesLike = bytes | bytearray | memoryview


@mypyc_attr(allow_interpreted_subclasses=True)
class BatchState:
    """What :func:`append_record` reads and updates of a batch: its encoded records and
    their count and timestamps.

    ``RecordBatchBuilder`` subclasses it and sets every field in its constructor.
    Compiled, the fields are read and written in place, not looked up by name per record.
    """

    __slots__ = ("_base_ts", "_buf", "_max_ts", "count")

    _buf: bytearray
    #: Package-internal: how many records the batch holds (the accumulator reads it as
    #: a field, compiled, rather than through the builder's ``record_count`` property).
    count: int
    _base_ts: int
    _max_ts: int


#: The int64 range of timestamps and their deltas.
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
# Timestamps within this bound need no int64 check (and are machine-size ints compiled).
_SAFE_TS: Final = (1 << 62) - 1


def zigzag(value: int) -> bytes:
    """Encode ``value`` as a zig-zag LEB128 varlong (also correct for varints)."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


#: Varints up to this value (exclusive) are looked up in :data:`ZZ`.
TABLE_LIMIT: Final = 16384
#: Encodings of -1..16383, looked up as ``ZZ[n + 1]``: every length, offset delta, header
#: count and timestamp delta of an ordinary record is in this range, and a tuple lookup is
#: far cheaper than running the LEB128 loop for each field of each record.
ZZ: Final[tuple[bytes, ...]] = tuple(zigzag(n) for n in range(-1, TABLE_LIMIT))
#: ``len(ZZ[i])``: sizes are looked up rather than measured.
ZZ_LEN: Final[tuple[int, ...]] = tuple(map(len, ZZ))
#: The length of a null key or value (-1).
NULL: Final = ZZ[0]
#: The header count of a record without headers (0).
EMPTY_HEADERS: Final = ZZ[1]
#: A record's attributes byte: always 0 in v2.
ATTRS: Final = b"\x00"
# Timestamp deltas below this (one byte each) have their piece in ATTRS_DELTA.
_ATTRS_DELTA_LIMIT: Final = 64
#: ``ATTRS`` followed by the encoded timestamp delta, for deltas 0..63: a record's second
#: and third bytes as one piece (each piece of a record costs a little to join).
ATTRS_DELTA: Final[tuple[bytes, ...]] = tuple(ATTRS + ZZ[d + 1] for d in range(_ATTRS_DELTA_LIMIT))


def as_bytes_like(obj: object, what: str) -> BytesLike:
    """Return ``obj`` as an object that ``bytearray +=`` copies and ``len`` measures in bytes."""
    if isinstance(obj, (bytes, bytearray)):
        return obj
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        raise SerializationError(
            f"record {what} must be bytes-like or None, got {type(obj).__name__}"
        ) from None
    if view.format != "B" or view.ndim != 1:
        try:
            view = view.cast("B")
        except TypeError as exc:
            raise SerializationError(f"record {what} buffer cannot be read: {exc}") from None
    return view


def encode_headers(headers: Sequence[Any]) -> bytearray:
    """Encode a non-empty header list of ``(str, bytes-like | None)`` pairs, count included.

    Raises :class:`~aioproducer.errors.SerializationError` naming what was wrong.
    """
    # Items typed Any: compiled, a typed item would be checked with a bare TypeError.
    count = len(headers)
    out = bytearray(ZZ[count + 1] if count < TABLE_LIMIT else zigzag(count))
    for item in headers:
        try:
            hkey, hvalue = item
        except (TypeError, ValueError):
            raise SerializationError(
                f"a header must be a (str, bytes | None) pair, got {item!r}"
            ) from None
        if not isinstance(hkey, str):
            raise SerializationError(f"header keys must be str, got {type(hkey).__name__}")
        try:
            key_bytes = hkey.encode()
        except UnicodeEncodeError as exc:
            raise SerializationError(f"header key {hkey!r} is not valid UTF-8: {exc}") from None
        size = len(key_bytes)
        out += ZZ[size + 1] if size < TABLE_LIMIT else zigzag(size)
        out += key_bytes
        if hvalue is None:
            out += NULL
            continue
        data: BytesLike = hvalue if type(hvalue) is bytes else as_bytes_like(hvalue, "header value")
        size = len(data)
        out += ZZ[size + 1] if size < TABLE_LIMIT else zigzag(size)
        out += data
    return out


def timestamp_delta(timestamp_ms: object, base_ts: int, count: int) -> bytes:
    """The encoded delta of ``timestamp_ms`` from the batch's ``base_ts`` (0 for the first
    record, ``count`` 0), both checked to be int64 (``TypeError`` for a timestamp that is
    not an int, else ``ValueError``)."""
    if not isinstance(timestamp_ms, int):
        raise TypeError(f"timestamp must be an int, got {type(timestamp_ms).__name__}")
    if not count:
        if not INT64_MIN <= timestamp_ms <= INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} does not fit in int64")
        return ZZ[1]  # the first record is the base: delta 0
    delta = timestamp_ms - base_ts
    if not INT64_MIN <= timestamp_ms <= INT64_MAX or not INT64_MIN <= delta <= INT64_MAX:
        raise ValueError(
            f"timestamp {timestamp_ms} is out of range for this batch (base timestamp {base_ts})"
        )
    return zigzag(delta)


def encode_record(
    buf: bytearray,
    count: int,
    base_ts: int,
    timestamp_ms: object,
    key: object,
    value: object,
    headers: Sequence[Header],
) -> int:
    """Append record number ``count`` of a batch whose base timestamp is ``base_ts`` (the
    record's own timestamp becomes it if ``count`` is 0) to ``buf``; return its encoded
    size in bytes.

    The reference encoding of a record (:func:`encode_records` repeats it inline). Everything is checked and computed before the first byte is
    written: invalid input raises (``SerializationError``, ``TypeError``, ``ValueError``)
    and leaves ``buf`` unchanged.
    """
    # Arguments straight from callers are typed object: compiled, a typed parameter would
    # raise a bare TypeError on entry instead of the errors below.
    if isinstance(timestamp_ms, int):
        head = stamp(timestamp_ms, base_ts, count)
    else:
        head = ATTRS + timestamp_delta(timestamp_ms, base_ts, count)  # raises TypeError
    return _encode_stamped(buf, count, head, key, value, headers)


def stamp(timestamp_ms: int, base_ts: int, count: int) -> bytes:
    """A record's attributes byte and its encoded timestamp delta (:func:`timestamp_delta`),
    for a timestamp known to be an int: one piece, from a table for an ordinary delta."""
    if -_SAFE_TS <= timestamp_ms <= _SAFE_TS:
        delta = timestamp_ms - base_ts if count else 0
        if 0 <= delta < _ATTRS_DELTA_LIMIT:
            return ATTRS_DELTA[delta]
        return ATTRS + (ZZ[delta + 1] if 0 <= delta < TABLE_LIMIT else zigzag(delta))
    return ATTRS + timestamp_delta(timestamp_ms, base_ts, count)


def _encode_stamped(
    buf: bytearray,
    count: int,
    head: bytes,
    key: object,
    value: object,
    headers: Sequence[Header],
) -> int:
    # encode_record() once the attributes and timestamp delta are encoded (``head``, from
    # stamp()). Sizes of table varints are looked up (ZZ_LEN) rather than measured: this
    # runs once per record.
    zz = ZZ
    zl = ZZ_LEN
    size = len(head)
    if count < TABLE_LIMIT:
        offset_part = zz[count + 1]
        size += zl[count + 1]
    else:
        offset_part = zigzag(count)
        size += len(offset_part)

    key_data: BytesLike = b""
    if key is None:
        key_len = 0
        key_part = NULL
        size += 1
    else:
        key_data = key if type(key) is bytes else as_bytes_like(key, "key")
        key_len = len(key_data)
        if key_len < TABLE_LIMIT:
            key_part = zz[key_len + 1]
            size += zl[key_len + 1] + key_len
        else:
            key_part = zigzag(key_len)
            size += len(key_part) + key_len

    value_data: BytesLike = b""
    if value is None:
        value_len = 0
        value_part = NULL
        size += 1
    else:
        value_data = value if type(value) is bytes else as_bytes_like(value, "value")
        value_len = len(value_data)
        if value_len < TABLE_LIMIT:
            value_part = zz[value_len + 1]
            size += zl[value_len + 1] + value_len
        else:
            value_part = zigzag(value_len)
            size += len(value_part) + value_len

    if headers:
        header_part: bytes | bytearray = encode_headers(headers)
        size += len(header_part)
    else:
        header_part = EMPTY_HEADERS
        size += 1

    if size < TABLE_LIMIT:
        length_part = zz[size + 1]
        encoded = size + zl[size + 1]
    else:
        length_part = zigzag(size)
        encoded = size + len(length_part)
    # One join and one append: cheaper than appending the pieces one by one, in Python
    # and compiled alike; each piece costs, so a null key adds none of its own (its -1
    # length is key_part), nor does a null value's empty data matter enough to branch on.
    if key is None:
        buf += b"".join((length_part, head, offset_part, NULL, value_part, value_data, header_part))
    else:
        buf += b"".join(
            (
                length_part,
                head,
                offset_part,
                key_part,
                key_data,
                value_part,
                value_data,
                header_part,
            )
        )
    return encoded


def _counted(builder: BatchState, count: int, ts: int) -> None:
    # Record ``count`` of timestamp ``ts`` is in the batch: its count and timestamps.
    if count == 0:
        builder._base_ts = ts
        builder._max_ts = ts
    elif ts > builder._max_ts:
        builder._max_ts = ts
    builder.count = count + 1


def append_record(
    builder: BatchState,
    timestamp_ms: object,
    key: object,
    value: object,
    headers: Sequence[Header],
) -> int:
    """``RecordBatchBuilder.append``: encode a record at the end of ``builder``'s batch,
    update its count and timestamps, and return the record's encoded size.

    The builder's method delegates here. Invalid input raises like :func:`encode_record`
    and leaves the builder unchanged.
    """
    count = builder.count
    encoded = encode_record(
        builder._buf, count, builder._base_ts, timestamp_ms, key, value, headers
    )
    # encode_record accepted it: an int.
    _counted(builder, count, cast(int, timestamp_ms))
    return encoded


def append_stamped(
    builder: BatchState,
    timestamp_ms: int,
    key: object,
    value: object,
    headers: Sequence[Header],
) -> int:
    """:func:`append_record` for a timestamp already known to be an int (the intake checked
    it), as the (compiled) accumulator calls it: one call per record, and the timestamp
    stays a machine integer. Same bytes, same errors."""
    count = builder.count
    head = stamp(timestamp_ms, builder._base_ts, count)
    encoded = _encode_stamped(builder._buf, count, head, key, value, headers)
    _counted(builder, count, timestamp_ms)
    return encoded


# No limit on a run's size: a machine-size int, so that compiled code compares it cheaply.
_NO_LIMIT: Final = (1 << 62) - 1


def encode_records(
    prefix: bytes,
    count: int,
    size: int,
    max_bytes: int | None,
    keys: Sequence[Any] | None,
    values: Sequence[Any],
    headers: Sequence[Any] | None,
    start: int,
    stop: int,
) -> tuple[list[Any], int, int, BaseException | None]:
    """``RecordBatchBuilder.append_many``'s loop: encode ``values[start:stop]`` (with their
    keys and headers) as records ``count``, ``count + 1``, ... of a batch of ``size`` bytes,
    each starting with ``prefix`` (attributes and timestamp delta, the same for the run).

    Stops before the first record that would take the batch past ``max_bytes`` (unless it
    would be the batch's first) and at the first invalid record. Returns the pieces to
    join (nothing is written), the batch's count and size after them, and that record's
    error (or None). The bytes are exactly :func:`encode_record`'s.
    """
    # Items typed Any: compiled, a typed item would be checked with a bare TypeError.
    limit = max_bytes if max_bytes is not None else _NO_LIMIT
    fixed = len(prefix)
    pieces: list[Any] = []
    put = pieces.extend
    zl = ZZ_LEN
    zz = ZZ
    table = TABLE_LIMIT
    error: BaseException | None = None
    try:
        for i in range(start, stop):
            key = keys[i] if keys is not None else None
            value = values[i]
            # Deliberate copy of encode_record's encoding, inline for speed (a call per
            # record would cost more than the encoding); a hypothesis test keeps them
            # byte-identical.
            if type(key) is bytes:
                key_len = len(key)
                key_part = zz[key_len + 1] if key_len < table else zigzag(key_len)
            elif key is None:
                key_len = 0
                key_part = NULL
            else:
                key = as_bytes_like(key, "key")
                key_len = len(key)
                key_part = zz[key_len + 1] if key_len < table else zigzag(key_len)
            if type(value) is bytes:
                value_len = len(value)
                value_part = zz[value_len + 1] if value_len < table else zigzag(value_len)
            elif value is None:
                value_len = 0
                value_part = NULL
            else:
                value = as_bytes_like(value, "value")
                value_len = len(value)
                value_part = zz[value_len + 1] if value_len < table else zigzag(value_len)
            if headers is not None:
                hdrs = headers[i]
                header_part: bytes | bytearray = encode_headers(hdrs) if hdrs else EMPTY_HEADERS
                header_len = len(header_part)
            else:
                header_part = EMPTY_HEADERS
                header_len = 1
            if count < table:
                offset_part = zz[count + 1]
                body = fixed + zl[count + 1]
            else:
                offset_part = zigzag(count)
                body = fixed + len(offset_part)
            body += len(key_part) + key_len + len(value_part) + value_len + header_len
            length_part = zz[body + 1] if body < table else zigzag(body)
            total = body + len(length_part)
            if size + total > limit and count:
                break
            size += total
            count += 1
            # One call per record; None key/value contribute no bytes (their -1 length is
            # in key_part/value_part).
            put(
                (
                    length_part,
                    prefix,
                    offset_part,
                    key_part,
                    key if key_len else b"",
                    value_part,
                    value if value_len else b"",
                    header_part,
                )
            )
    except (SerializationError, TypeError, ValueError) as exc:
        error = exc
    return pieces, count, size, error
