"""Columnar record encoding: a run of records from whole columns, with no Python object per
record.

A :class:`BinaryColumn` is a read-only view of a binary column (Arrow's layout: absolute
offsets into one data buffer, plus a validity mask). :func:`encode_run` encodes a run of
records from such columns into exactly the bytes
:meth:`~aioproducer.protocol.records.RecordBatchBuilder.append` would write for them one by
one: every length, varint, offset delta and record length is computed for the whole run at
once with numpy, and the payload bytes are copied by buffer, never per record in Python.

numpy is imported when a column is first made, not with this module (numpy and pyarrow
are optional dependencies); pyarrow, where installed, does the final interleaving copy
(``take`` on one binary array made of the run's pieces), else a numpy index gather does
it.

Pure computation on buffers: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Final

from aioproducer.errors import SerializationError
from aioproducer.protocol.batch_layout import RECORD_BATCH_OVERHEAD as _BATCH_OVERHEAD

__all__ = ["BinaryColumn", "encode_header_sections", "encode_run", "fresh_cuts", "numpy"]


def numpy() -> Any:
    """The numpy module, imported on first use; ``ImportError`` naming the extra if absent."""
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy is installed where tests run
        raise ImportError(
            "columns (Arrow arrays, tables) need numpy: pip install 'aioproducer[spark]'"
        ) from exc
    return np


#: Whether pyarrow (where installed) does the interleaving copy, and whether by
#: binary_view arrays (else by ``take``); tests turn them off to exercise the other paths.
USE_ARROW = True
USE_VIEWS = True


def _pyarrow() -> Any:
    if not USE_ARROW:
        return None
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - the numpy fallback is tested by forcing it
        return None
    return pa


class BinaryColumn:
    """A read-only binary column: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``, or null
    where ``valid`` is False.

    ``offsets`` is a numpy int64 array of ``len + 1`` absolute offsets into ``data`` (a
    numpy uint8 array, usually a zero-copy view of an Arrow buffer); ``valid`` is a numpy
    bool array, or None when no row is null. A null row spans no bytes (the constructors
    make sure of it), so the payload of rows ``a:b`` is always the one slice
    ``data[offsets[a]:offsets[b]]``.
    """

    __slots__ = ("_plan", "data", "offsets", "plan_stop", "valid")

    def __init__(self, offsets: Any, data: Any, valid: Any = None) -> None:
        """Wrap numpy arrays as they are (see the class docstring for their meaning)."""
        self.offsets = offsets
        self.data = data
        self.valid = valid
        # The encoding planned ahead for the next batches (see encode_run).
        self._plan: _Plan | None = None
        #: Rows before this one may be encoded ahead of the calls that ask for them, when
        #: a fresh batch starts (a bulk send sets it for the rows the sticky partitioner
        #: places, which come in consecutive runs); None: only what a call asks for.
        self.plan_stop: int | None = None

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_arrow(cls, array: Any, name: str = "column") -> BinaryColumn:
        """View an Arrow ``binary``, ``string``, ``large_binary`` or ``large_string`` array
        (or ChunkedArray, or dictionary array of those) as a column, copying as little as
        possible.

        Strings are read as their UTF-8 bytes (no cast). The array's slice offset and null
        bitmap are honoured; a ChunkedArray of several chunks is combined (one copy) and a
        dictionary array decoded (one copy). Anything else raises
        :class:`~aioproducer.errors.SerializationError` naming ``name``.
        """
        np = numpy()
        import pyarrow as pa  # an Arrow array exists, so pyarrow does

        if isinstance(array, pa.ChunkedArray):
            if array.num_chunks == 1:
                array = array.chunk(0)
            elif array.num_chunks == 0:
                array = pa.array([], type=array.type)
            else:
                array = array.combine_chunks()
        if not isinstance(array, pa.Array):
            raise SerializationError(
                f"{name} must be an Arrow array or a sequence, got {type(array).__name__}"
            )
        kind = array.type
        if pa.types.is_dictionary(kind):
            if not _is_binary_type(pa, kind.value_type):
                raise SerializationError(
                    f"{name} must be a binary or string column, got {kind} "
                    "(dictionary of a type that is not binary or string)"
                )
            array = array.dictionary_decode()
            kind = array.type
        if pa.types.is_binary(kind) or pa.types.is_string(kind):
            offset_type: Any = np.int32
        elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
            offset_type = np.int64
        else:
            raise SerializationError(
                f"{name} must be a binary or string column "
                f"(binary, string, large_binary or large_string), got {kind}"
            )
        n = len(array)
        validity, offsets_buf, data_buf = array.buffers()
        if n == 0:
            return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8))
        start = array.offset
        offsets = np.frombuffer(offsets_buf, dtype=offset_type)[start : start + n + 1]
        offsets = offsets.astype(np.int64, copy=offset_type is not np.int64)
        if data_buf is None or data_buf.size == 0:
            data = np.zeros(0, dtype=np.uint8)
        else:
            data = np.frombuffer(data_buf, dtype=np.uint8)
        valid = None
        if array.null_count:
            bits = np.frombuffer(validity, dtype=np.uint8)
            valid = np.unpackbits(bits, bitorder="little")[start : start + n].astype(bool)
        return cls(offsets, data, valid)._empty_nulls()

    @classmethod
    def from_sequence(cls, items: Sequence[Any], name: str = "column") -> BinaryColumn:
        """A column of ``items``: ``bytes``-like objects or None (null); ``str`` is encoded
        as UTF-8. Anything else raises :class:`~aioproducer.errors.SerializationError`
        naming ``name`` and the row (see :meth:`from_sequence_until_error`)."""
        column, _count, error = cls.from_sequence_until_error(items, name)
        if error is not None:
            raise error
        return column

    @classmethod
    def from_sequence_until_error(
        cls, items: Sequence[Any], name: str = "column"
    ) -> tuple[BinaryColumn, int, SerializationError | None]:
        """:meth:`from_sequence` of the rows before the first bad one: returns the column,
        how many rows it holds, and the bad row's error (None if every row is good)."""
        np = numpy()
        parts: list[bytes] = []
        lengths: list[int] = []
        valid: list[bool] = []
        error: SerializationError | None = None
        for i, item in enumerate(items):
            if item is None:
                lengths.append(0)
                valid.append(False)
                continue
            if type(item) is not bytes:
                if isinstance(item, str):
                    item = item.encode("utf-8")
                elif isinstance(item, (bytearray, memoryview)):
                    item = bytes(item)
                else:
                    error = SerializationError(
                        f"record {i}: {name} must be bytes, bytearray, memoryview, str or "
                        f"None, got {type(item).__name__}"
                    )
                    break
            parts.append(item)
            lengths.append(len(item))
            valid.append(True)
        count = len(lengths)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        data = np.frombuffer(b"".join(parts), dtype=np.uint8)
        mask = np.asarray(valid, dtype=bool)
        return cls(offsets, data, None if mask.all() else mask), count, error

    @classmethod
    def from_headers(cls, rows: Sequence[Any]) -> BinaryColumn:
        """A column of encoded header sections, one per row of ``rows`` (each a sequence
        of ``(str, bytes | None)`` pairs, or None/empty for none), as :func:`encode_run`
        takes them. Raises :class:`~aioproducer.errors.SerializationError` for a bad
        header, as :meth:`~aioproducer.protocol.records.RecordBatchBuilder.append` does. Runs per row: header lists are
        Python objects already."""
        from aioproducer.protocol.record_encoder import encode_headers

        empty = b"\x00"
        return cls.from_sequence([encode_headers(h) if h else empty for h in rows])

    def _empty_nulls(self) -> BinaryColumn:
        """This column, or a compacted copy if a null row spans bytes (Arrow allows it)."""
        valid = self.valid
        if valid is None:
            return self
        np = numpy()
        lengths = np.diff(self.offsets)
        if not lengths[~valid].any():
            return self
        lengths = np.where(valid, lengths, 0)
        keep = np.repeat(valid, np.diff(self.offsets))
        data = self.data[self.offsets[0] : self.offsets[-1]][keep]
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return BinaryColumn(offsets, data, valid)

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.offsets) - 1

    def lengths(self, start: int = 0, stop: int | None = None) -> Any:
        """The byte lengths of rows ``start:stop`` (numpy int64), -1 for a null row."""
        if stop is None:
            stop = len(self)
        np = numpy()
        out = np.diff(self.offsets[start : stop + 1])
        if self.valid is not None:
            out[~self.valid[start:stop]] = -1
        return out

    def nbytes(self, start: int = 0, stop: int | None = None) -> int:
        """The payload bytes of rows ``start:stop``."""
        if stop is None:
            stop = len(self)
        return int(self.offsets[stop] - self.offsets[start])

    def null_count(self) -> int:
        """How many rows are null."""
        return 0 if self.valid is None else int(len(self.valid) - self.valid.sum())

    def row_length(self, index: int) -> int:
        """Row ``index``'s byte length, -1 if null (Python int: for single rows)."""
        if self.valid is not None and not self.valid[index]:
            return -1
        return int(self.offsets[index + 1] - self.offsets[index])

    def row(self, index: int) -> bytes | None:
        """Row ``index`` as ``bytes`` (None if null): for errors and tests, not hot paths."""
        if self.valid is not None and not self.valid[index]:
            return None
        return bytes(self.data[self.offsets[index] : self.offsets[index + 1]])

    def to_pylist(self) -> list[bytes | None]:
        """Every row as ``bytes`` or None (for tests and per-row fallbacks)."""
        return [self.row(i) for i in range(len(self))]

    def head(self, count: int) -> BinaryColumn:
        """The first ``count`` rows (a view)."""
        valid = self.valid[:count] if self.valid is not None else None
        return BinaryColumn(self.offsets[: count + 1], self.data, valid)

    def take(self, indices: Any) -> BinaryColumn:
        """A new column of rows ``indices`` (numpy integer array), in that order: one
        gathering copy of the payload, no Python object per row."""
        np = numpy()
        indices = np.asarray(indices, dtype=np.int64)
        lengths = np.diff(self.offsets)[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        valid = self.valid[indices] if self.valid is not None else None
        pa = _pyarrow()
        if pa is not None:
            source = _arrow_view(pa, np, self.offsets, self.data)
            taken = source.take(pa.array(indices.astype(np.int32)))
            data = _arrow_payload(np, taken)
        else:
            starts = self.offsets[:-1][indices]
            data = self.data[_gather_index(np, starts, lengths, offsets)]
        return BinaryColumn(offsets, data, valid)


def _is_binary_type(pa: Any, kind: Any) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_large_string(kind)
    )


