"""Bulk sends from columns: Arrow arrays and tables checked, partitioned and grouped whole.

``Intake.columns`` (``aioproducer/intake.py``) hands a bulk send over to
:func:`prepare` when a column is an Arrow array (or ``values`` a table): the result is the
same :class:`~aioproducer.prepared.PreparedColumns`, but holding
:class:`~aioproducer.protocol.columnar.BinaryColumn` s, so sizes, partitions and the
grouping by partition are numpy passes and the records are encoded column-wise
(``RecordBatchBuilder.append_columns``), with no Python object per record; so are header
columns of string keys and binary or string values. Only a custom partitioner (a Python
function) and header columns of other layouts run per record.

numpy and pyarrow are imported here, so this module is imported only when columns come in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .errors import InvalidArgumentError, KafkaError, SerializationError
from .partitioner import key_partitions
from .prepared import FirstBad, PreparedColumns
from .protocol import columnar
from .protocol.columnar import BinaryColumn, encode_header_sections, numpy
from .protocol.records import RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BOUND

if TYPE_CHECKING:
    from .cluster import TopicInfo

__all__ = ["TABLE_COLUMNS", "ColumnChecks", "is_columnar", "prepare"]


#: How a bad record is reported: ``fail(index, error)``.
Fail = Callable[[int, BaseException], None]


class ColumnChecks(Protocol):
    """What :func:`prepare` (and ``aioproducer.sequences.prepare``) needs of the producer's
    ``Intake`` (which provides it): its limits, serializers and partitioning, without
    either module importing ``intake.py``."""

    #: The largest record size bound that can ever be sent.
    max_size: int

    @property
    def custom_partitioner(self) -> bool:
        """Whether a custom partitioner (a Python function) chooses the partitions."""

    @property
    def hashes_keys(self) -> bool:
        """Whether a record's key decides its partition, when none is given."""

    def serialize_column(self, topic: str, column: Sequence[Any], what: str, fail: Fail) -> Any:
        """A column of keys or values (``what``) serialized, cut at the first bad item."""

    def header_list(self, headers: Any) -> Any:
        """One record's headers checked."""

    def partition(self, topic: str, info: TopicInfo, key: Any, partition: Any) -> int:
        """The partition a record's key (or the custom partitioner) gives."""

    def too_large(self, size: int) -> KafkaError:
        """The error for a record of ``size`` bytes that can never be sent."""

    def invalid_partition(self, topic: str, partition: object, count: int) -> KafkaError:
        """The error for a partition the topic does not have."""

    def partitioner_failed(self, exc: Exception) -> KafkaError:
        """The error for a record the custom partitioner raised ``exc`` for."""


#: The columns a table (or record batch) passed as ``values`` to ``send_bulk`` may have:
#: ``value`` (required; binary or string), ``key`` (binary or string), ``headers``
#: (``list<struct<key: string, value: binary>>`` or ``map<string, binary>``) and
#: ``partition`` (integers; null lets the partitioner choose).
TABLE_COLUMNS = ("value", "key", "headers", "partition")


def is_columnar(obj: object) -> bool:
    """Whether ``obj`` is an Arrow array, chunked array, table or record batch, or a
    :class:`~aioproducer.protocol.columnar.BinaryColumn` (checked without importing
    pyarrow)."""
    return isinstance(obj, BinaryColumn) or type(obj).__module__.startswith("pyarrow")


