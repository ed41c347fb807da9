"""Where a run of column rows is cut into fresh batches: the compiled pass
(``fresh_cuts`` in ``protocol/_column_codec.pyx``) against the numpy plan
(``column_plan.fresh_cuts``) and against where the encoder itself cuts the same rows."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from aioproducer.protocol import column_plan, columnar  # noqa: E402
from aioproducer.protocol.columnar import BinaryColumn  # noqa: E402
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD  # noqa: E402

CODEC = columnar.CODEC
pytestmark = pytest.mark.skipif(
    CODEC is None, reason=f"the compiled column encoder is not active ({columnar.CODEC_REASON})"
)

# Lengths either side of a varint's size steps, and nulls.
payloads = st.none() | st.binary(max_size=20) | st.sampled_from([b"v" * n for n in (63, 64, 8192)])
headers_st = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(payloads, payloads, headers_st), max_size=150),
    with_keys=st.booleans(),
    with_headers=st.booleans(),
    limit=st.sampled_from([0, 80, 200, 1000, 16384, 1 << 20]),
    start=st.integers(min_value=0, max_value=5),
)
def test_compiled_cuts_are_the_numpy_plans_and_the_encoders(
    rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]],
    with_keys: bool,
    with_headers: bool,
    limit: int,
    start: int,
) -> None:
    values = BinaryColumn.from_sequence([v for v, _k, _h in rows])
    keys = BinaryColumn.from_sequence([k for _v, k, _h in rows]) if with_keys else None
    headers = BinaryColumn.from_headers([h for _v, _k, h in rows]) if with_headers else None
    start = min(start, len(rows))
    stop = len(rows)
    got = column_plan.fresh_cuts(values, keys, headers, start, stop, limit, CODEC)
    assert got == column_plan.fresh_cuts(values, keys, headers, start, stop, limit)
    # Each batch the encoder fills from empty ends at the next cut.
    batches = columnar.encode_batches(
        values, keys, headers, start, stop, b"\x00", RECORD_BATCH_OVERHEAD, limit
    )
    ends = [start]
    for count, _encoded in batches:
        ends.append(ends[-1] + count)
    assert got == (ends if batches else [start])


def test_compiled_cuts_refuse_offsets_that_decrease() -> None:
    assert CODEC is not None
    offsets = np.asarray([0, 5, 3, 6], dtype=np.int64)
    data = np.zeros(6, dtype=np.uint8)
    with pytest.raises(ValueError, match="must not decrease"):
        CODEC.fresh_cuts((offsets, data, None), None, None, 0, 3, 1, RECORD_BATCH_OVERHEAD, 100)
    with pytest.raises(ValueError, match="outside its data"):
        CODEC.fresh_cuts((offsets, data[:2], None), None, None, 0, 3, 1, 61, 100)
