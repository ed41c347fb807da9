"""Kafka primitive types: round trips, known encodings and hostile input."""

from __future__ import annotations

import contextlib
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioproducer.errors import ProtocolError
from aioproducer.protocol.primitives import Reader, Writer, uvarint_bytes

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)


def roundtrip(write: Callable[[Writer], None], read: Callable[[Reader], Any]) -> tuple[Any, bytes]:
    w = Writer()
    write(w)
    data = w.getvalue()
    r = Reader(data)
    value = read(r)
    r.expect_end()
    return value, data


# -- round trips ------------------------------------------------------------------------------


@given(INT8, INT16, INT32, INT64, UINT32, st.booleans())
def test_fixed_width_roundtrip(i8: int, i16: int, i32: int, i64: int, u32: int, b: bool) -> None:
    w = Writer()
    w.int8(i8)
    w.int16(i16)
    w.int32(i32)
    w.int64(i64)
    w.uint32(u32)
    w.boolean(b)
    data = w.getvalue()
    assert len(data) == 1 + 2 + 4 + 8 + 4 + 1
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.uint32(), r.boolean()) == (
        i8,
        i16,
        i32,
        i64,
        u32,
        b,
    )
    r.expect_end()


@given(UINT32)
def test_uvarint_roundtrip(value: int) -> None:
    assert roundtrip(lambda w: w.uvarint(value), Reader.uvarint)[0] == value


@given(UINT32)
def test_uvarint_bytes_matches_writer(value: int) -> None:
    w = Writer()
    w.uvarint(value)
    assert uvarint_bytes(value) == w.getvalue()


def test_uvarint_bytes_range() -> None:
    assert uvarint_bytes(0) == b"\x00"
    assert uvarint_bytes(16385) == b"\x81\x80\x01"
    with pytest.raises(ValueError):
        uvarint_bytes(-1)
    with pytest.raises(ValueError):
        uvarint_bytes(2**32)


def test_unpack_with_struct() -> None:
    fmt = struct.Struct(">ihq")
    r = Reader(fmt.pack(-5, 7, 2**40) + b"\x01")
    assert r.unpack(fmt) == (-5, 7, 2**40)
    assert r.remaining == 1
    with pytest.raises(ProtocolError, match="need 14 bytes"):
        r.unpack(fmt)
    assert r.boolean() is True


@given(INT32)
def test_varint_roundtrip(value: int) -> None:
    assert roundtrip(lambda w: w.varint(value), Reader.varint)[0] == value


@given(INT64)
def test_varlong_roundtrip(value: int) -> None:
    assert roundtrip(lambda w: w.varlong(value), Reader.varlong)[0] == value


@given(st.text(max_size=300), st.booleans())
def test_string_roundtrip(value: str, compact: bool) -> None:
    got, data = roundtrip(lambda w: w.string(value, compact), lambda r: r.string(compact))
    assert got == value
    encoded = value.encode()
    if not compact:
        assert data[:2] == len(encoded).to_bytes(2, "big")
    assert data.endswith(encoded)


@given(st.none() | st.text(max_size=50), st.booleans())
def test_nullable_string_roundtrip(value: str | None, compact: bool) -> None:
    got, _ = roundtrip(
        lambda w: w.nullable_string(value, compact), lambda r: r.nullable_string(compact)
    )
    assert got == value


@given(st.text(max_size=50), st.none() | st.text(max_size=50))
def test_compact_string_aliases(value: str, nullable: str | None) -> None:
    assert roundtrip(lambda w: w.compact_string(value), Reader.compact_string)[0] == value
    assert (
        roundtrip(lambda w: w.compact_nullable_string(nullable), Reader.compact_nullable_string)[0]
        == nullable
    )


@given(st.binary(max_size=5000), st.booleans())
def test_bytes_roundtrip(value: bytes, compact: bool) -> None:
    got, data = roundtrip(lambda w: w.bytes_(value, compact), lambda r: r.bytes_(compact))
    assert got == value
    if not compact:
        assert data[:4] == len(value).to_bytes(4, "big")


