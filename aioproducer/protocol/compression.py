"""Record-batch compression codecs, byte-compatible with what Kafka brokers accept.

Kafka compresses the *records section* of a v2 record batch as one unit. The bytes written
here match what the Java client emits, because the broker decompresses every batch it is
sent and rejects anything its Java readers cannot parse:

* **gzip**: one standard RFC 1952 member.
* **snappy**: the *xerial* block framing of ``snappy-java`` (a 16-byte header, then for every
  32 KiB of input a big-endian ``int32`` length and one raw snappy block). The Snappy
  *framing format* (``cramjam.snappy.compress``) is not accepted by brokers.
* **lz4**: a standard LZ4 frame with *independent* blocks; Kafka's reader refuses linked
  blocks, which is what ``cramjam.lz4.compress`` would produce.
* **zstd**: a standard zstd frame.

Decompression accepts everything a broker may hand back, including a single raw snappy
block (librdkafka's snappy output) and concatenated gzip members / xerial streams, and turns
every malformed input into :class:`~aioproducer.errors.CorruptRecordError`.

Everything here is pure computation on bytes.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Callable
from typing import Any, Final

import cramjam

from aioproducer.errors import ConfigError, CorruptRecordError

__all__ = [
    "DEFAULT_LEVELS",
    "LEVEL_RANGES",
    "Codec",
    "codec_from_name",
    "compress",
    "compress_records",
    "decompress",
    "validate_level",
]

BytesLike = bytes | bytearray | memoryview


class Codec(enum.IntEnum):
    """Compression codec ids, as stored in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_BY_NAME: Final[dict[str, Codec]] = {codec.name.lower(): codec for codec in Codec}


def codec_from_name(name: str) -> Codec:
    """Return the codec for a ``compression_type`` setting (``"none"``, ``"gzip"``, ...).

    Names are matched case-insensitively.

    Raises :class:`~aioproducer.errors.ConfigError` for any other name.
    """
    codec = _BY_NAME.get(name.strip().lower()) if isinstance(name, str) else None
    if codec is None:
        allowed = ", ".join(repr(n) for n in _BY_NAME)
        raise ConfigError(f"unknown compression type {name!r}; allowed values: {allowed}")
    return codec


#: Inclusive ``(min, max)`` compression level per codec, the same ranges as the Java
#: client's ``compression.<codec>.level`` settings. Codecs missing here take no level.
LEVEL_RANGES: Final[dict[Codec, tuple[int, int]]] = {
    Codec.GZIP: (1, 9),
    Codec.LZ4: (1, 17),
    Codec.ZSTD: (-131072, 22),
}

#: The level used when none is given (the Java client's defaults).
DEFAULT_LEVELS: Final[dict[Codec, int]] = {
    Codec.GZIP: 6,
    Codec.LZ4: 9,
    Codec.ZSTD: 3,
}

# Java's GzipCompression accepts Deflater.DEFAULT_COMPRESSION (-1) besides 1-9.
_GZIP_JAVA_DEFAULT: Final = -1


def validate_level(codec: Codec, level: int | None) -> int | None:
    """Check ``level`` for ``codec`` and return the level that will actually be used.

    ``None`` selects the codec's default (gzip 6, lz4 9, zstd 3). For gzip, ``-1`` is
    accepted as Java's spelling of "default" and also returns 6. ``none`` and ``snappy``
    take no level: they return ``None`` and reject any level given.

    Raises :class:`~aioproducer.errors.ConfigError` naming the allowed range.
    """
    if type(codec) is not Codec:
        # Codec(codec) costs an Enum call, paid by every new batch's builder otherwise.
        codec = Codec(codec)
    bounds = LEVEL_RANGES.get(codec)
    if bounds is None:
        if level is not None:
            raise ConfigError(
                f"compression type {codec.name.lower()!r} takes no compression level "
                f"(got {level!r})"
            )
        return None
    if level is None:
        return DEFAULT_LEVELS[codec]
    # bool is an int subclass, but True/False as a level is certainly a mistake.
    if not isinstance(level, int) or isinstance(level, bool):
        raise ConfigError(
            f"{codec.name.lower()} compression level must be an int, got {type(level).__name__}"
        )
    if codec is Codec.GZIP and level == _GZIP_JAVA_DEFAULT:
        return DEFAULT_LEVELS[codec]
    low, high = bounds
    if not low <= level <= high:
        extra = " (or -1 for the default)" if codec is Codec.GZIP else ""
        raise ConfigError(
            f"{codec.name.lower()} compression level must be in [{low}, {high}]{extra}, got {level}"
        )
    return level