def prepare(
    intake: ColumnChecks,
    topic: str,
    info: TopicInfo,
    values: Any,
    keys: Any,
    headers: Any,
    partitions: Any,
) -> PreparedColumns:
    """Check and convert a bulk send given as columns, cut it at the first bad record and
    group it by partition, as ``Intake.columns`` does for sequences.

    A column of the wrong type raises at once (nothing is buffered); a bad record (a bad
    header, a record too large, a bad partition) keeps the records before it, as with
    sequences.
    """
    np = numpy()
    values, keys, headers, partitions = _unpack_table(values, keys, headers, partitions)
    first_bad = FirstBad(1 << 62)  # the row count is not known yet
    fail = first_bad.fail

    value_col = _binary(intake, topic, values, "value", fail)
    count = len(value_col)
    key_col = None
    if keys is not None:
        key_col = _binary(intake, topic, keys, "key", fail)
        if len(key_col) != count:
            raise InvalidArgumentError(f"keys has {len(key_col)} items but values has {count}")
    header_col = None
    if headers is not None:
        header_col = _header_column(intake, headers, count, fail)
    explicit = None
    if partitions is not None:
        explicit = _partition_column(intake, partitions, count, topic, len(info.partitions), fail)

    # Size bounds: record_size_bound of every record, as one array.
    bound = np.diff(value_col.offsets) + RECORD_FRAMING_BOUND
    if key_col is not None:
        bound += np.diff(key_col.offsets[: count + 1])
    if header_col is not None:
        bound += np.diff(header_col.offsets[: count + 1])
    bound = bound[:count]
    too_large = np.flatnonzero(bound > intake.max_size)
    if len(too_large):
        first = int(too_large[0])
        fail(first, intake.too_large(int(bound[first]) + RECORD_BATCH_OVERHEAD))
    kept = min(count, first_bad.index)

    # Partitions: -1 leaves a record to the sticky partitioner.
    nparts = len(info.partitions)
    parts = explicit[:kept] if explicit is not None else None
    if intake.custom_partitioner:
        parts = _custom_partitions(intake, topic, info, key_col, parts, kept, fail)
        kept = min(kept, first_bad.index)
    elif key_col is not None and intake.hashes_keys:
        hashed = _key_partitions(np, key_col, kept, nparts)
        parts = hashed if parts is None else np.where(parts >= 0, parts, hashed)

    cols = PreparedColumns(value_col.head(kept), None, None)
    if key_col is not None:
        cols.keys = key_col.head(kept)
    if header_col is not None:
        cols.headers = header_col.head(kept)
    cols.error = first_bad.error
    cols.count = kept
    bound = bound[:kept]
    cols.max_estimate = int(bound.max()) if kept else RECORD_FRAMING_BOUND
    _group(np, cols, parts[:kept] if parts is not None else None, bound)
    return cols


def _unpack_table(values: Any, keys: Any, headers: Any, partitions: Any) -> tuple[Any, ...]:
    """The columns of a table or record batch passed as ``values``, by name."""
    schema = getattr(values, "schema", None)
    if schema is None or not hasattr(values, "column"):
        if values is None:
            raise InvalidArgumentError("values must be given")
        return values, keys, headers, partitions
    names = list(schema.names)
    unknown = [n for n in names if n not in TABLE_COLUMNS]
    if unknown:
        raise InvalidArgumentError(
            f"a table sent with send_bulk has columns {', '.join(TABLE_COLUMNS)}; "
            f"unknown column(s): {', '.join(map(repr, unknown))}"
        )
    if "value" not in names:
        raise InvalidArgumentError("a table sent with send_bulk needs a 'value' column")
    given = {"key": keys, "headers": headers, "partition": partitions}
    for name, arg in given.items():
        if name in names and arg is not None:
            raise InvalidArgumentError(
                f"the table has a {name!r} column and the {name} argument was given too"
            )
    column = values.column
    return (
        column("value"),
        column("key") if "key" in names else keys,
        column("headers") if "headers" in names else headers,
        column("partition") if "partition" in names else partitions,
    )


def _binary(intake: ColumnChecks, topic: str, column: Any, name: str, fail: Any) -> BinaryColumn:
    """``column`` as a BinaryColumn: an Arrow array viewed, a sequence converted (its
    serializer applied, as for a bulk send of sequences; a bad item cut there)."""
    if isinstance(column, BinaryColumn):
        return column
    if type(column).__module__.startswith("pyarrow"):
        return BinaryColumn.from_arrow(column, name)
    if isinstance(column, (str, bytes)) or not isinstance(column, Sequence):
        column = list(column)
    items = intake.serialize_column(topic, column, name, fail)
    converted, _rows, _error = BinaryColumn.from_sequence_until_error(items, name)
    if len(converted) < len(column):
        # Rows past the first bad one are cut: pad them as nulls so lengths stay aligned;
        # fail() has recorded the error at the bad row, and everything from there is dropped.
        np = numpy()
        missing = len(column) - len(converted)
        offsets = np.concatenate(
            [converted.offsets, np.full(missing, converted.offsets[-1], dtype=np.int64)]
        )
        valid = np.ones(len(column), dtype=bool)
        valid[len(converted) :] = False
        if converted.valid is not None:
            valid[: len(converted)] = converted.valid
        converted = BinaryColumn(offsets, converted.data, valid)
    return converted


def _nulls(column: BinaryColumn, count: int) -> Any:
    return ~column.valid[:count] if column.valid is not None else None


