"""Kafka record batches, message format v2 (magic 2): building and re-stamping.

Decoding lives in :mod:`.record_reader` and the shared layout in :mod:`.batch_layout`;
``Record``, ``RecordBatch`` and ``decode_batches`` are importable from here too.

The batch and record layout (header offsets, flags, varints) is written down once, in
:mod:`.batch_layout`.

Everything here is pure computation on bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from crc32c import crc32c

from aioproducer.errors import CorruptRecordError
from aioproducer.protocol import columnar as _columnar
from aioproducer.protocol.batch_layout import COVERED as _COVERED
from aioproducer.protocol.batch_layout import CRC_START as _CRC_START
from aioproducer.protocol.batch_layout import DEFAULT_MAX_DECOMPRESSED_SIZE, RECORD_BATCH_OVERHEAD
from aioproducer.protocol.batch_layout import INT16 as _INT16
from aioproducer.protocol.batch_layout import LOG_OVERHEAD as _LOG_OVERHEAD
from aioproducer.protocol.batch_layout import MAGIC as _MAGIC
from aioproducer.protocol.batch_layout import PREFIX as _PREFIX
from aioproducer.protocol.batch_layout import PRODUCER_ID_OFFSET as _PRODUCER_ID_OFFSET
from aioproducer.protocol.batch_layout import PRODUCER_STATE as _PRODUCER_STATE
from aioproducer.protocol.batch_layout import TRANSACTIONAL_FLAG as _TRANSACTIONAL_FLAG
from aioproducer.protocol.columnar import BinaryColumn, encode_run
from aioproducer.protocol.compression import Codec, compress_records, validate_level

# The encoding of records lives in its own module, compiled with mypyc where possible
# (append and append_many call it); this one keeps the batch's bytes and counters.
from aioproducer.protocol.record_encoder import ATTRS as _ATTRS
from aioproducer.protocol.record_encoder import INT64_MAX as _INT64_MAX
from aioproducer.protocol.record_encoder import INT64_MIN as _INT64_MIN
from aioproducer.protocol.record_encoder import TABLE_LIMIT as _TABLE_LIMIT
from aioproducer.protocol.record_encoder import ZZ as _ZZ
from aioproducer.protocol.record_encoder import BatchState
from aioproducer.protocol.record_encoder import append_record as _append_record
from aioproducer.protocol.record_encoder import encode_records as _encode_records
from aioproducer.protocol.record_encoder import zigzag as _zigzag
from aioproducer.protocol.record_reader import Record, RecordBatch, decode_batches, parse_records

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "RECORD_BATCH_OVERHEAD",
    "RECORD_FRAMING_BOUND",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "decode_batches",
    "record_size_bound",
    "restamp_producer_state",
]

Header = tuple[str, bytes | None]
BytesLike = bytes | bytearray | memoryview


#: The most bytes a record adds beyond its key, value and header bytes when it has no
#: headers: worst-case varints for the length (5), attributes (1), timestamp delta (10),
#: offset delta (5), key length, value length and header count (5 each).
RECORD_FRAMING_BOUND: Final = 5 + 1 + 10 + 5 + 5 + 5 + 5


def record_size_bound(
    key_len: int | None, value_len: int | None, headers: Sequence[Header] | None
) -> int:
    """An upper bound of the bytes :meth:`RecordBatchBuilder.append` adds for a record.

    The one estimate of a record's size: the producer reserves buffer memory and checks
    ``max_request_size`` with it. ``key_len``/``value_len`` are byte lengths, ``None`` (or
    a negative number) for null. Without headers it is ``RECORD_FRAMING_BOUND + key_len +
    value_len``, linear in the lengths, so a column of records is bounded by one sum
    instead of a pass per record. Excludes the :data:`RECORD_BATCH_OVERHEAD` a new batch
    adds.
    """
    size = RECORD_FRAMING_BOUND
    if key_len is not None and key_len > 0:
        size += key_len
    if value_len is not None and value_len > 0:
        size += value_len
    if headers:
        for hkey, hvalue in headers:
            # Two length varints; a str of n code points is at most 4n bytes of UTF-8.
            size += 10 + 4 * len(hkey) + (len(hvalue) if hvalue is not None else 0)
    return size


class RecordBatchBuilder(BatchState):
    """Accumulates records into one v2 record batch and encodes it.

    Records are encoded into an internal buffer as they are appended, so
    :attr:`size_in_bytes` is always exact (before compression). :meth:`build` may be called
    any number of times (a retry can rebuild with new producer state); appending after a
    build is allowed and simply makes the next build larger.
    """

    # _buf, count, _base_ts and _max_ts are BatchState's (the compiled encoder's).
    __slots__ = (
        "_codec",
        "_compressed",
        "_level",
        "_released",
        "_transactional",
    )

    def __init__(
        self,
        codec: Codec = Codec.NONE,
        level: int | None = None,
        *,
        transactional: bool = False,
    ) -> None:
        """Create an empty builder for ``codec`` at ``level`` (``None``: codec default).

        Raises :class:`~aioproducer.errors.ConfigError` if the level is not valid for the
        codec.
        """
        self._codec = Codec(codec)
        self._level = validate_level(self._codec, level)
        self._transactional = bool(transactional)
        self._buf = bytearray()
        self._released = False
        self.count = 0
        self._base_ts = 0
        self._max_ts = 0
        # (record count, compressed records) of the last build, reused by a rebuild.
        self._compressed: tuple[int, bytes | bytearray] | None = None

    # -- properties --------------------------------------------------------------------------

    @property
    def codec(self) -> Codec:
        """The compression codec of the batch."""
        return self._codec

    @property
    def level(self) -> int | None:
        """The effective compression level (``None`` for codecs without levels)."""
        return self._level

    @property
    def transactional(self) -> bool:
        """Whether the batch is marked transactional (attributes bit 4)."""
        return self._transactional

    @property
    def record_count(self) -> int:
        """Number of records appended so far."""
        return self.count

    @property
    def size_in_bytes(self) -> int:
        """Header plus uncompressed records so far: the batch size if it were not compressed."""
        return RECORD_BATCH_OVERHEAD + len(self._buf)

    @property
    def holds_compression(self) -> bool:
        """Whether :meth:`build` has the records' compression already (made by an earlier
        build, or handed in with records encoded elsewhere): building is then only the
        header and CRC, nothing worth a worker thread."""
        cached = self._compressed
        return cached is not None and cached[0] == self.count

    def release(self) -> None:
        """Free the encoded records once the batch is settled; the counts stay readable.

        The builder may not be appended to or built afterwards.
        """
        self._buf = bytearray()
        self._compressed = None
        self._released = True

    @property
    def base_timestamp(self) -> int | None:
        """Timestamp of the first record, or ``None`` while the builder is empty."""
        return self._base_ts if self.count else None

    @property
    def max_timestamp(self) -> int | None:
        """Largest record timestamp, or ``None`` while the builder is empty."""
        return self._max_ts if self.count else None

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        timestamp_ms: int,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: Sequence[Header] = (),
    ) -> int:
        """Encode one record at the end of the batch and return its encoded size in bytes.

        ``key``, ``value`` and header values may be any bytes-like object or ``None``
        (null); they are copied, so the caller may reuse its buffers. Header keys are
        ``str``. The first record's timestamp becomes the batch's base timestamp; later
        timestamps may be smaller (the delta is signed). Invalid input leaves the builder
        unchanged and raises :class:`~aioproducer.errors.SerializationError` (keys, values,
        headers), ``TypeError`` (a timestamp that is not an int) or ``ValueError`` (a
        timestamp outside int64).
        """
        # The work is record_encoder's (compiled where possible), which the accumulator
        # also calls directly. It checks everything before writing, so a rejected record
        # leaves nothing behind.
        return _append_record(self, timestamp_ms, key, value, headers)

    def append_many(
        self,
        timestamp_ms: int,
        keys: Sequence[BytesLike | None] | None,
        values: Sequence[BytesLike | None],
        headers: Sequence[Sequence[Header] | None] | None = None,
        start: int = 0,
        stop: int | None = None,
        max_bytes: int | None = None,
    ) -> tuple[int, int]:
        """Append ``values[start:stop]`` (with their keys and headers), all stamped
        ``timestamp_ms``; return ``(records appended, bytes added)``.

        The bytes are exactly those :meth:`append` would write for the same records one by
        one. ``keys``/``headers`` are ``None`` (no keys, no headers) or sequences indexed
        like ``values``. Appending stops before the first record that would take
        :attr:`size_in_bytes` past ``max_bytes``, unless the builder is still empty (a
        record too large for any batch then gets one of its own, as with :meth:`append`).
        A record that is invalid raises like :meth:`append` does; the records before it
        stay appended (:attr:`record_count` tells how many) and it leaves nothing behind.
        """
        if stop is None:
            stop = len(values)
        if start >= stop:
            return 0, 0
        count = self.count
        ts_part = self._run_timestamp_part(timestamp_ms)
        # Attributes and timestamp delta are the same for every record of the run: one
        # piece, and a constant share of every record's length.
        prefix = _ATTRS + ts_part
        size = RECORD_BATCH_OVERHEAD + len(self._buf)
        # The loop is record_encoder's (compiled where possible).
        pieces, count, size, error = _encode_records(
            prefix, count, size, max_bytes, keys, values, headers, start, stop
        )
        appended = count - self.count
        if appended:
            added = size - RECORD_BATCH_OVERHEAD - len(self._buf)
            self._buf += b"".join(pieces)
            self._stamp_run(timestamp_ms, count)
        else:
            added = 0
        if error is not None:
            raise error
        return appended, added

    def append_columns(
        self,
        timestamp_ms: int,
        keys: BinaryColumn | None,
        values: BinaryColumn,
        headers: BinaryColumn | None = None,
        start: int = 0,
        stop: int | None = None,
        max_bytes: int | None = None,
    ) -> tuple[int, int]:
        """:meth:`append_many` for columns: append rows ``start:stop`` of ``values`` (with
        their ``keys`` and ``headers``), all stamped ``timestamp_ms``; return ``(records
        appended, bytes added)``.

        The bytes are exactly those :meth:`append` would write for the same records one by
        one, and ``max_bytes`` works as in :meth:`append_many`, but the run is encoded
        column-wise by :func:`~aioproducer.protocol.columnar.encode_run` (numpy), with no
        Python object per record. ``keys``/``headers`` are None or
        :class:`~aioproducer.protocol.columnar.BinaryColumn` s indexed like ``values``; a
        row of ``headers`` is the record's encoded header section (``b"\\x00"``: none).
        Columns hold only valid rows, so only the timestamp can be refused (``TypeError``,
        ``ValueError``, before anything is appended).
        """
        if stop is None:
            stop = len(values)
        if start >= stop:
            return 0, 0
        count = self.count
        ts_part = self._run_timestamp_part(timestamp_ms)
        appended, encoded = encode_run(
            values,
            keys,
            headers,
            start,
            stop,
            count,
            ts_part,
            RECORD_BATCH_OVERHEAD + len(self._buf),
            max_bytes,
        )
        if not appended:
            return 0, 0
        added = len(encoded)
        self._buf += memoryview(encoded)
        self._stamp_run(timestamp_ms, count + appended)
        return appended, added

    def append_lists(
        self,
        timestamp_ms: int,
        keys: list[bytes | None] | None,
        values: list[bytes | None],
        start: int,
        stop: int,
        max_bytes: int,
    ) -> tuple[int, int]:
        """Package-internal (``run_append.py``): :meth:`append_many` for lists of bytes
        or None without headers, by the compiled encoder (``encode_sequence_run``), which
        the caller made sure runs; the same bytes. ``TypeError``, with nothing appended,
        if an item is not bytes or None."""
        codec = _columnar.CODEC
        assert codec is not None
        if start >= stop:
            return 0, 0
        count = self.count
        # The same steps as append_columns, but for the encoder's arguments.
        ts_part = self._run_timestamp_part(timestamp_ms)
        size = RECORD_BATCH_OVERHEAD + len(self._buf)
        appended, encoded = codec.encode_sequence_run(
            values, keys, start, stop, count, ts_part, size, max_bytes
        )
        if not appended:
            return 0, 0
        self._buf += encoded
        self._stamp_run(timestamp_ms, count + appended)
        return appended, len(encoded)

    def _run_timestamp_part(self, timestamp_ms: int) -> bytes:
        """The encoded timestamp delta every record of a run stamped ``timestamp_ms``
        shares (the run's first record is the base if the batch is empty), checked first
        so that a refused timestamp leaves the builder unchanged."""
        if self.count:
            delta = timestamp_ms - self._base_ts
            ts_part = (
                _ZZ[delta + 1]
                if 0 <= delta < _TABLE_LIMIT
                else self._timestamp_delta(timestamp_ms, delta)
            )
            if timestamp_ms > self._max_ts and timestamp_ms > _INT64_MAX:
                raise ValueError(f"timestamp {timestamp_ms} does not fit in int64")
            return ts_part
        if not isinstance(timestamp_ms, int):
            raise TypeError(f"timestamp must be an int, got {type(timestamp_ms).__name__}")
        if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} does not fit in int64")
        return b"\x00"

    def _stamp_run(self, timestamp_ms: int, new_count: int) -> None:
        """Account for a run stamped ``timestamp_ms`` that brought the count to
        ``new_count``: the base and largest timestamps, and the count."""
        if not self.count:
            self._base_ts = timestamp_ms
            self._max_ts = timestamp_ms
        elif timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        self.count = new_count

    def _timestamp_delta(self, timestamp_ms: int, delta: int) -> bytes:
        if not isinstance(timestamp_ms, int):
            raise TypeError(f"timestamp must be an int, got {type(timestamp_ms).__name__}")
        if not _INT64_MIN <= timestamp_ms <= _INT64_MAX or not (_INT64_MIN <= delta <= _INT64_MAX):
            raise ValueError(
                f"timestamp {timestamp_ms} is out of range for this batch "
                f"(base timestamp {self._base_ts})"
            )
        return _zigzag(delta)

    @staticmethod
    def estimate_size(
        key_len: int | None, value_len: int | None, headers: Sequence[Header] | None
    ) -> int:
        """Return an upper bound of what :meth:`append` adds for such a record: the same
        as :func:`record_size_bound`."""
        return record_size_bound(key_len, value_len, headers)

    # -- building ----------------------------------------------------------------------------

    def build(
        self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
    ) -> bytes:
        """Return the encoded batch: header, CRC and (compressed) records.

        The builder is left intact, so the batch can be built again (compression is done
        once and reused while no record is added). Raises ``ValueError`` for an empty
        builder (brokers reject batches without records) and for producer fields that are
        out of range or inconsistent (a producer id needs a sequence; a transactional
        batch needs a producer id).
        """
        if self._released:
            raise ValueError("the builder was released; its records are gone")
        count = self.count
        if not count:
            raise ValueError("cannot build a record batch without records")
        _check_producer_state(producer_id, producer_epoch, base_sequence, self._transactional)
        if self._codec is Codec.NONE:
            records: bytes | bytearray = self._buf
        else:
            cached = self._compressed
            if cached is not None and cached[0] == count:
                records = cached[1]
            else:
                records = compress_records(self._codec, self._buf, self._level)
                self._compressed = (count, records)
        attributes = self._codec | (_TRANSACTIONAL_FLAG if self._transactional else 0)
        covered = _COVERED.pack(
            attributes,
            count - 1,
            self._base_ts,
            self._max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        crc = crc32c(records, crc32c(covered))
        batch_length = RECORD_BATCH_OVERHEAD - _LOG_OVERHEAD + len(records)
        prefix = _PREFIX.pack(0, batch_length, -1, _MAGIC, crc)
        return b"".join((prefix, covered, records))

    # -- splitting ---------------------------------------------------------------------------

    def records(self) -> list[Record]:
        """Decode the records appended so far (offsets are the offset deltas)."""
        return parse_records(bytes(self._buf), self.count, 0, self._base_ts, None)

    def split(self, max_bytes: int) -> list[RecordBatchBuilder]:
        """Re-split the records into builders of at most ``max_bytes`` (uncompressed) each.

        Used when a broker answers ``MESSAGE_TOO_LARGE``. Order, timestamps, keys, values
        and headers are preserved; codec, level and the transactional flag are inherited.
        Sizes are measured like :attr:`size_in_bytes` (header included). A record that
        alone exceeds ``max_bytes`` gets a builder of its own.
        """
        parts: list[RecordBatchBuilder] = []
        current: RecordBatchBuilder | None = None
        for record in self.records():
            if current is None:
                current = self._empty_like()
                parts.append(current)
            length, max_ts = len(current._buf), current._max_ts
            current.append(record.timestamp_ms, record.key, record.value, record.headers)
            if current.size_in_bytes > max_bytes and current.count > 1:
                # Offset and timestamp deltas depend on the batch a record lands in, so
                # the exact size is only known after appending: undo and start afresh.
                current._truncate(length, current.count - 1, max_ts)
                current = self._empty_like()
                parts.append(current)
                current.append(record.timestamp_ms, record.key, record.value, record.headers)
        return parts

    def adopt_encoded(
        self,
        count: int,
        encoded: bytearray,
        timestamp_ms: int,
        compressed: bytes | bytearray | None,
    ) -> None:
        """Package-internal (``run_append.py``): make this empty builder hold ``count``
        records already encoded as ``encoded``, all timestamped ``timestamp_ms`` (checked
        by the caller), as if appended; ``compressed``, if given, is ``encoded``
        compressed with this builder's codec, which :meth:`build` then uses as it is
        (until a record is added) instead of compressing on the event loop."""
        self._buf = encoded
        self.count = count
        self._base_ts = timestamp_ms
        self._max_ts = timestamp_ms
        self._compressed = None if compressed is None else (count, compressed)

    def _truncate(self, length: int, count: int, max_ts: int) -> None:
        del self._buf[length:]
        self.count = count
        self._max_ts = max_ts
        self._compressed = None

    def _empty_like(self) -> RecordBatchBuilder:
        return RecordBatchBuilder(self._codec, self._level, transactional=self._transactional)

    def __repr__(self) -> str:
        return (
            f"<RecordBatchBuilder codec={self._codec.name.lower()} records={self.count} "
            f"size={self.size_in_bytes}>"
        )


def _check_producer_state(
    producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool
) -> None:
    if not _INT64_MIN <= producer_id <= _INT64_MAX:
        raise ValueError(f"producer id {producer_id} does not fit in int64")
    if not -(1 << 15) <= producer_epoch < (1 << 15):
        raise ValueError(f"producer epoch {producer_epoch} does not fit in int16")
    if not -(1 << 31) <= base_sequence < (1 << 31):
        raise ValueError(f"base sequence {base_sequence} does not fit in int32")
    if producer_id >= 0 and base_sequence < 0:
        # The broker rejects an idempotent batch without a sequence (INVALID_RECORD).
        raise ValueError(f"producer id {producer_id} needs a base sequence >= 0")
    if transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id")


def restamp_producer_state(
    batch: BytesLike,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool | None = None,
) -> bytes:
    """Return ``batch`` with new producer id, epoch and base sequence, and a fresh CRC.

    ``transactional`` sets or clears attributes bit 4; ``None`` keeps it. The records
    section is copied untouched (no recompression). ``batch`` must be exactly one v2 batch
    whose CRC is valid: checking it first keeps a fresh CRC from hiding corruption.
    Raises :class:`~aioproducer.errors.CorruptRecordError` for anything else and
    ``ValueError`` for out-of-range producer fields.
    """
    view = memoryview(batch)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(view) < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(f"a record batch needs at least 61 bytes, got {len(view)}")
    base_offset, batch_length, leader_epoch, magic, crc = _PREFIX.unpack_from(view)
    if magic != _MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {magic} (expected 2)")
    if batch_length + _LOG_OVERHEAD != len(view):
        raise CorruptRecordError(
            f"batch length field says {batch_length + _LOG_OVERHEAD} bytes, got {len(view)}"
        )
    actual = crc32c(view[_CRC_START:])
    if actual != crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: stored {crc:#010x}, computed {actual:#010x}"
        )
    (attributes,) = _INT16.unpack_from(view, _CRC_START)
    if transactional is None:
        transactional = bool(attributes & _TRANSACTIONAL_FLAG)
    _check_producer_state(producer_id, producer_epoch, base_sequence, transactional)
    if transactional:
        attributes |= _TRANSACTIONAL_FLAG
    else:
        attributes &= ~_TRANSACTIONAL_FLAG
    covered = bytearray(view[_CRC_START:RECORD_BATCH_OVERHEAD])
    _INT16.pack_into(covered, 0, attributes)
    _PRODUCER_STATE.pack_into(
        covered, _PRODUCER_ID_OFFSET - _CRC_START, producer_id, producer_epoch, base_sequence
    )
    rest = view[RECORD_BATCH_OVERHEAD:]
    new_crc = crc32c(rest, crc32c(covered))
    prefix = _PREFIX.pack(base_offset, batch_length, leader_epoch, magic, new_crc)
    return b"".join((prefix, covered, rest))
