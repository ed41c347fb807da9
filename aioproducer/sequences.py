"""Bulk sends from sequences: Python lists of keys, values, headers and partitions checked,
partitioned and grouped by partition.

``Intake.columns`` (``aioproducer/intake.py``) hands a bulk send of sequences over to
:func:`prepare`, as it hands columns to :func:`aioproducer.columns.prepare`; both read the
producer's settings through the same package-internal interface
(:class:`~aioproducer.columns.ColumnChecks`, which ``Intake`` provides), so neither
imports ``intake.py``. Per-record Python runs only where the input needs it
(serializers, values that are not bytes, headers, keys to hash, a custom partitioner);
columns of bytes are checked with C-level passes. Lists of bytes with nothing else to
apply (the common case) are checked, sized and grouped in one pass of the compiled
column codec (``scan_lists``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError, KafkaError, SerializationError
from .partitioner import partitions_of
from .prepared import FirstBad, PreparedColumns, group_sequences
from .protocol.columnar import CODEC
from .protocol.records import RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BOUND, record_size_bound

if TYPE_CHECKING:
    from .cluster import TopicInfo
    from .columns import ColumnChecks

__all__ = ["aligned", "prepare"]


def aligned(items: Iterable[Any] | None, count: int, name: str) -> Sequence[Any] | None:
    """``items`` as a sequence, checked to have one item per value (None stays None)."""
    if items is None:
        return None
    seq = items if isinstance(items, Sequence) else list(items)
    if len(seq) != count:
        raise InvalidArgumentError(f"{name} has {len(seq)} items but values has {count}")
    return seq


def prepare(
    intake: ColumnChecks,
    topic: str,
    info: TopicInfo,
    values: Any,
    keys: Any,
    headers: Any,
    partitions: Any,
    plain: bool = False,
) -> PreparedColumns:
    """Check and convert a bulk send given as sequences, cut it at the first bad record and
    group it by partition (keys hashed, or the custom partitioner called, here: in the
    caller's thread).

    ``plain``: no serializer applies (the producer has none for keys or values).
    """
    values = values if isinstance(values, Sequence) else list(values)
    count = len(values)
    keys = aligned(keys, count, "keys")
    codec = CODEC
    if (
        plain
        and codec is not None
        and headers is None
        and partitions is None
        and not intake.custom_partitioner
        and type(values) is list
        and (keys is None or type(keys) is list)
    ):
        # The common case in one compiled pass (protocol/_column_codec.pyx): types,
        # sizes and (keys to hash) the grouping by partition. None: an item that is not
        # bytes, or a record that may be too large; the passes below find and name it.
        scanned = codec.scan_lists(
            values,
            keys,
            len(info.partitions),
            keys is not None and intake.hashes_keys,
            RECORD_FRAMING_BOUND,
            intake.max_size,
        )
        if scanned is not None:
            order, runs, values, keys, bounds, largest = scanned
            cols = _prepared(
                intake, values, keys, None, None, largest - RECORD_FRAMING_BOUND, FirstBad(count)
            )
            cols.bounds = bounds
            cols.order = order
            cols.runs = runs
            return cols
    headers = aligned(headers, count, "headers")
    partitions = aligned(partitions, count, "partitions")
    first_bad = FirstBad(count)
    fail = first_bad.fail

    values = intake.serialize_column(topic, values, "value", fail)
    if keys is not None:
        keys = intake.serialize_column(topic, keys, "key", fail)
    header_sizes: list[int] | None = None
    if headers is not None:
        normalized: list[Any] = []
        header_sizes = []
        for i, hdrs in enumerate(headers):
            if i >= first_bad.index:
                break
            try:
                hl = intake.header_list(hdrs) if hdrs else None
            except SerializationError as exc:
                fail(i, exc)
                break
            normalized.append(hl)
            header_sizes.append(record_size_bound(0, 0, hl) - RECORD_FRAMING_BOUND)
        headers = normalized
    # Sizes: one C-level pass finds the largest record bound; only if that is too large
    # is each record measured to find the first culprit.
    vmax = max(map(len, filter(None, values[: first_bad.index])), default=0)
    kmax = (
        max(map(len, filter(None, keys[: first_bad.index])), default=0) if keys is not None else 0
    )
    hmax = max(header_sizes, default=0) if header_sizes else 0
    if RECORD_FRAMING_BOUND + vmax + kmax + hmax > intake.max_size:
        for i in range(first_bad.index):
            v, k = values[i], keys[i] if keys is not None else None
            need = (
                RECORD_FRAMING_BOUND
                + (len(v) if v is not None else 0)
                + (len(k) if k is not None else 0)
                + (header_sizes[i] if header_sizes is not None else 0)
            )
            if need > intake.max_size:
                fail(i, intake.too_large(need + RECORD_BATCH_OVERHEAD))
                break
    parts: list[Any] | None = None
    nparts = len(info.partitions)
    if partitions is not None:
        parts = list(partitions[: first_bad.index])
        for i, p in enumerate(parts):
            if p is not None and (type(p) is not int or not 0 <= p < nparts):
                fail(i, intake.invalid_partition(topic, p, nparts))
                break
    count = first_bad.index
    hash_keys = keys is not None and intake.hashes_keys
    if codec is not None and (hash_keys or not intake.custom_partitioner):
        # The compiled grouping (protocol/_column_codec.pyx): keys hashed, rows counted
        # and moved into partition order in C; the lists it leaves are what the compiled
        # encoder reads (run_append.py).
        if type(values) is not list:
            values = list(values)
        if keys is not None and type(keys) is not list:
            keys = list(keys)
        cols = _prepared(intake, values, keys, headers, header_sizes, vmax + kmax + hmax, first_bad)
        if count and (hash_keys or parts is not None):
            order, cols.runs, grouped = codec.group_rows(
                keys if hash_keys else None,
                parts,
                count,
                nparts,
                [values, keys, headers, header_sizes],
            )
            if order is not None:
                cols.values, cols.keys, cols.headers, cols.header_sizes = grouped
                cols.order = order
        elif count:
            cols.runs = [(None, 0, count)]
        return cols
    if hash_keys:
        # Keys to hash: one compiled loop; an explicit partition wins over the key's.
        hashed = partitions_of(keys, first_bad.index, nparts)
        if parts is not None:
            hashed = [h if p is None else p for p, h in zip(parts, hashed, strict=False)]
        parts = hashed
    elif intake.custom_partitioner:
        # A custom partitioner: one call per record, decided here.
        if parts is None:
            parts = [None] * first_bad.index
        for i in range(first_bad.index):
            if parts[i] is None:
                k = keys[i] if keys is not None else None
                try:
                    parts[i] = intake.partition(topic, info, k, None)
                except KafkaError as exc:
                    fail(i, exc)
                    break
                except Exception as exc:
                    fail(i, intake.partitioner_failed(exc))
                    break
    cols = _prepared(intake, values, keys, headers, header_sizes, vmax + kmax + hmax, first_bad)
    if parts is not None:
        del parts[first_bad.index :]
    group_sequences(cols, parts, first_bad.index)
    return cols


def _prepared(
    intake: ColumnChecks,
    values: Any,
    keys: Any,
    headers: Any,
    header_sizes: list[int] | None,
    largest: int,
    first_bad: FirstBad,
) -> PreparedColumns:
    """The checked sequences as :class:`PreparedColumns`, not grouped yet (``largest``:
    the largest record's bytes beyond its framing)."""
    cols = PreparedColumns(values, keys, headers)
    cols.header_sizes = header_sizes
    cols.max_estimate = RECORD_FRAMING_BOUND + largest
    # A slice reserves at most a quarter of the largest request or buffer: one larger
    # than the buffer would wait for room forever.
    cols.max_run = max(1, intake.max_size // 4 // cols.max_estimate)
    cols.error = first_bad.error
    cols.count = first_bad.index
    return cols
