"""Bulk sends from sequences: Python lists of keys, values, headers and partitions checked,
partitioned and grouped by partition.

``Intake.columns`` (``aioproducer/intake.py``) hands a bulk send of sequences over to
:func:`prepare`, as it hands columns to :func:`aioproducer.columns.prepare`; both read the
producer's settings through the same package-internal interface
(:class:`~aioproducer.columns.ColumnChecks`, which ``Intake`` provides), so neither
imports ``intake.py``. Per-record Python runs only where the input needs it
(serializers, values that are not bytes, headers, keys to hash, a custom partitioner);
columns of bytes are checked with C-level passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError, KafkaError, SerializationError
from .partitioner import partitions_of
from .prepared import FirstBad, PreparedColumns, group_sequences
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
) -> PreparedColumns:
    """Check and convert a bulk send given as sequences, cut it at the first bad record and
    group it by partition (keys hashed, or the custom partitioner called, here: in the
    caller's thread)."""
    values = values if isinstance(values, Sequence) else list(values)
    count = len(values)
    keys = aligned(keys, count, "keys")
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
    if keys is not None and intake.hashes_keys:
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
    cols = PreparedColumns(values, keys, headers)
    cols.header_sizes = header_sizes
    cols.max_estimate = RECORD_FRAMING_BOUND + vmax + kmax + hmax
    cols.error = first_bad.error
    cols.count = first_bad.index
    if parts is not None:
        del parts[first_bad.index :]
    group_sequences(cols, parts, first_bad.index)
    return cols
