"""The compiled grouping and encoding of a bulk send of Python sequences
(``group_rows`` and ``encode_sequence_batches`` in ``protocol/_column_codec.pyx``) against
the scalar paths they replace: the same partitions, order and runs as ``partitions_of``
and ``group_sequences``, and the same batches, byte for byte, as ``append_many`` and the
column encoder."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioproducer.partitioner import partitions_of
from aioproducer.prepared import PreparedColumns, group_sequences
from aioproducer.protocol import columnar
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder

CODEC = columnar.CODEC
pytestmark = pytest.mark.skipif(
    CODEC is None, reason=f"the compiled column encoder is not active ({columnar.CODEC_REASON})"
)

# Short ones, and lengths either side of a varint's size steps.
payloads = st.none() | st.binary(max_size=20) | st.sampled_from([b"v" * n for n in (63, 64, 8192)])
keys_st = st.one_of(st.none(), st.binary(max_size=12))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(keys_st, st.one_of(st.none(), st.integers(0, 20)), payloads), max_size=80
    ),
    nparts=st.sampled_from([1, 2, 3, 12, 21, 256, 70000]),
    hash_keys=st.booleans(),
    explicit=st.booleans(),
    cut=st.integers(min_value=0, max_value=5),
)
def test_compiled_grouping_is_the_scalar_hash_and_counting_sort(
    rows: list[tuple[bytes | None, int | None, bytes | None]],
    nparts: int,
    hash_keys: bool,
    explicit: bool,
    cut: int,
) -> None:
    assert CODEC is not None
    keys = [k for k, _p, _v in rows]
    values = [v for _k, _p, v in rows]
    parts = [None if p is None else p % nparts for _k, p, _v in rows] if explicit else None
    headers = [[("h", v)] if v else None for v in values]
    sizes = list(range(len(rows)))
    count = max(0, len(rows) - cut)  # the rows after a bad one are left out
    # The scalar path of sequences.prepare: keys hashed, an explicit partition winning.
    want_parts: list[Any] | None = None if parts is None else parts[:count]
    if hash_keys:
        hashed = partitions_of(keys, count, nparts)
        if want_parts is not None:
            hashed = [h if p is None else p for p, h in zip(want_parts, hashed, strict=True)]
        want_parts = hashed
    want = PreparedColumns(values, keys, headers)
    want.header_sizes = sizes
    if count:
        group_sequences(want, want_parts, count)
        if want_parts is None:
            want.runs = [(None, 0, count)]
    order, runs, grouped = CODEC.group_rows(
        keys if hash_keys else None, parts, count, nparts, [values, keys, headers, sizes]
    )
    if count == 0:
        assert runs == [] and order is None
        return
    assert runs == want.runs
    assert order == want.order
    assert grouped == [want.values, want.keys, want.headers, want.header_sizes]


def test_grouping_refuses_what_it_cannot_read() -> None:
    assert CODEC is not None
    with pytest.raises(ValueError, match="outside"):
        CODEC.group_rows(None, [0, 3], 2, 3, [])
    with pytest.raises(ValueError, match="rows"):
        CODEC.group_rows([b"k"], None, 2, 3, [])
    with pytest.raises(ValueError, match="every column"):
        CODEC.group_rows([b"k", b"j"], None, 2, 3, [[b"v"]])
    with pytest.raises(TypeError, match="bytes or None"):
        CODEC.group_rows(["text"], None, 1, 3, [])


def _by_append_many(
    values: list[Any], keys: list[Any] | None, limit: int
) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    while pos < len(values):
        builder = RecordBatchBuilder()
        count, _added = builder.append_many(7, keys, values, None, pos, len(values), limit)
        out.append((count, bytes(builder._buf)))
        pos += count
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(payloads, payloads), min_size=1, max_size=40),
    with_keys=st.booleans(),
    limit=st.sampled_from([0, 80, 200, 1000, 16384, 1 << 20]),
    start=st.integers(min_value=0, max_value=3),
)
def test_compiled_sequence_batches_are_byte_identical_to_append_many(
    rows: list[tuple[bytes | None, bytes | None]], with_keys: bool, limit: int, start: int
) -> None:
    assert CODEC is not None
    values = [v for v, _k in rows]
    keys = [k for _v, k in rows] if with_keys else None
    start = min(start, len(rows))
    got = CODEC.encode_sequence_batches(
        values, keys, start, len(rows), b"\x00", RECORD_BATCH_OVERHEAD, limit
    )
    assert all(type(encoded) is bytearray for _n, encoded in got)
    want = _by_append_many(values[start:], None if keys is None else keys[start:], limit)
    assert [(n, bytes(encoded)) for n, encoded in got] == want
    # Where a bulk send cuts the same rows before encoding them: at these batches' ends.
    ends = [start]
    for n, _encoded in got:
        ends.append(ends[-1] + n)
    cuts = CODEC.sequence_cuts(values, keys, start, len(rows), 1, RECORD_BATCH_OVERHEAD, limit)
    assert cuts == (ends if got else [start])
    if start == 0:
        # And what the column encoder writes for the same rows.
        np = pytest.importorskip("numpy")
        from aioproducer.protocol.columnar import BinaryColumn, encode_batches

        def column(items: list[bytes | None]) -> BinaryColumn:
            offsets = [0]
            for item in items:
                offsets.append(offsets[-1] + (len(item) if item else 0))
            data = np.frombuffer(b"".join(i for i in items if i) or b"\x00", dtype=np.uint8)
            valid = np.asarray([i is not None for i in items], dtype=bool)
            return BinaryColumn(np.asarray(offsets, dtype=np.int64), data, valid)

        cols = encode_batches(
            column(values),
            None if keys is None else column(keys),
            None,
            0,
            len(rows),
            b"\x00",
            RECORD_BATCH_OVERHEAD,
            limit,
        )
        assert [(n, bytes(e)) for n, e in cols] == want


def test_sequence_encoder_refuses_what_is_not_bytes_before_writing() -> None:
    assert CODEC is not None
    with pytest.raises(TypeError, match="bytes or None, got str"):
        CODEC.encode_sequence_batches([b"a", "b"], None, 0, 2, b"\x00", 61, 1000)
    with pytest.raises(TypeError, match="got bytearray"):
        CODEC.encode_sequence_batches([b"a"], [bytearray(b"k")], 0, 1, b"\x00", 61, 1000)
    with pytest.raises(ValueError, match="not all in the lists"):
        CODEC.encode_sequence_batches([b"a"], [], 0, 1, b"\x00", 61, 1000)


_INTAKES: dict[int, Any] = {}


def _intake(max_request_size: int) -> Any:
    """A never-started producer's intake: what ``sequences.prepare`` checks against."""
    from aioproducer import Producer

    if max_request_size not in _INTAKES:
        producer = Producer("127.0.0.1:1", max_request_size=max_request_size)
        _INTAKES[max_request_size] = producer.intake
    return _INTAKES[max_request_size]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(keys_st, payloads), max_size=60),
    with_keys=st.booleans(),
    nparts=st.sampled_from([1, 2, 12, 257]),
    bad=st.sampled_from([None, "text", bytearray(b"b")]),
    bad_at=st.integers(min_value=0, max_value=80),
    bad_key=st.booleans(),
    max_request_size=st.sampled_from([1 << 20, 8230]),
)
def test_one_pass_scan_prepares_what_the_general_passes_do(
    rows: list[tuple[bytes | None, bytes | None]],
    with_keys: bool,
    nparts: int,
    bad: Any,
    bad_at: int,
    bad_key: bool,
    max_request_size: int,
) -> None:
    """``scan_lists`` (sequences.prepare with ``plain``) against the passes it folds:
    the same records kept, the same groups, order and runs, the same size bounds of every
    slice and the same error naming the same record."""
    from aioproducer.cluster import TopicInfo
    from aioproducer.sequences import prepare

    keys: list[Any] | None = [k for k, _v in rows] if with_keys else None
    values: list[Any] = [v for _k, v in rows]
    if bad is not None and bad_at < len(rows):
        (keys if bad_key and keys is not None else values)[bad_at] = bad
    intake = _intake(max_request_size=max_request_size)
    parts = tuple(range(nparts))
    info = TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)

    def prepared(plain: bool) -> Any:
        # Copies: grouping must not change the caller's lists.
        v, k = list(values), None if keys is None else list(keys)
        cols = prepare(intake, "t", info, v, k, None, None, plain)
        assert v == values and k == keys
        return cols

    fast, general = prepared(True), prepared(False)
    if (bad is None or bad_at >= len(rows)) and general.max_estimate <= intake.max_size:
        assert fast.bounds is not None  # the one-pass scan ran
    assert (fast.count, fast.runs, fast.max_estimate) == (
        general.count,
        general.runs,
        general.max_estimate,
    )
    assert repr(fast.error) == repr(general.error)
    assert (None if fast.order is None else list(fast.order)) == general.order
    assert fast.values[: fast.count] == general.values[: general.count]
    if keys is not None:
        assert fast.keys[: fast.count] == general.keys[: general.count]
    for start in range(fast.count + 1):
        for stop in range(start, min(fast.count, start + 3) + 1):
            assert fast.estimate(start, stop) == general.estimate(start, stop)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(payloads, max_size=4),
    rows=st.lists(st.tuples(payloads, payloads), min_size=1, max_size=30),
    with_keys=st.booleans(),
    limit=st.sampled_from([0, 150, 1000, 16384]),
    later=st.sampled_from([0, 5, 300, -2]),
    start=st.integers(min_value=0, max_value=3),
)
def test_filling_an_open_batch_from_lists_is_append_many(
    before: list[bytes | None],
    rows: list[tuple[bytes | None, bytes | None]],
    with_keys: bool,
    limit: int,
    later: int,
    start: int,
) -> None:
    """``RecordBatchBuilder.append_lists`` (the compiled ``encode_sequence_run``) into a
    batch already holding records of another timestamp: the same records taken, the
    same bytes and the same batch as ``append_many``."""
    values = [v for v, _k in rows]
    keys = [k for _v, k in rows] if with_keys else None
    start = min(start, len(rows))
    got, want = RecordBatchBuilder(), RecordBatchBuilder()
    for builder in (got, want):
        for value in before:
            builder.append(1000, b"k", value)
    taken = got.append_lists(1000 + later, keys, values, start, len(rows), limit)
    assert taken == want.append_many(1000 + later, keys, values, None, start, len(rows), limit)
    assert got.record_count == want.record_count
    if want.record_count:
        assert got.build(5, 1, 0) == want.build(5, 1, 0)
    with pytest.raises(TypeError, match="got str"):
        got.append_lists(1000, None, [b"a", "b"], 0, 2, 1 << 20)
    assert got.record_count == want.record_count


def test_sequence_cuts_refuse_what_is_not_bytes() -> None:
    assert CODEC is not None
    with pytest.raises(TypeError, match="expected bytes or None, got str"):
        CODEC.sequence_cuts([b"a", "b"], None, 0, 2, 1, RECORD_BATCH_OVERHEAD, 100)
    with pytest.raises(ValueError, match="not all in the lists"):
        CODEC.sequence_cuts([b"a"], [b"k"], 0, 2, 1, RECORD_BATCH_OVERHEAD, 100)