def _arrow_view(pa: Any, np: Any, offsets: Any, data: Any) -> Any:
    """A large_binary Arrow array over numpy ``offsets`` (int64) and ``data``, no copy."""
    if len(data) == 0:
        data = np.zeros(1, dtype=np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(offsets) - 1,
        [None, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(data)],
    )


def _arrow_payload(np: Any, array: Any) -> Any:
    """The concatenated payload of a binary Arrow array made by ``take``, as uint8."""
    _validity, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)
    first, last = int(offsets[array.offset]), int(offsets[array.offset + len(array)])
    if data_buf is None or last == first:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(data_buf, dtype=np.uint8)[first:last]


def _gather_index(np: Any, starts: Any, lengths: Any, offsets: Any) -> Any:
    """Source index of every output byte when segments ``starts``/``lengths`` are copied
    back to back (output offsets ``offsets``): the numpy-only gathering copy."""
    total = int(offsets[-1])
    shift = np.repeat(starts - offsets[:-1], lengths)
    return shift + np.arange(total, dtype=np.int64)


# -- varints -----------------------------------------------------------------------------------


def _put_varints(np: Any, out: Any, pos: Any, zz: Any, sizes: Any) -> None:
    """Write LEB128 varints ``zz`` (non-negative int64, with their ``sizes``) at
    ``out[pos]`` onwards."""
    if not len(zz):
        return
    widest = int(sizes.max())
    if widest == int(sizes.min()):
        # All the same size (the usual case): no row selection.
        for j in range(widest):
            byte = zz & 0x7F if j == 0 else (zz >> (7 * j)) & 0x7F
            out[pos + j if j else pos] = byte | 0x80 if j < widest - 1 else byte
        return
    more = sizes > 1
    out[pos] = (zz & 0x7F) | (more << 7)
    rows = np.flatnonzero(more)
    pos, zz, sizes = pos[rows], zz[rows], sizes[rows]
    for j in range(1, 10):
        zz = zz >> 7
        more = sizes > j + 1
        out[pos + j] = (zz & 0x7F) | (more << 7)
        if not more.any():
            return
        rows = np.flatnonzero(more)
        pos, zz, sizes = pos[rows], zz[rows], sizes[rows]


