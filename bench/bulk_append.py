"""``python -m bench.bulk_append``: the producer loop's share of a bulk send of columns, no
network.

A bulk send of Arrow columns (``--rows`` rows of ``--value-size`` bytes, with ``--keyed``
string keys of 50 distinct values, 12 partitions, ``--compression``) is prepared by a
producer's ``Intake.columns`` (not timed: in a ``SyncProducer`` or a Spark task the
sending thread does it), then what the loop does with it is timed in two parts:

* ``append``: every run through ``Intake.append_run`` into the producer's accumulator,
  as ``send_bulk`` does, and the bulk's ``track()``;
* ``build + complete``: every batch built (encoded header, CRC, compression) and
  completed, as the sender does once the broker has answered.

Each figure is the minimum over ``--rounds`` rounds of CPU time (``time.process_time``):
the round least disturbed by other work on the machine. Objects alive after the warm-up
are frozen out of the garbage collector's view, so that a full collection of an
unrelated heap is not charged to one round.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import pyarrow as pa

from aioproducer import Producer
from aioproducer.cluster import TopicInfo
from aioproducer.results import BulkDelivery

_TS = 1_700_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk_append", description=__doc__)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    ns = parser.parse_args()
    rows = ns.rows - ns.rows % 1000
    distinct = [bytes([65 + (i + j) % 26 for j in range(ns.value_size)]) for i in range(1000)]
    values = pa.array(distinct * (rows // 1000), pa.binary())
    keys = pa.array([f"key-{i % 50}" for i in range(rows)], pa.string()) if ns.keyed else None
    # Never started: its intake and accumulator are used directly, on this thread.
    producer = Producer(
        "127.0.0.1:1", compression_type=ns.compression, batch_size=16384, buffer_memory=1 << 30
    )
    intake = producer.intake
    acc = producer._acc
    budget = producer._budget
    parts = tuple(range(12))
    info = TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)
    intake.accepting = True
    intake._wake_sender = lambda: None

    def one() -> tuple[float, float, int]:
        cols = intake.columns("t", info, values, keys, None, None)
        bulk = BulkDelivery("t", _TS)
        runs = cols.slices(16384, bulk)
        started = time.process_time()
        for run in runs:
            if not budget.try_reserve(run.size):
                raise SystemExit("buffer_memory is too small for the bench")
            intake.append_run(run, info)
        bulk.track(cols.order)
        appended = time.process_time() - started
        batches = list(acc.incomplete)
        started = time.process_time()
        for batch in batches:
            batch.builder.build(-1, -1, -1)
            acc.complete_batch(batch, 0, -1)
        completed = time.process_time() - started
        acc.batches.clear()
        if not bulk.done() or bulk.delivered != rows:
            raise SystemExit(f"the bulk did not complete: {bulk!r}")
        return appended, completed, len(batches)

    one()
    gc.collect()
    gc.freeze()
    results = [one() for _ in range(ns.rounds)]
    append = min(r[0] for r in results)
    done = min(r[1] for r in results)
    count = results[0][2]
    kind = "keyed" if ns.keyed else "keyless"
    print(
        f"{kind} {ns.value_size} B {ns.compression}, {rows:,} rows in {count:,} batches: "
        f"append {append / rows * 1e9:.0f} ns a row ({append / count * 1e6:.1f} µs a batch), "
        f"build + complete {done / rows * 1e9:.0f} ns a row ({done / count * 1e6:.1f} µs a "
        f"batch); load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