def _header_column(intake: ColumnChecks, headers: Any, count: int, fail: Any) -> BinaryColumn:
    """Every record's encoded header section. An Arrow ``list<struct<key: string, value:
    binary>>`` or ``map<string, binary>`` column (value also string) is encoded a column at
    a time; other Arrow header columns and sequences run per record (``to_pylist``)."""
    if type(headers).__module__.startswith("pyarrow"):
        encoded = _arrow_header_column(headers, count, fail)
        if encoded is not None:
            return encoded
        try:
            rows = headers.to_pylist()
        except AttributeError:
            raise InvalidArgumentError(
                f"headers must be an Arrow list or map column, got {type(headers).__name__}"
            ) from None
        kind = str(getattr(headers, "type", ""))
        if not (
            kind.startswith("list<") or kind.startswith("large_list<") or kind.startswith("map<")
        ) and not all(r is None for r in rows):
            raise InvalidArgumentError(
                "headers must be a list<struct<key: string, value: binary>> or "
                f"map<string, binary> column, got {kind}"
            )
    else:
        rows = list(headers)
    if len(rows) != count:
        raise InvalidArgumentError(f"headers has {len(rows)} items but values has {count}")
    checked: list[Any] = []
    for i, row in enumerate(rows):
        if row:
            if isinstance(row, list) and row and isinstance(row[0], dict):
                row = [(item.get("key"), item.get("value")) for item in row]
            try:
                row = intake.header_list(row)
            except SerializationError as exc:
                fail(i, exc)
                row = None
        checked.append(row or None)
    return BinaryColumn.from_headers(checked)


def _arrow_header_column(headers: Any, count: int, fail: Any) -> BinaryColumn | None:
    """The header sections of an Arrow list-of-struct or map column with string keys and
    binary or string values, encoded column-wise; None for other layouts (the per-row
    path takes those, with its own checks and messages)."""
    import pyarrow as pa

    np = numpy()
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks() if headers.num_chunks != 1 else headers.chunk(0)
    kind = getattr(headers, "type", None)
    if kind is None or not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind)
    ):
        return None
    entry = kind.value_type if not pa.types.is_map(kind) else None
    if entry is not None and not (
        pa.types.is_struct(entry)
        and entry.num_fields == 2
        and entry.get_field_index("key") >= 0
        and entry.get_field_index("value") >= 0
    ):
        return None
    if len(headers) != count:
        raise InvalidArgumentError(f"headers has {len(headers)} items but values has {count}")
    offsets = np.asarray(headers.offsets, dtype=np.int64)
    counts = np.diff(offsets)
    if headers.null_count:
        nulls = ~np.asarray(headers.is_valid(), dtype=bool)
        if counts[nulls].any():
            return None  # a null row spanning entries (Arrow allows it): per row
    entries = headers.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if pa.types.is_map(kind):
        key_array, value_array = entries.field(0), entries.field(1)
    else:
        key_array, value_array = entries.field("key"), entries.field("value")
    if not (pa.types.is_string(key_array.type) or pa.types.is_large_string(key_array.type)):
        return None
    try:
        keys = BinaryColumn.from_arrow(key_array, "header key")
        values = BinaryColumn.from_arrow(value_array, "header value")
    except SerializationError:
        return None  # values of another type: the per-row path names it
    # A null entry or a null key fails its row (and cuts the rows after it).
    missing = ~keys.valid if keys.valid is not None else np.zeros(len(keys), dtype=bool)
    if entries.null_count:
        missing |= ~np.asarray(entries.is_valid(), dtype=bool)
    if missing.any():
        first = int(np.flatnonzero(missing)[0])
        row = int(np.searchsorted(offsets[1:] - offsets[0], first, side="right"))
        fail(row, SerializationError("header keys must be str, got NoneType"))
        keys = BinaryColumn(keys.offsets, keys.data)
    return encode_header_sections(counts, keys, values)


def _partition_column(
    intake: ColumnChecks, partitions: Any, count: int, topic: str, nparts: int, fail: Any
) -> Any:
    """Explicit partitions as a numpy int64 array, -1 where the partitioner chooses."""
    np = numpy()
    if type(partitions).__module__.startswith("pyarrow"):
        import pyarrow as pa

        if isinstance(partitions, pa.ChunkedArray):
            partitions = partitions.combine_chunks()
        if not pa.types.is_integer(partitions.type) and not pa.types.is_null(partitions.type):
            raise InvalidArgumentError(
                f"the partition column must hold integers, got {partitions.type}"
            )
        if pa.types.is_null(partitions.type):
            out = np.full(len(partitions), -1, np.int64)
        else:
            # Through int64: unsigned columns cannot hold the -1 that marks a null.
            wide = partitions.cast(pa.int64(), safe=False).fill_null(-1)
            out = np.asarray(wide.to_numpy(zero_copy_only=False), dtype=np.int64)
        given = np.ones(len(out), dtype=bool)
        if partitions.null_count:
            given = partitions.is_valid().to_numpy(zero_copy_only=False)
        if len(out) != count:
            raise InvalidArgumentError(f"partitions has {len(out)} items but values has {count}")
        wrong = np.flatnonzero(given & ((out < 0) | (out >= nparts)))
        if len(wrong):
            i = int(wrong[0])
            fail(i, intake.invalid_partition(topic, int(out[i]), nparts))
        return out
    items = list(partitions)
    if len(items) != count:
        raise InvalidArgumentError(f"partitions has {len(items)} items but values has {count}")
    out = np.full(count, -1, dtype=np.int64)
    for i, p in enumerate(items):
        if p is None:
            continue
        if type(p) is not int or not 0 <= p < nparts:
            fail(i, intake.invalid_partition(topic, p, nparts))
            break
        out[i] = p
    return out


