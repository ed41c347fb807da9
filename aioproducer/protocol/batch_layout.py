"""The record batch layout, message format v2 (magic 2): offsets, flags and struct formats
shared by the encoder (:mod:`.records`) and the decoder (:mod:`.record_reader`).

A batch is a 61-byte header followed by the records section, which is compressed as a
whole when the batch uses a codec (the record count stays in the uncompressed header)::

    offset  field                 type     value written by the producer
    0       baseOffset            int64    0 (the broker assigns offsets)
    8       batchLength           int32    batch size - 12
    12      partitionLeaderEpoch  int32    -1
    16      magic                 int8     2
    17      crc                   uint32   CRC-32C of bytes [21, end)
    21      attributes            int16    codec (bits 0-2) | transactional (bit 4)
    23      lastOffsetDelta       int32    record count - 1
    27      baseTimestamp         int64    timestamp of the first record
    35      maxTimestamp          int64    largest record timestamp
    43      producerId            int64    -1 unless idempotent
    51      producerEpoch         int16    -1 unless idempotent
    55      baseSequence          int32    -1 unless idempotent
    57      recordsCount          int32
    61      records

Each record is ``length`` (varint) followed by that many bytes: ``attributes`` (int8, 0),
``timestampDelta`` (varlong), ``offsetDelta`` (varint), key and value (varint length, -1 for
null, then the bytes) and the headers (varint count, then per header a varint-length UTF-8
key and a varint-length value, -1 for null). Varints are zig-zag LEB128.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "CODEC_MASK",
    "CONTROL_FLAG",
    "COVERED",
    "CRC_START",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "HEADER",
    "HEADER_UP_TO_MAGIC",
    "INT16",
    "INT32",
    "LOG_OVERHEAD",
    "MAGIC",
    "PREFIX",
    "PRODUCER_ID_OFFSET",
    "PRODUCER_STATE",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG",
]

#: Size of the record batch header that precedes the records section.
RECORD_BATCH_OVERHEAD: Final = 61

#: Default bound on one batch's decompressed records section when decoding.
DEFAULT_MAX_DECOMPRESSED_SIZE: Final = 64 * 1024 * 1024

MAGIC: Final = 2
#: Bytes before batchLength's payload: baseOffset and batchLength itself.
LOG_OVERHEAD: Final = 12
#: Enough bytes to read batchLength and magic, as Java's ByteBufferLogInputStream requires
#: before it decides whether a batch is merely incomplete or invalid.
HEADER_UP_TO_MAGIC: Final = 17
CRC_START: Final = 21
PRODUCER_ID_OFFSET: Final = 43

CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20

#: baseOffset, batchLength, partitionLeaderEpoch, magic, crc
PREFIX: Final = struct.Struct(">qiibI")
#: attributes .. recordsCount: the CRC-covered part of the header.
COVERED: Final = struct.Struct(">hiqqqhii")
HEADER: Final = struct.Struct(">qiibIhiqqqhii")
#: producerId, producerEpoch, baseSequence
PRODUCER_STATE: Final = struct.Struct(">qhi")
INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