@given(st.none() | st.binary(max_size=100), st.booleans())
def test_nullable_bytes_roundtrip(value: bytes | None, compact: bool) -> None:
    got, _ = roundtrip(
        lambda w: w.nullable_bytes(value, compact), lambda r: r.nullable_bytes(compact)
    )
    assert got == value
    assert roundtrip(lambda w: w.compact_nullable_bytes(value), Reader.compact_nullable_bytes)[
        0
    ] == (value)


@given(st.binary(max_size=100))
def test_compact_bytes_alias(value: bytes) -> None:
    assert roundtrip(lambda w: w.compact_bytes(value), Reader.compact_bytes)[0] == value


@given(st.lists(INT32, max_size=50), st.booleans())
def test_int32_array_roundtrip(values: list[int], compact: bool) -> None:
    got, _ = roundtrip(
        lambda w: w.array(values, w.int32, compact), lambda r: r.int32_array(compact)
    )
    assert got == values
    got2, _ = roundtrip(
        lambda w: w.int32_array(values, compact), lambda r: r.array(r.int32, compact, 4)
    )
    assert got2 == values


@given(st.none() | st.lists(st.text(max_size=10), max_size=10), st.booleans())
def test_nullable_string_array_roundtrip(values: list[str] | None, compact: bool) -> None:
    got, _ = roundtrip(
        lambda w: w.nullable_array(values, lambda s: w.string(s, compact), compact),
        lambda r: r.nullable_array(lambda: r.string(compact), compact),
    )
    assert got == values


@given(st.lists(INT16, max_size=10), st.none() | st.lists(INT16, max_size=10))
def test_compact_array_aliases(values: list[int], nullable: list[int] | None) -> None:
    assert roundtrip(
        lambda w: w.compact_array(values, w.int16), lambda r: r.compact_array(r.int16)
    )[0] == (values)
    assert (
        roundtrip(
            lambda w: w.compact_nullable_array(nullable, w.int16),
            lambda r: r.compact_nullable_array(r.int16),
        )[0]
        == nullable
    )


@given(st.uuids())
def test_uuid_roundtrip(value: uuid.UUID) -> None:
    got, data = roundtrip(lambda w: w.uuid(value), Reader.uuid)
    assert got == value
    assert data == value.bytes


def test_none_uuid_is_zero() -> None:
    w = Writer()
    w.uuid(None)
    assert w.getvalue() == bytes(16)


@given(st.dictionaries(st.integers(0, 2**31), st.binary(max_size=20), max_size=6))
def test_tagged_fields_roundtrip(fields: dict[int, bytes]) -> None:
    got, _ = roundtrip(lambda w: w.tagged_fields(fields), Reader.tagged_fields)
    assert {tag: bytes(value) for tag, value in got.items()} == fields


def test_tagged_fields_sorted_by_tag() -> None:
    w = Writer()
    w.tagged_fields([(5, b"\x01"), (1, b"\x02\x03")])
    assert w.getvalue() == bytes([2, 1, 2, 2, 3, 5, 1, 1])
    w = Writer()
    w.tagged_fields()
    assert w.getvalue() == b"\x00"


def test_skip_tagged_fields() -> None:
    r = Reader(bytes([2, 1, 2, 2, 3, 5, 1, 1, 0x7F]))
    r.skip_tagged_fields()
    assert r.int8() == 0x7F


# -- known byte vectors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**31 - 1, "ffffffff07"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_uvarint_vectors(value: int, encoded: str) -> None:
    w = Writer()
    w.uvarint(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).uvarint() == value


# zigzag: 0->0, -1->1, 1->2, -2->3, 63->126, -64->127, 64->128 (two bytes), 150->300.
@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (150, "ac02"),
        (-(2**31), "ffffffff0f"),
        (2**31 - 1, "feffffff0f"),
    ],
)
def test_varint_vectors(value: int, encoded: str) -> None:
    w = Writer()
    w.varint(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varint() == value


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (300, "d804"),
        (2**63 - 1, "feffffffffffffffff01"),
        (-(2**63), "ffffffffffffffffff01"),
    ],
)
def test_varlong_vectors(value: int, encoded: str) -> None:
    w = Writer()
    w.varlong(value)
    assert w.getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varlong() == value


