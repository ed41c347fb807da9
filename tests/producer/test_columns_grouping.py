"""A bulk send of Arrow columns is partitioned and grouped exactly as the same send of
Python sequences: the compiled murmur2 over a key column's buffers and the counting sort
by partition against the per-record path (the oracle)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from aioproducer import Producer  # noqa: E402
from aioproducer.cluster import TopicInfo  # noqa: E402


def _info(count: int) -> TopicInfo:
    parts = tuple(range(count))
    return TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)


# Keys of every length: empty, under a word, a few words, longer than 256 bytes.
_KEY = st.one_of(
    st.none(),
    st.binary(max_size=9),
    st.binary(min_size=10, max_size=40),
    st.binary(min_size=300, max_size=310),
)


def _arrow(items: list[Any], kind: str, split: int) -> Any:
    """``items`` as an Arrow column of ``kind``, sliced or chunked."""
    if kind == "sliced":
        return pa.array([b"pad", *items, b"pad"], pa.binary()).slice(1, len(items))
    if kind == "chunked":
        return pa.chunked_array([items[:split], items[split:]], pa.large_binary())
    return pa.array(items, getattr(pa, kind)())


# A producer's checks and partitioning: one producer's, never started.
_INTAKE = Producer("localhost:9092").intake


def _grouped(cols: Any) -> tuple[Any, ...]:
    values = cols.values if isinstance(cols.values, list) else cols.values.to_pylist()
    keys = cols.keys if cols.keys is None or isinstance(cols.keys, list) else cols.keys.to_pylist()
    order = None if cols.order is None else [int(i) for i in cols.order]
    return cols.count, [tuple(run) for run in cols.runs], order, values[: cols.count], keys


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.tuples(_KEY, st.one_of(st.none(), st.integers(0, 299))), max_size=60),
    st.sampled_from([1, 3, 12, 300]),
    st.sampled_from(["binary", "large_binary", "sliced", "chunked"]),
    st.booleans(),
    st.data(),
)
def test_arrow_columns_group_as_sequences_do(
    rows: list[tuple[bytes | None, int | None]],
    nparts: int,
    kind: str,
    explicit: bool,
    data: st.DataObject,
) -> None:
    keys = [key for key, _part in rows]
    values = [bytes([i % 256]) * (i % 7) for i in range(len(rows))]
    parts = [None if p is None else p % nparts for _key, p in rows] if explicit else None
    split = data.draw(st.integers(0, len(rows)))
    intake = _INTAKE
    info = _info(nparts)
    expected = intake.columns("t", info, values, keys, None, parts)
    got = intake.columns(
        "t",
        info,
        _arrow(values, kind, split),
        _arrow(keys, kind, split),
        None,
        pa.array(parts, pa.int32()) if parts is not None else None,
    )
    assert _grouped(got) == _grouped(expected)


def test_string_keys_hash_their_utf8_bytes() -> None:
    keys = ["", "é", "ключ", "k" * 300, None, "emoji 🎉"] * 5
    values = [b"v"] * len(keys)
    intake = _INTAKE
    info = _info(12)
    for kind in (pa.string(), pa.large_string()):
        got = intake.columns("t", info, pa.array(values), pa.array(keys, kind), None, None)
        expected = intake.columns("t", info, values, keys, None, None)
        assert _grouped(got) == _grouped(expected)


def _batches(cols: Any, method: str, limit: int, slice_rows: int) -> dict[Any, list[bytes]]:
    """Each partition's batches, its runs appended a slice at a time as a bulk send's
    slices are (after one record already in the partition's open batch)."""
    from aioproducer.protocol.records import RecordBatchBuilder

    ts = 1_700_000_000_000
    out: dict[Any, list[bytes]] = {}
    for part, start, stop in cols.runs:
        builders = [RecordBatchBuilder()]
        builders[0].append(ts, b"first", b"already there")
        for pos in range(start, stop, slice_rows):
            end = min(stop, pos + slice_rows)
            while pos < end:
                count, _added = getattr(builders[-1], method)(
                    ts, cols.keys, cols.values, cols.headers, pos, end, limit
                )
                pos += count
                if pos < end:
                    builders.append(RecordBatchBuilder())
        out[part] = [b.build() for b in builders]
    return out


@pytest.mark.parametrize("limit", [16384, 1 << 20])
def test_keyed_runs_longer_than_a_slice_encode_as_sequences_do(limit: int) -> None:
    # Runs of ~6,000 rows per partition: planned ahead across their 4,096-row slices,
    # starting mid-batch; the bytes must be append_many's.
    n = 12_000
    keys = [b"k%d" % (i % 20) for i in range(n)]
    values = [bytes([i % 251]) * (i % 200) for i in range(n)]
    info = _info(2)
    expected = _INTAKE.columns("t", info, values, keys, None, None)
    got = _INTAKE.columns("t", info, pa.array(values), pa.array(keys), None, None)
    assert _grouped(got) == _grouped(expected)
    assert _batches(got, "append_columns", limit, 4096) == _batches(
        expected, "append_many", limit, 4096
    )


def test_binary_columns_take_the_column_path() -> None:
    # A BinaryColumn is a column, as an Arrow array is: the intake must not take it for a
    # sequence (which it cannot iterate) because of the module it lives in.
    from aioproducer.protocol.columnar import BinaryColumn

    keys = [b"k1", None, b"k3", b"k4"]
    values = [b"a", b"bb", None, b"dddd"]
    got = _INTAKE.columns(
        "t",
        _info(3),
        BinaryColumn.from_arrow(pa.array(values, pa.binary())),
        BinaryColumn.from_arrow(pa.array(keys, pa.binary())),
        None,
        None,
    )
    assert _grouped(got) == _grouped(_INTAKE.columns("t", _info(3), values, keys, None, None))


_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@settings(deadline=None, max_examples=40)
@given(
    st.lists(
        st.tuples(
            _KEY,
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(
                st.none(),
                st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=8)), max_size=2),
            ),
        ),
        min_size=1,
        max_size=80,
    ),
    st.sampled_from([2, 3, 12]),
    st.sampled_from([200, 1000, 16384]),
)
def test_keyed_columns_with_nulls_and_headers_encode_as_sequences_do(
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]],
    nparts: int,
    limit: int,
) -> None:
    # Keyed rows of several partitions, null keys and values, and headers: the batches
    # of the Arrow columns grouped by partition (gathered by the compiled encoder where
    # it runs) are the sequences' byte for byte, and read back as them.
    from aioproducer.protocol.records import decode_batches

    keys = [k for k, _v, _h in rows]
    values = [v for _k, v, _h in rows]
    headers = [h for _k, _v, h in rows]
    info = _info(nparts)
    expected = _INTAKE.columns("t", info, values, keys, headers, None)
    arrow_headers = pa.array(
        [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
        _HEADER_TYPE,
    )
    got = _INTAKE.columns(
        "t", info, pa.array(values, pa.binary()), pa.array(keys, pa.binary()), arrow_headers, None
    )
    assert _grouped(got) == _grouped(expected)
    batches = _batches(got, "append_columns", limit, 7)
    assert batches == _batches(expected, "append_many", limit, 7)
    order = list(range(len(rows))) if got.order is None else got.order.tolist()
    for part, start, stop in got.runs:
        read = [r for batch in decode_batches(b"".join(batches[part])) for r in batch.records]
        want = [(keys[i], values[i], list(headers[i] or [])) for i in order[start:stop]]
        assert [(r.key, r.value, list(r.headers)) for r in read[1:]] == want
