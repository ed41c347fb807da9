"""Choosing a partition: Java-compatible murmur2 for keys, (adaptive) sticky for keyless records.

murmur2 comes as a byte loop (what runs where this module is compiled, per key and over a
whole key column), as ``struct``-unpacked words per key when interpreted, and for a whole
column of keys with numpy when interpreted (:func:`key_partitions`, used by bulk sends of
columns and the Spark writer); tests keep them equal to each other and to Java's.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from . import speedups

try:
    # Native 64-bit ints where compiled (mypyc reads the annotation); the package is
    # there wherever mypyc built it, and plain ints serve where it is not installed.
    from mypy_extensions import i64
except ImportError:  # pragma: no cover - installed with the build tools
    i64 = int  # type: ignore[misc]

if TYPE_CHECKING:
    import pyarrow as pa

    from .adaptive import PartitionLoad

__all__ = [
    "StickyPartitioner",
    "key_partitions",
    "moves_on",
    "murmur2",
    "partition_for_key",
    "partitions_for_keys",
    "partitions_of",
]

_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF

# Which murmur2 loop runs: the byte loop compiled, struct's word unpacking interpreted.
_COMPILED: Final = speedups.ACTIVE == "compiled"


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit int (identical to Java's ``Utils.murmur2``)."""
    raw = data if type(data) is bytes else bytes(data)
    h = _murmur2(raw, 0, len(raw)) if _COMPILED else _murmur2_words(raw)
    return h - 0x100000000 if h & 0x80000000 else h


def _murmur2_words(data: bytes) -> int:
    """:func:`_murmur2` of all of ``data`` for the interpreter: whole words unpacked by
    ``struct`` (fewer bytecodes per word than reading bytes; compiled, the byte loop wins)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    for k in struct.unpack_from(f"<{end >> 2}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def _murmur2(data: bytes, start: i64, stop: i64) -> i64:
    """murmur2 of ``data[start:stop]`` as an unsigned 32-bit int, read in place.

    Native 64-bit ints where compiled: every product is of a value below 2**32 and the
    constant (below 2**31), so it fits in 63 bits and is exact, with no big-int path."""
    length = stop - start
    h: i64 = (0x9747B28C ^ length) & _MASK
    end = stop - (length & 3)
    i = start
    # Four bytes at a time, little-endian, as the Java implementation reads them.
    while i < end:
        k: i64 = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
        i += 4
    extra = length & 3
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def _offset_at(offsets: bytes, index: i64) -> i64:
    """Entry ``index`` of a little-endian int64 array given as bytes."""
    at = index << 3
    value: i64 = 0
    shift: i64 = 0
    while shift < 64:
        value |= offsets[at] << shift
        at += 1
        shift += 8
    return value


def _column_partitions(data: bytes, offsets: bytes, count: i64, num_partitions: i64) -> bytes:
    """The key partition of every key ``data[offsets[i]:offsets[i + 1]]`` (``offsets``:
    ``count + 1`` little-endian int64, as bytes), one compiled loop over the keys' bytes with
    no object per key. One byte per key if there are at most 256 partitions, else two
    (little-endian)."""
    wide = num_partitions > 256
    out = [0] * (count * 2 if wide else count)
    prev = _offset_at(offsets, 0)
    i: i64 = 0
    while i < count:
        nxt = _offset_at(offsets, i + 1)
        part = (_murmur2(data, prev, nxt) & 0x7FFFFFFF) % num_partitions
        if wide:
            out[2 * i] = part & 0xFF
            out[2 * i + 1] = part >> 8
        else:
            out[i] = part
        prev = nxt
        i += 1
    return bytes(out)


def partitions_of(keys: Sequence[Any], count: int, num_partitions: int) -> list[Any]:
    """:func:`partition_for_key` of each of the first ``count`` of ``keys`` (``bytes``), None
    for a null key: one loop, compiled where this module is (a bulk send of sequences)."""
    out: list[Any] = [None] * count
    for i in range(count):
        key = keys[i]
        if key is not None:
            h = _murmur2(key, 0, len(key)) if _COMPILED else _murmur2_words(key)
            out[i] = (h & 0x7FFFFFFF) % num_partitions
    return out


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for ``key`` among ``num_partitions``."""
    # toPositive is a mask, not abs(): it must match Java bit for bit.
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# Keys up to this long are hashed as rows of one zero-padded matrix (rows x longest key);
# longer ones would inflate it for every row, so they are hashed one by one instead.
_MAX_VECTOR_KEY = 256


