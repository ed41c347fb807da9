"""Kafka wire-protocol primitive types: a :class:`Writer` and a :class:`Reader`.

The encodings follow the Kafka protocol guide: big-endian fixed-width integers, unsigned
varints (LEB128), zigzag varints/varlongs, int16-length strings and int32-length bytes and
arrays, and, for flexible message versions (KIP-482), "compact" variants whose length is an
unsigned varint holding ``length + 1`` (``0`` meaning null) plus tagged-field sections.

The :class:`Reader` treats its input as hostile: every length is checked against the bytes
that remain before anything is allocated, over-long varints are rejected, and every failure
is a :class:`~aioproducer.errors.ProtocolError` (never ``IndexError`` or ``struct.error``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

from aioproducer.errors import ProtocolError

__all__ = ["Reader", "Writer", "uvarint_bytes"]

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1

# Byte strings at least this long are kept by reference and joined once at the end, so a
# large payload (a record batch) is copied exactly once into the finished message.
_BY_REFERENCE = 2048

_NULL16 = _I16.pack(-1)
_NULL32 = _I32.pack(-1)


def uvarint_bytes(value: int) -> bytes:
    """Return the unsigned-varint encoding of ``value`` (0 <= value < 2**32)."""
    if 0 <= value < 0x80:
        return bytes((value,))
    if not 0 <= value <= _UINT32_MAX:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Writer:
    """Serialises Kafka primitives into a growing buffer.

    Small values are appended to a ``bytearray``; byte strings of 2 KiB or more passed to
    :meth:`raw` (and the bytes writers) are kept by reference, so :meth:`getvalue` copies them
    exactly once; such buffers must not be modified before :meth:`getvalue`. Methods that
    have a compact (flexible-version) form take ``compact``.
    """

    __slots__ = ("_buf", "_chunks", "_size")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._chunks: list[bytes | bytearray | memoryview] = []
        self._size = 0  # bytes held in _chunks

    def __len__(self) -> int:
        return self._size + len(self._buf)

    def getvalue(self, *, size_prefix: bool = False) -> bytes:
        """Return everything written, optionally preceded by its int32 length."""
        if not self._chunks and not size_prefix:
            return bytes(self._buf)
        parts: list[bytes | bytearray | memoryview] = []
        if size_prefix:
            parts.append(_I32.pack(len(self)))
        parts.extend(self._chunks)
        parts.append(self._buf)
        return b"".join(parts)

    # -- fixed width --------------------------------------------------------------------

    def int8(self, value: int) -> None:
        """Write a signed 8-bit integer."""
        self._buf += _I8.pack(value)

    def int16(self, value: int) -> None:
        """Write a big-endian signed 16-bit integer."""
        self._buf += _I16.pack(value)

    def int32(self, value: int) -> None:
        """Write a big-endian signed 32-bit integer."""
        self._buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        """Write a big-endian signed 64-bit integer."""
        self._buf += _I64.pack(value)

    def uint32(self, value: int) -> None:
        """Write a big-endian unsigned 32-bit integer."""
        self._buf += _U32.pack(value)

    def boolean(self, value: bool) -> None:
        """Write a boolean as one byte (0 or 1)."""
        self._buf.append(1 if value else 0)

    def uuid(self, value: UUID | None) -> None:
        """Write a UUID as 16 bytes; ``None`` is written as the all-zero UUID."""
        self._buf += value.bytes if value is not None else bytes(16)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes as they are (no length); large ones are kept by reference."""
        if len(data) >= _BY_REFERENCE:
            if self._buf:
                self._chunks.append(self._buf)
                self._size += len(self._buf)
                self._buf = bytearray()
            self._chunks.append(data)
            self._size += len(data)
        else:
            self._buf += data

    def pieces(self, parts: list[bytes]) -> None:
        """Append ``parts`` as they are, in order, all kept by reference (joined once by
        :meth:`getvalue`): a message body prepared as a list in one go, say record
        batches between their small headers, without a call per piece."""
        buf = self._buf
        if buf:
            self._chunks.append(buf)
            self._size += len(buf)
            self._buf = bytearray()
        self._chunks.extend(parts)
        self._size += sum(map(len, parts))

    # -- varints ------------------------------------------------------------------------

    def uvarint(self, value: int) -> None:
        """Write an unsigned varint (LEB128) of at most 32 bits."""
        if value < 0x80:
            if value < 0:
                raise ValueError(f"unsigned varint cannot be negative: {value}")
            self._buf.append(value)
            return
        if value > _UINT32_MAX:
            raise ValueError(f"unsigned varint out of range: {value}")
        self._write_leb128(value)

    def varint(self, value: int) -> None:
        """Write a zigzag-encoded signed 32-bit varint."""
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise ValueError(f"varint out of int32 range: {value}")
        self._write_leb128(((value << 1) ^ (value >> 31)) & _UINT32_MAX)

    def varlong(self, value: int) -> None:
        """Write a zigzag-encoded signed 64-bit varint."""
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"varlong out of int64 range: {value}")
        self._write_leb128(((value << 1) ^ (value >> 63)) & _UINT64_MAX)

    def _write_leb128(self, value: int) -> None:
        buf = self._buf
        while value >= 0x80:
            buf.append((value & 0x7F) | 0x80)
            value >>= 7
        buf.append(value)

    # -- strings ------------------------------------------------------------------------

    def string(self, value: str, compact: bool = False) -> None:
        """Write a non-null string (int16 length, or compact when ``compact``)."""
        data = value.encode()
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"string too long for an int16 length: {len(data)} bytes")
            self._buf += _I16.pack(len(data))
        self._buf += data

    def nullable_string(self, value: str | None, compact: bool = False) -> None:
        """Write a string that may be null (length -1, or 0 in compact form)."""
        if value is None:
            if compact:
                self._buf.append(0)
            else:
                self._buf += _NULL16
        else:
            self.string(value, compact)

    def compact_string(self, value: str) -> None:
        """Write a non-null compact string (uvarint length + 1)."""
        self.string(value, True)

    def compact_nullable_string(self, value: str | None) -> None:
        """Write a compact string that may be null."""
        self.nullable_string(value, True)

    # -- bytes --------------------------------------------------------------------------

    def bytes_(self, value: bytes | bytearray | memoryview, compact: bool = False) -> None:
        """Write non-null bytes (int32 length, or compact when ``compact``)."""
        if compact:
            self.uvarint(len(value) + 1)
        else:
            self._buf += _I32.pack(len(value))
        self.raw(value)

    def nullable_bytes(
        self, value: bytes | bytearray | memoryview | None, compact: bool = False
    ) -> None:
        """Write bytes that may be null (length -1, or 0 in compact form)."""
        if value is None:
            if compact:
                self._buf.append(0)
            else:
                self._buf += _NULL32
        else:
            self.bytes_(value, compact)

    def compact_bytes(self, value: bytes | bytearray | memoryview) -> None:
        """Write non-null compact bytes (uvarint length + 1)."""
        self.bytes_(value, True)

    def compact_nullable_bytes(self, value: bytes | bytearray | memoryview | None) -> None:
        """Write compact bytes that may be null."""
        self.nullable_bytes(value, True)

    # -- arrays -------------------------------------------------------------------------

    def array_length(self, length: int | None, compact: bool = False) -> None:
        """Write just an array's element count (``None`` for a null array)."""
        if compact:
            self.uvarint(0 if length is None else length + 1)
        else:
            self._buf += _I32.pack(-1 if length is None else length)

    def array(
        self, items: Sequence[T], write: Callable[[T], object], compact: bool = False
    ) -> None:
        """Write a non-null array: its count, then ``write(item)`` for each item."""
        self.array_length(len(items), compact)
        for item in items:
            write(item)

    def nullable_array(
        self, items: Sequence[T] | None, write: Callable[[T], object], compact: bool = False
    ) -> None:
        """Write an array that may be null."""
        if items is None:
            self.array_length(None, compact)
        else:
            self.array(items, write, compact)

    def compact_array(self, items: Sequence[T], write: Callable[[T], object]) -> None:
        """Write a non-null compact array (uvarint count + 1)."""
        self.array(items, write, True)

    def compact_nullable_array(
        self, items: Sequence[T] | None, write: Callable[[T], object]
    ) -> None:
        """Write a compact array that may be null."""
        self.nullable_array(items, write, True)

    def int32_array(self, values: Sequence[int], compact: bool = False) -> None:
        """Write a non-null array of int32 in one step."""
        self.array_length(len(values), compact)
        self._buf += struct.pack(f">{len(values)}i", *values)

    # -- tagged fields ------------------------------------------------------------------

    def tagged_fields(
        self, fields: Mapping[int, bytes] | Iterable[tuple[int, bytes]] | None = None
    ) -> None:
        """Write a tagged-field section: count, then (tag, size, data) in ascending tag order.

        ``fields`` maps each tag to its already-encoded value; empty or ``None`` writes the
        one-byte empty section.
        """
        if not fields:
            self._buf.append(0)
            return
        pairs = sorted(fields.items() if isinstance(fields, Mapping) else fields)
        self.uvarint(len(pairs))
        for tag, data in pairs:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.raw(data)


