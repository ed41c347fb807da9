"""RecordBatchBuilder.append_many and run_append.append_run against the one-by-one path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioproducer.accumulator import Accumulator, MemoryBudget
from aioproducer.errors import SerializationError
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    record_size_bound,
)
from aioproducer.results import BulkDelivery
from aioproducer.run_append import append_run

blobs = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.just(b""),
    st.binary(min_size=16380, max_size=16400),  # past the varint table
)
headers_st = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
    ),
)


def one_by_one(
    ts: int, keys: list[Any] | None, values: list[Any], headers: list[Any] | None, limit: int
) -> list[bytes]:
    """Batches as filling builders with append() would make them, exact size rule."""
    out: list[RecordBatchBuilder] = [RecordBatchBuilder()]
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
    return [b.build() for b in out if b.record_count]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(blobs, blobs, headers_st), max_size=30),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    limit=st.integers(min_value=RECORD_BATCH_OVERHEAD, max_value=40_000),
    ts=st.integers(min_value=0, max_value=2**40),
)
def test_append_many_is_byte_identical_to_append(
    rows: list[Any], with_keys: bool, with_headers: bool, limit: int, ts: int
) -> None:
    keys = [r[0] for r in rows] if with_keys else None
    values = [r[1] for r in rows]
    headers = [r[2] for r in rows] if with_headers else None
    built: list[bytes] = []
    pos = 0
    while pos < len(values):
        builder = RecordBatchBuilder()
        count, added = builder.append_many(ts, keys, values, headers, pos, len(values), limit)
        assert count >= 1
        assert added == builder.size_in_bytes - RECORD_BATCH_OVERHEAD
        built.append(builder.build())
        pos += count
    assert built == one_by_one(ts, keys, values, headers, limit)


def test_append_many_continues_a_builder_with_later_timestamp() -> None:
    a, b = RecordBatchBuilder(), RecordBatchBuilder()
    a.append(1000, b"k", b"v")
    b.append(1000, b"k", b"v")
    a.append_many(1005, [b"x", None], [b"1", b"22"])
    b.append(1005, b"x", b"1")
    b.append(1005, None, b"22")
    assert a.build() == b.build()
    assert a.max_timestamp == 1005


def test_append_many_keeps_records_before_a_bad_one() -> None:
    builder, reference = RecordBatchBuilder(), RecordBatchBuilder()
    with pytest.raises(SerializationError):
        builder.append_many(7, None, [b"a", b"b", 3, b"d"])  # type: ignore[list-item]
    reference.append(7, None, b"a")
    reference.append(7, None, b"b")
    assert builder.record_count == 2
    assert builder.build() == reference.build()


def new_acc(limit: int = 1 << 20, batch_size: int = 300) -> Accumulator:
    return Accumulator(
        batch_size=batch_size,
        linger=0.0,
        delivery_timeout=30.0,
        codec=Codec.NONE,
        compression_level=None,
        budget=MemoryBudget(limit),
    )


def test_append_run_fills_batches_and_keeps_budget_exact() -> None:
    acc = new_acc()
    values = [bytes([i]) * 50 for i in range(20)]
    reserved = sum(record_size_bound(0, len(v), None) for v in values)
    assert acc.budget.try_reserve(reserved)
    spans: list[Any] = []
    appended, added, wake = append_run(
        acc, "t", 0, 5, None, values, None, 0, 20, reserved, 0.0, spans
    )
    assert appended == 20 and wake
    batches = list(acc.batches[("t", 0)])
    assert len(batches) > 1
    assert all(b.builder.size_in_bytes <= 300 for b in batches)
    assert all(b.full for b in batches[:-1])
    # Budget: exactly the batches' bytes, headers included.
    assert acc.budget.used == sum(b.builder.size_in_bytes for b in batches)
    assert acc.budget.used == sum(b.reserved for b in batches)
    assert added == sum(b.builder.size_in_bytes - RECORD_BATCH_OVERHEAD for b in batches)
    assert [(s[1], s[2]) for s in spans] == [(0, b.record_count) for b in batches]
    decoded = [r.value for b in batches for r in b.builder.records()]
    assert decoded == values
    for b in batches:
        acc.complete_batch(b, 100, -1)
    assert acc.budget.used == 0


def test_append_run_bad_record_keeps_earlier_ones_and_budget_exact() -> None:
    acc = new_acc(batch_size=120)
    values: list[Any] = [b"a" * 40, b"b" * 40, b"c" * 40, "not bytes", b"e"]
    reserved = 5 * record_size_bound(0, 40, None)
    assert acc.budget.try_reserve(reserved)
    spans: list[Any] = []
    with pytest.raises(SerializationError):
        append_run(acc, "t", 0, 5, None, values, None, 0, 5, reserved, 0.0, spans)
    batches = list(acc.batches[("t", 0)])
    assert sum(b.record_count for b in batches) == 3
    assert all(b.record_count for b in batches)  # no empty batch left behind
    assert len(acc.incomplete) == len(batches)
    assert acc.budget.used == sum(b.builder.size_in_bytes for b in batches)
    assert sum(s[2] for s in spans) == 3


def test_bulk_delivery_counts_and_metadata() -> None:
    acc = new_acc()
    values = [b"x" * 100 for _ in range(10)]
    reserved = 10 * record_size_bound(0, 100, None)
    assert acc.budget.try_reserve(reserved)
    spans: list[Any] = []
    append_run(acc, "t", 3, 9, None, values, None, 0, 10, reserved, 0.0, spans)
    bulk = BulkDelivery("t", 9)
    bulk.add_spans(spans)
    bulk.track(None)
    assert not bulk.done()
    batches = list(acc.batches[("t", 3)])
    acc.complete_batch(batches[0], 500, -1)
    assert not bulk.done()
    acc.fail_batch(batches[1], SerializationError("boom"))
    for b in batches[2:]:
        acc.complete_batch(b, 900, -1)
    assert bulk.done() and bulk.records == 10
    assert bulk.failed == batches[1].record_count
    assert bulk.delivered == 10 - bulk.failed
    assert isinstance(bulk.first_error, SerializationError)
    md = bulk.metadata(1)
    assert (md.partition, md.offset, md.timestamp_ms) == (3, 501, 9)
    with pytest.raises(SerializationError):
        bulk.metadata(batches[0].record_count)
