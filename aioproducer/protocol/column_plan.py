"""Planning a columnar run: where a run of records from whole columns is cut into batches,
and the plan that serves consecutive batches from one encoding (``columnar.py`` encodes).

Sizes are computed for the whole run at once with numpy: each record's tail (key, value,
headers and their lengths, the same wherever it lands), then the prefix sums that find
every batch's end in one search per offset-delta tier.

Pure computation on buffers: no I/O.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

from aioproducer.protocol.batch_layout import RECORD_BATCH_OVERHEAD as _BATCH_OVERHEAD
from aioproducer.protocol.column_view import BinaryColumn, numpy

__all__ = [
    "Plan",
    "Request",
    "cuts",
    "fresh_cuts",
    "record_size",
    "tails",
    "varint_sizes",
    "zigzag",
]


_OD_TIERS: Final = (64, 8192, 1 << 20, 1 << 27, 1 << 34)
# Records a plan may encode ahead of the calls (see BinaryColumn.plan_stop).
PLAN_AHEAD: Final = 4096
# Zig-zag values from which a varint takes one more byte.
_VARINT_STEPS: Final = tuple(1 << (7 * k) for k in range(1, 9))


def varint_sizes(np: Any, zz: Any) -> Any:
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


def zigzag(values: Any) -> Any:
    """Zig-zag of int64 lengths and deltas (all >= -1 here: no overflow)."""
    return (values << 1) ^ (values >> 63)


#: A column, or None (no keys, no headers).
Maybe = BinaryColumn | None

#: What a call of ``columnar.encode_run`` asks for: keys, headers, start, stop, the offset
#: delta of the first record, its timestamp delta (encoded), the batch's size so far and
#: its limit.
Request = tuple[Maybe, Maybe, int, int, int, bytes, int, int | None]


class Plan:
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

    def serve(self, request: Request) -> tuple[int, Any, bool] | None:
        """``(records, bytes, whether the batch is cut after them)`` if the request (the
        arguments of ``columnar.encode_run`` after ``values``) is the plan's, else None."""
        keys, headers, start, stop, first_offset_delta, ts_part, size_so_far, max_bytes = request
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


def _varint_size(zz: int) -> int:
    size = 1
    while zz >= 0x80:
        zz >>= 7
        size += 1
    return size


def record_size(
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
    codec: Any = None,
) -> list[int]:
    """Where records ``start:stop`` are cut into batches of at most ``max_bytes`` when
    every batch starts empty: ``[start, ..., stop]``, one item per batch boundary.

    A bulk send cuts the rows the sticky partitioner places into runs there, so that each
    run fills one batch and ``columnar.encode_run`` serves them all from one plan.
    ``codec``: the compiled column codec, if it runs here; it finds the same cuts in one
    pass over the offsets, where numpy needs a search per batch."""
    if start >= stop:
        return [start]
    if codec is not None:
        found: list[int] = codec.fresh_cuts(
            (values.offsets, values.data, values.valid),
            None if keys is None else (keys.offsets, keys.data, keys.valid),
            None if headers is None else (headers.offsets, headers.data, None),
            start,
            stop,
            1,
            _BATCH_OVERHEAD,
            max_bytes,
        )
        return found
    np = numpy()
    tail, *_rest = tails(np, values, keys, headers, start, stop)
    batches = cuts(np, tail, stop - start, 0, 1, _BATCH_OVERHEAD, max_bytes)
    return [start] + [start + b[1] for b in batches]


def tails(np: Any, values: BinaryColumn, keys: Maybe, headers: Maybe, start: int, stop: int) -> Any:
    """Each record's "tail" size, the same wherever it lands (key length, key, value
    length, value, header section), with the value and key length varints and sizes."""
    vlen = values.lengths(start, stop)
    vzz = zigzag(vlen) if values.valid is not None else vlen << 1
    vsize = varint_sizes(np, vzz)
    tail = vsize + np.maximum(vlen, 0)
    kzz = ksize = None
    if keys is not None:
        klen = keys.lengths(start, stop)
        kzz = zigzag(klen) if keys.valid is not None else klen << 1
        ksize = varint_sizes(np, kzz)
        tail += ksize + np.maximum(klen, 0)
    else:
        tail += 1  # the null key's length, -1
    if headers is not None:
        tail += np.diff(headers.offsets[start : stop + 1])
    else:
        tail += 1  # header count 0
    return tail, vzz, vsize, kzz, ksize


def cuts(
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
            np.cumsum(body + varint_sizes(np, body << 1), out=found[1:])
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