# -- the encoder -------------------------------------------------------------------------------

# A record's offset delta takes k + 1 bytes below _OD_TIERS[k] (zig-zag LEB128).
_OD_TIERS: Final = (64, 8192, 1 << 20, 1 << 27, 1 << 34)
# Records a plan may encode ahead of the calls (see BinaryColumn.plan_stop).
_PLAN_AHEAD: Final = 4096
# Zig-zag values from which a varint takes one more byte.
_VARINT_STEPS: Final = tuple(1 << (7 * k) for k in range(1, 9))


def _sizes(np: Any, zz: Any) -> Any:
    """LEB128 sizes of non-negative zig-zag values (int64): a comparison per byte the
    largest one needs (lengths below 8192 take two)."""
    sizes = np.ones(len(zz), dtype=np.int64)
    if len(zz):
        largest = int(zz.max())
        for step in _VARINT_STEPS:
            if largest < step:
                break
            sizes += zz >= step
    return sizes


def _zz(values: Any) -> Any:
    """Zig-zag of int64 lengths and deltas (all >= -1 here: no overflow)."""
    return (values << 1) ^ (values >> 63)


class _Plan:
    """Records ``start:stop`` of a column encoded for consecutive batches at once.

    A small batch holds a few hundred records; numpy's fixed cost per call would dominate
    if every batch were encoded on its own. So the first call for a run cuts the whole run
    into the batches it would fill (the first one continuing the caller's batch, the
    others fresh, each cut exactly where :meth:`~aioproducer.protocol.records.RecordBatchBuilder.append_many` would cut
    it), encodes them in one go, and the following calls are served slices of it as long
    as they ask for exactly what was planned (same record, offset delta, timestamp delta
    and batch size so far; anything else is planned afresh).
    """

    __slots__ = (
        "batch_ends",
        "batch_j0",
        "batch_starts",
        "batch_used",
        "data",
        "first_ts",
        "headers",
        "keys",
        "max_bytes",
        "rec_off",
        "start",
        "stop",
    )

    keys: BinaryColumn | None
    headers: BinaryColumn | None
    max_bytes: int | None
    start: int
    stop: int
    first_ts: bytes
    # Per batch (absolute rows): first row, end, offset delta of the first row, and the
    # batch's bytes before it.
    batch_starts: list[int]
    batch_ends: list[int]
    batch_j0: list[int]
    batch_used: list[int]
    # numpy: byte offset of every record in data (one more than records).
    rec_off: Any
    data: Any

    def serve(
        self,
        keys: BinaryColumn | None,
        headers: BinaryColumn | None,
        start: int,
        stop: int,
        first_offset_delta: int,
        ts_part: bytes,
        size_so_far: int,
        max_bytes: int | None,
    ) -> tuple[int, Any, bool] | None:
        """``(records, bytes, whether the batch is cut after them)`` if the request is the
        plan's, else None."""
        i = start - self.start
        if (
            not 0 <= i < self.stop - self.start
            or keys is not self.keys
            or headers is not self.headers
            or max_bytes != self.max_bytes
        ):
            return None
        b = bisect.bisect_right(self.batch_starts, start) - 1
        first = self.batch_starts[b]
        rec_off = self.rec_off
        if (
            self.batch_j0[b] + start - first != first_offset_delta
            or self.batch_used[b] + int(rec_off[i] - rec_off[first - self.start]) != size_so_far
            or ts_part != (self.first_ts if b == 0 else b"\x00")
        ):
            return None
        end = self.batch_ends[b]
        last = min(stop, end)
        data = self.data[int(rec_off[i]) : int(rec_off[last - self.start])]
        return last - start, data, end < self.stop