def test_string_vectors() -> None:
    w = Writer()
    w.string("abc")
    w.compact_string("abc")
    w.nullable_string(None)
    w.compact_nullable_string(None)
    w.compact_string("")
    w.nullable_bytes(None)
    w.compact_nullable_bytes(None)
    w.array_length(None)
    w.array_length(None, True)
    w.array_length(2, True)
    assert w.getvalue().hex() == "000361626304616263ffff0001ffffffff00ffffffff0003"


def test_size_prefix_and_large_chunks() -> None:
    big = bytes(range(256)) * 40  # kept by reference
    w = Writer()
    w.int16(7)
    w.bytes_(big)
    w.int8(-1)
    assert len(w) == 2 + 4 + len(big) + 1
    assert w.getvalue() == b"\x00\x07" + len(big).to_bytes(4, "big") + big + b"\xff"
    assert w.getvalue(size_prefix=True) == (len(w)).to_bytes(4, "big") + w.getvalue()


def test_writer_rejects_out_of_range() -> None:
    w = Writer()
    with pytest.raises(ValueError):
        w.uvarint(-1)
    with pytest.raises(ValueError):
        w.uvarint(2**32)
    with pytest.raises(ValueError):
        w.varint(2**31)
    with pytest.raises(ValueError):
        w.varlong(-(2**63) - 1)
    with pytest.raises(ValueError):
        w.string("x" * 40000)


# -- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        Reader.int8,
        Reader.int16,
        Reader.int32,
        Reader.int64,
        Reader.uint32,
        Reader.boolean,
        Reader.uuid,
        Reader.uvarint,
        Reader.varint,
        Reader.varlong,
        Reader.string,
        Reader.compact_string,
        Reader.bytes_,
        Reader.compact_bytes,
        Reader.int32_array,
        Reader.tagged_fields,
        lambda r: r.array(r.int8),
    ],
)
def test_empty_input_raises_protocol_error(read: Callable[[Reader], object]) -> None:
    with pytest.raises(ProtocolError):
        read(Reader(b""))


@pytest.mark.parametrize(
    ("data", "read"),
    [
        ("000102", Reader.int32),
        ("00000000000000", Reader.int64),
        ("00", Reader.int16),
        ("0005616263", Reader.string),  # 5 declared, 3 present
        ("06616263", Reader.compact_string),
        ("00000004aabbcc", Reader.bytes_),
        ("05aabbcc", Reader.compact_bytes),
        ("80", Reader.uvarint),  # continuation bit with nothing after it
        ("ffff", Reader.varint),
        ("0101", Reader.tagged_fields),  # one field: tag 1, size missing
        ("01010a00", Reader.tagged_fields),  # tag 1 says 10 bytes, 1 left
    ],
)
def test_truncated_input_raises(data: str, read: Callable[[Reader], object]) -> None:
    with pytest.raises(ProtocolError):
        read(Reader(bytes.fromhex(data)))


def test_overlong_varints_rejected() -> None:
    with pytest.raises(ProtocolError, match="longer than 5"):
        Reader(bytes.fromhex("8080808080800100")).uvarint()
    with pytest.raises(ProtocolError, match="longer than 5"):
        Reader(bytes.fromhex("808080808001")).varint()
    with pytest.raises(ProtocolError, match="longer than 10"):
        Reader(bytes.fromhex("80808080808080808080800100")).varlong()
    # Five bytes but more than 32 bits of payload.
    with pytest.raises(ProtocolError, match="overflows"):
        Reader(bytes.fromhex("ffffffff1f")).uvarint()
    with pytest.raises(ProtocolError, match="overflows"):
        Reader(bytes.fromhex("ffffffffffffffffff03")).varlong()


def test_absurd_array_count_fails_fast() -> None:
    calls = 0

    def read_item() -> int:
        nonlocal calls
        calls += 1
        return 0

    data = (2_000_000_000).to_bytes(4, "big") + bytes(10)
    start = time.perf_counter()
    with pytest.raises(ProtocolError, match="2000000000"):
        Reader(data).array(read_item)
    with pytest.raises(ProtocolError):
        Reader(data).int32_array()
    with pytest.raises(ProtocolError):
        Reader(data).nullable_array(read_item)
    compact = Writer()
    compact.uvarint(2**32 - 1)
    with pytest.raises(ProtocolError):
        Reader(compact.getvalue() + bytes(10)).compact_array(read_item)
    assert calls == 0
    assert time.perf_counter() - start < 0.5