# -- compression ------------------------------------------------------------------------------

# snappy-java's SnappyCodec header: magic, then version and minimum compatible version.
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_LEN: Final = 16
# SnappyOutputStream.DEFAULT_BLOCK_SIZE: uncompressed bytes per xerial chunk.
_XERIAL_BLOCK_SIZE: Final = 32 * 1024
_INT32_BE: Final = struct.Struct(">i")

# The Java client uses lz4-java's *fast* compressor when the level is the default (9) and
# the high-compression one otherwise. In the LZ4 frame API level 9 means HC, which is
# several times slower, so the default is mapped to a fast-mode frame level instead.
_LZ4_FAST_FRAME_LEVEL: Final = 1
# Frame levels from here on are LZ4-HC, left to cramjam's frame compressor.
_LZ4_HC_MIN_LEVEL: Final = 3
# Magic, FLG 0x60 (version 1, independent blocks, no checksums, no content size), BD 0x40
# (64 KiB blocks) and the descriptor's checksum byte (xxh32 of 60 40, second byte).
_LZ4_FRAME_HEADER: Final = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK: Final = 64 * 1024
# LZ4's worst case for a block of n bytes is n + n / 255 + 16.
_LZ4_BLOCK_BOUND: Final = _LZ4_BLOCK + _LZ4_BLOCK // 255 + 16
_LZ4_END_MARK: Final = b"\x00\x00\x00\x00"
# Per thread: the encoding threads of a SyncProducer's bulk sends compress at once.
_LZ4_SCRATCH: Final = threading.local()
_LZ4_UNCOMPRESSED: Final = 0x80000000
_UINT32_LE: Final = struct.Struct("<I")