def encode_run(
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    start: int,
    stop: int,
    first_offset_delta: int,
    ts_part: bytes,
    size_so_far: int,
    max_bytes: int | None,
) -> tuple[int, Any]:
    """Encode records ``start:stop`` as :meth:`~aioproducer.protocol.records.RecordBatchBuilder.append` would, one after
    the other, into a batch already holding ``first_offset_delta`` records and
    ``size_so_far`` bytes; returns ``(records encoded, their bytes)`` (a bytes-like
    object: a numpy uint8 array).

    Every record gets the timestamp delta ``ts_part`` (already encoded). ``keys`` and
    ``headers`` are None (no key, no headers) or columns like ``values``; a row of
    ``headers`` is the record's encoded header section (the count varint and the pairs;
    ``b"\\x00"`` for none). Encoding stops before the first record that would take the
    batch past ``max_bytes`` (None: no limit), unless the batch is empty: then at least one
    record is encoded.

    The rest of the run is encoded ahead for the batches that follow, and kept on
    ``values`` until a call asks for something else (see :class:`_Plan`).
    """
    if start >= stop:
        return 0, b""
    np = numpy()
    plan = values._plan
    got = None
    if plan is not None:
        got = plan.serve(
            keys, headers, start, stop, first_offset_delta, ts_part, size_so_far, max_bytes
        )
    if got is None:
        if first_offset_delta and max_bytes is not None:
            # A batch that cannot take even the first record is common (a run that
            # ended at a cut): say so without disturbing the plan.
            first = _record_size(values, keys, headers, start, first_offset_delta, ts_part)
            if size_so_far + first > max_bytes:
                return 0, b""
        horizon = stop
        ahead = values.plan_stop
        if not first_offset_delta and ahead is not None and start < ahead:
            horizon = max(stop, min(ahead, start + _PLAN_AHEAD))
        plan = _make_plan(
            np,
            values,
            keys,
            headers,
            start,
            horizon,
            first_offset_delta,
            ts_part,
            size_so_far,
            max_bytes,
        )
        values._plan = plan
        if plan is None:  # pragma: no cover - the check above returns first
            return 0, b""
        got = plan.serve(
            keys, headers, start, stop, first_offset_delta, ts_part, size_so_far, max_bytes
        )
        assert got is not None
    count, data, _cut = got
    if plan is not None and start + count >= plan.stop:
        values._plan = None  # used up
    return count, data