def test_array_count_checked_against_item_size() -> None:
    # 3 int32 elements need 12 bytes; only 8 remain.
    data = (3).to_bytes(4, "big") + bytes(8)
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(data).int32_array()
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(data).array(Reader(data).int32, item_size=4)


def test_absurd_lengths_fail_fast() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        Reader(b"\x7f\xff" + b"x" * 10).string()
    with pytest.raises(ProtocolError, match="exceeds"):
        Reader(b"\x7f\xff\xff\xff" + b"x" * 10).bytes_()
    with pytest.raises(ProtocolError, match="exceeds"):
        Reader(bytes.fromhex("ffffffff0f") + b"x" * 10).compact_bytes()
    with pytest.raises(ProtocolError, match="tagged fields"):
        Reader(bytes.fromhex("ffffffff0f") + b"x" * 10).tagged_fields()


def test_negative_lengths_and_nulls() -> None:
    with pytest.raises(ProtocolError, match="negative"):
        Reader(b"\xff\xfe").string()
    with pytest.raises(ProtocolError, match="negative"):
        Reader(b"\xff\xff\xff\xfe").bytes_()
    with pytest.raises(ProtocolError, match="negative"):
        Reader(b"\xff\xff\xff\xfe").array(lambda: 0)
    with pytest.raises(ProtocolError, match="null"):
        Reader(b"\xff\xff").string()
    with pytest.raises(ProtocolError, match="null"):
        Reader(b"\x00").compact_string()
    with pytest.raises(ProtocolError, match="null"):
        Reader(b"\xff\xff\xff\xff").bytes_()
    with pytest.raises(ProtocolError, match="null"):
        Reader(b"\xff\xff\xff\xff").array(lambda: 0)
    assert Reader(b"\xff\xff\xff\xff").nullable_array(lambda: 0) is None


def test_invalid_utf8_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="UTF-8"):
        Reader(b"\x00\x02\xff\xfe").string()


def test_reader_position_and_views() -> None:
    r = Reader(memoryview(b"\x00\x01abcdef"), 0)
    assert r.int16() == 1
    assert r.pos == 2
    assert r.remaining == 6
    assert bytes(r.view(2)) == b"ab"
    r.skip(1)
    assert r.raw(3) == b"def"
    r.expect_end()
    with pytest.raises(ProtocolError):
        Reader(b"ab").expect_end()
    with pytest.raises(ProtocolError):
        Reader(b"ab", 3)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_anything_but_protocol_error(data: bytes) -> None:
    readers: list[Callable[[Reader], object]] = [
        lambda r: r.nullable_array(lambda: r.nullable_string(True), True),
        lambda r: r.array(lambda: (r.int32(), r.compact_nullable_bytes(), r.tagged_fields())),
        lambda r: (r.varint(), r.varlong(), r.uvarint(), r.string(), r.bytes_()),
        Reader.int32_array,
    ]
    for read in readers:
        with contextlib.suppress(ProtocolError):
            read(Reader(data))


def test_skip_if_skips_only_an_exact_match() -> None:
    r = Reader(b"\x01\x00\x00\x07")
    assert not r.skip_if(b"\x01\x00\x01")  # differs: nothing read
    assert r.pos == 0
    assert r.skip_if(b"\x01\x00\x00")
    assert r.pos == 3
    assert not r.skip_if(b"\x07\x00")  # runs past the end: nothing read
    assert r.int8() == 7


def test_pieces_keeps_order_and_size() -> None:
    w = Writer()
    w.int16(1)
    w.pieces([b"ab", b"c" * 3000, b""])
    w.raw(b"d")
    assert len(w) == 2 + 2 + 3000 + 1
    assert w.getvalue(size_prefix=True) == struct.pack(">ih", 3005, 1) + b"ab" + b"c" * 3000 + b"d"
