"""run_append.append_run of columns: the partition's open batch first, then every new batch
of the run encoded in one call (columnar.encode_batches), checked against append() one
record at a time, on both column encoders; and a bulk send's completion, told once by
each of its batches."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from test_column_codec import implementation  # noqa: E402, F401  (a fixture)
from test_records_columnar import by_append  # noqa: E402

from aioproducer.accumulator import Accumulator, MemoryBudget  # noqa: E402
from aioproducer.errors import KafkaError  # noqa: E402
from aioproducer.protocol import columnar  # noqa: E402
from aioproducer.protocol.columnar import BinaryColumn  # noqa: E402
from aioproducer.protocol.compression import Codec, compress  # noqa: E402
from aioproducer.protocol.records import (  # noqa: E402
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    decode_batches,
    record_size_bound,
)
from aioproducer.results import BulkDelivery  # noqa: E402
from aioproducer.run_append import append_run  # noqa: E402

TS = 1_700_000_000_000

payloads = st.one_of(
    st.none(), st.binary(max_size=30), st.builds(lambda n: b"v" * n, st.sampled_from([63, 64, 700]))
)


def make_acc(batch_size: int = 1000, codec: Codec = Codec.NONE) -> Accumulator:
    budget = MemoryBudget(1 << 20)
    return Accumulator(
        batch_size=batch_size,
        linger=0.0,
        delivery_timeout=60.0,
        codec=codec,
        compression_level=None,
        budget=budget,
    )


def reference(
    before: int, rows: list[tuple[bytes | None, bytes | None]], headers: Any, limit: int
) -> list[bytes]:
    """The batches append() makes of ``before`` one-byte records then ``rows``."""
    keys = [None] * before + [k for k, _v in rows]
    values = [b"x"] * before + [v for _k, v in rows]
    hdrs = [[]] * before + headers if headers is not None else None
    return [b.build() for b in by_append(TS, keys, values, hdrs, limit)]


@pytest.mark.usefixtures("implementation")  # each column encoder in turn
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(st.tuples(payloads, payloads), min_size=1, max_size=60),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    limit=st.integers(min_value=RECORD_BATCH_OVERHEAD + 800, max_value=6_000),
    before=st.sampled_from([0, 1, 5]),
    run=st.integers(min_value=1, max_value=70),
)
def test_runs_of_columns_make_the_batches_append_makes_with_exact_memory(
    rows: list[tuple[bytes | None, bytes | None]],
    with_keys: bool,
    with_headers: bool,
    limit: int,
    before: int,
    run: int,
) -> None:
    if not with_keys:
        rows = [(None, v) for _k, v in rows]
    headers = None
    if with_headers:
        headers = [[("h", bytes([i % 256]))] if i % 3 else [] for i in range(len(rows))]
    acc = make_acc(batch_size=limit)
    budget = acc.budget
    for _ in range(before):
        need = record_size_bound(None, 1, None)
        assert budget.try_reserve(need)
        acc.append("t", 0, TS, None, b"x", None, need, 0.0)
    values = BinaryColumn.from_sequence([v for _k, v in rows])
    keys = BinaryColumn.from_sequence([k for k, _v in rows]) if with_keys else None
    header_col = BinaryColumn.from_headers(headers) if headers is not None else None
    spans: list[Any] = []
    for pos in range(0, len(rows), run):
        end = min(len(rows), pos + run)
        need = sum(
            record_size_bound(
                len(k) if k is not None else None,
                len(v) if v is not None else None,
                headers[i] if headers is not None else None,
            )
            for i, (k, v) in enumerate(rows[pos:end], pos)
        )
        assert budget.try_reserve(need)
        appended, _added, _wake = append_run(
            acc, "t", 0, TS, keys, values, header_col, pos, end, need, 0.0, spans
        )
        assert appended == end - pos
    batches = list(acc.batches[("t", 0)])
    assert [b.builder.build() for b in batches] == reference(before, rows, headers, limit)
    # Every row has its span, in order, and no batch but the last takes more records.
    assert sum(count for _b, _first, count in spans) == len(rows)
    assert all(b.full for b in batches[:-1])
    for batch, first, count in spans:
        assert first >= 0 and first + count <= batch.record_count
    # Memory: exactly the batches' bytes stay reserved (each estimate trimmed to size).
    assert budget.used == sum(b.reserved + b.unsettled for b in batches)
    assert all(b.reserved == b.builder.size_in_bytes for b in batches)
    # And the records read back in order.
    got = [r for b in batches for r in decode_batches(b.builder.build())[0].records][before:]
    assert [(r.key, r.value) for r in got] == rows


def test_a_timestamp_outside_int64_is_refused_before_anything_is_appended() -> None:
    acc = make_acc()
    values = BinaryColumn.from_sequence([b"a", b"b"])
    need = 2 * record_size_bound(None, 1, None)
    assert acc.budget.try_reserve(need)
    spans: list[Any] = []
    with pytest.raises(ValueError, match="int64"):
        append_run(acc, "t", 0, 1 << 63, None, values, None, 0, 2, need, 0.0, spans)
    assert spans == [] and acc.budget.used == 0 and not acc.batches


def _batches_of(acc: Any) -> list[Any]:
    return list(acc.batches[("t", 0)])


def test_a_bulk_completes_once_its_last_batch_has_even_when_batches_are_shared() -> None:
    acc = make_acc(batch_size=RECORD_BATCH_OVERHEAD + 100)
    values = BinaryColumn.from_sequence([b"v" * 20] * 5)
    need = 5 * record_size_bound(None, 20, None)
    first, second = BulkDelivery("t", TS), BulkDelivery("t", TS)
    for bulk in (first, second):
        spans: list[Any] = []
        assert acc.budget.try_reserve(need)
        append_run(acc, "t", 0, TS, None, values, None, 0, 5, need, 0.0, spans)
        bulk.add_spans(spans)
        bulk.track(None)
    batches = _batches_of(acc)
    # Three records of 27 bytes a batch: 3 + 2, then the shared one takes 1 more, 3 + 1.
    assert [b.record_count for b in batches] == [3, 3, 3, 1]
    shared = batches[1]
    assert shared.bulk is first  # the first bulk is told through the field
    done: list[str] = []
    first.add_done_callback(lambda _b: done.append("first"))
    second.add_done_callback(lambda _b: done.append("second"))
    failure = KafkaError("refused")
    acc.complete_batch(batches[0], 0, -1)
    acc.fail_batch(shared, failure)
    assert done == ["first"] and shared.bulk is None
    assert (first.delivered, first.failed, first.first_error) == (3, 2, failure)
    acc.complete_batch(batches[2], 10, -1)
    assert not second.done()
    acc.complete_batch(batches[3], 20, -1)
    assert done == ["first", "second"]
    assert (second.delivered, second.failed) == (4, 1)
    assert second.metadata(1).offset == 10 and second.metadata(4).offset == 20
    with pytest.raises(KafkaError):
        second.metadata(0)  # the shared batch's record of the second bulk failed


def test_a_bulk_whose_batches_are_done_before_tracking_is_done_at_once() -> None:
    acc = make_acc()
    values = BinaryColumn.from_sequence([b"a"])
    need = record_size_bound(None, 1, None)
    assert acc.budget.try_reserve(need)
    spans: list[Any] = []
    append_run(acc, "t", 0, TS, None, values, None, 0, 1, need, 0.0, spans)
    bulk = BulkDelivery("t", TS)
    bulk.add_spans(spans)
    acc.complete_batch(spans[0][0], 7, -1)
    bulk.track(None)
    assert bulk.done() and bulk.metadata(0).offset == 7


def test_pieces_encoded_ahead_close_the_open_batch_and_keep_their_compression() -> None:
    acc = make_acc(batch_size=RECORD_BATCH_OVERHEAD + 200, codec=Codec.LZ4)
    need = record_size_bound(None, 1, None)
    assert acc.budget.try_reserve(need)
    acc.append("t", 0, TS, None, b"x", None, need, 0.0)
    values = BinaryColumn.from_sequence([b"v" * 50] * 9)
    pieces = columnar.encode_batches(
        values, None, None, 0, 9, b"\x00", RECORD_BATCH_OVERHEAD, RECORD_BATCH_OVERHEAD + 200
    )
    packed = [(n, data, compress(Codec.LZ4, data)) for n, data in pieces]
    size = 9 * record_size_bound(None, 50, None)
    assert acc.budget.try_reserve(size)
    spans: list[Any] = []
    appended, added, wake = append_run(
        acc, "t", 0, TS, None, values, None, 0, 9, size, 0.0, spans, packed
    )
    batches = _batches_of(acc)
    assert (appended, wake) == (9, True) and added == sum(len(d) for _n, d, _c in packed)
    # The open batch took none of them: its one record stays alone, ahead of the run.
    assert [b.record_count for b in batches] == [1, 3, 3, 3]
    assert batches[0].full and [s[0] for s in spans] == batches[1:]
    assert acc.budget.used == sum(b.reserved + b.unsettled for b in batches)
    for batch, (_n, _data, compressed) in zip(batches[1:], packed, strict=True):
        assert batch.builder._compressed[1] is compressed  # build() does not compress again
        assert batch.builder.build() == _rebuilt(batch.builder)
    got = [r.value for b in batches for r in decode_batches(b.builder.build())[0].records]
    assert got == [b"x"] + [b"v" * 50] * 9


def _rebuilt(builder: RecordBatchBuilder) -> bytes:
    builder._compressed = None
    return builder.build()


@pytest.mark.usefixtures("implementation")  # each column encoder in turn
@pytest.mark.parametrize("codec", [Codec.LZ4, Codec.ZSTD, Codec.GZIP])
def test_batches_compressed_as_encoded_are_those_encoded_then_compressed(codec: Codec) -> None:
    # encode_compressed_batches compresses each batch inside the encoding call: the
    # same batches, cut at the same records, as encoding the run and then compressing.
    values = BinaryColumn.from_sequence(
        [None if i % 11 == 0 else b"%d-" % i * (1 + i % 40) for i in range(400)]
    )
    keys = BinaryColumn.from_sequence([b"k%d" % (i % 7) for i in range(400)])
    limit = RECORD_BATCH_OVERHEAD + 2000
    got = columnar.encode_compressed_batches(
        values, keys, None, (5, 390), RECORD_BATCH_OVERHEAD, limit, codec, None
    )
    plain = columnar.encode_batches(
        values, keys, None, 5, 390, b"\x00", RECORD_BATCH_OVERHEAD, limit
    )
    assert len(plain) > 5
    assert [(n, bytes(data)) for n, data, _c in got] == [(n, bytes(d)) for n, d in plain]
    for _n, data, compressed in got:
        assert type(data) is bytearray
        assert bytes(compressed) == compress(codec, data)