def _varint_size(zz: int) -> int:
    size = 1
    while zz >= 0x80:
        zz >>= 7
        size += 1
    return size


def _record_size(
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    row: int,
    offset_delta: int,
    ts_part: bytes,
) -> int:
    """The exact encoded size of one record (Python ints: for a single record)."""
    body = 1 + len(ts_part) + _varint_size(offset_delta << 1)
    for column in (values, keys):
        if column is None:
            body += 1
            continue
        length = column.row_length(row)
        body += _varint_size(length << 1) + length if length >= 0 else 1
    if headers is None:
        body += 1
    else:
        body += headers.row_length(row)
    return body + _varint_size(body << 1)


def fresh_cuts(
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    start: int,
    stop: int,
    max_bytes: int,
) -> list[int]:
    """Where records ``start:stop`` are cut into batches of at most ``max_bytes`` when
    every batch starts empty: ``[start, ..., stop]``, one item per batch boundary.

    A bulk send cuts the rows the sticky partitioner places into runs there, so that each
    run fills one batch and :func:`encode_run` serves them all from one plan."""
    if start >= stop:
        return [start]
    np = numpy()
    tail, *_rest = _tails(np, values, keys, headers, start, stop)
    batches = _cuts(np, tail, stop - start, 0, 1, _BATCH_OVERHEAD, max_bytes)
    return [start] + [start + b[1] for b in batches]


def _tails(
    np: Any,
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    start: int,
    stop: int,
) -> tuple[Any, Any, Any, Any, Any]:
    """Each record's "tail" size, the same wherever it lands (key length, key, value
    length, value, header section), with the value and key length varints and sizes."""
    vlen = values.lengths(start, stop)
    vzz = _zz(vlen) if values.valid is not None else vlen << 1
    vsize = _sizes(np, vzz)
    tail = vsize + np.maximum(vlen, 0)
    kzz = ksize = None
    if keys is not None:
        klen = keys.lengths(start, stop)
        kzz = _zz(klen) if keys.valid is not None else klen << 1
        ksize = _sizes(np, kzz)
        tail += ksize + np.maximum(klen, 0)
    else:
        tail += 1  # the null key's length, -1
    if headers is not None:
        tail += np.diff(headers.offsets[start : stop + 1])
    else:
        tail += 1  # header count 0
    return tail, vzz, vsize, kzz, ksize


def _cuts(
    np: Any,
    tail: Any,
    n: int,
    first_offset_delta: int,
    first_ts_len: int,
    size_so_far: int,
    max_bytes: int | None,
) -> list[tuple[int, int, int, int, int]]:
    """The batches ``n`` records with these tails fill: (first record, end, offset delta
    of the first, timestamp delta size, bytes before the first), relative to the first
    record; the first batch continues the caller's, the others start empty. Empty if
    not even one record fits the caller's non-empty batch."""
    batches: list[tuple[int, int, int, int, int]] = []
    if max_bytes is None:
        batches.append((0, n, first_offset_delta, first_ts_len, size_so_far))
        return batches
    cums: dict[tuple[int, int], Any] = {}

    def cum(ts_len: int, osize: int) -> Any:
        # Prefix sums of the records' sizes with that timestamp and offset delta size.
        found = cums.get((ts_len, osize))
        if found is None:
            body = tail + (1 + ts_len + osize)
            found = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(body + _sizes(np, body << 1), out=found[1:])
            cums[(ts_len, osize)] = found
        return found

    pos, j0, ts_len, used = 0, first_offset_delta, first_ts_len, size_so_far
    while pos < n:
        end = _cut(np, cum, pos, n, j0, ts_len, max_bytes - used)
        if end == pos:
            break  # only the caller's batch can take nothing
        batches.append((pos, end, j0, ts_len, used))
        pos, j0, ts_len, used = end, 0, 1, _BATCH_OVERHEAD
    return batches


