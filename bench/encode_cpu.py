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
* ``bulk/arrow``: all a bulk send of Arrow columns costs before the network, a
  producer's ``Intake.columns`` (checks, sizes, and with ``--keyed`` the keys hashed and
  the rows grouped by partition, 12 partitions) and then ``append_columns`` partition by
  partition, a builder per partition.
* ``bulk/lists``: the same for a bulk send of Python lists: ``Intake.columns`` (checks,
  sizes, with ``--keyed`` the keys hashed and the rows grouped), then each slice
  encoded into new batches in one call (``encode_sequence_batches``), a builder per
  batch (``append_many`` where the compiled codec does not run, as with ``--numpy``).

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
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from aioproducer import Producer
from aioproducer.cluster import TopicInfo
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


def _fill_bulk(array: pa.Array, key_array: pa.Array | None, limit: int, run: int) -> None:
    # As send_bulk does: checked and grouped once, then appended run by run.
    parts = tuple(range(12))
    info = TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)
    cols = _INTAKE.columns("t", info, array, key_array, None, None)
    for _part, start, stop in cols.runs:
        builder = RecordBatchBuilder()
        for pos, end in _runs(stop - start, run):
            pos, end = pos + start, end + start
            while pos < end:
                count, _added = builder.append_columns(
                    TS, cols.keys, cols.values, cols.headers, pos, end, limit
                )
                pos += count
                if pos < end:
                    builder = RecordBatchBuilder()


def _fill_lists(values: list[bytes], keys: list[bytes] | None, limit: int, run: int) -> None:
    # As send_bulk of lists does: checked (and keyed: hashed and grouped) once, then each
    # slice encoded into new batches in one call, a builder per batch.
    parts = tuple(range(12))
    info = TopicInfo("t", parts, dict.fromkeys(parts, 1), dict.fromkeys(parts, 0), parts)
    cols = _INTAKE.columns("t", info, values, keys, None, None)
    codec = columnar.CODEC
    if codec is None:
        _fill_many(cols.values, cols.keys, limit, run)
        return
    for _part, start, stop in cols.runs:
        for pos, end in _runs(stop - start, run):
            pieces = codec.encode_sequence_batches(
                cols.values,
                cols.keys,
                start + pos,
                start + end,
                b"\x00",
                RECORD_BATCH_OVERHEAD,
                limit,
            )
            for count, encoded in pieces:
                RecordBatchBuilder().adopt_encoded(count, encoded, TS, None)


_INTAKE = Producer("localhost:9092").intake


def _cpu_per_record(run: Callable[[], None], records: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        run()
        samples.append((time.process_time() - start) / records * 1e6)
    return statistics.median(samples)


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
        _fill_bulk(binary, key_array, 16384, args.run)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        return 0
    cases: list[tuple[str, Callable[[int], Any]]] = [
        ("append", lambda limit: _fill_append(values, keys, limit)),
        ("append_many", lambda limit: _fill_many(values, keys, limit, args.run)),
        ("columns/binary", lambda limit: _fill_columns(binary, key_array, limit, args.run)),
        ("columns/string", lambda limit: _fill_columns(string, key_array, limit, args.run)),
        ("columns/batches", lambda limit: _fill_batches(binary, key_array, limit, args.run)),
        ("bulk/arrow", lambda limit: _fill_bulk(binary, key_array, limit, args.run)),
        ("bulk/lists", lambda limit: _fill_lists(values, keys, limit, args.run)),
    ]
    limits = (16384, 1 << 20)
    print(f"{n} records of 100 B{' with 10-B keys' if keys else ''}, median of {args.rounds}")
    print(f"column encoder: {'compiled' if columnar.CODEC is not None else 'numpy'}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'encoder':<16}" + "".join(f"{f'{limit // 1024} KB':>12}" for limit in limits))
    for name, case in cases:
        cells = [
            _cpu_per_record(lambda c=case, limit=limit: c(limit), n, args.rounds)
            for limit in limits
        ]
        print(f"{name:<16}" + "".join(f"{cell:>9.3f} us" for cell in cells))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
