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

With ``--lists`` the same rows are Python lists of ``bytes`` (made as the bench's clients
make them) sent in chunks of 10,000, as ``send_bulk`` of lists is; the ``append`` figure
then includes ``Intake.columns`` (checks, sizes, grouping), which an async producer runs
on its loop.

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
from typing import Any

import pyarrow as pa

from aioproducer import Producer
from aioproducer.cluster import TopicInfo
from aioproducer.results import BulkDelivery

_TS = 1_700_000_000_000
#: Records per send_bulk call with --lists (the bench clients' default chunk).
_CHUNK = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk_append", description=__doc__)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lists", action="store_true", help="Python lists, not Arrow arrays")
    ns = parser.parse_args()
    rows = ns.rows - ns.rows % 1000
    chunks: list[tuple[Any, Any]]
    if ns.lists:
        from bench.clients._common import iter_records

        made = list(iter_records(rows, ns.value_size, ns.keyed))
        chunks = [
            (
                [v for v, _k in made[s : s + _CHUNK]],
                [k for _v, k in made[s : s + _CHUNK]] if ns.keyed else None,
            )
            for s in range(0, rows, _CHUNK)
        ]
    else:
        distinct = [bytes([65 + (i + j) % 26 for j in range(ns.value_size)]) for i in range(1000)]
        values = pa.array(distinct * (rows // 1000), pa.binary())
        keys = pa.array([f"key-{i % 50}" for i in range(rows)], pa.string()) if ns.keyed else None
        chunks = [(values, keys)]
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
        appended = 0.0
        bulks = []
        for values, keys in chunks:
            started = time.process_time()
            cols = intake.columns("t", info, values, keys, None, None)
            prepared = time.process_time()
            bulk = BulkDelivery("t", _TS)
            runs = cols.slices(16384, bulk)
            started = started if ns.lists else time.process_time()
            for run in runs:
                if not budget.try_reserve(run.size):
                    raise SystemExit("buffer_memory is too small for the bench")
                intake.append_run(run, info)
            bulk.track(cols.order)
            # Arrow columns: in a SyncProducer or a Spark task the sending thread prepares
            # them, so only the loop's part is timed.
            appended += time.process_time() - (started if ns.lists else prepared)
            bulks.append(bulk)
        batches = list(acc.incomplete)
        started = time.process_time()
        for batch in batches:
            batch.builder.build(-1, -1, -1)
            acc.complete_batch(batch, 0, -1)
        completed = time.process_time() - started
        acc.batches.clear()
        if not all(bulk.done() for bulk in bulks) or sum(b.delivered for b in bulks) != rows:
            raise SystemExit(f"the bulks did not complete: {bulks!r}")
        return appended, completed, len(batches)

    one()
    gc.collect()
    gc.freeze()
    results = [one() for _ in range(ns.rounds)]
    append = min(r[0] for r in results)
    done = min(r[1] for r in results)
    count = results[0][2]
    kind = ("keyed" if ns.keyed else "keyless") + (" lists" if ns.lists else "")
    print(
        f"{kind} {ns.value_size} B {ns.compression}, {rows:,} rows in {count:,} batches: "
        f"append {append / rows * 1e9:.0f} ns a row ({append / count * 1e6:.1f} µs a batch), "
        f"build + complete {done / rows * 1e9:.0f} ns a row ({done / count * 1e6:.1f} µs a "
        f"batch); load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