def _make_plan(
    np: Any,
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    start: int,
    stop: int,
    first_offset_delta: int,
    ts_part: bytes,
    size_so_far: int,
    max_bytes: int | None,
) -> _Plan | None:
    """Cut records ``start:stop`` into batches and encode them (None: not even the first
    record fits the caller's non-empty batch)."""
    n = stop - start
    tail, vzz, vsize, kzz, ksize = _tails(np, values, keys, headers, start, stop)
    batches = _cuts(np, tail, n, first_offset_delta, len(ts_part), size_so_far, max_bytes)
    if not batches:
        return None

    # Per record: its offset delta and sizes; every batch but the first starts empty,
    # with a one-byte timestamp delta (0).
    firsts = [b[0] for b in batches]
    counts = [b[1] - b[0] for b in batches]
    n = batches[-1][1]
    tail = tail[:n]
    shift = np.asarray([b[0] - b[2] for b in batches], dtype=np.int64)
    j = np.arange(n, dtype=np.int64) - np.repeat(shift, counts)
    ozz = j << 1
    osize = _sizes(np, ozz)
    first_count = counts[0]
    body = tail + osize
    body += 2  # attributes, timestamp delta
    if len(ts_part) != 1:
        body[:first_count] += len(ts_part) - 1
    lzz = body << 1
    lsize = _sizes(np, lzz)
    rec_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(body, out=rec_off[1:])
    rec_off[1:] += np.cumsum(lsize)

    # Piece P[i]: [header count 0 of record i-1] length, attributes, timestamp delta,
    # offset delta, key length, and (without a key column) the null key and value length.
    trailer = headers is None
    width = lsize + osize
    width += 2  # attributes, timestamp delta
    if len(ts_part) != 1:
        width[:first_count] += len(ts_part) - 1
    width += ksize[:n] if keys is not None else 1 + vsize[:n]
    if trailer:
        width[1:] += 1
    # The other pieces: key and value length M[i] between a key and its value (with a
    # key column), and the column's own rows.
    columns: list[BinaryColumn] = [keys] if keys is not None else []
    columns.append(values)
    if headers is not None:
        columns.append(headers)
    per_record = 2 + (2 if keys is not None else 0) + (1 if headers is not None else 0)
    pa = _pyarrow()
    views = None
    if (
        pa is not None
        and USE_VIEWS
        and int(width.max()) <= _INLINE
        and all(c.offsets[start + n] - c.offsets[start] < 1 << 31 for c in columns)
        and _views_work(pa, np)
    ):
        # Arrow's binary_view layout: a 16-byte view per piece in record order, the
        # short pieces written into their views, the others pointing into the columns'
        # buffers; one cast to large_binary then copies every piece once.
        count = n * per_record + (1 if trailer else 0)
        views = np.zeros((count, 16), dtype=np.uint8)
        pdata = views.reshape(-1)
        words = views.view(np.int32)
        words[0 : n * per_record : per_record, 0] = width
        if trailer:
            words[count - 1, 0] = 1  # the last record's header count, 0
        pos_ = np.arange(4, 16 * count - 16 * (1 if trailer else 0), 16 * per_record)
    else:
        poff = np.zeros(n + 2 if trailer else n + 1, dtype=np.int64)
        np.cumsum(width, out=poff[1 : n + 1])
        if trailer:
            poff[n + 1] = poff[n] + 1
        pdata = np.zeros(int(poff[-1]), dtype=np.uint8)  # zeros: attributes, trailers
        pos_ = poff[:n].copy()
    if trailer:
        pos_[1:] += 1
    _put_varints(np, pdata, pos_, lzz, lsize)
    pos_ += lsize + 1  # the attributes byte is 0
    first_count = int(counts[0])
    if ts_part != b"\x00":
        for k, byte in enumerate(ts_part):
            pdata[pos_[:first_count] + k] = byte
    # Fresh batches' timestamp delta is 0, already there.
    pos_ += 1
    if len(ts_part) != 1:
        pos_[:first_count] += len(ts_part) - 1
    _put_varints(np, pdata, pos_, ozz, osize)
    pos_ += osize
    if keys is not None:
        _put_varints(np, pdata, pos_, kzz[:n], ksize[:n])
    else:
        pdata[pos_] = 1  # null key: length -1
        _put_varints(np, pdata, pos_ + 1, vzz[:n], vsize[:n])

    if views is not None:
        words = views.view(np.int32)
        buffers = [None, pa.py_buffer(views)]
        piece = 1
        for index, column in enumerate(columns):
            if column is values and keys is not None:
                m_rows = slice(piece, n * per_record, per_record)
                words[m_rows, 0] = vsize[:n]
                m_pos = np.arange(16 * piece + 4, 16 * n * per_record, 16 * per_record)
                _put_varints(np, pdata, m_pos, vzz[:n], vsize[:n])
                piece += 1
            rows = words[piece : n * per_record : per_record]
            buffers.append(_fill_views(np, rows, column, start, start + n, index))
            piece += 1
        array = pa.Array.from_buffers(pa.binary_view(), len(views), buffers)
        data = _arrow_payload(np, array.cast(pa.large_binary()))
    else:
        sources: list[tuple[Any, Any]] = [(poff, pdata)]
        if keys is not None:
            # Piece M[i]: the value length, between the key and the value.
            moff = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(vsize[:n], out=moff[1:])
            mdata = np.empty(int(moff[-1]), dtype=np.uint8)
            _put_varints(np, mdata, moff[:-1], vzz[:n], vsize[:n])
            sources.append((keys.offsets[start : start + n + 1], keys.data))
            sources.append((moff, mdata))
        sources.append((values.offsets[start : start + n + 1], values.data))
        if headers is not None:
            sources.append((headers.offsets[start : start + n + 1], headers.data))
        data = _interleave(np, sources, n, trailer)

    plan = _Plan()
    plan.keys = keys
    plan.headers = headers
    plan.max_bytes = max_bytes
    plan.start = start
    plan.stop = start + n
    plan.first_ts = ts_part
    plan.batch_starts = [start + first for first in firsts]
    plan.batch_ends = [start + b[1] for b in batches]
    plan.batch_j0 = [b[2] for b in batches]
    plan.batch_used = [b[4] for b in batches]
    plan.rec_off = rec_off
    plan.data = data
    return plan


