"""``python -m bench.encode_cpu``: CPU per record of the record encoders, no producer.

Fills :class:`~aioproducer.protocol.records.RecordBatchBuilder` s of 16 KB and 1 MB with
100-byte keyless records (``--keyed``: with 10-byte keys), a run of ``--run`` records at a
time as a bulk send's slices come (4096), and reports the CPU time
(``time.process_time``) per record of each encoder:

* ``append``: one call per record (the reference encoding);
* ``append_many``: a run of Python ``bytes`` at a time;
* ``columns/binary`` and ``columns/string``: ``append_columns`` on a
  :class:`~aioproducer.protocol.columnar.BinaryColumn` viewing a pyarrow ``binary`` or
  ``string`` array (the view is made once per round, as a bulk send makes it once);
* ``columns/batches``: the ``binary`` column cut into new batches a run at a time, one
  ``columnar.encode_batches`` call a run, as the producer fills the batches after a
  partition's open one (and a builder per batch);
* ``bulk/arrow``: all a bulk send of Arrow columns costs before the accumulator, by the
  producer's own code where it can: ``Intake.columns`` (checks, sizes, and with
  ``--keyed`` the keys hashed and the rows grouped by partition, 12 partitions), its
  slices, and each slice encoded in ``run_append``'s order (the partition's open batch
  filled by ``append_columns``, the rest cut into new batches by one ``encode_batches``
  call), a builder per batch;
* ``bulk/lists``: the same for a bulk send of Python lists (``append_lists`` and
  ``encode_sequence_batches``; ``append_many`` where the compiled codec does not run, as
  with ``--numpy``).

The column cases run the compiled column encoder where it is installed
(``python -m aioproducer info``); ``--numpy`` runs its numpy twin instead, in the same
install. Each cell is the median of ``--rounds`` rounds. ``--profile`` prints a cProfile of the
bulk send of Arrow columns (``bulk/arrow``, 16 KB) instead.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from aioproducer import BulkDelivery, Producer
from aioproducer.cluster import TopicInfo
from aioproducer.prepared import BULK_SLICE
from aioproducer.protocol import columnar
from aioproducer.protocol.columnar import BinaryColumn
from aioproducer.protocol.records import RECORD_BATCH_OVERHEAD, RecordBatchBuilder

TS = 1_700_000_000_000


def _fill_append(values: list[bytes], keys: list[bytes] | None, limit: int) -> None:
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        if builder.size_in_bytes + 150 > limit and builder.record_count:
            builder = RecordBatchBuilder()
        builder.append(TS, key, value)


def _runs(n: int, run: int) -> list[tuple[int, int]]:
    return [(start, min(n, start + run)) for start in range(0, n, run)]


def _fill_many(values: list[bytes], keys: list[bytes] | None, limit: int, run: int) -> None:
    # As run_append.append_run does: runs of a bulk send fill the open batch, then new ones.
    builder = RecordBatchBuilder()
    for pos, stop in _runs(len(values), run):
        while pos < stop:
            count, _added = builder.append_many(TS, keys, values, None, pos, stop, limit)
            pos += count
            if pos < stop:
                builder = RecordBatchBuilder()


def _fill_columns(array: pa.Array, key_array: pa.Array | None, limit: int, run: int) -> None:
    values = BinaryColumn.from_arrow(array)
    keys = BinaryColumn.from_arrow(key_array) if key_array is not None else None
    builder = RecordBatchBuilder()
    for pos, stop in _runs(len(values), run):
        while pos < stop:
            count, _added = builder.append_columns(TS, keys, values, None, pos, stop, limit)
            pos += count
            if pos < stop:
                builder = RecordBatchBuilder()


def _fill_batches(array: pa.Array, key_array: pa.Array | None, limit: int, run: int) -> None:
    # As the producer fills new batches: a run cut and encoded in one call, then a
    # builder per batch that keeps its bytes.
    values = BinaryColumn.from_arrow(array)
    keys = BinaryColumn.from_arrow(key_array) if key_array is not None else None
    for pos, stop in _runs(len(values), run):
        pieces = columnar.encode_batches(
            values, keys, None, pos, stop, b"\x00", RECORD_BATCH_OVERHEAD, limit
        )
        for count, encoded in pieces:
            RecordBatchBuilder().adopt_encoded(count, encoded, TS, None)


def _fill_bulk(values: Any, keys: Any, limit: int) -> None:
    # As a bulk send does, minus the accumulator: checked (and keyed: hashed and grouped)
    # once by the producer's Intake.columns, cut into its slices, and each slice
    # appended in run_append's order: the partition's open batch first (append_columns,
    # or append_lists for lists), then the rest of the slice cut into new batches by one
    # encoder call, a builder per batch. Full builders are dropped, as sent batches are.
    cols = _INTAKE.columns("t", _TOPIC, values, keys, None, None)
    codec = columnar.CODEC
    lists = isinstance(values, list)
    if lists and codec is None:
        _fill_many(cols.values, cols.keys, limit, BULK_SLICE)
        return
    open_batches: dict[int | None, RecordBatchBuilder] = {}
    for run in cols.slices(limit, BulkDelivery("t", TS)):
        part, pos, stop = run.partition, run.start, run.stop
        builder = open_batches.pop(part, None)
        if builder is not None:
            if lists:
                count, _added = builder.append_lists(TS, cols.keys, cols.values, pos, stop, limit)
            else:
                count, _added = builder.append_columns(
                    TS, cols.keys, cols.values, cols.headers, pos, stop, limit
                )
            pos += count
            if pos == stop and builder.size_in_bytes < limit:
                open_batches[part] = builder
        if pos < stop:
            if lists:
                assert codec is not None
                pieces = codec.encode_sequence_batches(
                    cols.values, cols.keys, pos, stop, b"\x00", RECORD_BATCH_OVERHEAD, limit
                )
            else:
                pieces = columnar.encode_batches(
                    cols.values,
                    cols.keys,
                    cols.headers,
                    pos,
                    stop,
                    b"\x00",
                    RECORD_BATCH_OVERHEAD,
                    limit,
                )
            last = RecordBatchBuilder()
            for count, encoded in pieces:
                last = RecordBatchBuilder()
                last.adopt_encoded(count, encoded, TS, None)
            if last.size_in_bytes < limit:
                open_batches[part] = last


_PARTS = tuple(range(12))
_TOPIC = TopicInfo("t", _PARTS, dict.fromkeys(_PARTS, 1), dict.fromkeys(_PARTS, 0), _PARTS)
_INTAKE = Producer("localhost:9092").intake


def _cpu_per_record(run: Callable[[], None], records: int, rounds: int) -> tuple[float, float]:
    # The median CPU per record (µs) and minor page faults per 100k records: first
    # touches of fresh memory, which cost 2-14 µs each on the VMs measured.
    samples = []
    faults = []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.process_time()
        run()
        samples.append((time.process_time() - start) / records * 1e6)
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * 1e5 / records)
    return statistics.median(samples), statistics.median(faults)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints a table of microseconds of CPU per record."""
    parser = argparse.ArgumentParser(prog="python -m bench.encode_cpu", description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--numpy", action="store_true", help="the numpy column encoder, even where compiled"
    )
    parser.add_argument(
        "--run", type=int, default=4096, help="records per run (a bulk send's slice: 4096)"
    )
    parser.add_argument(
        "--case",
        action="append",
        help="run only this case (repeatable): the cases before it change the allocator's "
        "state (which sizes glibc maps afresh), and with it the page faults of those after",
    )
    args = parser.parse_args(argv)
    if args.numpy:
        columnar.CODEC = None
    n = args.records
    values = [i.to_bytes(4, "big") * 25 for i in range(n)]
    keys = [f"key-{i % 1000:06d}".encode() for i in range(n)] if args.keyed else None
    binary = pa.array(values, type=pa.binary())
    string = pa.array([v.hex()[:100] for v in values], type=pa.string())
    key_array = pa.array(keys, type=pa.binary()) if keys is not None else None
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _fill_bulk(binary, key_array, 16384)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        return 0
    cases: list[tuple[str, Callable[[int], Any]]] = [
        ("append", lambda limit: _fill_append(values, keys, limit)),
        ("append_many", lambda limit: _fill_many(values, keys, limit, args.run)),
        ("columns/binary", lambda limit: _fill_columns(binary, key_array, limit, args.run)),
        ("columns/string", lambda limit: _fill_columns(string, key_array, limit, args.run)),
        ("columns/batches", lambda limit: _fill_batches(binary, key_array, limit, args.run)),
        ("bulk/arrow", lambda limit: _fill_bulk(binary, key_array, limit)),
        ("bulk/lists", lambda limit: _fill_bulk(values, keys, limit)),
    ]
    if args.case:
        cases = [(name, case) for name, case in cases if name in args.case]
    limits = (16384, 1 << 20)
    print(f"{n} records of 100 B{' with 10-B keys' if keys else ''}, median of {args.rounds}")
    print(f"column encoder: {'compiled' if columnar.CODEC is not None else 'numpy'}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{'encoder':<16}"
        + "".join(f"{f'{limit // 1024} KB':>12}" for limit in limits)
        + "".join(f"{f'faults {limit // 1024} KB':>16}" for limit in limits)
        + "  (page faults per 100k records)"
    )
    for name, case in cases:
        cells = [
            _cpu_per_record(lambda c=case, limit=limit: c(limit), n, args.rounds)
            for limit in limits
        ]
        print(
            f"{name:<16}"
            + "".join(f"{cpu:>9.3f} us" for cpu, _faults in cells)
            + "".join(f"{faults:>16.0f}" for _cpu, faults in cells)
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
