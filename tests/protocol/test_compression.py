"""Tests for aioproducer.protocol.compression: byte formats the Java broker accepts."""

from __future__ import annotations

import array
import contextlib
import gzip
import os
import random
import struct
import time

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioproducer.errors import ConfigError, CorruptRecordError
from aioproducer.protocol.compression import (
    DEFAULT_LEVELS,
    LEVEL_RANGES,
    Codec,
    codec_from_name,
    compress,
    compress_records,
    decompress,
    validate_level,
)

ALL_CODECS = list(Codec)
COMPRESSING = [c for c in Codec if c is not Codec.NONE]
XERIAL_HEADER = b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"


def compressible(size: int, seed: int = 1) -> bytes:
    """Text-like data: a random 1 KiB pattern with a counter, so it compresses but varies."""
    rnd = random.Random(seed).randbytes(1024)
    out = bytearray()
    i = 0
    while len(out) < size:
        out += rnd[: 97 + i % 400] + str(i).encode()
        i += 1
    return bytes(out[:size])


# -- xxHash32 (used by the LZ4 frame format), written from the specification -------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for lane in range(4):
                (word,) = struct.unpack_from("<I", data, pos)
                v[lane] = (_rotl((v[lane] + word * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        acc = (_rotl((acc + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


def test_xxh32_reference_vectors() -> None:
    # Published test vectors of the reference implementation.
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def walk_lz4_frame(frame: bytes) -> tuple[int, int, list[bytes]]:
    """Parse an LZ4 frame the way Kafka's Lz4BlockInputStream does.

    Returns (FLG, BD, blocks), each block decoded *on its own*, which only works when
    blocks are independent.
    """
    assert frame[:4] == b"\x04\x22\x4d\x18", "LZ4 frame magic"
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 0b01, "version 01"
    assert flg & 0x02 == 0 and flg & 0x01 == 0, "reserved bit and DictID must be 0"
    assert bd & 0x8F == 0 and 4 <= (bd >> 4) & 0x07 <= 7, "BD block size 64 KB..4 MB"
    pos = 6
    if flg & 0x08:
        pos += 8  # content size
    # KIP-57: the header checksum covers the descriptor only (FLG .. end of descriptor).
    assert frame[pos] == (xxh32(frame[4:pos]) >> 8) & 0xFF, "header checksum"
    pos += 1
    max_block = 1 << (8 + 2 * ((bd >> 4) & 0x07))
    blocks = []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            break
        stored = size >> 31
        size &= 0x7FFFFFFF
        block = frame[pos : pos + size]
        assert len(block) == size
        pos += size
        if flg & 0x10:
            (checksum,) = struct.unpack_from("<I", frame, pos)
            assert checksum == xxh32(block), "block checksum"
            pos += 4
        if stored:
            blocks.append(block)
        else:
            # Re-wrap the block alone in a frame: a block that references data of earlier
            # blocks (linked mode) cannot decode like that.
            descriptor = bytes([0x60, bd])
            standalone = (
                frame[:4]
                + descriptor
                + bytes([(xxh32(descriptor) >> 8) & 0xFF])
                + struct.pack("<I", size)
                + block
                + b"\x00\x00\x00\x00"
            )
            decoded = bytes(cramjam.lz4.decompress(standalone))
            assert 0 < len(decoded) <= max_block
            blocks.append(decoded)
    if flg & 0x04:
        pos += 4  # content checksum (Kafka reads it without verifying)
    assert pos == len(frame), "no trailing bytes"
    return flg, bd, blocks


# -- names and levels -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Codec.NONE),
        ("gzip", Codec.GZIP),
        ("snappy", Codec.SNAPPY),
        ("lz4", Codec.LZ4),
        ("zstd", Codec.ZSTD),
        ("ZSTD", Codec.ZSTD),
        (" Gzip ", Codec.GZIP),
    ],
)
def test_codec_from_name(name: str, codec: Codec) -> None:
    assert codec_from_name(name) is codec


def test_codec_values_match_attribute_bits() -> None:
    assert [(c.name, int(c)) for c in Codec] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]


@pytest.mark.parametrize("name", ["", "lz4hc", "brotli", "snappy-framed", "1"])
def test_codec_from_name_rejects_unknown(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        codec_from_name(name)
    message = str(info.value)
    assert repr(name) in message
    for allowed in ("'none'", "'gzip'", "'snappy'", "'lz4'", "'zstd'"):
        assert allowed in message


def test_default_levels() -> None:
    assert validate_level(Codec.GZIP, None) == 6
    assert validate_level(Codec.GZIP, -1) == 6
    assert validate_level(Codec.LZ4, None) == 9
    assert validate_level(Codec.ZSTD, None) == 3
    assert validate_level(Codec.NONE, None) is None
    assert validate_level(Codec.SNAPPY, None) is None
    assert DEFAULT_LEVELS == {Codec.GZIP: 6, Codec.LZ4: 9, Codec.ZSTD: 3}
    assert LEVEL_RANGES == {Codec.GZIP: (1, 9), Codec.LZ4: (1, 17), Codec.ZSTD: (-131072, 22)}


@pytest.mark.parametrize(
    ("codec", "level"),
    [
        (Codec.GZIP, 1),
        (Codec.GZIP, 9),
        (Codec.LZ4, 1),
        (Codec.LZ4, 17),
        (Codec.ZSTD, -131072),
        (Codec.ZSTD, 0),
        (Codec.ZSTD, 22),
    ],
)
def test_levels_at_the_bounds_are_accepted(codec: Codec, level: int) -> None:
    assert validate_level(codec, level) == level


@pytest.mark.parametrize(
    ("codec", "level", "expected"),
    [
        (Codec.GZIP, 0, "[1, 9]"),
        (Codec.GZIP, 10, "[1, 9]"),
        (Codec.GZIP, -2, "[1, 9]"),
        (Codec.LZ4, 0, "[1, 17]"),
        (Codec.LZ4, 18, "[1, 17]"),
        (Codec.ZSTD, -131073, "[-131072, 22]"),
        (Codec.ZSTD, 23, "[-131072, 22]"),
        (Codec.SNAPPY, 1, "takes no compression level"),
        (Codec.NONE, 0, "takes no compression level"),
    ],
)
def test_levels_out_of_range_are_rejected(codec: Codec, level: int, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_level(codec, level)
    assert expected in str(info.value)
    assert codec.name.lower() in str(info.value)


def test_level_must_be_an_int() -> None:
    with pytest.raises(ConfigError, match="must be an int"):
        validate_level(Codec.ZSTD, True)
    with pytest.raises(ConfigError, match="must be an int"):
        validate_level(Codec.GZIP, 5.0)  # type: ignore[arg-type]


def test_compress_validates_level() -> None:
    with pytest.raises(ConfigError, match=r"\[1, 17\]"):
        compress(Codec.LZ4, b"x", level=40)


# -- round trips ------------------------------------------------------------------------------

SIZES = [0, 1, 100, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024 + 1, 200_000]


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("size", SIZES)
def test_round_trip_sizes(codec: Codec, size: int) -> None:
    for data in (compressible(size), os.urandom(size)):
        packed = compress(codec, data)
        assert decompress(codec, packed) == data
        assert decompress(codec, packed, max_size=size) == data


@pytest.mark.parametrize("codec", ALL_CODECS)
@given(data=st.binary(max_size=5000))
@settings(max_examples=60, deadline=None)
def test_round_trip_random(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize(
    ("codec", "levels"),
    [
        (Codec.GZIP, [1, 5, 9, -1]),
        (Codec.LZ4, [1, 2, 3, 9, 12, 17]),
        (Codec.ZSTD, [-131072, -5, 0, 1, 3, 19, 22]),
    ],
)
def test_round_trip_every_level(codec: Codec, levels: list[int]) -> None:
    data = compressible(70_000)
    for level in levels:
        packed = compress(codec, data, level)
        assert decompress(codec, packed) == data
        if level > -1000:  # zstd's fastest negative levels barely compress at all
            assert len(packed) < len(data)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_bytes_like_inputs(codec: Codec) -> None:
    data = compressible(40_000)
    expected = compress(codec, data)
    ints = array.array("I", data[:40_000])  # a non-byte memoryview format
    for variant in (bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert decompress(codec, compress(codec, variant)) == data
    assert decompress(codec, compress(codec, memoryview(ints))) == ints.tobytes()
    assert decompress(codec, memoryview(bytearray(expected))) == data
    assert decompress(codec, bytearray(expected)) == data


def test_none_is_identity() -> None:
    assert compress(Codec.NONE, bytearray(b"abc")) == b"abc"
    assert type(compress(Codec.NONE, bytearray(b"abc"))) is bytes
    assert decompress(Codec.NONE, b"abc") == b"abc"
    with pytest.raises(CorruptRecordError):
        decompress(Codec.NONE, b"abc", max_size=2)


# -- exact formats ----------------------------------------------------------------------------


def test_gzip_is_a_standard_member() -> None:
    data = compressible(50_000)
    packed = compress(Codec.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data
    # ISIZE trailer: uncompressed size mod 2^32, little-endian.
    assert struct.unpack("<I", packed[-4:])[0] == len(data)
    # Level 1 and 9 differ, i.e. the level is actually applied.
    assert compress(Codec.GZIP, data, 1) != compress(Codec.GZIP, data, 9)


def test_gzip_reads_concatenated_members_and_stdlib_output() -> None:
    packed = gzip.compress(b"first ", 9) + gzip.compress(b"second", 1)
    assert decompress(Codec.GZIP, packed) == b"first second"
    assert decompress(Codec.GZIP, packed, max_size=12) == b"first second"
    with pytest.raises(CorruptRecordError, match="more than 11"):
        decompress(Codec.GZIP, packed, max_size=11)


def parse_xerial(packed: bytes) -> list[bytes]:
    assert packed[:16] == XERIAL_HEADER
    pos = 16
    chunks = []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        pos += 4
        chunks.append(packed[pos : pos + length])
        pos += length
    assert pos == len(packed)
    return chunks


@pytest.mark.parametrize("size", [0, 1, 32 * 1024, 32 * 1024 + 1, 100_000])
def test_snappy_is_xerial_framed_in_32k_chunks(size: int) -> None:
    data = compressible(size)
    packed = compress(Codec.SNAPPY, data)
    chunks = parse_xerial(packed)
    decoded = [bytes(cramjam.snappy.decompress_raw(chunk)) for chunk in chunks]
    expected_sizes = [min(32 * 1024, size - start) for start in range(0, size, 32 * 1024)]
    assert [len(d) for d in decoded] == expected_sizes
    assert b"".join(decoded) == data


def test_snappy_never_uses_the_snappy_framing_format() -> None:
    packed = compress(Codec.SNAPPY, b"hello" * 100)
    assert not packed.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert packed.startswith(b"\x82SNAPPY\x00")


def test_snappy_decodes_a_raw_block() -> None:
    # librdkafka writes one raw block, which the Java reader also accepts.
    data = compressible(100_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Codec.SNAPPY, raw) == data
    assert decompress(Codec.SNAPPY, raw, max_size=100_000) == data
    with pytest.raises(CorruptRecordError, match="more than 99999"):
        decompress(Codec.SNAPPY, raw, max_size=99_999)
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(b""))) == b""


def test_snappy_decodes_concatenated_xerial_streams() -> None:
    first, second = compressible(40_000, 1), compressible(5_000, 2)
    packed = compress(Codec.SNAPPY, first) + compress(Codec.SNAPPY, second)
    assert decompress(Codec.SNAPPY, packed) == first + second


def test_snappy_accepts_little_endian_xerial_versions() -> None:
    # Some non-Java producers write version/compat little-endian; readers ignore them.
    packed = bytearray(compress(Codec.SNAPPY, b"payload" * 10))
    packed[8:16] = b"\x01\x00\x00\x00\x01\x00\x00\x00"
    assert decompress(Codec.SNAPPY, bytes(packed)) == b"payload" * 10


def test_snappy_rejects_impossible_declared_length_without_allocating() -> None:
    # A 5-byte "raw block" announcing 4 GiB of output.
    with pytest.raises(CorruptRecordError, match="impossible"):
        decompress(Codec.SNAPPY, b"\xff\xff\xff\xff\x0f")
    xerial = XERIAL_HEADER + struct.pack(">i", 5) + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(CorruptRecordError, match="impossible"):
        decompress(Codec.SNAPPY, xerial)


@pytest.mark.parametrize("size", [0, 1, 65_536, 65_537, 300_000])
@pytest.mark.parametrize("level", [None, 1, 12, 17])
def test_lz4_frame_has_independent_blocks(size: int, level: int | None) -> None:
    # A repeated pattern makes later blocks reference earlier ones if blocks were linked.
    data = (os.urandom(1000) * (size // 1000 + 1))[:size]
    packed = compress(Codec.LZ4, data, level)
    flg, bd, blocks = walk_lz4_frame(packed)
    assert flg & 0x20, "block independence flag (FLG bit 5)"
    assert flg & 0x04 == 0, "no content checksum"
    assert bd == 0x40, "64 KB maximum block size"
    # Java writes full 64 KiB blocks, some cramjam versions smaller ones: both are valid.
    assert all(0 < len(b) <= 65_536 for b in blocks)
    assert b"".join(blocks) == data
    assert decompress(Codec.LZ4, packed) == data


def test_lz4_walker_detects_linked_blocks() -> None:
    # cramjam.lz4.compress writes linked blocks, which Kafka rejects: the walker used above
    # must be able to tell the difference (both by the flag and by decoding).
    data = os.urandom(1000) * 200
    linked = bytes(cramjam.lz4.compress(data))
    assert linked[4] & 0x20 == 0
    flagged = bytearray(linked)
    flagged[4] |= 0x20
    flagged[6] = (xxh32(bytes(flagged[4:6])) >> 8) & 0xFF
    with pytest.raises(cramjam.DecompressionError):
        walk_lz4_frame(bytes(flagged))
    assert compress(Codec.LZ4, data)[4] & 0x20 == 0x20


def test_lz4_default_level_is_java_fast_mode() -> None:
    # Java uses the fast compressor at the default level 9 and HC otherwise.
    data = compressible(300_000)
    fast = compress(Codec.LZ4, data)
    assert fast == compress(Codec.LZ4, data, 9)
    assert fast == compress(Codec.LZ4, data, 1)
    assert fast != compress(Codec.LZ4, data, 12)


def _reference_lz4_frame(data: bytes, level: int) -> bytes:
    # The reference C library's frame API, set up as Java's producer writes frames.
    import lz4.frame

    return bytes(
        lz4.frame.compress(
            data,
            compression_level=level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            block_checksum=False,
            content_checksum=False,
            store_size=False,
        )
    )


@pytest.mark.parametrize("size", [0, 1, 15, 16_384, 65_535, 65_536, 65_537, 300_001])
@pytest.mark.parametrize("kind", ["compressible", "random", "mixed"])
def test_lz4_fast_frames_are_the_reference_librarys(size: int, kind: str) -> None:
    # Fast-mode frames are put together block by block here; they must be exactly the
    # C library's frames, including blocks that do not shrink (stored as they are).
    if kind == "compressible":
        data = compressible(size)
    elif kind == "random":
        data = os.urandom(size)
    else:
        data = (os.urandom(size // 2) + compressible(size))[:size]
    out = compress_records(Codec.LZ4, bytearray(data))
    assert type(out) is bytearray
    assert bytes(out) == _reference_lz4_frame(data, 1)
    assert compress(Codec.LZ4, memoryview(data)) == bytes(out)
    assert compress(Codec.LZ4, data, 2) == bytes(out)
    assert out[:7] == b"\x04\x22\x4d\x18\x60\x40\x82", "Java's frame header"
    assert decompress(Codec.LZ4, out) == data


def test_lz4_frames_of_concurrent_threads_do_not_mix() -> None:
    # Each thread compresses through a scratch buffer of its own.
    from concurrent.futures import ThreadPoolExecutor

    inputs = [compressible(200_000, seed) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        frames = list(pool.map(lambda d: bytes(compress_records(Codec.LZ4, d)), inputs * 4))
    assert frames == [_reference_lz4_frame(d, 1) for d in inputs * 4]


def test_zstd_is_a_standard_frame_at_the_level() -> None:
    data = compressible(100_000)
    packed = compress(Codec.ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert packed == bytes(cramjam.zstd.compress(data, level=3))
    assert compress(Codec.ZSTD, data, 19) == bytes(cramjam.zstd.compress(data, level=19))
    assert compress(Codec.ZSTD, data, 19) != packed


def test_zstd_reads_concatenated_frames() -> None:
    packed = compress(Codec.ZSTD, b"a" * 10) + compress(Codec.ZSTD, b"b" * 100_000)
    expected = b"a" * 10 + b"b" * 100_000
    # The first frame declares 10 bytes: the buffer must grow past that hint.
    assert decompress(Codec.ZSTD, packed, max_size=len(expected)) == expected
    assert decompress(Codec.ZSTD, packed) == expected
    with pytest.raises(CorruptRecordError, match="more than"):
        decompress(Codec.ZSTD, packed, max_size=len(expected) - 1)


# -- bounds -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSING)
def test_max_size_is_inclusive(codec: Codec) -> None:
    data = compressible(70_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=70_000) == data
    with pytest.raises(CorruptRecordError, match="more than 69999"):
        decompress(codec, packed, max_size=69_999)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed, max_size=0)


@pytest.mark.parametrize("codec", COMPRESSING)
def test_highly_compressible_data_grows_the_buffer(codec: Codec) -> None:
    # Ratio far above the initial guess: lz4 (no size hint) must retry with larger buffers.
    data = bytes(8 * 1024 * 1024)
    packed = compress(codec, data)
    assert len(packed) * 8 < len(data)
    assert decompress(codec, packed, max_size=len(data)) == data


@pytest.mark.parametrize("codec", COMPRESSING)
def test_decompression_bomb_is_stopped_early(codec: Codec) -> None:
    bomb = compress(codec, bytes(256 * 1024 * 1024), 1 if codec is not Codec.SNAPPY else None)
    started = time.perf_counter()
    with pytest.raises(CorruptRecordError, match="more than 1048576"):
        decompress(codec, bomb, max_size=1024 * 1024)
    # Decoding 256 MiB takes far longer than this on any machine.
    assert time.perf_counter() - started < 0.1


def test_max_size_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="max_size"):
        decompress(Codec.GZIP, compress(Codec.GZIP, b"x"), max_size=-1)


# -- corruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSING)
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"not compressed at all" * 5])
def test_garbage_raises_corrupt_record_error(codec: Codec, garbage: bytes) -> None:
    if codec is Codec.SNAPPY and garbage == b"\x00":
        # A valid raw snappy block of zero bytes.
        assert decompress(codec, garbage) == b""
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage, max_size=1000)


@pytest.mark.parametrize("codec", COMPRESSING)
def test_truncation_raises_corrupt_record_error(codec: Codec) -> None:
    data = compressible(100_000)
    packed = compress(codec, data)
    for cut in (1, 2, 5, len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut])
        with pytest.raises(CorruptRecordError):
            decompress(codec, packed[:cut], max_size=len(data))


@pytest.mark.parametrize("codec", COMPRESSING)
@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_mutated_input_never_raises_anything_else(codec: Codec, data: st.DataObject) -> None:
    original = compressible(data.draw(st.integers(0, 3000)))
    packed = bytearray(compress(codec, original))
    for _ in range(data.draw(st.integers(1, 4))):
        if not packed:
            break
        index = data.draw(st.integers(0, len(packed) - 1))
        packed[index] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        packed = packed[: data.draw(st.integers(0, len(packed)))]
    for max_size in (None, 4000):
        try:
            out = decompress(codec, bytes(packed), max_size=max_size)
        except CorruptRecordError:
            continue
        assert isinstance(out, bytes)
        assert max_size is None or len(out) <= max_size


@pytest.mark.parametrize("codec", COMPRESSING)
@given(garbage=st.binary(max_size=300))
@settings(max_examples=150, deadline=None)
def test_random_bytes_never_raise_anything_else(codec: Codec, garbage: bytes) -> None:
    for candidate in (garbage, XERIAL_HEADER + garbage):
        with contextlib.suppress(CorruptRecordError):
            decompress(codec, candidate, max_size=100_000)