def compress(codec: Codec, data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` the way the Java producer does for ``codec``.

    ``level`` is validated with :func:`validate_level`; ``None`` means the codec default.
    ``Codec.NONE`` returns ``data`` as bytes.
    """
    out = compress_records(codec, data, level)
    return out if type(out) is bytes else bytes(out)


def compress_records(codec: Codec, data: BytesLike, level: int | None = None) -> bytes | bytearray:
    """:func:`compress`, but the result may be a ``bytearray`` (lz4 at a fast level is
    written straight into one), which spares a batch's records one copy."""
    if type(codec) is not Codec:
        # An Enum call costs more than the rest of this function for a small batch.
        codec = Codec(codec)
    level = validate_level(codec, level)
    if codec is Codec.NONE:
        return bytes(data)
    if codec is Codec.GZIP:
        assert level is not None
        # stdlib zlib is slightly faster than cramjam's gzip here and writes the same
        # standard member; wbits 31 selects the gzip wrapper.
        compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec is Codec.SNAPPY:
        return _xerial_snappy(data)
    if codec is Codec.LZ4:
        assert level is not None
        frame_level = _LZ4_FAST_FRAME_LEVEL if level == DEFAULT_LEVELS[Codec.LZ4] else level
        if frame_level < _LZ4_HC_MIN_LEVEL:
            return _lz4_fast_frame(data)
        lz4 = cramjam.lz4.Compressor(level=frame_level, content_checksum=False, block_linked=False)
        # Compressor.compress accepts only bytes (not bytearray or memoryview).
        lz4.compress(data if type(data) is bytes else bytes(data))
        return bytes(lz4.finish())
    return bytes(cramjam.zstd.compress(data, level=level))


def _lz4_fast_frame(data: BytesLike) -> bytearray:
    """An LZ4 frame of ``data`` in fast mode: the bytes the reference library's frame API
    writes for independent 64 KiB blocks without checksums (the header Java's producer
    writes too), with no copy of ``data`` on the way in.

    Each block is compressed into this thread's scratch buffer and appended from there,
    so the frame is allocated about its final size, not the worst case: a fresh
    worst-case buffer costs a zero fill and page faults the size of the input."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    scratch: bytearray | None = getattr(_LZ4_SCRATCH, "buffer", None)
    if scratch is None:
        scratch = _LZ4_SCRATCH.buffer = bytearray(_LZ4_BLOCK_BOUND)
    out = bytearray(_LZ4_FRAME_HEADER)
    into = cramjam.lz4.compress_block_into
    pack_size = _UINT32_LE.pack
    with memoryview(scratch) as compressed:
        for start in range(0, len(view), _LZ4_BLOCK):
            block = view[start : start + _LZ4_BLOCK]
            length = len(block)
            written: int = into(block, scratch, mode="default", store_size=False)
            if 0 < written < length:
                out += pack_size(written)
                out += compressed[:written]
            else:
                # As the frame API does: a block that does not shrink is stored as it is.
                out += pack_size(length | _LZ4_UNCOMPRESSED)
                out += block
    out += _LZ4_END_MARK
    return out


def _xerial_snappy(data: BytesLike) -> bytes:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    parts: list[Any] = [_XERIAL_HEADER]
    append = parts.append
    compress_raw = cramjam.snappy.compress_raw
    pack_len = _INT32_BE.pack
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = compress_raw(view[start : start + _XERIAL_BLOCK_SIZE])
        append(pack_len(len(block)))
        # join() reads cramjam's Buffer through the buffer protocol: one copy, no bytes().
        append(block)
    return b"".join(parts)


# -- decompression ----------------------------------------------------------------------------

# The smallest output buffer tried first when the decompressed size is unknown; growing
# is geometric, so a good guess only saves a retry.
_MIN_GUESS: Final = 64 * 1024
_GUESS_RATIO: Final = 8
_GROWTH: Final = 4
# A raw snappy block cannot expand more than 64 output bytes per 3 input bytes (a
# 2-byte-offset copy), so a larger declared length is corrupt. Checking it avoids
# allocating gigabytes because of a five-byte header.
_SNAPPY_MAX_RATIO: Final = 22
_BUFFER_FULL: Final = "failed to write whole buffer"


def decompress(codec: Codec, data: BytesLike, *, max_size: int | None = None) -> bytes:
    """Decompress a records section compressed with ``codec``.

    Accepts gzip (one or more members), snappy (xerial framing, possibly several
    concatenated streams, or a single raw block), LZ4 frames and zstd frames.

    ``max_size`` bounds the decompressed size: larger output raises
    :class:`~aioproducer.errors.CorruptRecordError`. How tightly memory and work are
    bounded depends on the codec:

    * gzip and snappy never allocate more than ``max_size`` (plus the input) and snappy
      rejects oversized input from its declared length without decompressing;
    * lz4 and zstd decompress into a buffer that starts from a guess (zstd: the frame's
      declared content size) and grows up to ``max_size``; decoding stops as soon as the
      buffer is full, so work and memory stay ``O(max_size)``, but a bomb near the limit
      may be decoded a few times while the buffer grows.

    Without ``max_size`` the output is unbounded apart from snappy's declared-length
    sanity check. Malformed input raises ``CorruptRecordError``, never a cramjam or zlib
    exception.
    """
    codec = Codec(codec)
    if max_size is not None and max_size < 0:
        raise ValueError(f"max_size must be >= 0, got {max_size}")
    if codec is Codec.NONE:
        if max_size is not None and len(data) > max_size:
            raise CorruptRecordError(f"records section of {len(data)} bytes exceeds {max_size}")
        return bytes(data)
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        data = data.cast("B")
    if codec is Codec.GZIP:
        return _gunzip(data, max_size)
    if codec is Codec.SNAPPY:
        return _unsnappy(data, max_size)
    if codec is Codec.LZ4:
        return _bounded(cramjam.lz4.decompress, cramjam.lz4.decompress_into, data, max_size, None)
    return _bounded(
        cramjam.zstd.decompress,
        cramjam.zstd.decompress_into,
        data,
        max_size,
        _zstd_content_size(data),
    )


def _gunzip(data: BytesLike, max_size: int | None) -> bytes:
    # zlib's max_length lets the output be bounded while decoding instead of afterwards.
    # Java's GZIPInputStream reads concatenated members, so this does too.
    parts: list[bytes] = []
    produced = 0
    pending: BytesLike = data
    try:
        while True:
            inflater = zlib.decompressobj(31)
            if max_size is None:
                chunk = inflater.decompress(pending)
            else:
                # One byte more than allowed tells "exactly max_size" from "too large".
                chunk = inflater.decompress(pending, max_size - produced + 1)
            produced += len(chunk)
            if max_size is not None and produced > max_size:
                raise CorruptRecordError(f"gzip data decompresses to more than {max_size} bytes")
            parts.append(chunk)
            if not inflater.eof:
                raise CorruptRecordError("gzip data is truncated")
            pending = inflater.unused_data
            if not pending:
                break
    except zlib.error as exc:
        raise CorruptRecordError(f"invalid gzip data: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unsnappy(data: BytesLike, max_size: int | None) -> bytes:
    view = memoryview(data)
    # snappy-java's SnappyInputStream falls back to one raw block when the magic is absent.
    if len(view) < _XERIAL_HEADER_LEN or bytes(view[:8]) != _XERIAL_MAGIC:
        _snappy_block_len(view, max_size, 0)
        return bytes(_snappy_raw(view))

    # Validate every chunk header and total the declared sizes before decoding anything,
    # so an oversized stream is refused without work.
    blocks: list[memoryview] = []
    total = 0
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos >= 8 and bytes(view[pos : pos + 8]) == _XERIAL_MAGIC:
            # A concatenated stream starts with its own header (version and compatible
            # version are not checked, matching lenient readers of other producers).
            if end - pos < _XERIAL_HEADER_LEN:
                raise CorruptRecordError("truncated xerial snappy header")
            pos += _XERIAL_HEADER_LEN
            continue
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy chunk length")
        (length,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"xerial snappy chunk length {length} exceeds the {end - pos} bytes left"
            )
        block = view[pos : pos + length]
        pos += length
        total += _snappy_block_len(block, max_size, total)
        blocks.append(block)
    if len(blocks) == 1:
        return bytes(_snappy_raw(blocks[0]))
    return b"".join([_snappy_raw(block) for block in blocks])


def _snappy_block_len(block: memoryview, max_size: int | None, before: int) -> int:
    try:
        size: int = cramjam.snappy.decompress_raw_len(block)
    except (cramjam.DecompressionError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"invalid snappy data: {exc}") from None
    if size > len(block) * _SNAPPY_MAX_RATIO + 32:
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes claims an impossible {size} bytes of output"
        )
    if max_size is not None and before + size > max_size:
        raise CorruptRecordError(f"snappy data decompresses to more than {max_size} bytes")
    return size


def _snappy_raw(block: memoryview) -> Any:
    # Returns a cramjam Buffer (untyped): usable wherever a bytes-like object is.
    try:
        return cramjam.snappy.decompress_raw(block)
    except (cramjam.DecompressionError, ValueError, OverflowError) as exc:
        raise CorruptRecordError(f"invalid snappy data: {exc}") from None


def _bounded(
    unbounded: Callable[[BytesLike], Any],
    into: Callable[[BytesLike, bytearray], int],
    data: BytesLike,
    max_size: int | None,
    size_hint: int | None,
) -> bytes:
    name = "lz4" if unbounded is cramjam.lz4.decompress else "zstd"
    if max_size is None:
        try:
            return bytes(unbounded(data))
        except (cramjam.DecompressionError, ValueError, OverflowError) as exc:
            raise CorruptRecordError(f"invalid {name} data: {exc}") from None

    if size_hint is not None and size_hint > max_size:
        raise CorruptRecordError(f"{name} frame declares {size_hint} bytes, more than {max_size}")
    # cramjam decodes into a fixed buffer and stops with an error as soon as it is full,
    # so no attempt does more than O(len(buffer)) work. "Did not fit" is recognised by the
    # message of Rust's io::ErrorKind::WriteZero (the tests pin it); any other error is
    # corruption, reported without retrying with ever larger buffers.
    if size_hint is not None:
        capacity = size_hint
    else:
        capacity = min(max_size, max(_MIN_GUESS, len(data) * _GUESS_RATIO))
    while True:
        out = bytearray(capacity)
        try:
            written = into(data, out)
        except (cramjam.DecompressionError, ValueError, OverflowError) as exc:
            if _BUFFER_FULL not in str(exc):
                raise CorruptRecordError(f"invalid {name} data: {exc}") from None
            if capacity >= max_size:
                raise CorruptRecordError(
                    f"{name} data decompresses to more than {max_size} bytes"
                ) from None
            capacity = min(max_size, max(capacity * _GROWTH, _MIN_GUESS))
            continue
        if written == capacity:
            return bytes(out)
        return bytes(memoryview(out)[:written])


def _zstd_content_size(data: BytesLike) -> int | None:
    """Return the Frame_Content_Size of a lone zstd frame's header, if it declares one."""
    # RFC 8878 section 3.1.1.1: magic, Frame_Header_Descriptor, optional window
    # descriptor, optional dictionary id, optional content size (little-endian).
    if len(data) < 6 or bytes(data[:4]) != b"\x28\xb5\x2f\xfd":
        return None
    descriptor = data[4]
    fcs_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    fcs_len = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if fcs_len == 0 or len(data) < pos + fcs_len:
        return None
    size = int.from_bytes(data[pos : pos + fcs_len], "little")
    return size + 256 if fcs_len == 2 else size
