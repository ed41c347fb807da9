"""RecordBatchBuilder.append_columns (the columnar encoder) against append and append_many."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from aioproducer.errors import SerializationError  # noqa: E402
from aioproducer.protocol import column_view, columnar  # noqa: E402
from aioproducer.protocol.columnar import BinaryColumn  # noqa: E402
from aioproducer.protocol.compression import Codec  # noqa: E402
from aioproducer.protocol.records import (  # noqa: E402
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    decode_batches,
)

# Values are text so that string columns can hold them too.
texts = st.one_of(
    st.none(),
    st.just(""),
    st.text(max_size=30),
    st.builds(lambda n: "x" * n, st.sampled_from([63, 64, 127, 128, 16383, 16384, 20000])),
)
headers_st = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
    ),
)
ARROW_TYPES = ["binary", "string", "large_binary", "large_string"]


@pytest.fixture(params=["views", "take", "numpy"])
def interleave(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every way of the final copy: pyarrow's binary_view cast or take, or numpy alone."""
    old = column_view.USE_ARROW, column_view.USE_VIEWS
    column_view.USE_ARROW = request.param != "numpy"
    column_view.USE_VIEWS = request.param == "views"
    yield request.param
    column_view.USE_ARROW, column_view.USE_VIEWS = old


def encoded(items: list[str | None] | None) -> list[bytes | None] | None:
    if items is None:
        return None
    return [s.encode() if s is not None else None for s in items]


def arrow_column(items: list[str | None], kind: str, shape: str) -> Any:
    """``items`` as an Arrow array of ``kind``: plain, sliced out of a larger array,
    chunked, or dictionary-encoded."""
    typ = getattr(pa, kind)()
    data: list[Any] = items if "string" in kind else encoded(items)  # type: ignore[assignment]
    if shape == "sliced":
        pad: list[Any] = ["pad", None] if "string" in kind else [b"pad", None]
        return pa.array(pad + data + pad, type=typ).slice(2, len(data))
    if shape == "chunked":
        half = len(data) // 2
        return pa.chunked_array([pa.array(data[:half], typ), pa.array(data[half:], typ)], typ)
    if shape == "dictionary":
        return pa.array(data, type=typ).dictionary_encode()
    return pa.array(data, type=typ)


def by_append(
    ts: int, keys: list[Any] | None, values: list[Any], headers: list[Any] | None, limit: int
) -> list[RecordBatchBuilder]:
    """Builders as filling them with append() one record at a time makes them."""
    out = [RecordBatchBuilder()]
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        hdrs = (headers[i] if headers is not None else None) or ()
        current = out[-1]
        size, count = len(current._buf), current.record_count
        current.append(ts, key, value, hdrs)
        if current.size_in_bytes > limit and count:
            current._truncate(size, count, ts)
            current = RecordBatchBuilder()
            out.append(current)
            current.append(ts, key, value, hdrs)
    return [b for b in out if b.record_count]