def partitions_for_keys(
    keys: pa.Array | pa.ChunkedArray | Sequence[bytes | None], num_partitions: int
) -> list[int | None]:
    """:func:`partition_for_key` of every key of a column, computed in bulk with numpy.

    ``keys`` is an Arrow binary or string array (large or not, chunked or not) or a sequence
    of ``bytes``. A null key gives None: it has no key partition (the sticky partitioner
    places such records). Needs numpy and pyarrow, which the ``spark`` extra installs.
    """
    try:
        import numpy as np
        import pyarrow as pa
    except ImportError as exc:
        raise ImportError(
            "partitions_for_keys needs numpy and pyarrow (the 'spark' extra): pip install numpy pyarrow"
        ) from exc

    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, not {num_partitions}")
    column: Any = keys
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    elif not isinstance(column, pa.Array):
        column = pa.array(column, type=pa.binary())
    # Strings are UTF-8 bytes already: the cast is a view, not a copy.
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    if pa.types.is_binary(column.type):
        offset_type: Any = np.int32
    elif pa.types.is_large_binary(column.type):
        offset_type = np.int64
    else:
        raise TypeError(f"keys must be a binary or string column, not {column.type}")
    n = len(column)
    if n == 0:
        return []

    _validity, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[column.offset : column.offset + n + 1]
    nulls = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else None
    found = key_partitions(offsets.astype(np.int64), data, nulls, num_partitions)
    parts: list[int | None] = found.tolist()
    if nulls is not None:
        for i in np.flatnonzero(nulls).tolist():
            parts[i] = None
    return parts