def _cut(np: Any, cum: Any, pos: int, n: int, j0: int, ts_len: int, room: int) -> int:
    """Where a batch starting at record ``pos`` (its offset delta ``j0``, ``room`` bytes
    left) ends: before the first record that does not fit, after at least one record if
    the batch is empty."""
    start, j, left = pos, j0, room
    end = pos
    for k, tier in enumerate(_OD_TIERS):
        if j >= tier:
            continue
        sums = cum(ts_len, k + 1)
        seg_end = min(n, pos + (tier - j))
        base = int(sums[pos])
        whole = int(sums[seg_end]) - base
        if whole > left:
            # The cut is in this tier: the last e with sums[e] - sums[pos] <= left.
            end = max(pos, int(sums.searchsorted(base + left, "right")) - 1)
            break
        left -= whole
        j += seg_end - pos
        pos = seg_end
        if pos == n:
            end = n
            break
    if end == start and j0 == 0:
        end = start + 1
    return end


def _interleave(np: Any, sources: list[tuple[Any, Any]], n: int, trailer: bool) -> Any:
    """Concatenate row 0 of every source, then row 1 of every source, ...; with
    ``trailer``, the first source has one extra row that comes last."""
    k = len(sources)
    offsets, data, row_base = _stack(np, sources)
    # The order of the pieces: record by record.
    order = (np.arange(n, dtype=np.int32)[:, None] + row_base[:k].astype(np.int32)).reshape(-1)
    if trailer:
        order = np.append(order, row_base[1] - 1)
    return _gather_rows(np, offsets, data, order)


def _stack(np: Any, sources: list[tuple[Any, Any]]) -> tuple[Any, Any, Any]:
    """The rows of every source (``(offsets, data)``, each source's rows one contiguous
    slice of its data) as one column: its offsets, its data, and where each source's rows
    start in it (one more entry: the total)."""
    k = len(sources)
    firsts = [int(off[0]) for off, _data in sources]
    lasts = [int(off[-1]) for off, _data in sources]
    bases = np.zeros(k + 1, dtype=np.int64)
    np.cumsum([b - a for a, b in zip(firsts, lasts, strict=True)], out=bases[1:])
    rows = [len(off) - 1 for off, _data in sources]
    row_base = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(rows, out=row_base[1:])
    offsets = np.empty(int(row_base[-1]) + 1, dtype=np.int64)
    for j, (off, _data) in enumerate(sources):
        offsets[row_base[j] : row_base[j + 1] + 1] = off - firsts[j] + bases[j]
    data = np.concatenate([d[a:b] for (_off, d), a, b in zip(sources, firsts, lasts, strict=True)])
    return offsets, data, row_base


def _gather_rows(np: Any, offsets: Any, data: Any, order: Any) -> Any:
    """The bytes of rows ``order`` of the column ``offsets``/``data``, back to back
    (one gathering copy: Arrow's take where pyarrow is there, else a numpy index)."""
    pa = _pyarrow()
    if pa is not None:
        combined = _arrow_view(pa, np, offsets, data)
        return _arrow_payload(np, combined.take(pa.array(order.astype(np.int32))))
    starts = offsets[:-1][order]
    lengths = np.diff(offsets)[order]
    out_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    return data[_gather_index(np, starts, lengths, out_offsets)]