def fill(
    method: str, ts: int, keys: Any, values: Any, headers: Any, limit: int, codec: Codec
) -> list[bytes]:
    built: list[bytes] = []
    pos = 0
    while pos < len(values):
        builder = RecordBatchBuilder(codec)
        count, added = getattr(builder, method)(ts, keys, values, headers, pos, len(values), limit)
        assert count >= 1
        assert added == builder.size_in_bytes - RECORD_BATCH_OVERHEAD
        built.append(builder.build())
        pos += count
    return built


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(st.tuples(texts, texts, headers_st), max_size=40),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    limit=st.integers(min_value=RECORD_BATCH_OVERHEAD, max_value=40_000),
    ts=st.integers(min_value=0, max_value=2**40),
    kind=st.sampled_from(ARROW_TYPES),
    key_kind=st.sampled_from(ARROW_TYPES),
    shape=st.sampled_from(["plain", "sliced", "chunked", "dictionary"]),
)
def test_append_columns_is_byte_identical_to_append_and_append_many(
    interleave: str,
    rows: list[Any],
    with_keys: bool,
    with_headers: bool,
    limit: int,
    ts: int,
    kind: str,
    key_kind: str,
    shape: str,
) -> None:
    keys = [r[0] for r in rows] if with_keys else None
    values = [r[1] for r in rows]
    headers = [r[2] for r in rows] if with_headers else None
    values_col = BinaryColumn.from_arrow(arrow_column(values, kind, shape))
    keys_col = (
        BinaryColumn.from_arrow(arrow_column(keys, key_kind, "plain")) if keys is not None else None
    )
    headers_col = BinaryColumn.from_headers(headers) if headers is not None else None
    key_bytes, value_bytes = encoded(keys), encoded(values)
    assert value_bytes is not None
    expected = [b.build() for b in by_append(ts, key_bytes, value_bytes, headers, limit)]
    got = fill("append_columns", ts, keys_col, values_col, headers_col, limit, Codec.NONE)
    assert got == expected
    assert fill("append_many", ts, key_bytes, value_bytes, headers, limit, Codec.NONE) == got
    # And read back by the reader.
    records = [r for batch in decode_batches(b"".join(got)) for r in batch.records]
    assert [(r.key, r.value, r.timestamp_ms) for r in records] == [
        (key_bytes[i] if key_bytes else None, value_bytes[i], ts) for i in range(len(values))
    ]
    assert [list(r.headers) for r in records] == [
        list(h or ()) for h in headers or [None] * len(values)
    ]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_every_codec_builds_the_same_batches(codec: Codec) -> None:
    values = [f"value-{i}".encode() * (i % 7) if i % 11 else None for i in range(3000)]
    keys = [f"k{i % 13}".encode() if i % 5 else None for i in range(3000)]
    values_col = BinaryColumn.from_arrow(pa.array(values, pa.binary()))
    keys_col = BinaryColumn.from_arrow(pa.array(keys, pa.binary()))
    got = fill("append_columns", 42, keys_col, values_col, None, 16384, codec)
    assert got == fill("append_many", 42, keys, values, None, 16384, codec)
    records = [r for batch in decode_batches(b"".join(got)) for r in batch.records]
    assert [(r.key, r.value) for r in records] == list(zip(keys, values, strict=True))


def test_append_columns_continues_a_builder_like_append(interleave: str) -> None:
    values = BinaryColumn.from_sequence([b"a" * 10, None, b"", b"b" * 20000])
    keys = BinaryColumn.from_sequence([None, b"k", b"", b"kk"])
    for later in (1000, 1005, 999, 1000 + 20000, 1000 + 2**40):
        a, b = RecordBatchBuilder(), RecordBatchBuilder()
        for builder in (a, b):
            builder.append(1000, b"first", b"v")
            builder.append(1000, None, b"second")
        before = a.size_in_bytes
        count, added = a.append_columns(later, keys, values, None, 1, 4)
        assert (count, added) == (3, a.size_in_bytes - before)
        for i in range(1, 4):
            b.append(later, keys.row(i), values.row(i))
        assert a.build() == b.build()
        assert (a.base_timestamp, a.max_timestamp) == (b.base_timestamp, b.max_timestamp)


def test_a_full_builder_takes_nothing_and_an_empty_one_takes_a_huge_record() -> None:
    values = BinaryColumn.from_sequence([b"x" * 500, b"y"])
    builder = RecordBatchBuilder()
    builder.append(1, None, b"z" * 50)
    assert builder.append_columns(1, None, values, None, 0, 2, 200) == (0, 0)
    assert builder.record_count == 1
    empty = RecordBatchBuilder()
    count, added = empty.append_columns(1, None, values, None, 0, 2, 200)
    assert count == 1 and empty.size_in_bytes == RECORD_BATCH_OVERHEAD + added > 200


def test_offset_deltas_past_the_one_byte_varints_are_exact(interleave: str) -> None:
    # 20000 one-byte records in one batch: offset deltas need one, two and three bytes.
    values = [bytes([i % 256]) for i in range(20000)]
    col = BinaryColumn.from_sequence(values)
    a, b = RecordBatchBuilder(), RecordBatchBuilder()
    assert a.append_columns(5, None, col, None, 0, 20000, None)[0] == 20000
    assert b.append_many(5, None, values)[0] == 20000
    assert a.build() == b.build()


