"""Columnar record encoding: a run of records from whole columns, with no Python object per
record.

Two implementations write the same bytes. Where the package was installed with Cython and
a C compiler, :func:`encode_run` calls the compiled encoder (``_column_codec.pyx``: one
pass over the column buffers per batch, see ``CODEC_REASON``); else (and with
``AIOPRODUCER_PURE_PYTHON=1``) it is :func:`encode_run_numpy`, described below.

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
from collections.abc import Callable
from typing import Any, Final

from aioproducer import speedups
from aioproducer.protocol import column_view
from aioproducer.protocol.column_plan import (
    PLAN_AHEAD,
    Plan,
    Request,
    cuts,
    fresh_cuts,
    record_size,
    tails,
    varint_sizes,
    zigzag,
)
from aioproducer.protocol.column_view import (
    BinaryColumn,
    _arrow_payload,
    _arrow_view,
    _gather_index,
    _pyarrow,
    numpy,
)
from aioproducer.protocol.compression import Codec, compress_records

__all__ = [
    "CODEC",
    "CODEC_REASON",
    "BinaryColumn",
    "encode_batches",
    "encode_compressed_batches",
    "encode_header_sections",
    "encode_run",
    "encode_run_numpy",
    "fresh_cuts",
    "numpy",
]

#: The compiled column encoder (``protocol/_column_codec.pyx``) if it runs here, else None;
#: and why, in words (``python -m aioproducer info`` prints it).
CODEC, CODEC_REASON = speedups.extension("aioproducer.protocol._column_codec")
if CODEC is None:
    speedups.log.info("aioproducer encodes columns with numpy: %s", CODEC_REASON)


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
    object).

    Every record gets the timestamp delta ``ts_part`` (already encoded). ``keys`` and
    ``headers`` are None (no key, no headers) or columns like ``values``; a row of
    ``headers`` is the record's encoded header section (the count varint and the pairs;
    ``b"\\x00"`` for none). Encoding stops before the first record that would take the
    batch past ``max_bytes`` (None: no limit), unless the batch is empty: then at least one
    record is encoded.

    The compiled encoder (``CODEC``) where it runs, else :func:`encode_run_numpy`: both
    write the same bytes and cut at the same record.
    """
    codec = CODEC
    if codec is None:
        request = (keys, headers, start, stop, first_offset_delta, ts_part, size_so_far, max_bytes)
        return encode_run_numpy(values, request)
    encoded: tuple[int, Any] = codec.encode_run(
        *_buffers(values, keys, headers),
        start,
        stop,
        first_offset_delta,
        ts_part,
        size_so_far,
        max_bytes,
    )
    return encoded


def _buffers(
    values: BinaryColumn, keys: BinaryColumn | None, headers: BinaryColumn | None
) -> tuple[Any, Any, Any]:
    """The compiled encoder's view of the columns: ``(offsets, data, valid)`` each."""
    return (
        (values.offsets, values.data, values.valid),
        None if keys is None else (keys.offsets, keys.data, keys.valid),
        None if headers is None else (headers.offsets, headers.data, None),
    )


def encode_batches(
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    start: int,
    stop: int,
    ts_part: bytes,
    empty_size: int,
    max_bytes: int,
    compress: Callable[[bytearray], bytes | bytearray] | None = None,
) -> list[tuple[Any, ...]]:
    """Records ``start:stop`` encoded into new batches, each filled up to ``max_bytes``
    from ``empty_size`` bytes (its header): ``(records, their bytes)`` per batch (a
    ``bytearray``, which the batch keeps as it is), what
    :func:`encode_run` called once per new batch would give, in one call (the compiled
    encoder acquires the columns' buffers once for the whole run). With ``compress``,
    ``(records, their bytes, compress(their bytes))``: each batch compressed right after
    it is encoded."""
    codec = CODEC
    if codec is None:
        out: list[tuple[Any, ...]] = []
        while start < stop:
            request = (keys, headers, start, stop, 0, ts_part, empty_size, max_bytes)
            count, encoded = encode_run_numpy(values, request)
            piece = bytearray(encoded)
            out.append((count, piece) if compress is None else (count, piece, compress(piece)))
            start += count
        return out
    batches: list[tuple[Any, ...]] = codec.encode_batches(
        *_buffers(values, keys, headers), start, stop, ts_part, empty_size, max_bytes, compress
    )
    return batches