class Reader:
    """Reads Kafka primitives from a buffer, advancing a position.

    Every failure (truncated data, impossible lengths, over-long varints, invalid UTF-8) raises
    :class:`~aioproducer.errors.ProtocolError`.
    """

    __slots__ = ("_data", "_end", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        view = data if isinstance(data, memoryview) else memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._data = view
        self._end = len(view)
        if not 0 <= pos <= self._end:
            raise ProtocolError(f"start position {pos} outside a buffer of {self._end} bytes")
        self._pos = pos

    @property
    def pos(self) -> int:
        """The offset of the next byte to read."""
        return self._pos

    @property
    def remaining(self) -> int:
        """How many bytes are left to read."""
        return self._end - self._pos

    def expect_end(self, what: str = "message") -> None:
        """Raise :class:`ProtocolError` unless every byte has been consumed."""
        if self._pos != self._end:
            raise ProtocolError(f"{self._end - self._pos} unexpected trailing bytes after {what}")

    def _truncated(self, need: int) -> ProtocolError:
        return ProtocolError(
            f"truncated data: need {need} bytes at offset {self._pos}, have {self._end - self._pos}"
        )

    # -- fixed width --------------------------------------------------------------------

    def int8(self) -> int:
        """Read a signed 8-bit integer."""
        pos = self._pos
        if pos >= self._end:
            raise self._truncated(1)
        self._pos = pos + 1
        value: int = _I8.unpack_from(self._data, pos)[0]
        return value

    def int16(self) -> int:
        """Read a big-endian signed 16-bit integer."""
        pos = self._pos
        if pos + 2 > self._end:
            raise self._truncated(2)
        self._pos = pos + 2
        value: int = _I16.unpack_from(self._data, pos)[0]
        return value

    def int32(self) -> int:
        """Read a big-endian signed 32-bit integer."""
        pos = self._pos
        if pos + 4 > self._end:
            raise self._truncated(4)
        self._pos = pos + 4
        value: int = _I32.unpack_from(self._data, pos)[0]
        return value

    def int64(self) -> int:
        """Read a big-endian signed 64-bit integer."""
        pos = self._pos
        if pos + 8 > self._end:
            raise self._truncated(8)
        self._pos = pos + 8
        value: int = _I64.unpack_from(self._data, pos)[0]
        return value

    def uint32(self) -> int:
        """Read a big-endian unsigned 32-bit integer."""
        pos = self._pos
        if pos + 4 > self._end:
            raise self._truncated(4)
        self._pos = pos + 4
        value: int = _U32.unpack_from(self._data, pos)[0]
        return value

    def boolean(self) -> bool:
        """Read a boolean byte; any non-zero value is true (as in the Java client)."""
        pos = self._pos
        if pos >= self._end:
            raise self._truncated(1)
        self._pos = pos + 1
        return self._data[pos] != 0

    def uuid(self) -> UUID:
        """Read a 16-byte UUID."""
        return UUID(bytes=self.raw(16))

    def raw(self, size: int) -> bytes:
        """Read exactly ``size`` bytes."""
        return bytes(self.view(size))

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        """Read consecutive fixed-width fields in one step with a precompiled struct."""
        pos = self._pos
        if pos + fmt.size > self._end:
            raise self._truncated(fmt.size)
        self._pos = pos + fmt.size
        return fmt.unpack_from(self._data, pos)

    def skip_if(self, expected: bytes) -> bool:
        """Skip the next bytes and return True if they are exactly ``expected``; else read
        nothing and return False. A decoder's fast path for a common run of fields (say,
        empty arrays, a null string and no tagged fields) that would otherwise be read
        one call at a time."""
        pos = self._pos
        end = pos + len(expected)
        if end <= self._end and self._data[pos:end] == expected:
            self._pos = end
            return True
        return False

    def view(self, size: int) -> memoryview:
        """Return the next ``size`` bytes as a memoryview (no copy) and skip past them."""
        pos = self._pos
        if size < 0 or pos + size > self._end:
            raise self._truncated(size)
        self._pos = pos + size
        return self._data[pos : pos + size]

    def skip(self, size: int) -> None:
        """Skip ``size`` bytes."""
        self.view(size)

    # -- varints ------------------------------------------------------------------------

    def _leb128(self, max_bytes: int) -> int:
        data = self._data
        pos = self._pos
        end = self._end
        result = 0
        shift = 0
        for i in range(max_bytes):
            if pos + i >= end:
                raise self._truncated(i + 1)
            byte = data[pos + i]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self._pos = pos + i + 1
                return result
            shift += 7
        raise ProtocolError(f"varint longer than {max_bytes} bytes at offset {pos}")

    def uvarint(self) -> int:
        """Read an unsigned varint of at most 5 bytes / 32 bits."""
        pos = self._pos
        if pos < self._end:
            byte = self._data[pos]
            if byte < 0x80:
                self._pos = pos + 1
                return byte
        value = self._leb128(5)
        if value > _UINT32_MAX:
            raise ProtocolError(f"unsigned varint overflows 32 bits at offset {pos}")
        return value

    def varint(self) -> int:
        """Read a zigzag-encoded signed 32-bit varint (at most 5 bytes)."""
        pos = self._pos
        value = self._leb128(5)
        if value > _UINT32_MAX:
            raise ProtocolError(f"varint overflows 32 bits at offset {pos}")
        return (value >> 1) ^ -(value & 1)

    def varlong(self) -> int:
        """Read a zigzag-encoded signed 64-bit varint (at most 10 bytes)."""
        pos = self._pos
        value = self._leb128(10)
        if value > _UINT64_MAX:
            raise ProtocolError(f"varlong overflows 64 bits at offset {pos}")
        return (value >> 1) ^ -(value & 1)

    # -- lengths ------------------------------------------------------------------------

    def _length(self, compact: bool, short: bool, what: str) -> int:
        """Read a length prefix; -1 means null. Checks it against the remaining bytes."""
        if compact:
            size = self.uvarint() - 1
        elif short:
            size = self.int16()
        else:
            size = self.int32()
        if size < -1:
            raise ProtocolError(f"negative {what} length {size}")
        if size > self._end - self._pos:
            raise ProtocolError(
                f"{what} length {size} exceeds the {self._end - self._pos} bytes remaining"
            )
        return size

    def _decode_str(self, size: int) -> str:
        pos = self._pos
        self._pos = pos + size
        try:
            return str(self._data[pos : pos + size], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in string at offset {pos}") from exc

    # -- strings ------------------------------------------------------------------------

    def string(self, compact: bool = False) -> str:
        """Read a non-null string (int16 length, or compact when ``compact``)."""
        size = self._length(compact, True, "string")
        if size < 0:
            raise ProtocolError("null value for a non-nullable string")
        return self._decode_str(size)

    def nullable_string(self, compact: bool = False) -> str | None:
        """Read a string that may be null."""
        size = self._length(compact, True, "string")
        if size < 0:
            return None
        return self._decode_str(size)

    def compact_string(self) -> str:
        """Read a non-null compact string."""
        return self.string(True)

    def compact_nullable_string(self) -> str | None:
        """Read a compact string that may be null."""
        return self.nullable_string(True)

    # -- bytes --------------------------------------------------------------------------

    def bytes_(self, compact: bool = False) -> bytes:
        """Read non-null bytes (int32 length, or compact when ``compact``)."""
        size = self._length(compact, False, "bytes")
        if size < 0:
            raise ProtocolError("null value for non-nullable bytes")
        return self.raw(size)

    def nullable_bytes(self, compact: bool = False) -> bytes | None:
        """Read bytes that may be null."""
        size = self._length(compact, False, "bytes")
        if size < 0:
            return None
        return self.raw(size)

    def compact_bytes(self) -> bytes:
        """Read non-null compact bytes."""
        return self.bytes_(True)

    def compact_nullable_bytes(self) -> bytes | None:
        """Read compact bytes that may be null."""
        return self.nullable_bytes(True)

    # -- arrays -------------------------------------------------------------------------

    def array_length(
        self, compact: bool = False, item_size: int = 1, *, nullable: bool = False
    ) -> int:
        """Read an array count, rejecting counts the remaining bytes cannot hold.

        ``item_size`` is the smallest possible encoded size of one element. A null array
        (returned as -1) is only accepted when ``nullable``.
        """
        count = self.uvarint() - 1 if compact else self.int32()
        if count < 0:
            if count == -1 and nullable:
                return -1
            if count == -1:
                raise ProtocolError("null value for a non-nullable array")
            raise ProtocolError(f"negative array length {count}")
        if count * item_size > self._end - self._pos:
            raise ProtocolError(
                f"array of {count} elements cannot fit in the {self._end - self._pos} bytes remaining"
            )
        return count

    def array(self, read: Callable[[], T], compact: bool = False, item_size: int = 1) -> list[T]:
        """Read a non-null array, calling ``read()`` for each element."""
        return [read() for _ in range(self.array_length(compact, item_size))]

    def nullable_array(
        self, read: Callable[[], T], compact: bool = False, item_size: int = 1
    ) -> list[T] | None:
        """Read an array that may be null."""
        count = self.array_length(compact, item_size, nullable=True)
        if count < 0:
            return None
        return [read() for _ in range(count)]

    def compact_array(self, read: Callable[[], T], item_size: int = 1) -> list[T]:
        """Read a non-null compact array."""
        return self.array(read, True, item_size)

    def compact_nullable_array(self, read: Callable[[], T], item_size: int = 1) -> list[T] | None:
        """Read a compact array that may be null."""
        return self.nullable_array(read, True, item_size)

    def int32_array(self, compact: bool = False) -> list[int]:
        """Read a non-null array of int32 in one step."""
        count = self.array_length(compact, 4)
        pos = self._pos
        self._pos = pos + 4 * count
        return list(struct.unpack_from(f">{count}i", self._data, pos))

    # -- tagged fields ------------------------------------------------------------------

    def tagged_fields(self) -> dict[int, memoryview]:
        """Read a tagged-field section, returning each tag's raw value (not copied).

        Callers decode the tags they know and ignore the rest, which is how unknown tags
        from newer brokers are skipped safely.
        """
        count = self.uvarint()
        if count == 0:
            return {}
        if count * 2 > self._end - self._pos:
            raise ProtocolError(f"{count} tagged fields cannot fit in the remaining bytes")
        fields: dict[int, memoryview] = {}
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            fields[tag] = self.view(size)
        return fields

    def skip_tagged_fields(self) -> None:
        """Read and discard a tagged-field section."""
        pos = self._pos
        if pos < self._end and self._data[pos] == 0:
            self._pos = pos + 1
            return
        self.tagged_fields()
