"""The exactly-once writer's marker arithmetic, without Spark or a broker: which rows of a
task's input an earlier attempt's marker says are committed, and what is left to send."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from aioproducer.spark.exactly_once import _after, committed_rows  # noqa: E402


@pytest.mark.parametrize(
    ("done", "note", "batch", "expected"),
    [
        (-1, "", 0, None),  # no marker yet
        (4, "rows=10", 5, None),  # an earlier batch: nothing of this one is in Kafka
        (5, "rows=10", 5, 10),  # this batch, ten rows committed by a cut-short attempt
        (5, "rows=0", 5, 0),
        (5, "", 5, 2**62),  # this batch without a count: committed whole
        (5, "rows=x", 5, 2**62),
        (6, "rows=3", 5, 2**62),  # a later batch: this one was committed whole
    ],
)
def test_committed_rows(done: int, note: str, batch: int, expected: int | None) -> None:
    assert committed_rows(done, note, batch) == expected


def _batches(*sizes: int) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch([pa.array(range(start, start + n))], names=["v"]))
        start += n
    return out


@pytest.mark.parametrize("skip", [0, 1, 3, 4, 5, 9, 10, 11, 100])
def test_after_sends_exactly_the_rows_past_the_committed_ones(skip: int) -> None:
    batches = _batches(4, 0, 3, 3)
    read: list[int] = []

    def every() -> Iterator[pa.RecordBatch]:
        for b in batches:
            read.append(b.num_rows)
            yield b

    rest = [v for b in _after(every(), skip) for v in b.column(0).to_pylist()]
    assert rest == list(range(10))[skip:]
    assert read == [4, 0, 3, 3]  # the whole input was read, whatever was skipped
