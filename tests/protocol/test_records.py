"""Tests for aioproducer.protocol.records: RecordBatch v2 encoding, decoding and re-stamping.

Third-party decoders and builders (kafka-python and aiokafka) serve as oracles. The venv
has none of kafka-python's optional codec backends (python-snappy, lz4, zstandard), so
for those codecs its record parsing and xerial framing run with cramjam doing the raw
block/frame work; aiokafka uses cramjam natively.
"""

from __future__ import annotations

import array
import contextlib
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import aiokafka.record.default_records as aiokafka_default
import cramjam
import kafka.codec
import kafka.record.default_records as kafka_default
import pytest
from aiokafka.record.memory_records import MemoryRecords as AiokafkaMemoryRecords
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as kafka_pure_crc32c
from kafka.record.memory_records import MemoryRecords as KafkaMemoryRecords

from aioproducer.errors import ConfigError, CorruptRecordError, SerializationError
from aioproducer.protocol.compression import Codec, compress, decompress
from aioproducer.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    decode_batches,
    restamp_producer_state,
)

Headers = list[tuple[str, bytes | None]]
RecordTuple = tuple[int, bytes | None, bytes | None, Headers]


# -- helpers ----------------------------------------------------------------------------------


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def recrc(batch: bytes | bytearray) -> bytes:
    """Return ``batch`` with its CRC recomputed (to test structure checks behind the CRC)."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def build(
    records: list[RecordTuple],
    codec: Codec = Codec.NONE,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = RecordBatchBuilder(codec, transactional=transactional)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build(*producer)


def as_tuples(records: list[Record]) -> list[tuple[int, int, Any, Any, Any]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records]


@pytest.fixture(scope="module", autouse=True)
def kafka_python_codecs() -> Iterator[None]:
    """Give kafka-python codec backends for snappy, lz4 and zstd (see module docstring)."""

    def lz4_encode(payload: bytes) -> bytes:
        compressor = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        compressor.compress(bytes(payload))
        return bytes(compressor.finish())

    patch = pytest.MonkeyPatch()
    patch.setattr(
        kafka.codec,
        "snappy",
        SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        ),
    )
    patch.setattr(kafka.codec, "lz4", SimpleNamespace())
    patch.setattr(kafka.codec, "zstd", SimpleNamespace())
    patch.setattr(kafka_default, "lz4_encode", lz4_encode)
    patch.setattr(kafka_default, "lz4_decode", lambda p: bytes(cramjam.lz4.decompress(bytes(p))))
    patch.setattr(kafka_default, "zstd_encode", lambda p: bytes(cramjam.zstd.compress(bytes(p))))
    patch.setattr(kafka_default, "zstd_decode", lambda p: bytes(cramjam.zstd.decompress(bytes(p))))
    yield
    patch.undo()


def third_party_decodes(data: bytes) -> list[dict[str, Any]]:
    """Decode ``data`` with kafka-python, aiokafka (C) and aiokafka (pure Python).

    Asserts that all three agree and validate the CRC, and returns kafka-python's view.
    """
    views = []
    for name, batches in (
        ("kafka-python", _iterate(KafkaMemoryRecords(bytes(data)))),
        ("aiokafka", _iterate(AiokafkaMemoryRecords(bytes(data)))),
        ("aiokafka-py", _split_py(data)),
    ):
        decoded = []
        for batch in batches:
            assert batch.validate_crc(), name
            fields = {
                "base_offset": batch.base_offset,
                "magic": batch.magic,
                "crc": batch.crc,
                "attributes": batch.attributes,
                "codec": batch.compression_type,
                "timestamp_type": batch.timestamp_type,
                "is_transactional": batch.is_transactional,
                "is_control": batch.is_control_batch,
                "last_offset_delta": batch.last_offset_delta,
                "base_timestamp": batch.first_timestamp,
                "max_timestamp": batch.max_timestamp,
                "producer_id": batch.producer_id,
                "producer_epoch": batch.producer_epoch,
                "base_sequence": batch.base_sequence,
                "records": [
                    (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch
                ],
            }
            decoded.append(fields)
        views.append(decoded)
    assert views[0] == views[1] == views[2]
    return views[0]


def _iterate(memory_records: Any) -> Iterator[Any]:
    while memory_records.has_next():
        yield memory_records.next_batch()


def _split_py(data: bytes) -> Iterator[Any]:
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        yield aiokafka_default._DefaultRecordBatchPy(bytes(data[pos : pos + 12 + length]))
        pos += 12 + length


def ours_as_fields(batch: RecordBatch) -> dict[str, Any]:
    return {
        "base_offset": batch.base_offset,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "codec": int(batch.codec),
        "timestamp_type": batch.timestamp_type,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "last_offset_delta": batch.last_offset_delta,
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "records": as_tuples(batch.records),
    }


# -- known bytes ------------------------------------------------------------------------------

# Derived by hand from the v2 layout: two records, transactional, producer 5/3/7.
#   record 0: ts 1000 (delta 0), offset delta 0, null key, value "hi", no headers
#     body 00 00 00 01 04 68 69 00 (8 bytes) -> length varint zigzag(8)=0x10
#   record 1: ts 999 (delta -1 -> 0x01), offset delta 1 (0x02), key "k", null value,
#     one header "h" = "v": body 00 01 02 02 6b 01 02 02 68 02 76 (11 bytes) -> 0x16
#   records section: 9 + 12 = 21 bytes; batch 82 bytes; batchLength 70 = 0x46
KNOWN_RECORDS = bytes.fromhex("10 00 00 00 01 04 6869 0016 00 01 02 02 6b 01 02 02 68 02 76")
KNOWN_COVERED = bytes.fromhex(
    "0010"  # attributes: transactional, no codec, CreateTime
    "00000001"  # lastOffsetDelta
    "00000000000003e8"  # baseTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000 (the second record is older)
    "0000000000000005"  # producerId
    "0003"  # producerEpoch
    "00000007"  # baseSequence
    "00000002"  # recordsCount
)
KNOWN_CRC = 0x74A70E86
KNOWN_BATCH = (
    bytes.fromhex("000000000000000000000046ffffffff02")
    + KNOWN_CRC.to_bytes(4, "big")
    + KNOWN_COVERED
    + KNOWN_RECORDS
)


def test_known_bytes_crc_is_crc32c_of_attributes_to_end() -> None:
    assert crc32c_bitwise(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c_bitwise(KNOWN_COVERED + KNOWN_RECORDS) == KNOWN_CRC


def test_builder_produces_known_bytes() -> None:
    builder = RecordBatchBuilder(transactional=True)
    assert builder.append(1000, None, b"hi") == 9
    assert builder.append(999, b"k", None, [("h", b"v")]) == 12
    assert builder.size_in_bytes == 61 + 21
    assert builder.build(5, 3, 7) == KNOWN_BATCH


def test_decoder_reads_known_bytes() -> None:
    (batch,) = decode_batches(KNOWN_BATCH)
    assert batch == RecordBatch(
        base_offset=0,
        batch_length=70,
        partition_leader_epoch=-1,
        magic=2,
        crc=KNOWN_CRC,
        attributes=0x10,
        codec=Codec.NONE,
        timestamp_type=0,
        is_transactional=True,
        is_control=False,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1000,
        producer_id=5,
        producer_epoch=3,
        base_sequence=7,
        records=[
            Record(0, 1000, None, b"hi", []),
            Record(1, 999, b"k", None, [("h", b"v")]),
        ],
    )


def test_known_bytes_agree_with_third_party_decoders() -> None:
    (fields,) = third_party_decodes(KNOWN_BATCH)
    assert fields["records"] == [(0, 1000, None, b"hi", []), (1, 999, b"k", None, [("h", b"v")])]
    assert fields["crc"] == KNOWN_CRC
    assert kafka_pure_crc32c(KNOWN_BATCH[21:]) == KNOWN_CRC


def test_header_constants() -> None:
    assert RECORD_BATCH_OVERHEAD == 61
    builder = RecordBatchBuilder()
    assert builder.size_in_bytes == 61
    assert builder.record_count == 0
    assert builder.base_timestamp is None
    assert builder.max_timestamp is None


# -- varint boundaries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value_len", "length_prefix"),
    [
        (0, b"\x0c"),  # body 6 -> zigzag 12
        (57, b"\x7e"),  # body 63 -> 126, the last one-byte length
        (58, b"\x80\x01"),  # body 64 -> 128
        (16_375, b"\xfe\xff\x01"),  # body 16383 -> the table's last entry
        (16_376, b"\x80\x80\x02"),  # body 16384 -> the first length outside the table
    ],
)
def test_record_length_varint(value_len: int, length_prefix: bytes) -> None:
    builder = RecordBatchBuilder()
    # body: attributes, timestamp delta, offset delta, null key (1 byte each), value
    # length varint, value, header count (1 byte)
    added = builder.append(5, None, b"v" * value_len)
    batch = builder.build()
    assert batch[61 : 61 + len(length_prefix)] == length_prefix
    assert added == len(batch) - 61
    assert decode_batches(batch)[0].records[0].value == b"v" * value_len


@pytest.mark.parametrize(
    ("delta", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (16_383, b"\xfe\xff\x01"),
        (16_384, b"\x80\x80\x02"),
        (-(2**62), b"\xff" * 8 + b"\x7f"),
        (2**62, b"\x80" * 9 + b"\x01"),
    ],
)
def test_timestamp_delta_varlong(delta: int, encoded: bytes) -> None:
    base = 12345
    builder = RecordBatchBuilder()
    builder.append(base, None, None)
    first_len = builder.size_in_bytes - 61
    builder.append(base + delta, None, None)
    batch = builder.build()
    second = batch[61 + first_len :]
    # length, attributes, then the timestamp delta
    assert second[2 : 2 + len(encoded)] == encoded
    records = decode_batches(batch)[0].records
    assert [r.timestamp_ms for r in records] == [base, base + delta]


def test_offset_deltas_beyond_the_table() -> None:
    builder = RecordBatchBuilder()
    for i in range(20_000):
        builder.append(i, None, i.to_bytes(3, "big"))
    batch = builder.build()
    (decoded,) = decode_batches(batch)
    assert decoded.last_offset_delta == 19_999
    assert [(r.offset, r.timestamp_ms, r.value) for r in decoded.records] == [
        (i, i, i.to_bytes(3, "big")) for i in range(20_000)
    ]
    last = third_party_decodes(batch)[0]["records"][-1]
    assert last == (19_999, 19_999, None, (19_999).to_bytes(3, "big"), [])


def test_many_headers_and_long_header_values() -> None:
    headers: Headers = [(f"h{i}", bytes([i % 256]) * i) for i in range(300)]
    headers += [("big", b"x" * 20_000), ("null", None), ("", b""), ("ünïcødé ✓ 𝄞", b"\x00")]
    batch = build([(1, b"key", b"value", headers)])
    (decoded,) = decode_batches(batch)
    assert decoded.records[0].headers == headers
    assert third_party_decodes(batch)[0]["records"][0][4] == headers


# -- append -----------------------------------------------------------------------------------


def test_append_returns_exact_growth() -> None:
    builder = RecordBatchBuilder(Codec.ZSTD)
    sizes = []
    for i, (key, value, headers) in enumerate(
        [
            (None, b"x" * 100, []),
            (b"k" * 10, b"y" * 100, [("trace", b"abc")]),
            (b"", b"", [("n", None)]),
            (None, None, []),
        ]
    ):
        before = builder.size_in_bytes
        added = builder.append(1_700_000_000_000 + i, key, value, headers)
        sizes.append(added)
        assert builder.size_in_bytes - before == added
    # record 1: body 1+1+1+1+(2+100)+1 = 107, length varint 2 bytes
    # record 2: body 1+1+1+(1+10)+(2+100)+(1+1+5+1+3) = 127, length varint 2 bytes
    # record 3: body 1+1+1+1+1+(1+1+1+1) = 9; record 4: body 6
    assert sizes == [109, 129, 10, 7]
    assert builder.record_count == 4


def test_bytes_like_keys_values_and_header_values_encode_like_bytes() -> None:
    plain = RecordBatchBuilder()
    plain.append(7, b"key!", b"value-bytes!", [("h", b"hv!!")])
    expected = plain.build()
    for convert in (bytearray, memoryview, lambda b: memoryview(bytearray(b))):
        builder = RecordBatchBuilder()
        builder.append(7, convert(b"key!"), convert(b"value-bytes!"), [("h", convert(b"hv!!"))])
        assert builder.build() == expected
    # Multi-byte item formats are measured in bytes, not items.
    builder = RecordBatchBuilder()
    builder.append(
        7,
        memoryview(array.array("I", b"key!")),
        array.array("B", b"value-bytes!"),  # type: ignore[arg-type]
        [("h", memoryview(array.array("H", b"hv!!")))],  # type: ignore[list-item]
    )
    assert builder.build() == expected


def test_appended_buffers_are_copied() -> None:
    value = bytearray(b"original")
    builder = RecordBatchBuilder()
    builder.append(1, None, value)
    value[:] = b"mutated!"
    assert decode_batches(builder.build())[0].records[0].value == b"original"


def _state(builder: RecordBatchBuilder) -> tuple[object, ...]:
    return (
        builder.record_count,
        builder.size_in_bytes,
        builder.base_timestamp,
        builder.max_timestamp,
        builder.build(),
    )


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((10, "str key", b"v"), SerializationError, "key must be bytes-like"),
        ((10, None, 42), SerializationError, "value must be bytes-like"),
        ((10, None, b"v", [(b"bytes-key", b"v")]), SerializationError, "header keys must be str"),
        ((10, None, b"v", [("k", "str value")]), SerializationError, "header value"),
        ((10, None, b"v", [("k",)]), SerializationError, "pair"),
        ((10, None, b"v", [("\udc80", b"v")]), SerializationError, "UTF-8"),
        ((2**63, None, b"v"), ValueError, "range"),
        ((-(2**63) - 1, None, b"v"), ValueError, "range"),
        ((10.5, None, b"v"), TypeError, "must be an int"),
    ],
)
def test_rejected_append_leaves_builder_unchanged(
    args: tuple[Any, ...], error: type[Exception], match: str
) -> None:
    builder = RecordBatchBuilder(Codec.GZIP)
    builder.append(100, b"k", b"first")
    before = _state(builder)
    with pytest.raises(error, match=match):
        builder.append(*args)
    assert _state(builder) == before
    builder.append(101, None, b"second")
    assert [r.value for r in decode_batches(builder.build())[0].records] == [b"first", b"second"]


@pytest.mark.parametrize(("ts", "error"), [(2**63, ValueError), (1.0, TypeError)])
def test_first_timestamp_is_validated(ts: Any, error: type[Exception]) -> None:
    builder = RecordBatchBuilder()
    with pytest.raises(error):
        builder.append(ts, None, b"v")
    assert builder.record_count == 0
    assert builder.size_in_bytes == 61


def test_timestamps_extremes_of_int64() -> None:
    low, high = -(2**63), 2**63 - 1
    batch = build([(0, None, b"a", []), (high, None, b"b", []), (-1, None, b"c", [])])
    (decoded,) = decode_batches(batch)
    assert [r.timestamp_ms for r in decoded.records] == [0, high, -1]
    assert decoded.max_timestamp == high
    batch = build([(low, None, b"a", [])])
    assert decode_batches(batch)[0].base_timestamp == low


def test_invalid_codec_level_raises_config_error() -> None:
    with pytest.raises(ConfigError):
        RecordBatchBuilder(Codec.GZIP, 12)
    with pytest.raises(ConfigError):
        RecordBatchBuilder(Codec.SNAPPY, 1)
    assert RecordBatchBuilder(Codec.LZ4).level == 9
    assert RecordBatchBuilder(Codec.SNAPPY).level is None


def test_properties_track_timestamps() -> None:
    builder = RecordBatchBuilder()
    builder.append(500, None, None)
    builder.append(400, None, None)
    builder.append(900, None, None)
    builder.append(800, None, None)
    assert (builder.base_timestamp, builder.max_timestamp, builder.record_count) == (500, 900, 4)


# -- estimate_size ----------------------------------------------------------------------------


def test_estimate_size_exact_values() -> None:
    # 36 (worst-case varints: length 5, attributes 1, timestamp 10, offset 5, key length
    # 5, value length 5, header count 5) + key + value + per header 10 + 4 * key + value
    assert RecordBatchBuilder.estimate_size(None, 100, []) == 36 + 100
    assert RecordBatchBuilder.estimate_size(-1, None, []) == 36
    assert RecordBatchBuilder.estimate_size(3, 0, [("ab", b"xyz"), ("é", None)]) == (
        36 + 3 + (10 + 4 * 2 + 3) + (10 + 4 * 1)
    )


@given(
    records=st.lists(
        st.tuples(
            st.integers(-(2**61), 2**61),
            st.none() | st.binary(max_size=200),
            st.none() | st.binary(max_size=200),
            st.lists(
                st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=30)), max_size=3
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
@settings(max_examples=100, deadline=None)
def test_estimate_size_is_an_upper_bound(records: list[RecordTuple]) -> None:
    builder = RecordBatchBuilder()
    for ts, key, value, headers in records:
        estimate = RecordBatchBuilder.estimate_size(
            None if key is None else len(key), None if value is None else len(value), headers
        )
        assert builder.append(ts, key, value, headers) <= estimate


# -- build ------------------------------------------------------------------------------------


def test_build_is_repeatable_and_reflects_later_appends() -> None:
    for codec in Codec:
        builder = RecordBatchBuilder(codec)
        builder.append(10, None, b"a" * 50)
        first = builder.build(1, 0, 0)
        assert builder.build(1, 0, 0) == first
        assert builder.record_count == 1
        builder.append(11, None, b"b" * 50)
        second = builder.build(1, 0, 0)
        assert [r.value for r in decode_batches(second)[0].records] == [b"a" * 50, b"b" * 50]
        assert decode_batches(builder.build(1, 0, 0)) == decode_batches(second)


def test_build_empty_raises() -> None:
    with pytest.raises(ValueError, match="without records"):
        RecordBatchBuilder().build()


@pytest.mark.parametrize(
    ("producer", "transactional", "match"),
    [
        ((5, 0, -1), False, "base sequence"),
        ((-1, -1, -1), True, "transactional"),
        ((2**63, 0, 0), False, "int64"),
        ((1, 2**15, 0), False, "int16"),
        ((1, 0, 2**31), False, "int32"),
    ],
)
def test_build_rejects_bad_producer_state(
    producer: tuple[int, int, int], transactional: bool, match: str
) -> None:
    builder = RecordBatchBuilder(transactional=transactional)
    builder.append(1, None, b"v")
    with pytest.raises(ValueError, match=match):
        builder.build(*producer)


@pytest.mark.parametrize("codec", list(Codec))
def test_compressed_section_starts_after_header(codec: Codec) -> None:
    builder = RecordBatchBuilder(codec)
    for i in range(100):
        builder.append(1000 + i, None, b"payload %d " % i * 5)
    batch = builder.build()
    uncompressed = RecordBatchBuilder()
    for i in range(100):
        uncompressed.append(1000 + i, None, b"payload %d " % i * 5)
    plain = uncompressed.build()
    assert batch[21:23] == struct.pack(">h", int(codec))
    assert batch[57:61] == struct.pack(">i", 100)  # count stays uncompressed
    assert decompress(codec, batch[61:]) == plain[61:]
    assert struct.unpack(">i", batch[8:12])[0] == len(batch) - 12
    assert batch[61:] == compress(codec, plain[61:])


# -- round trips and third-party oracles ------------------------------------------------------

# Realistic epoch milliseconds, plus extremes whose deltas still fit in a varlong.
timestamps = st.one_of(
    st.integers(1_500_000_000_000, 1_500_000_100_000),
    st.integers(-(2**61), 2**61),
)
small_or_large_bytes = st.one_of(
    st.none(),
    st.binary(max_size=64),
    # Lengths around the end of the varint table.
    st.integers(16_370, 17_000).map(lambda n: bytes([n % 251]) * n),
)
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=4
)
record_lists = st.lists(
    st.tuples(timestamps, small_or_large_bytes, small_or_large_bytes, header_lists),
    min_size=1,
    max_size=12,
)
producer_states = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
)


def expected_records(records: list[RecordTuple]) -> list[tuple[int, int, Any, Any, Any]]:
    return [(i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(records)]


@pytest.mark.parametrize("codec", list(Codec))
@given(records=record_lists, producer=producer_states, transactional=st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip_with_every_decoder(
    codec: Codec,
    records: list[RecordTuple],
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    transactional = transactional and producer[0] >= 0
    batch = build(records, codec, producer, transactional)
    (decoded,) = decode_batches(batch)
    assert decoded.base_offset == 0
    assert decoded.batch_length == len(batch) - 12
    assert decoded.partition_leader_epoch == -1
    assert decoded.magic == 2
    assert decoded.crc == crc32c(batch[21:]) == struct.unpack(">I", batch[17:21])[0]
    assert decoded.attributes == int(codec) | (0x10 if transactional else 0)
    assert decoded.codec is codec
    assert decoded.timestamp_type == 0
    assert decoded.is_transactional is transactional
    assert decoded.is_control is False
    assert decoded.last_offset_delta == len(records) - 1
    assert decoded.base_timestamp == records[0][0]
    assert decoded.max_timestamp == max(r[0] for r in records)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == producer
    assert as_tuples(decoded.records) == expected_records(records)

    (theirs,) = third_party_decodes(batch)
    assert theirs == ours_as_fields(decoded)


def kafka_python_build(
    records: list[RecordTuple], codec: Codec, producer: tuple[int, int, int], txn: bool
) -> bytes:
    builder = kafka_default.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=txn,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=2**30,
    )
    for offset, (ts, key, value, headers) in enumerate(records):
        builder.append(offset, ts, key, value, headers)
    return bytes(builder.build())


def aiokafka_build(
    records: list[RecordTuple], codec: Codec, producer: tuple[int, int, int], txn: bool
) -> bytes:
    builder = aiokafka_default.DefaultRecordBatchBuilder(
        2, int(codec), int(txn), producer[0], producer[1], producer[2], 2**30
    )
    for offset, (ts, key, value, headers) in enumerate(records):
        builder.append(offset, ts, key, value, headers)
    return bytes(builder.build())


@pytest.mark.parametrize("third_party_build", [kafka_python_build, aiokafka_build])
@pytest.mark.parametrize("codec", list(Codec))
@given(records=record_lists, producer=producer_states, transactional=st.booleans())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_third_party_batches_decode_identically(
    third_party_build: Any,
    codec: Codec,
    records: list[RecordTuple],
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    transactional = transactional and producer[0] >= 0
    # Those builders silently drop the codec when compression does not pay off.
    padded = [*records, (records[0][0], None, b"z" * 2000, [])]
    batch = third_party_build(padded, codec, producer, transactional)
    (decoded,) = decode_batches(batch)
    assert decoded.codec is codec
    assert decoded.is_transactional is transactional
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == producer
    assert as_tuples(decoded.records) == expected_records(padded)
    (theirs,) = third_party_decodes(batch)
    assert theirs == ours_as_fields(decoded)


def test_third_party_snappy_without_xerial_framing_decodes() -> None:
    # librdkafka-style raw snappy, built with aiokafka's own codec helper.
    from aiokafka.codec import snappy_encode

    plain = build([(5, b"k", b"value " * 50, [("h", None)])])
    section = snappy_encode(plain[61:], xerial_compatible=False)
    header = bytearray(plain[:61])
    struct.pack_into(">h", header, 21, int(Codec.SNAPPY))
    struct.pack_into(">i", header, 8, 61 + len(section) - 12)
    (decoded,) = decode_batches(recrc(bytes(header) + section))
    assert as_tuples(decoded.records) == [(0, 5, b"k", b"value " * 50, [("h", None)])]


# -- decode_batches: sequences, partial data, corruption --------------------------------------


def three_batches() -> list[bytes]:
    return [
        build([(100 + i, b"k%d" % j, b"v" * (10 * i + j), []) for i in range(3)], codec)
        for j, codec in enumerate((Codec.NONE, Codec.LZ4, Codec.GZIP))
    ]


def test_decodes_concatenated_batches_and_offsets() -> None:
    parts = three_batches()
    # Give the batches broker-assigned offsets (not CRC-covered) and a leader epoch.
    data = b""
    for index, part in enumerate(parts):
        patched = bytearray(part)
        struct.pack_into(">qii", patched, 0, 1000 * index, len(part) - 12, 7)
        data += bytes(patched)
    batches = decode_batches(data)
    assert [b.base_offset for b in batches] == [0, 1000, 2000]
    assert [b.partition_leader_epoch for b in batches] == [7, 7, 7]
    assert [[r.offset for r in b.records] for b in batches] == [
        [0, 1, 2],
        [1000, 1001, 1002],
        [2000, 2001, 2002],
    ]
    assert [b.codec for b in batches] == [Codec.NONE, Codec.LZ4, Codec.GZIP]
    theirs = third_party_decodes(data)
    assert theirs == [ours_as_fields(b) for b in batches]


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 40, 61, 62, -1])
def test_partial_last_batch(cut: int) -> None:
    parts = three_batches()
    whole = parts[0] + parts[1]
    last = parts[2]
    truncated = whole + last[:cut]
    assert len(decode_batches(truncated, allow_partial=True)) == 2
    with pytest.raises(CorruptRecordError, match=f"byte {len(whole)}"):
        decode_batches(truncated)


def test_empty_input() -> None:
    assert decode_batches(b"") == []
    assert decode_batches(b"", allow_partial=True) == []


def test_bad_magic_is_rejected_even_when_partial() -> None:
    batch = bytearray(three_batches()[0])
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_batches(bytes(batch))
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_batches(bytes(batch[:30]), allow_partial=True)


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 48])
def test_invalid_batch_length_is_rejected(length: int) -> None:
    batch = bytearray(three_batches()[0])
    struct.pack_into(">i", batch, 8, length)
    with pytest.raises(CorruptRecordError, match=f"invalid length {length}"):
        decode_batches(bytes(batch), allow_partial=True)


def test_oversized_batch_length_is_rejected() -> None:
    batch = bytearray(three_batches()[0])
    struct.pack_into(">i", batch, 8, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="claims 2147483659 bytes"):
        decode_batches(bytes(batch))


def test_unknown_codec_is_rejected() -> None:
    batch = bytearray(three_batches()[0])
    struct.pack_into(">h", batch, 21, 5)
    with pytest.raises(CorruptRecordError, match="unknown codec id 5"):
        decode_batches(recrc(batch))


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_any_flipped_crc_covered_byte_is_detected(data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(list(Codec)))
    batch = bytearray(build([(1, b"key", b"value" * 20, [("h", b"x")])] * 3, codec, (9, 1, 4)))
    index = data.draw(st.integers(21, len(batch) - 1))
    batch[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bytes(batch))
    # kafka-python agrees that the CRC no longer matches.
    assert not KafkaMemoryRecords(bytes(batch)).next_batch().validate_crc()


def test_leader_epoch_and_base_offset_are_not_crc_covered() -> None:
    batch = bytearray(three_batches()[0])
    struct.pack_into(">q", batch, 0, 123456)
    struct.pack_into(">i", batch, 12, 99)
    (decoded,) = decode_batches(bytes(batch))
    assert (decoded.base_offset, decoded.partition_leader_epoch) == (123456, 99)
    assert decoded.records[0].offset == 123456


def corrupt_records_section(records: bytes, count: int) -> bytes:
    """A NONE batch with a chosen (possibly corrupt) section and a valid CRC."""
    header = bytearray(build([(1, None, b"x", [])])[:61])
    struct.pack_into(">i", header, 8, 61 + len(records) - 12)
    struct.pack_into(">i", header, 57, count)
    return recrc(bytes(header) + records)


GOOD_RECORD = bytes.fromhex("10 00 00 00 01 04 6869 00")  # as in the known batch


def record_with_body(body: str, length: int | None = None) -> bytes:
    """A record: zig-zag length (one byte, < 64) followed by the hex ``body``."""
    raw = bytes.fromhex(body)
    size = len(raw) if length is None else length
    assert 0 <= size < 64
    return bytes([size << 1]) + raw


FILLER = "00" * 50


@pytest.mark.parametrize(
    ("records", "count", "match"),
    [
        (GOOD_RECORD, 2, "cannot fit"),
        (GOOD_RECORD * 3, 2, "9 bytes are left after the 2 records"),
        (GOOD_RECORD, 0, "left after the 0 records"),
        (GOOD_RECORD, -1, "negative record count"),
        (GOOD_RECORD, 2**31 - 1, "cannot fit"),
        (bytes.fromhex("ffffffffff"), 1, "cannot fit"),
        # attributes, ts, offset, key len, value len, value, header count
        (record_with_body("00 00 00 01 04 6869 00", 63), 1, "length 63, but only 8"),
        (record_with_body("00 00 00 01 04 6869 00", 5) + b"\x00" * 3, 1, "invalid length 5"),
        (record_with_body("00 00 00 01 04 6869 00 00"), 1, "declares 9 bytes but its fields use 8"),
        (record_with_body("00 00 00 03 04 6869 00"), 1, "key length -2"),
        (record_with_body("00 00 00 0a 04 6869 00"), 1, "key overruns"),
        (record_with_body("00 00 00 01 08 6869 00"), 1, "value overruns"),
        (record_with_body("00 00 00 01 05 6869 00"), 1, "value length -3"),
        (record_with_body("00 00 00 01 04 6869 7e"), 1, "invalid header count 63"),
        (record_with_body("00 00 00 01 04 6869 01"), 1, "invalid header count -1"),
        (record_with_body("00 00 00 01 04 6869"), 1, "header count of record 0 is truncated"),
        # ... then header key length, key, header value length, value
        (record_with_body("00 00 00 01 01 02 7e 00 00"), 1, "invalid header key length 63"),
        (record_with_body("00 00 00 01 01 02 01 00 00"), 1, "invalid header key length -1"),
        (record_with_body("00 00 00 01 01 02 02 ff 01"), 1, "not UTF-8"),
        (record_with_body("00 00 00 01 01 02 00 7e 00"), 1, "header value overruns"),
        (record_with_body("00 00 00 01 01 02 00 05 00"), 1, "header value length -3"),
        (record_with_body("00" + "ff" * 10 + FILLER), 1, "longer than 10 bytes"),
        (record_with_body("00 00" + "ff" * 5 + "7f" + FILLER), 1, "longer than 5 bytes"),
        (record_with_body("00 00 ffffffff7f" + FILLER), 1, "out of range"),
        (GOOD_RECORD * 2 + bytes.fromhex("808080"), 3, "length of record 2 is truncated"),
    ],
)
def test_structural_corruption_behind_a_valid_crc(records: bytes, count: int, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        decode_batches(corrupt_records_section(records, count))


def test_structural_corruption_inside_compressed_section() -> None:
    plain = build([(1, b"key", b"value", [])])
    section = bytearray(plain[61:])
    section[0] = 0x7E  # record length 63: overruns
    packed = compress(Codec.ZSTD, bytes(section))
    header = bytearray(plain[:61])
    struct.pack_into(">h", header, 21, int(Codec.ZSTD))
    struct.pack_into(">i", header, 8, 61 + len(packed) - 12)
    with pytest.raises(CorruptRecordError, match="record 0 has length 63"):
        decode_batches(recrc(bytes(header) + packed))


def test_corrupt_compressed_section_behind_a_valid_crc() -> None:
    batch = bytearray(build([(1, b"key", b"value" * 100, [])], Codec.LZ4))
    batch[70] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="lz4"):
        decode_batches(recrc(batch))


def test_decompressed_size_is_bounded() -> None:
    builder = RecordBatchBuilder(Codec.ZSTD)
    for i in range(200):
        builder.append(i, None, bytes(10_000))
    batch = builder.build()
    assert len(batch) < 10_000
    assert len(decode_batches(batch, max_decompressed_size=builder.size_in_bytes)[0].records) == 200
    with pytest.raises(CorruptRecordError, match="more than 100000"):
        decode_batches(batch, max_decompressed_size=100_000)


def test_log_append_time_and_control_flags() -> None:
    batch = bytearray(build([(10, None, b"a", []), (30, None, b"b", []), (20, None, b"c", [])]))
    struct.pack_into(">h", batch, 21, 0x08 | 0x20)
    (decoded,) = decode_batches(recrc(batch))
    assert decoded.timestamp_type == 1
    assert decoded.is_control is True
    assert [r.timestamp_ms for r in decoded.records] == [30, 30, 30]


def test_crc_check_can_be_skipped() -> None:
    batch = bytearray(three_batches()[0])
    batch[17] ^= 0xFF
    assert len(decode_batches(bytes(batch), verify_crc=False)[0].records) == 3


def test_accepts_bytearray_and_memoryview() -> None:
    data = b"".join(three_batches())
    expected = decode_batches(data)
    assert decode_batches(bytearray(data)) == expected
    assert decode_batches(memoryview(b"xx" + data)[2:]) == expected


@given(data=st.data())
@settings(max_examples=300, deadline=None)
def test_mutations_never_raise_anything_but_corrupt_record_error(data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(list(Codec)))
    records = [(1, b"key", b"value" * 3, [("h", b"x"), ("n", None)]), (5, None, b"", [])]
    batch = bytearray(build(records * 2, codec, (9, 1, 4)))
    for _ in range(data.draw(st.integers(1, 6))):
        index = data.draw(st.integers(0, len(batch) - 1))
        batch[index] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        batch = batch[: data.draw(st.integers(0, len(batch)))]
    if data.draw(st.booleans()):
        batch += data.draw(st.binary(max_size=80))
    for verify in (True, False):
        with contextlib.suppress(CorruptRecordError):
            decode_batches(bytes(batch), verify_crc=verify, allow_partial=data.draw(st.booleans()))


# -- split ------------------------------------------------------------------------------------


def sized_records() -> list[RecordTuple]:
    # body 1+1+1+1+(2+101)+1 = 108, plus a 2-byte length: 110 bytes per record.
    return [(1000 + i, None, bytes([i]) * 101, []) for i in range(10)]


def test_split_exact_grouping() -> None:
    builder = RecordBatchBuilder(Codec.SNAPPY, transactional=True)
    for record in sized_records():
        assert builder.append(*record) == 110
    # 61 + 3 * 110 = 391 fits in 400, a fourth record would not.
    parts = builder.split(400)
    assert [p.record_count for p in parts] == [3, 3, 3, 1]
    assert [p.size_in_bytes for p in parts] == [391, 391, 391, 171]
    assert all(p.codec is Codec.SNAPPY and p.transactional for p in parts)
    assert [p.base_timestamp for p in parts] == [1000, 1003, 1006, 1009]
    decoded = [decode_batches(p.build(3, 0, 0))[0] for p in parts]
    values = [r.value for batch in decoded for r in batch.records]
    assert values == [bytes([i]) * 101 for i in range(10)]
    assert [[r.offset for r in b.records] for b in decoded] == [[0, 1, 2]] * 3 + [[0]]
    assert [[r.timestamp_ms for r in b.records] for b in decoded] == [
        [1000, 1001, 1002],
        [1003, 1004, 1005],
        [1006, 1007, 1008],
        [1009],
    ]
    # The original is untouched.
    assert builder.record_count == 10


def test_split_boundary_is_inclusive() -> None:
    builder = RecordBatchBuilder()
    for record in sized_records()[:4]:
        builder.append(*record)
    assert [p.record_count for p in builder.split(61 + 2 * 110)] == [2, 2]
    assert [p.record_count for p in builder.split(61 + 2 * 110 - 1)] == [1, 1, 1, 1]


def test_split_gives_oversized_records_their_own_builder() -> None:
    builder = RecordBatchBuilder(Codec.ZSTD, 7)
    builder.append(1, b"a", b"small", [("h", None)])
    builder.append(2, b"b", b"x" * 5000, [])
    builder.append(3, b"c", b"small", [])
    builder.append(4, b"d", b"small", [])
    parts = builder.split(200)
    assert [p.record_count for p in parts] == [1, 1, 2]
    assert parts[1].size_in_bytes > 200
    assert all(p.level == 7 for p in parts)
    decoded = [as_tuples(decode_batches(p.build())[0].records) for p in parts]
    assert decoded == [
        [(0, 1, b"a", b"small", [("h", None)])],
        [(0, 2, b"b", b"x" * 5000, [])],
        [(0, 3, b"c", b"small", []), (1, 4, b"d", b"small", [])],
    ]


@given(records=record_lists, max_bytes=st.integers(61, 3000))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_split_preserves_records_and_packs_greedily(
    records: list[RecordTuple], max_bytes: int
) -> None:
    builder = RecordBatchBuilder(Codec.LZ4)
    for record in records:
        builder.append(*record)
    parts = builder.split(max_bytes)
    flattened = [
        (r.timestamp_ms, r.key, r.value, r.headers)
        for part in parts
        for r in decode_batches(part.build())[0].records
    ]
    assert flattened == [tuple(r) for r in records]
    for index, part in enumerate(parts):
        assert part.size_in_bytes <= max_bytes or part.record_count == 1
        if index + 1 < len(parts):
            # Greedy: the next part's first record would not have fitted.
            probe = RecordBatchBuilder()
            for r in decode_batches(part.build())[0].records:
                probe.append(r.timestamp_ms, r.key, r.value, r.headers)
            head = decode_batches(parts[index + 1].build())[0].records[0]
            probe.append(head.timestamp_ms, head.key, head.value, head.headers)
            assert probe.size_in_bytes > max_bytes


def test_split_of_empty_builder() -> None:
    assert RecordBatchBuilder().split(1000) == []


# -- restamp_producer_state -------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
def test_restamp_changes_only_producer_fields_and_crc(codec: Codec) -> None:
    builder = RecordBatchBuilder(codec)
    for i in range(20):
        builder.append(1000 + i, b"k%d" % i, b"v" * 100, [("h", b"x")])
    original = builder.build()
    restamped = restamp_producer_state(original, 123456789, 7, 42, transactional=True)
    assert len(restamped) == len(original)
    assert restamped[:17] == original[:17]  # base offset, length, leader epoch, magic
    assert restamped[21:23] == struct.pack(">h", int(codec) | 0x10)
    assert restamped[23:43] == original[23:43]  # last offset delta, timestamps
    assert restamped[43:57] == struct.pack(">qhi", 123456789, 7, 42)
    assert restamped[57:] == original[57:]  # count and records: not recompressed
    assert struct.unpack(">I", restamped[17:21])[0] == crc32c_bitwise(restamped[21:])

    # Identical to building afresh with that state (compression is deterministic).
    txn_builder = RecordBatchBuilder(codec, transactional=True)
    for i in range(20):
        txn_builder.append(1000 + i, b"k%d" % i, b"v" * 100, [("h", b"x")])
    assert txn_builder.build(123456789, 7, 42) == restamped

    (theirs,) = third_party_decodes(restamped)
    assert (theirs["producer_id"], theirs["producer_epoch"], theirs["base_sequence"]) == (
        123456789,
        7,
        42,
    )
    assert theirs["is_transactional"] is True
    assert theirs == ours_as_fields(decode_batches(restamped)[0])


def test_restamp_keeps_or_clears_transactional_flag() -> None:
    builder = RecordBatchBuilder(transactional=True)
    builder.append(1, None, b"v")
    batch = builder.build(1, 0, 0)
    kept = restamp_producer_state(batch, 1, 1, 5)
    assert decode_batches(kept)[0].is_transactional is True
    cleared = restamp_producer_state(batch, 1, 1, 5, transactional=False)
    assert decode_batches(cleared)[0].attributes == 0
    reset = restamp_producer_state(cleared, -1, -1, -1)
    assert (decode_batches(reset)[0].producer_id, decode_batches(reset)[0].base_sequence) == (
        -1,
        -1,
    )


def test_restamp_keeps_broker_fields() -> None:
    batch = bytearray(three_batches()[1])
    struct.pack_into(">q", batch, 0, 77)
    struct.pack_into(">i", batch, 12, 3)
    restamped = restamp_producer_state(bytes(batch), 4, 2, 0)
    (decoded,) = decode_batches(restamped)
    assert (decoded.base_offset, decoded.partition_leader_epoch) == (77, 3)


def test_restamp_rejects_corrupt_or_foreign_input() -> None:
    batch = three_batches()[0]
    flipped = bytearray(batch)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        restamp_producer_state(bytes(flipped), 1, 0, 0)
    with pytest.raises(CorruptRecordError, match="batch length"):
        restamp_producer_state(batch + batch, 1, 0, 0)
    with pytest.raises(CorruptRecordError, match="61 bytes"):
        restamp_producer_state(batch[:60], 1, 0, 0)
    wrong_magic = bytearray(batch)
    wrong_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        restamp_producer_state(bytes(wrong_magic), 1, 0, 0)
    with pytest.raises(ValueError, match="base sequence"):
        restamp_producer_state(batch, 1, 0, -1)
    with pytest.raises(ValueError, match="transactional"):
        restamp_producer_state(batch, -1, -1, -1, transactional=True)


@given(
    producer=producer_states,
    new_state=st.tuples(
        st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)
    ),
    codec=st.sampled_from(list(Codec)),
)
@settings(max_examples=50, deadline=None)
def test_restamp_round_trip(
    producer: tuple[int, int, int], new_state: tuple[int, int, int], codec: Codec
) -> None:
    batch = build([(5, b"k", b"v" * 30, [("a", b"b")])] * 3, codec, producer)
    restamped = restamp_producer_state(batch, *new_state)
    (decoded,) = decode_batches(restamped)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == new_state
    assert decoded.records == decode_batches(batch)[0].records
    assert KafkaMemoryRecords(restamped).next_batch().validate_crc()
    assert AiokafkaMemoryRecords(restamped).next_batch().validate_crc()


def test_release_frees_the_records_but_keeps_the_count() -> None:
    builder = RecordBatchBuilder()
    for i in range(10):
        builder.append(1000 + i, None, b"x" * 100)
    assert builder.size_in_bytes > 1000
    builder.release()
    assert builder.record_count == 10
    assert builder.size_in_bytes == RECORD_BATCH_OVERHEAD
    with pytest.raises(ValueError, match="released"):
        builder.build()
