"""Package-internal: Arrow columns and batches as a Spark task sends them (pyarrow and
numpy are imported only when these run)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def arrow_binary(column: pa.Array) -> pa.Array:
    """A string or binary Arrow column as binary (what a serializer is given)."""
    import pyarrow as pa

    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    return column


def arrow_nbytes(column: pa.Array) -> int:
    """The bytes of a binary or string column's non-null items (read from its offsets)."""
    import pyarrow.compute as pc

    if column.null_count == 0 and len(column):
        # Offsets are absolute into the data buffer: the last minus the first is the total.
        import numpy as np
        import pyarrow as pa

        large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
        width = np.int64 if large else np.int32
        offsets = np.frombuffer(column.buffers()[1], dtype=width)
        return int(offsets[column.offset + len(column)] - offsets[column.offset])
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


#: Spark hands a task Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
#: rows: 10,000 by default, which ``write()`` and the data source leave as they are
#: (larger batches cost the JVM more CPU per row to fill and send). Keyed, 10,000 rows are
#: ~800 per Kafka partition of 12, and every such run pays the column encoder's fixed cost
#: per call. So consecutive batches are sent together, up to this many rows or bytes (one
#: copy of those bytes; the bound keeps a worker's memory at its buffer plus a constant).
COALESCE_ROWS = 65_536
COALESCE_BYTES = 8 << 20


def coalesce(
    batches: Iterable[pa.RecordBatch], max_rows: int, max_bytes: int
) -> Iterator[pa.RecordBatch]:
    """``batches`` (non-empty ones, of one schema) joined in order into batches of at least
    ``max_rows`` rows or ``max_bytes`` bytes (the last one: whatever is left); a batch
    that reaches either bound alone passes through without a copy."""
    import pyarrow as pa

    group: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        group.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= max_rows or size >= max_bytes:
            yield _joined(pa, group)
            group, rows, size = [], 0, 0
    if group:
        yield _joined(pa, group)


def _joined(pa: Any, group: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(group) == 1:
        return group[0]
    table = pa.Table.from_batches(group).combine_chunks()
    joined: pa.RecordBatch = table.to_batches()[0]
    return joined