def encode_compressed_batches(
    values: BinaryColumn,
    keys: BinaryColumn | None,
    headers: BinaryColumn | None,
    rows: tuple[int, int],
    empty_size: int,
    max_bytes: int,
    codec: Codec,
    level: int | None,
) -> list[tuple[int, bytearray, bytes | bytearray]]:
    """:func:`encode_batches` of ``rows`` (``(start, stop)``), every record stamped as
    its batch's first (timestamp delta 0), each batch also compressed with ``codec`` at
    ``level``: ``(records, their bytes, those bytes compressed)`` per batch. Each batch
    is compressed right after it is encoded, while its bytes are still in the CPU's
    cache, not after the whole run."""
    start, stop = rows

    def squeeze(encoded: bytearray) -> bytes | bytearray:
        return compress_records(codec, encoded, level)

    batches: list[tuple[int, bytearray, bytes | bytearray]] = encode_batches(
        values, keys, headers, start, stop, b"\x00", empty_size, max_bytes, squeeze
    )
    return batches


def encode_run_numpy(values: BinaryColumn, request: Request) -> tuple[int, Any]:
    """:func:`encode_run` with numpy: ``request`` is its arguments after ``values``
    (``(keys, headers, start, stop, first_offset_delta, ts_part, size_so_far,
    max_bytes)``); returns ``(records encoded, their bytes)`` (a numpy uint8 array).

    The rest of the run is encoded ahead for the batches that follow, and kept on
    ``values`` until a call asks for something else (see :class:`Plan`).
    """
    keys, headers, start, stop, first_offset_delta, ts_part, size_so_far, max_bytes = request
    if start >= stop:
        return 0, b""
    np = numpy()
    plan = values._plan
    got = None
    if plan is not None:
        got = plan.serve(request)
    if got is None:
        if first_offset_delta and max_bytes is not None:
            # A batch that cannot take even the first record is common (a run that
            # ended at a cut): say so without disturbing the plan.
            first = record_size(values, keys, headers, start, first_offset_delta, ts_part)
            if size_so_far + first > max_bytes:
                return 0, b""
        horizon = stop
        ahead = values.plan_stop
        run_ends = values.run_ends
        if ahead is not None and start < ahead:
            if not first_offset_delta:
                horizon = max(stop, min(ahead, start + PLAN_AHEAD))
        elif run_ends is not None:
            # The rest of this partition's run comes next, slice after slice: plan it
            # now (a later call that does not match the plan is planned afresh).
            index = bisect.bisect_right(run_ends, start)
            if index < len(run_ends):
                horizon = max(stop, min(run_ends[index], start + PLAN_AHEAD))
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
        got = plan.serve(request)
        assert got is not None
    count, data, _cut = got
    if plan is not None and start + count >= plan.stop:
        values._plan = None  # used up
    return count, data


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
) -> Plan | None:
    """Cut records ``start:stop`` into batches and encode them (None: not even the first
    record fits the caller's non-empty batch)."""
    n = stop - start
    tail, vzz, vsize, kzz, ksize = tails(np, values, keys, headers, start, stop)
    batches = cuts(np, tail, n, first_offset_delta, len(ts_part), size_so_far, max_bytes)
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
    osize = varint_sizes(np, ozz)
    first_count = counts[0]
    body = tail + osize
    body += 2  # attributes, timestamp delta
    if len(ts_part) != 1:
        body[:first_count] += len(ts_part) - 1
    lzz = body << 1
    lsize = varint_sizes(np, lzz)
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
        and column_view.USE_VIEWS
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

    plan = Plan()
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
    zz = zigzag(values)
    sizes = varint_sizes(np, zz)
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
    first 4 bytes, buffer index, offset); ``rows`` is zeroed. The bytes are gathered one
    position at a time over all rows (numpy's fast direction)."""
    pa = _pyarrow()
    first, last = int(column.offsets[start]), int(column.offsets[stop])
    chunk = column.data[first:last] if last > first else np.zeros(1, dtype=np.uint8)
    starts = column.offsets[start:stop] - first
    lengths = np.diff(column.offsets[start : stop + 1])
    small = lengths <= _INLINE
    all_small = bool(small.all())
    any_small = all_small or bool(small.any())
    width = int(lengths.max()) if all_small else (_INLINE if any_small else 4)
    # The inline bytes go straight into the (zeroed) views, a byte position at a time
    # over all rows: one gather and one strided store each, no widening to words.
    inline = rows.view(np.uint8)
    shortest = int(lengths.min()) if any_small else width
    for c in range(min(width, _INLINE)):
        byte = np.take(chunk, starts + c, mode="clip")
        if c >= shortest:
            byte[lengths <= c] = 0
        inline[:, 4 + c] = byte
    rows[:, 0] = lengths
    if not all_small:
        rows[:, 2] = np.where(small, rows[:, 2], index) if any_small else index
        rows[:, 3] = np.where(small, rows[:, 3], starts) if any_small else starts
    return pa.py_buffer(chunk)
