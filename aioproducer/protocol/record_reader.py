"""Decoding Kafka record batches (message format v2): bounded, CRC-checked, pure.

The layout is described in :mod:`.batch_layout`. Every length is checked against the bytes
actually present before anything is allocated, and decompression stops at a bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crc32c import crc32c

from aioproducer.errors import CorruptRecordError
from aioproducer.protocol.batch_layout import CODEC_MASK as _CODEC_MASK
from aioproducer.protocol.batch_layout import CONTROL_FLAG as _CONTROL_FLAG
from aioproducer.protocol.batch_layout import CRC_START as _CRC_START
from aioproducer.protocol.batch_layout import DEFAULT_MAX_DECOMPRESSED_SIZE, RECORD_BATCH_OVERHEAD
from aioproducer.protocol.batch_layout import HEADER as _HEADER
from aioproducer.protocol.batch_layout import HEADER_UP_TO_MAGIC as _HEADER_UP_TO_MAGIC
from aioproducer.protocol.batch_layout import INT32 as _INT32
from aioproducer.protocol.batch_layout import LOG_OVERHEAD as _LOG_OVERHEAD
from aioproducer.protocol.batch_layout import MAGIC as _MAGIC
from aioproducer.protocol.batch_layout import TIMESTAMP_TYPE_MASK as _TIMESTAMP_TYPE_MASK
from aioproducer.protocol.batch_layout import TRANSACTIONAL_FLAG as _TRANSACTIONAL_FLAG
from aioproducer.protocol.compression import Codec, decompress

__all__ = ["Record", "RecordBatch", "decode_batches", "parse_records"]

BytesLike = bytes | bytearray | memoryview


@dataclass(slots=True)
class Record:
    """One decoded record. ``offset`` and ``timestamp_ms`` are absolute."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class RecordBatch:
    """One decoded v2 record batch: every header field plus the decoded records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    codec: Codec
    #: 0 CreateTime, 1 LogAppendTime.
    timestamp_type: int
    is_transactional: bool
    is_control: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]


def decode_batches(
    data: BytesLike,
    *,
    verify_crc: bool = True,
    allow_partial: bool = False,
    max_decompressed_size: int | None = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[RecordBatch]:
    """Decode a sequence of concatenated v2 record batches.

    A Fetch response may end with an incomplete batch: with ``allow_partial`` it is
    skipped, otherwise it is an error. ``max_decompressed_size`` bounds each batch's
    decompressed records section (``None``: unbounded).

    Anything malformed raises :class:`~aioproducer.errors.CorruptRecordError`: magic other
    than 2, a CRC mismatch (when ``verify_crc``), a length that is too small or runs past
    the data, an unknown codec, undecodable compressed data, records that overrun their
    length or a records section that does not hold exactly ``recordsCount`` records.
    """
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = len(view)
    batches: list[RecordBatch] = []
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < _HEADER_UP_TO_MAGIC:
            if allow_partial:
                break
            raise CorruptRecordError(
                f"truncated record batch at byte {pos}: only {remaining} bytes left"
            )
        (batch_length,) = _INT32.unpack_from(view, pos + 8)
        if batch_length < RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD:
            raise CorruptRecordError(
                f"record batch at byte {pos} has invalid length {batch_length} "
                f"(at least {RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD} required)"
            )
        magic = view[pos + 16]
        if magic != _MAGIC:
            raise CorruptRecordError(
                f"record batch at byte {pos} has unsupported magic {magic} (expected 2)"
            )
        size = batch_length + _LOG_OVERHEAD
        if size > remaining:
            if allow_partial:
                break
            raise CorruptRecordError(
                f"record batch at byte {pos} claims {size} bytes but only {remaining} remain"
            )
        batches.append(
            _decode_batch(view[pos : pos + size], pos, verify_crc, max_decompressed_size)
        )
        pos += size
    return batches


def _decode_batch(
    view: memoryview, where: int, verify_crc: bool, max_size: int | None
) -> RecordBatch:
    (
        base_offset,
        batch_length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(view)
    if verify_crc:
        actual = crc32c(view[_CRC_START:])
        if actual != crc:
            raise CorruptRecordError(
                f"record batch at byte {where} (base offset {base_offset}) failed its CRC "
                f"check: stored {crc:#010x}, computed {actual:#010x}"
            )
    codec_id = attributes & _CODEC_MASK
    if codec_id > Codec.ZSTD:
        raise CorruptRecordError(f"record batch at byte {where} uses unknown codec id {codec_id}")
    codec = Codec(codec_id)
    if count < 0:
        raise CorruptRecordError(f"record batch at byte {where} has negative record count {count}")
    section = view[RECORD_BATCH_OVERHEAD:]
    if codec is Codec.NONE:
        records_data = bytes(section)
    elif not section and not count:
        records_data = b""
    else:
        records_data = decompress(codec, section, max_size=max_size)
    timestamp_type = 1 if attributes & _TIMESTAMP_TYPE_MASK else 0
    try:
        records = parse_records(
            records_data,
            count,
            base_offset,
            base_timestamp,
            max_timestamp if timestamp_type else None,
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"record batch at byte {where} (base offset {base_offset}): {exc}"
        ) from None
    return RecordBatch(
        base_offset=base_offset,
        batch_length=batch_length,
        partition_leader_epoch=leader_epoch,
        magic=magic,
        crc=crc,
        attributes=attributes,
        codec=codec,
        timestamp_type=timestamp_type,
        is_transactional=bool(attributes & _TRANSACTIONAL_FLAG),
        is_control=bool(attributes & _CONTROL_FLAG),
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=records,
    )


def _read_varint(
    buf: bytes, pos: int, end: int, what: str, index: int, bits: int = 32
) -> tuple[int, int]:
    """Read a zig-zag varint (``bits`` 32) or varlong (64) from ``buf[pos:end]``.

    ``what`` and ``index`` only name the field in error messages (formatted lazily: this
    runs several times per record).
    """
    if pos < end:
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
    max_bytes = 5 if bits == 32 else 10
    raw = 0
    shift = 0
    stop = min(end, pos + max_bytes)
    while pos < stop:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> bits:
                raise CorruptRecordError(f"{what} of record {index}: varint is out of range")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    if pos >= end:
        raise CorruptRecordError(f"{what} of record {index} is truncated")
    raise CorruptRecordError(f"{what} of record {index}: varint is longer than {max_bytes} bytes")


def parse_records(
    buf: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> list[Record]:
    """Decode ``count`` records from an uncompressed records section ``buf``.

    Offsets and timestamps are made absolute from the batch's base values (the log append
    time replaces every timestamp when given). Raises ``CorruptRecordError`` on bad input.
    """
    # Every record needs at least 7 bytes, so a count larger than that allows is corrupt;
    # checking first also keeps a forged count from driving a long loop.
    end = len(buf)
    if count * 7 > end:
        raise CorruptRecordError(f"{count} records cannot fit in {end} bytes")
    read = _read_varint
    records: list[Record] = []
    pos = 0
    for index in range(count):
        length, pos = read(buf, pos, end, "length", index)
        record_end = pos + length
        if length < 6:
            raise CorruptRecordError(f"record {index} has invalid length {length}")
        if record_end > end:
            raise CorruptRecordError(
                f"record {index} has length {length}, but only {end - pos} bytes remain"
            )
        pos += 1  # attributes: unused in v2
        ts_delta, pos = read(buf, pos, record_end, "timestamp delta", index, 64)
        offset_delta, pos = read(buf, pos, record_end, "offset delta", index)
        key_len, pos = read(buf, pos, record_end, "key length", index)
        if key_len < 0:
            if key_len != -1:
                raise CorruptRecordError(f"record {index} has key length {key_len}")
            key = None
        else:
            if key_len > record_end - pos:
                raise CorruptRecordError(f"record {index}'s key overruns the record")
            key = buf[pos : pos + key_len]
            pos += key_len
        value_len, pos = read(buf, pos, record_end, "value length", index)
        if value_len < 0:
            if value_len != -1:
                raise CorruptRecordError(f"record {index} has value length {value_len}")
            value = None
        else:
            if value_len > record_end - pos:
                raise CorruptRecordError(f"record {index}'s value overruns the record")
            value = buf[pos : pos + value_len]
            pos += value_len
        header_count, pos = read(buf, pos, record_end, "header count", index)
        # Each header needs at least two bytes (two lengths).
        if header_count < 0 or header_count * 2 > record_end - pos:
            raise CorruptRecordError(f"record {index} has invalid header count {header_count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            hkey_len, pos = read(buf, pos, record_end, "header key length", index)
            if hkey_len < 0 or hkey_len > record_end - pos:
                raise CorruptRecordError(f"record {index} has invalid header key length {hkey_len}")
            try:
                hkey = buf[pos : pos + hkey_len].decode()
            except UnicodeDecodeError:
                raise CorruptRecordError(
                    f"record {index} has a header key that is not UTF-8"
                ) from None
            pos += hkey_len
            hvalue_len, pos = read(buf, pos, record_end, "header value length", index)
            if hvalue_len < 0:
                if hvalue_len != -1:
                    raise CorruptRecordError(f"record {index} has header value length {hvalue_len}")
                hvalue = None
            else:
                if hvalue_len > record_end - pos:
                    raise CorruptRecordError(f"record {index}'s header value overruns the record")
                hvalue = buf[pos : pos + hvalue_len]
                pos += hvalue_len
            headers.append((hkey, hvalue))
        if pos != record_end:
            raise CorruptRecordError(
                f"record {index} declares {length} bytes but its fields use "
                f"{length - (record_end - pos)}"
            )
        timestamp = log_append_time if log_append_time is not None else base_timestamp + ts_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != end:
        raise CorruptRecordError(
            f"{end - pos} bytes are left after the {count} records the header announces"
        )
    return records