def key_partitions(offsets: Any, data: Any, nulls: Any, num_partitions: int) -> Any:
    """:func:`partition_for_key` of every key of a binary column given as numpy arrays:
    ``offsets`` (int64, one more than keys, absolute into ``data``), ``data`` (uint8, or
    None if empty) and ``nulls`` (bool, or None: no null). Returns a numpy int64 array,
    -1 for a null key. Compiled, one loop over the keys' bytes; interpreted, numpy over a
    matrix of the keys (keys longer than 256 bytes one by one)."""
    import numpy as np

    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if _COMPILED and num_partitions <= 0xFFFF:
        # The keys' bytes and offsets once as bytes (copies of the keys only), hashed in
        # one loop that makes no object per key.
        first = int(offsets[0])
        raw = data[first : int(offsets[-1])].tobytes() if data is not None else b""
        rel = np.asarray(offsets - first, dtype="<i8").tobytes()
        found = _column_partitions(raw, rel, n, num_partitions)
        parts = np.frombuffer(found, np.uint8 if num_partitions <= 256 else "<u2")
        parts = parts.astype(np.int64)
        if nulls is not None:
            parts[nulls] = -1
        return parts
    lengths = np.diff(offsets).astype(np.int64)
    long_keys = lengths > _MAX_VECTOR_KEY
    # A null's slot may still span bytes; its result is discarded, so padding it is harmless.
    lengths = np.where(long_keys, 0, lengths)
    max_len = int(lengths.max())
    if data is None or len(data) == 0:
        data = np.zeros(1, dtype=np.uint8)
    # One row per key, zero-padded to the longest key (reads past a key are masked out).
    width = max(4, (max_len + 3) & ~3)
    index = offsets[:-1, None].astype(np.int64) + np.arange(width, dtype=np.int64)
    valid = np.arange(width) < lengths[:, None]
    matrix = np.where(valid, data[np.minimum(index, len(data) - 1)], 0).astype(np.uint32)
    m = np.uint32(_M)
    with np.errstate(over="ignore"):
        h = (np.uint32(0x9747B28C) ^ lengths.astype(np.uint32)).astype(np.uint32)
        blocks = lengths >> 2
        for b in range(width // 4):
            k = (
                matrix[:, 4 * b]
                | (matrix[:, 4 * b + 1] << np.uint32(8))
                | (matrix[:, 4 * b + 2] << np.uint32(16))
                | (matrix[:, 4 * b + 3] << np.uint32(24))
            )
            k = k * m
            k ^= k >> np.uint32(24)
            k = k * m
            h = np.where(b < blocks, (h * m) ^ k, h)
        end = (blocks << 2)[:, None]
        rows = np.arange(n)[:, None]
        tail = matrix[rows, np.minimum(end + np.arange(3), width - 1)]
        extra = (lengths & 3)[:, None]
        tail = np.where(np.arange(3) < extra, tail, 0).astype(np.uint32)
        h ^= (tail[:, 2] << np.uint32(16)) | (tail[:, 1] << np.uint32(8)) | tail[:, 0]
        h = np.where(lengths & 3, h * m, h)
        h ^= h >> np.uint32(13)
        h = h * m
        h ^= h >> np.uint32(15)
    parts = ((h & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int64)
    if nulls is not None:
        long_keys &= ~nulls
    for i in np.flatnonzero(long_keys).tolist():
        start, stop = int(offsets[i]), int(offsets[i + 1])
        parts[i] = partition_for_key(data[start:stop].tobytes(), num_partitions)
    if nulls is not None:
        parts[nulls] = -1
    return parts


def moves_on(produced: int, batch_full: bool, limit: int) -> bool:
    """Package-internal: whether the sticky partitioner leaves a partition it has sent
    ``produced`` bytes to, its open batch ``batch_full`` or not, ``limit`` the bytes that
    fill a batch: past twice the limit, or past it once the batch is full."""
    return produced >= 2 * limit or (produced >= limit and batch_full)


class StickyPartitioner:
    """KIP-794 "strictly uniform sticky" choice for records without a key.

    Each topic sticks to one partition until ``batch_size`` bytes went to it and its open
    batch is full, or unconditionally after ``2 * batch_size`` bytes; then it moves to a
    random partition that has a leader. Switching by bytes produced (not batches created)
    keeps the load uniform even when some partitions drain faster than others. With a
    ``load`` (adaptive partitioning, ``adaptive.py``), the next partition is drawn with
    weights that favour short queues, and brokers that stalled are skipped.
    """

    __slots__ = ("_load", "_rng", "batch_size", "states")

    def __init__(
        self,
        batch_size: int,
        rng: random.Random | None = None,
        load: PartitionLoad | None = None,
    ) -> None:
        #: Bytes after which the partition may change (at ``2 * batch_size`` it must).
        self.batch_size = max(1, batch_size)
        self._rng = rng or random.Random()
        self._load = load
        #: topic -> [current partition, bytes produced to it since it was chosen]. The
        #: intake's per-record path reads it directly and adds each record's bytes,
        #: calling :meth:`on_append` (with size 0) only once they reach ``batch_size``.
        self.states: dict[str, list[int]] = {}

    def partition(self, topic: str, available: Sequence[int], num_partitions: int) -> int:
        """The current sticky partition for ``topic``, choosing one if there is none."""
        state = self.states.get(topic)
        if state is None or state[0] >= num_partitions:
            state = [self._choose(topic, available, num_partitions, -1), 0]
            self.states[topic] = state
        return state[0]

    def on_append(
        self,
        topic: str,
        partition: int,
        size: int,
        batch_full: bool,
        available: Sequence[int],
        num_partitions: int,
        batch_limit: int = 0,
    ) -> None:
        """Account ``size`` bytes appended to ``partition``; maybe switch to another one.

        ``batch_limit``: the uncompressed bytes that fill the partition's open batch, when
        compression lets it hold more than ``batch_size`` (the thresholds scale with it).
        """
        state = self.states.get(topic)
        if state is None or state[0] != partition:
            return
        state[1] += size
        if moves_on(state[1], batch_full, max(self.batch_size, batch_limit)):
            state[0] = self._choose(topic, available, num_partitions, partition)
            state[1] = 0

    def forget(self, topics: Iterable[str]) -> None:
        """Drop the sticky choice of ``topics`` (they left the metadata)."""
        for topic in topics:
            self.states.pop(topic, None)

    def _choose(
        self, topic: str, available: Sequence[int], num_partitions: int, current: int
    ) -> int:
        candidates = available if available else range(num_partitions)
        if len(candidates) == 1:
            return candidates[0]
        if self._load is not None:
            chosen = self._load.choose(topic, candidates, self._rng)
            if chosen is not None:
                return chosen
        while True:
            choice = candidates[self._rng.randrange(len(candidates))]
            if choice != current:
                return choice
