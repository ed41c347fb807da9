"""The sticky partitioner's rows of a bulk send cut where each batch fills (lists checked
in one compiled pass, and columns): one run per batch, whose batch is full once the run
is appended, holding exactly the records the encoder puts in a batch started empty."""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.cluster import TopicInfo
from aioproducer.protocol import columnar
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder
from aioproducer.results import BulkDelivery

CODEC = columnar.CODEC
pytestmark = pytest.mark.skipif(
    CODEC is None, reason=f"the compiled column encoder is not active ({columnar.CODEC_REASON})"
)
BATCH = 2048
TS = 1_700_000_000_000


def _producer() -> tuple[Producer, TopicInfo]:
    # Never started: its intake and accumulator are used directly, as the loop would.
    producer = Producer("127.0.0.1:1", batch_size=BATCH, buffer_memory=1 << 24)
    producer.intake.accepting = True
    producer.intake._wake_sender = lambda: None
    parts = tuple(range(3))
    return producer, TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)


def _append_each(producer: Producer, info: TopicInfo, values: Any) -> list[Any]:
    intake = producer.intake
    cols = intake.columns("t", info, values, None, None, None)
    runs = cols.slices(BATCH, BulkDelivery("t", TS))
    batches = []
    for run in runs:
        assert producer._budget.try_reserve(run.size)
        before = set(producer._acc.incomplete)
        intake.append_run(run, info)
        made = [b for b in producer._acc.incomplete if b not in before]
        # One new batch per run, holding the run; full at once unless it is the last.
        assert len(made) == 1 and made[0].record_count == run.stop - run.start
        assert made[0].full == (run is not runs[-1])
        batches.append(made[0])
    return batches


def _expected(values: list[bytes]) -> list[bytes]:
    """The batches append_many fills from empty, one after another."""
    out, pos = [], 0
    while pos < len(values):
        builder = RecordBatchBuilder()
        pos += builder.append_many(TS, None, values, None, pos, len(values), BATCH)[0]
        out.append(builder.build())
    return out


@pytest.mark.parametrize("kind", ["lists", "columns"])
def test_keyless_runs_are_cut_where_each_batch_fills(kind: str) -> None:
    values = [b"%05d" % i + b"v" * (i % 90) for i in range(1500)]
    given: Any = values
    if kind == "columns":
        pa = pytest.importorskip("pyarrow")
        given = pa.array(values, pa.binary())
    producer, info = _producer()
    batches = _append_each(producer, info, given)
    assert len(batches) > 20
    built = [b.builder.build() for b in batches]
    # The records were appended with the bulk's timestamp as every batch's base.
    assert built == _expected(values)
    assert all(RECORD_BATCH_OVERHEAD < len(b) <= BATCH for b in built)