def _custom_partitions(
    intake: ColumnChecks,
    topic: str,
    info: TopicInfo,
    keys: BinaryColumn | None,
    parts: Any,
    count: int,
    fail: Any,
) -> Any:
    """A custom partitioner's choice for each record without an explicit partition: one
    call per record, as it is a Python function."""
    np = numpy()
    out = parts.copy() if parts is not None else np.full(count, -1, dtype=np.int64)
    for i in np.flatnonzero(out[:count] < 0).tolist():
        key = keys.row(i) if keys is not None else None
        try:
            out[i] = intake.partition(topic, info, key, None)
        except KafkaError as exc:
            fail(i, exc)
            break
        except Exception as exc:
            fail(i, intake.partitioner_failed(exc))
            break
    return out


def _key_partitions(np: Any, keys: BinaryColumn, count: int, nparts: int) -> Any:
    """The default partitioner's choice for each of the first ``count`` keys (-1: null):
    one compiled loop over the column's buffers where the compiled column encoder runs."""
    codec = columnar.CODEC
    if codec is None:
        return key_partitions(keys.offsets[: count + 1], keys.data, _nulls(keys, count), nparts)
    out = np.empty(count, dtype=np.int64)
    codec.key_partitions((keys.offsets, keys.data, keys.valid), count, nparts, out)
    return out


def _take(np: Any, column: BinaryColumn, order: Any) -> BinaryColumn:
    """Rows ``order`` of ``column`` (a permutation of all its rows): compiled, one copy of
    each row's bytes, where the compiled column encoder runs."""
    codec = columnar.CODEC
    if codec is None:
        return column.take(order)
    count = len(order)
    offsets = np.empty(count + 1, dtype=np.int64)
    data = np.empty(column.nbytes(), dtype=np.uint8)
    codec.gather((column.offsets, column.data, None), order, count, offsets, data)
    valid = column.valid[order] if column.valid is not None else None
    return BinaryColumn(offsets, data, valid)


def _group(np: Any, cols: PreparedColumns, parts: Any, bound: Any) -> None:
    """Order ``cols`` by partition (stably, sticky records first) and cut them into runs;
    reorders the columns with one gathering copy each. O(rows): no comparison sort."""
    count = cols.count
    sizes = np.zeros(count + 1, dtype=np.int64)
    if count == 0:
        cols.sizes = sizes
        return
    if parts is None or (parts == parts[0]).all():
        part = None if parts is None or parts[0] < 0 else int(parts[0])
        cols.runs = [(part, 0, count)]
        np.cumsum(bound, out=sizes[1:])
        cols.sizes = sizes
        if part is None:
            cols.values.plan_stop = count  # sticky runs come one after the other
        else:
            cols.values.run_ends = [count]
        return
    # A counting sort by partition (the sticky records, -1, first): numpy sorts 8- and
    # 16-bit keys stably by radix, in O(rows); the histogram gives the runs.
    bins = int(parts.max()) + 2
    codec = columnar.CODEC
    if codec is not None:
        # Compiled: a histogram, its prefix sums and one scatter of row numbers.
        order = np.empty(count, dtype=np.int64)
        counts = np.zeros(bins, dtype=np.int64)
        codec.partition_order(
            np.ascontiguousarray(parts, dtype=np.int64), count, bins, order, counts
        )
    else:
        shifted = parts + 1
        small = shifted.astype(
            np.uint8 if bins <= 0x100 else np.uint16 if bins <= 0x10000 else np.int64
        )
        order = np.argsort(small, kind="stable")
        counts = np.bincount(small, minlength=bins)
    ends = np.cumsum(counts).tolist()
    cols.values = _take(np, cols.values, order)
    if cols.keys is not None:
        cols.keys = _take(np, cols.keys, order)
    if cols.headers is not None:
        cols.headers = _take(np, cols.headers, order)
    np.cumsum(bound[order], out=sizes[1:])
    cols.sizes = sizes
    cols.order = order
    cols.runs = [
        (None if p == 0 else p - 1, ends[p] - int(counts[p]), ends[p])
        for p in np.flatnonzero(counts).tolist()
    ]
    if cols.runs[0][0] is None:
        cols.values.plan_stop = cols.runs[0][2]  # the sticky records sort first
    cols.values.run_ends = [stop for part, _start, stop in cols.runs if part is not None]