def test_batches_planned_ahead_follow_any_interleaving_of_calls() -> None:
    values = [bytes(i % 300) for i in range(3000)]
    col = BinaryColumn.from_sequence(values)
    col.plan_stop = len(values)  # plans may reach past what a call asks for
    reference = fill("append_many", 9, None, values, None, 4096, Codec.NONE)
    assert fill("append_columns", 9, None, col, None, 4096, Codec.NONE) == reference
    # A call the plan did not foresee (another batch size, another start) is encoded anew.
    other = RecordBatchBuilder()
    other.append_columns(9, None, col, None, 17, 3000, 1000)
    check = RecordBatchBuilder()
    check.append_many(9, None, values, None, 17, 3000, 1000)
    assert other.build() == check.build()
    assert fill("append_columns", 9, None, col, None, 4096, Codec.NONE) == reference


def test_columns_from_arrow_reject_other_types_naming_the_column() -> None:
    with pytest.raises(SerializationError, match=r"value must be a binary or string column.*int64"):
        BinaryColumn.from_arrow(pa.array([1, 2, 3]), "value")
    with pytest.raises(SerializationError, match="key must be a binary or string column"):
        BinaryColumn.from_arrow(pa.array([1, 2]).dictionary_encode(), "key")
    with pytest.raises(SerializationError, match="record 1: value must be bytes"):
        BinaryColumn.from_sequence([b"a", 3], "value")


def test_column_views_are_zero_copy_and_honour_slices_and_nulls() -> None:
    array = pa.array([b"aa", None, b"", b"bbb", None, b"c"], pa.binary())
    col = BinaryColumn.from_arrow(array.slice(1, 4))
    assert len(col) == 4
    assert col.lengths().tolist() == [-1, 0, 3, -1]
    assert col.nbytes() == 3 and col.null_count() == 2
    assert col.to_pylist() == [None, b"", b"bbb", None]
    assert np.shares_memory(col.data, np.frombuffer(array.buffers()[2], np.uint8))
    taken = col.take(np.array([2, 0, 2, 1]))
    assert taken.to_pylist() == [b"bbb", None, b"bbb", b""]
    assert BinaryColumn.from_arrow(pa.chunked_array([], pa.string())).to_pylist() == []


def test_a_null_that_spans_bytes_is_compacted() -> None:
    # Arrow allows a null slot to cover bytes; the column must not send them.
    offsets = pa.py_buffer(np.array([0, 2, 5, 6], dtype=np.int32))
    data = pa.py_buffer(b"aabbbc")
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little"))
    array = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data], null_count=1)
    col = BinaryColumn.from_arrow(array)
    assert col.to_pylist() == [b"aa", None, b"c"]
    a, b = RecordBatchBuilder(), RecordBatchBuilder()
    a.append_columns(1, None, col)
    b.append_many(1, None, [b"aa", None, b"c"])
    assert a.build() == b.build()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), max_size=200),
    limit=st.integers(min_value=RECORD_BATCH_OVERHEAD, max_value=20_000),
)
def test_fresh_cuts_are_where_append_many_cuts_fresh_batches(sizes: list[int], limit: int) -> None:
    values = [bytes(n) for n in sizes]
    col = BinaryColumn.from_sequence(values)
    expected, pos = [0], 0
    while pos < len(values):
        pos += RecordBatchBuilder().append_many(1, None, values, None, pos, len(values), limit)[0]
        expected.append(pos)
    assert columnar.fresh_cuts(col, None, None, 0, len(values), limit) == expected


def test_runs_at_fresh_cuts_are_served_from_one_plan() -> None:
    values = [bytes(i % 200) for i in range(3000)]
    col = BinaryColumn.from_sequence(values)
    col.plan_stop = len(values)
    cuts = columnar.fresh_cuts(col, None, None, 0, len(values), 2048)
    plans: list[Any] = []
    got = []
    for start, stop in itertools.pairwise(cuts):
        builder = RecordBatchBuilder()
        assert builder.append_columns(3, None, col, None, start, stop, 2048)[0] == stop - start
        plans.append(col._plan)
        got.append(builder.build())
    assert got == fill("append_many", 3, None, values, None, 2048, Codec.NONE)
    # Plans reach 4096 records ahead: one for all of these (dropped once used up).
    assert len(cuts) > 100
    assert plans[-1] is None
    assert all(plan is plans[0] for plan in plans[:-1])
