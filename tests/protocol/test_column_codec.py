"""The compiled column encoder (protocol/_column_codec.pyx) against the numpy one and against
RecordBatchBuilder.append, both implementations called directly in every run."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from test_records_columnar import by_append  # noqa: E402

from aioproducer import speedups  # noqa: E402
from aioproducer.protocol import columnar  # noqa: E402
from aioproducer.protocol.columnar import BinaryColumn  # noqa: E402
from aioproducer.protocol.records import (  # noqa: E402
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    decode_batches,
)

CODEC = columnar.CODEC
needs_codec = pytest.mark.skipif(
    CODEC is None, reason=f"the compiled column encoder is not active ({columnar.CODEC_REASON})"
)

payloads = st.one_of(
    st.none(),
    st.binary(max_size=20),
    st.builds(lambda n: b"v" * n, st.sampled_from([63, 64, 8191, 8192])),
)
header_sections = st.one_of(
    st.just(b"\x00"),
    st.builds(
        lambda k, v: b"\x02" + _varint(len(k) << 1) + k + _varint(len(v) << 1) + v,
        st.binary(max_size=6),
        st.binary(max_size=6),
    ),
)
# Timestamp deltas as a run's records share them, encoded (zig-zag varints).
ts_parts = st.sampled_from(
    [b"\x00", b"\x02", b"\x80\x01", b"\xfe\xff\x03", b"\x80\x80\x80\x80\x10"]
)
offset_deltas = st.one_of(
    st.sampled_from([0, 1, 62, 63, 64, 8190, 8191, 8192, (1 << 20) - 1, 1 << 20]),
    st.integers(min_value=0, max_value=(1 << 31) - 1),
)


def _varint(zz: int) -> bytes:
    out = bytearray()
    while zz >= 0x80:
        out.append(zz & 0x7F | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


def raw_column(rows: list[bytes | None], wide: bool, pad: int) -> tuple[Any, Any, Any]:
    """Arrow's layout of ``pad`` junk rows then ``rows``: offsets (int64 if ``wide``, else
    int32) starting past some junk bytes, data, validity (None if no null)."""
    offsets = [3]
    data = bytearray(b"abc")
    valid = []
    for row in [b"junk"] * pad + rows:
        if row is not None:
            data += row
        valid.append(row is not None)
        offsets.append(len(data))
    kind = np.int64 if wide else np.int32
    mask = None if all(valid) else np.asarray(valid, dtype=bool)
    return np.asarray(offsets, dtype=kind), np.frombuffer(bytes(data), dtype=np.uint8), mask


def as_column(raw: tuple[Any, Any, Any] | None) -> BinaryColumn | None:
    if raw is None:
        return None
    offsets, data, valid = raw
    return BinaryColumn(offsets.astype(np.int64), data, valid)


@needs_codec
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(payloads, payloads, header_sections), min_size=1, max_size=30),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    wide=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    pad=st.integers(min_value=0, max_value=3),
    first_offset_delta=offset_deltas,
    ts_part=ts_parts,
    size_so_far=st.integers(min_value=RECORD_BATCH_OVERHEAD, max_value=3000),
    max_bytes=st.one_of(st.none(), st.integers(min_value=RECORD_BATCH_OVERHEAD, max_value=20_000)),
    tail=st.integers(min_value=0, max_value=2),
)
def test_compiled_and_numpy_encoders_write_the_same_bytes_and_cut_at_the_same_record(
    rows: list[tuple[bytes | None, bytes | None, bytes]],
    with_keys: bool,
    with_headers: bool,
    wide: tuple[bool, bool, bool],
    pad: int,
    first_offset_delta: int,
    ts_part: bytes,
    size_so_far: int,
    max_bytes: int | None,
    tail: int,
) -> None:
    values = raw_column([r[1] for r in rows], wide[0], pad)
    keys = raw_column([r[0] for r in rows], wide[1], pad) if with_keys else None
    headers = raw_column([r[2] for r in rows], wide[2], pad) if with_headers else None
    start, stop = pad, pad + len(rows) - min(tail, len(rows) - 1)
    args = (start, stop, first_offset_delta, ts_part, size_so_far, max_bytes)
    assert CODEC is not None
    count, data = CODEC.encode_run(values, keys, headers, *args)
    want_count, want = columnar.encode_run_numpy(
        as_column(values), (as_column(keys), as_column(headers), *args)
    )
    assert (count, bytes(data)) == (want_count, bytes(want))
    if first_offset_delta == 0:
        assert count >= 1  # an empty batch takes at least one record


@pytest.fixture(params=["compiled", "numpy"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """append_columns on each encoder in turn."""
    if request.param == "compiled" and CODEC is None:
        pytest.skip(f"the compiled column encoder is not active ({columnar.CODEC_REASON})")
    old = columnar.CODEC
    columnar.CODEC = CODEC if request.param == "compiled" else None
    yield request.param
    columnar.CODEC = old


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=st.lists(st.tuples(payloads, payloads, st.just(b"")), min_size=1, max_size=40),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    wide=st.booleans(),
    limit=st.integers(min_value=RECORD_BATCH_OVERHEAD + 700, max_value=30_000),
    before=st.sampled_from([0, 1, 63, 64, 70]),
    run=st.integers(min_value=1, max_value=15),
)
def test_append_columns_on_either_encoder_is_byte_identical_to_append(
    implementation: str,
    rows: list[tuple[bytes | None, bytes | None, bytes]],
    with_keys: bool,
    with_headers: bool,
    wide: bool,
    limit: int,
    before: int,
    run: int,
) -> None:
    ts = 1_700_000_000_000
    if not with_keys:
        rows = [(None, v, h) for _k, v, h in rows]
    headers = None
    if with_headers:
        headers = [[("h", bytes([i % 256]))] if i % 2 else [] for i in range(len(rows))]
    # The reference: the same records, after ``before`` others (that fit in the first
    # batch: up to 70 of 8 bytes), one append() at a time.
    want = [
        b.build()
        for b in by_append(
            ts,
            [None] * before + [k for k, _v, _h in rows],
            [b"x"] * before + [v for _k, v, _h in rows],
            [[]] * before + headers if headers is not None else None,
            limit,
        )
    ]
    offsets, data, valid = raw_column([r[1] for r in rows], wide, 0)
    # int32 offsets reach the compiled encoder as they are.
    values = BinaryColumn(offsets, data, valid)
    keys = BinaryColumn.from_sequence([r[0] for r in rows]) if with_keys else None
    header_col = BinaryColumn.from_headers(headers) if headers is not None else None
    built: list[bytes] = []
    builder = RecordBatchBuilder()
    for _ in range(before):
        builder.append(ts, None, b"x")
    pos = 0
    while pos < len(rows):
        # Runs of ``run`` rows, as a bulk send's slices come.
        end = min(len(rows), pos + run)
        while pos < end:
            size = builder.size_in_bytes
            count, added = builder.append_columns(ts, keys, values, header_col, pos, end, limit)
            assert added == builder.size_in_bytes - size
            pos += count
            if pos < end:
                built.append(builder.build())
                builder = RecordBatchBuilder()
    built.append(builder.build())
    assert built == want
    # And the batches read back as the rows.
    records = [r for batch in decode_batches(b"".join(built)) for r in batch.records][before:]
    assert [(r.key, r.value) for r in records] == [(k, v) for k, v, _h in rows]
    assert [list(r.headers) for r in records] == [list(h) for h in headers or [[]] * len(rows)]


@needs_codec
def test_bad_buffers_are_refused_not_read_past() -> None:
    assert CODEC is not None
    offsets = np.asarray([0, 4, 2], dtype=np.int64)
    data = np.frombuffer(b"abcd", dtype=np.uint8)
    with pytest.raises(ValueError, match="must not decrease"):
        CODEC.encode_run((offsets, data, None), None, None, 0, 2, 0, b"\x00", 61, None)
    offsets = np.asarray([0, 4, 9], dtype=np.int64)
    with pytest.raises(ValueError, match="outside its data"):
        CODEC.encode_run((offsets, data, None), None, None, 0, 2, 0, b"\x00", 61, None)
    with pytest.raises(ValueError, match="fewer than"):
        CODEC.encode_run((offsets, data, None), None, None, 0, 5, 0, b"\x00", 61, None)
    with pytest.raises(ValueError, match="int32 or int64"):
        CODEC.encode_run(
            (offsets.astype(np.int16), data, None), None, None, 0, 1, 0, b"\x00", 61, None
        )


def test_the_compiled_encoder_runs_wherever_it_could_be_built() -> None:
    """An install with a C compiler and Cython encodes columns compiled (unless asked not
    to); a missing or stale build says why."""
    if os.environ.get(speedups.ENV_VAR) == "1":
        assert CODEC is None and speedups.ENV_VAR in columnar.CODEC_REASON
    elif speedups.can_compile() and importlib.util.find_spec("Cython") is not None:
        assert CODEC is not None, columnar.CODEC_REASON
    else:
        assert CODEC is None and columnar.CODEC_REASON


def _codec_in(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != speedups.ENV_VAR}
    code = (
        "from aioproducer.protocol import columnar as c; print(c.CODEC is not None, c.CODEC_REASON)"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@needs_codec
def test_a_column_encoder_edited_after_the_build_never_runs(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent.parent
    shutil.copytree(root / "aioproducer", tmp_path / "aioproducer")
    for group in root.glob("aioproducer__mypyc*"):
        shutil.copy(group, tmp_path)
    assert _codec_in(tmp_path).stdout.startswith("True")
    with (tmp_path / "aioproducer" / "protocol" / "_column_codec.pyx").open("a") as source:
        source.write("# edited\n")
    result = _codec_in(tmp_path)
    assert result.stdout.startswith("False") and "changed since it was compiled" in result.stdout
    env = {k: v for k, v in os.environ.items() if k != speedups.ENV_VAR}
    info = subprocess.run(
        [sys.executable, "-m", "aioproducer", "info", "--require-compiled"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "columns     numpy:" in info.stdout
    # A machine that can compile must not pass its tests on a stale build.
    assert info.returncode == (1 if speedups.can_compile() else 0)


@needs_codec
@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=60),
    nparts=st.sampled_from([1, 2, 3, 12, 255, 256, 1000, 70000]),
    wide=st.booleans(),
    pad=st.integers(min_value=0, max_value=2),
)
def test_compiled_key_partitions_are_the_scalar_murmur2_partitions(
    keys: list[bytes | None], nparts: int, wide: bool, pad: int
) -> None:
    from aioproducer.partitioner import partition_for_key

    assert CODEC is not None
    offsets, data, valid = raw_column(keys, wide, pad)
    out = np.full(len(keys), -7, dtype=np.int64)
    CODEC.key_partitions(
        (offsets[pad:], data, None if valid is None else valid[pad:]), len(keys), nparts, out
    )
    assert out.tolist() == [-1 if k is None else partition_for_key(k, nparts) for k in keys]


@needs_codec
@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(min_value=-1, max_value=14), payloads), max_size=80),
    wide=st.booleans(),
)
def test_compiled_grouping_is_the_stable_sort_and_take(
    rows: list[tuple[int, bytes | None]], wide: bool
) -> None:
    assert CODEC is not None
    parts = np.asarray([p for p, _v in rows], dtype=np.int64)
    bins = int(parts.max()) + 2 if rows else 1
    order = np.full(len(rows), -7, dtype=np.int64)
    counts = np.full(bins, 99, dtype=np.int64)
    CODEC.partition_order(parts, len(rows), bins, order, counts)
    assert order.tolist() == np.argsort(parts + 1, kind="stable").tolist()
    assert counts.tolist() == np.bincount(parts + 1, minlength=bins).tolist()
    offsets, data, _valid = raw_column([v for _p, v in rows], wide, 1)
    out_offsets = np.empty(len(rows) + 1, dtype=np.int64)
    out_data = np.empty(int(offsets[-1] - offsets[1]), dtype=np.uint8)
    written = CODEC.gather((offsets[1:], data, None), order, len(rows), out_offsets, out_data)
    want = BinaryColumn(offsets[1:].astype(np.int64), data).take(order)
    assert written == len(out_data)
    assert out_offsets.tolist() == want.offsets.tolist()
    assert bytes(out_data) == bytes(want.data)
    with pytest.raises(ValueError, match="outside"):
        one = np.zeros(1, dtype=np.int64)
        CODEC.partition_order(np.asarray([bins - 1], dtype=np.int64), 1, bins, one, counts)
