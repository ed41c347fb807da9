"""Arrow header columns encoded a column at a time: the same bytes as the per-record
encoder, over list-of-struct and map layouts, null rows and values, slices and chunks, and
the same errors for a missing key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from aioproducer import Producer, SerializationError, SyncProducer  # noqa: E402
from aioproducer.protocol.columnar import BinaryColumn  # noqa: E402
from aioproducer.testing import FakeCluster  # noqa: E402

STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])

header = st.tuples(
    st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=130))
)
rows = st.lists(st.one_of(st.none(), st.lists(header, max_size=4)), max_size=30)


def _as_list_of_struct(items: list[Any], large: bool = False) -> Any:
    kind = pa.large_list(STRUCT) if large else pa.list_(STRUCT)
    data = [None if r is None else [{"key": k, "value": v} for k, v in r] for r in items]
    return pa.array(data, kind)


def _as_map(items: list[Any]) -> Any:
    return pa.array(items, pa.map_(pa.string(), pa.binary()))


# The checks a producer makes (header keys, values): one producer's, never started.
_INTAKE = Producer("localhost:9092").intake


def _encoded(column: Any, count: int) -> list[bytes | None]:
    from aioproducer.columns import _header_column

    errors: list[Any] = []
    out = _header_column(_INTAKE, column, count, lambda i, e: errors.append((i, e)))
    assert errors == []
    return out.to_pylist()


def _expected(items: list[Any]) -> list[bytes | None]:
    return BinaryColumn.from_headers([r or None for r in items]).to_pylist()


@settings(max_examples=150, deadline=None)
@given(rows, st.data())
def test_header_columns_encode_as_the_per_record_encoder(items: list[Any], data: Any) -> None:
    expected = _expected(items)
    start = data.draw(st.integers(0, len(items)))
    stop = data.draw(st.integers(start, len(items)))
    for column in (_as_list_of_struct(items), _as_list_of_struct(items, True), _as_map(items)):
        assert _encoded(column, len(items)) == expected
        assert _encoded(column.slice(start, stop - start), stop - start) == expected[start:stop]
    halves = pa.chunked_array(
        [_as_map(items[:start]), _as_map(items[start:])], pa.map_(pa.string(), pa.binary())
    )
    assert _encoded(halves, len(items)) == expected


def test_string_header_values_are_their_utf8_bytes() -> None:
    kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    column = pa.array([[{"key": "é", "value": "ü"}], [{"key": "n", "value": None}]], kind)
    assert _encoded(column, 2) == _expected([[("é", "ü".encode())], [("n", None)]])


def test_a_null_header_key_fails_its_row_and_keeps_the_rows_before() -> None:
    column = _as_list_of_struct([[("a", b"1")], [("b", b"2")], [("c", b"3")]])
    broken = pa.array(
        [[{"key": "a", "value": b"1"}], [{"key": None, "value": b"2"}], [None]],
        pa.list_(STRUCT),
    )
    values = pa.array([b"v0", b"v1", b"v2"])
    with FakeCluster(brokers=1) as cluster:
        cluster.create_topic("headers", 1)
        with SyncProducer(cluster.bootstrap_servers) as producer:
            with pytest.raises(SerializationError, match="record 1 of the bulk send: header keys"):
                producer.send_bulk("headers", values, headers=broken)
            producer.send_bulk("headers", values, headers=column).result(timeout=30)
        records = cluster.records("headers", 0)
    assert [(r.value, list(r.headers)) for r in records] == [
        (b"v0", [("a", b"1")]),
        (b"v0", [("a", b"1")]),
        (b"v1", [("b", b"2")]),
        (b"v2", [("c", b"3")]),
    ]
