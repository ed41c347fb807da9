"""A bulk send's records once checked: :class:`PreparedColumns`, grouped by partition and cut
into :class:`ColumnRun` s.

``Intake.columns`` (``intake.py``) makes them from sequences (grouped by
:func:`group_sequences`) and ``aioproducer.columns`` from Arrow columns; the hand-off
admits and appends them a run at a time.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Final

from .protocol.column_plan import fresh_cuts
from .protocol.columnar import CODEC
from .protocol.records import RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BOUND

if TYPE_CHECKING:
    from .results import BulkDelivery

__all__ = ["BULK_SLICE", "ColumnRun", "FirstBad", "PreparedColumns", "group_sequences"]

#: Records per slice of a bulk send: between slices the sender may run.
BULK_SLICE: Final = 4096


class FirstBad:
    """The first bad record of a bulk send being checked: checks may run out of order
    (column by column), so the lowest index reported wins."""

    __slots__ = ("error", "index")

    def __init__(self, count: int) -> None:
        #: The first bad record's index (``count``: none so far).
        self.index = count
        #: Its error, naming the record.
        self.error: BaseException | None = None

    def fail(self, index: int, exc: BaseException) -> None:
        """Report record ``index`` as bad with ``exc`` (kept if it comes first)."""
        if index < self.index:
            self.index = index
            error = type(exc)(f"record {index} of the bulk send: {exc}")
            error.__cause__ = exc
            self.error = error


class ColumnRun:
    """Records ``start:stop`` of a bulk send's :class:`PreparedColumns`, bound for one
    partition (None: the sticky partitioner's), with the bytes reserved for them: the
    unit in which a bulk send is admitted and appended."""

    __slots__ = (
        "appended",
        "bulk",
        "columns",
        "fills",
        "partition",
        "pieces",
        "size",
        "start",
        "stop",
    )

    def __init__(
        self,
        columns: PreparedColumns,
        partition: int | None,
        start: int,
        stop: int,
        size: int,
        bulk: BulkDelivery,
    ) -> None:
        self.columns = columns
        self.partition = partition
        self.start = start
        self.stop = stop
        #: An upper bound of the bytes its records add to batches.
        self.size = size
        #: The bulk send whose outcome it adds to (its topic and timestamp are the run's).
        self.bulk = bulk
        #: How many of its records :meth:`Intake.append_run` appended (set by it).
        self.appended = 0
        #: The run already encoded into whole batches by the thread that sent it
        #: (:meth:`Intake.encode_ahead`): ``(records, their bytes, the bytes compressed or
        #: None)`` per batch; None: the loop encodes the run when it appends it.
        self.pieces: list[tuple[int, Any, Any]] | None = None
        #: Whether its last record fills the batch its records fill from empty (the next
        #: record of the send would not fit): a run cut where that batch ends. Its last
        #: batch then takes no more records, if its records started one.
        self.fills = False


class PreparedColumns:
    """A bulk send's records, checked and converted, grouped into runs by partition.

    Only the records before the first bad one are kept; :attr:`error` is that record's.
    """

    __slots__ = (
        "bounds",
        "count",
        "error",
        "header_sizes",
        "headers",
        "keys",
        "max_estimate",
        "max_run",
        "order",
        "runs",
        "sizes",
        "values",
    )

    def __init__(
        self,
        values: Any,
        keys: Any,
        headers: Any,
    ) -> None:
        #: Sequences (bytes or None; header lists or None), or, for a bulk send of
        #: columns, :class:`~aioproducer.protocol.columnar.BinaryColumn` s (headers
        #: encoded) that the encoder reads column-wise.
        self.values = values
        self.keys = keys
        self.headers = headers
        # Per-record header bytes in the size bound, when there are headers.
        self.header_sizes: list[int] | None = None
        #: For columns: the running sum of the records' size bounds (numpy, one more
        #: than records), so any slice's estimate is one subtraction.
        self.sizes: Any = None
        #: For sequences checked in one compiled pass: the running sum of the records'
        #: size bounds (an ``array('q')``, one more than records), like :attr:`sizes`.
        self.bounds: Any = None
        self.max_estimate = RECORD_FRAMING_BOUND
        #: At most this many records per slice (0: ``BULK_SLICE``), so that a slice's
        #: reservation fits a small ``buffer_memory`` with room to spare.
        self.max_run = 0
        #: Each appended record's position in the input, when grouping reordered them
        #: (a list, or a numpy array for columns).
        self.order: Any = None
        #: (partition or None for sticky, start, stop) per partition, in append order.
        self.runs: list[tuple[int | None, int, int]] = []
        #: How many records are kept (those before the first bad one).
        self.count = 0
        #: The first bad record's error, naming its index.
        self.error: BaseException | None = None

    def estimate(self, start: int, stop: int) -> int:
        """An upper bound of the bytes records ``start:stop`` add to batches: the sum of
        their ``record_size_bound``, in C-level passes."""
        sizes = self.sizes
        if sizes is not None:
            return int(sizes[stop] - sizes[start])
        bounds = self.bounds
        if bounds is not None:
            return int(bounds[stop] - bounds[start])
        total = RECORD_FRAMING_BOUND * (stop - start)
        total += sum(map(len, filter(None, self.values[start:stop])))
        if self.keys is not None:
            total += sum(map(len, filter(None, self.keys[start:stop])))
        if self.header_sizes is not None:
            total += sum(self.header_sizes[start:stop])
        return total

    def slices(self, batch_size: int, bulk: BulkDelivery) -> list[ColumnRun]:
        """The runs cut into slices: at most a batch's worth for the sticky partitioner
        (it may move on after each batch; exactly a batch for columns and for lists
        checked in one compiled pass), else ``BULK_SLICE`` records."""
        out: list[ColumnRun] = []
        sticky_step = min(BULK_SLICE, max(1, batch_size // self.max_estimate))
        for part, start, stop in self.runs:
            cuts = self._fresh_cuts(start, stop, batch_size) if part is None else None
            if cuts is not None:
                # The sticky partitioner's rows cut exactly where each batch fills, so a
                # run is one batch, encoded in one call, and the batch it ends is known
                # full (no call to find that the next record does not fit).
                step = min(BULK_SLICE, self.max_run) if self.max_run else BULK_SLICE
                for i in range(len(cuts) - 1):
                    for pos in range(cuts[i], cuts[i + 1], step):
                        end = min(cuts[i + 1], pos + step)
                        run = ColumnRun(self, None, pos, end, self.estimate(pos, end), bulk)
                        run.fills = end == cuts[i + 1] < stop and pos == cuts[i]
                        out.append(run)
                continue
            step = sticky_step if part is None else BULK_SLICE
            if self.max_run:
                step = min(step, self.max_run)
            for pos in range(start, stop, step):
                end = min(stop, pos + step)
                out.append(ColumnRun(self, part, pos, end, self.estimate(pos, end), bulk))
        return out

    def _fresh_cuts(self, start: int, stop: int, batch_size: int) -> list[int] | None:
        """Where rows ``start:stop`` fill batches from empty (``[start, ..., stop]``), for
        columns, and for lists checked in one compiled pass; None: cut by estimates."""
        if self.sizes is not None:
            # Columns (numpy where the codec does not run).
            return fresh_cuts(self.values, self.keys, self.headers, start, stop, batch_size, CODEC)
        if self.bounds is None or CODEC is None:
            return None
        cuts: list[int] = CODEC.sequence_cuts(
            self.values, self.keys, start, stop, 1, RECORD_BATCH_OVERHEAD, batch_size
        )
        return cuts


def group_sequences(cols: PreparedColumns, parts: list[Any] | None, count: int) -> None:
    """Order the first ``count`` records of ``cols`` (sequences) by partition, stably, the
    sticky partitioner's (None) first, and cut them into runs."""
    if count == 0:
        return
    if parts is None:
        cols.runs = [(None, 0, count)]
        return
    distinct = set(parts)
    if len(distinct) == 1:
        cols.runs = [(parts[0], 0, count)]
        return
    # A counting sort (O(records), compiled): slot 0 for the sticky partitioner's records
    # (None), slot p + 1 for partition p; a histogram, its running sums, one scatter.
    slots = [0] * count
    counts = [0] * (max(p for p in distinct if p is not None) + 2)
    for i in range(count):
        p = parts[i]
        slot = 0 if p is None else p + 1
        slots[i] = slot
        counts[slot] += 1
    runs: list[tuple[int | None, int, int]] = []
    nexts = [0] * len(counts)
    pos = 0
    for slot in range(len(counts)):
        nexts[slot] = pos
        if counts[slot]:
            runs.append((None if slot == 0 else slot - 1, pos, pos + counts[slot]))
            pos += counts[slot]
    order = [0] * count
    for i in range(count):
        slot = slots[i]
        order[nexts[slot]] = i
        nexts[slot] += 1
    pick = operator.itemgetter(*order)
    cols.values = list(pick(cols.values))
    if cols.keys is not None:
        cols.keys = list(pick(cols.keys))
    if cols.headers is not None:
        cols.headers = list(pick(cols.headers))
    if cols.header_sizes is not None:
        cols.header_sizes = list(pick(cols.header_sizes))
    cols.order = order
    cols.runs = runs