def _varint_column(np: Any, values: Any) -> tuple[Any, Any]:
    """Zig-zag LEB128 varints of int64 ``values`` as a column ``(offsets, data)``."""
    zz = _zz(values)
    sizes = _sizes(np, zz)
    offsets = np.zeros(len(zz) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.zeros(max(int(offsets[-1]), 1), dtype=np.uint8)
    _put_varints(np, data, offsets[:-1], zz, sizes)
    return offsets, data


def encode_header_sections(counts: Any, keys: BinaryColumn, values: BinaryColumn) -> BinaryColumn:
    """Every row's encoded header section (count, then each header's key and value with
    their lengths), a column at a time: ``counts`` (int64) headers per row, whose keys and
    values (a null value: no value) follow one another in ``keys``/``values``. The bytes
    are :func:`~aioproducer.protocol.record_encoder.encode_headers`' (``b"\x00"`` for
    none)."""
    np = numpy()
    n = len(counts)
    h = len(keys)
    key_lengths = np.diff(keys.offsets)
    value_lengths = values.lengths()  # -1: null
    pieces = [
        _varint_column(np, counts),
        _varint_column(np, key_lengths),
        (keys.offsets, keys.data),
        _varint_column(np, value_lengths),
        (values.offsets, values.data),
    ]
    offsets, data, _row_base = _stack(np, pieces)
    firsts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=firsts[1:])
    # Output piece positions: row i's count comes after the rows before it and their
    # headers' 4 pieces each; header j's pieces follow its row's count.
    order = np.empty(n + 4 * h, dtype=np.int64)
    order[np.arange(n, dtype=np.int64) + 4 * firsts[:-1]] = np.arange(n, dtype=np.int64)
    if h:
        row_of = np.repeat(np.arange(n, dtype=np.int64), counts)
        header_pos = row_of + 1 + 4 * np.arange(h, dtype=np.int64)
        for part in range(4):
            order[header_pos + part] = n + part * h + np.arange(h, dtype=np.int64)
    lengths = np.diff(offsets)
    section = lengths[:n].copy()
    if h:
        per_header = lengths[n : n + h] + lengths[n + h : n + 2 * h]
        per_header += lengths[n + 2 * h : n + 3 * h] + lengths[n + 3 * h :]
        section += np.bincount(row_of, weights=per_header, minlength=n).astype(np.int64)
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(section, out=out_offsets[1:])
    return BinaryColumn(out_offsets, _gather_rows(np, offsets, data, order))


# Whether this pyarrow casts binary_view to large_binary (empty: not tried yet).
_VIEWS: list[bool] = []
# A view holds up to this many bytes inline (Arrow's binary_view layout).
_INLINE: Final = 12


def _views_work(pa: Any, np: Any) -> bool:
    """Whether pyarrow has binary_view arrays and casts them to large_binary (tried
    once)."""
    if not _VIEWS:
        try:
            views = np.zeros(16, dtype=np.uint8)
            views[0] = 3
            views[4:7] = (1, 2, 3)
            array = pa.Array.from_buffers(pa.binary_view(), 1, [None, pa.py_buffer(views)])
            _VIEWS.append(array.cast(pa.large_binary()).to_pylist() == [b"\x01\x02\x03"])
        except (AttributeError, NotImplementedError, pa.ArrowException):
            _VIEWS.append(False)
    return _VIEWS[0]


def _fill_views(np: Any, rows: Any, column: BinaryColumn, start: int, stop: int, index: int) -> Any:
    """Write the views of rows ``start:stop`` of ``column`` into ``rows`` (int32, one row
    of 4 words per view) as data buffer ``index``; returns that buffer.

    A view is (length, 12 bytes inline) for a piece of up to 12 bytes, else (length,
    first 4 bytes, buffer index, offset). The bytes are gathered one position at a time
    over all rows (numpy's fast direction), and assembled into little-endian words."""
    pa = _pyarrow()
    first, last = int(column.offsets[start]), int(column.offsets[stop])
    chunk = column.data[first:last] if last > first else np.zeros(1, dtype=np.uint8)
    starts = column.offsets[start:stop] - first
    lengths = np.diff(column.offsets[start : stop + 1])
    small = lengths <= _INLINE
    all_small = bool(small.all())
    any_small = all_small or bool(small.any())
    width = int(lengths.max()) if all_small else (_INLINE if any_small else 4)
    acc = [np.zeros(len(starts), dtype=np.uint32) for _ in range(3)]
    for c in range(min(width, _INLINE)):
        byte = np.take(chunk, starts + c, mode="clip").astype(np.uint32)
        if any_small:
            byte[lengths <= c] = 0
        acc[c >> 2] |= byte << np.uint32(8 * (c & 3))
    rows[:, 0] = lengths
    rows[:, 1] = acc[0].view(np.int32)
    if all_small:
        rows[:, 2] = acc[1].view(np.int32)
        rows[:, 3] = acc[2].view(np.int32)
    elif not any_small:
        rows[:, 2] = index
        rows[:, 3] = starts
    else:
        rows[:, 2] = np.where(small, acc[1].view(np.int32), index)
        rows[:, 3] = np.where(small, acc[2].view(np.int32), starts)
    return pa.py_buffer(chunk)
