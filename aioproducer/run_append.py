"""Appending a bulk send's runs to an :class:`~aioproducer.accumulator.Accumulator`'s
batches: a run of sequences or of columns (``Intake.append_run`` calls :func:`append_run`).

A run of columns, or of lists of bytes without headers where the compiled column codec
runs, fills the partition's open batch first; the batches after it are encoded in one
call of the encoder (or were encoded ahead by the sending thread: pieces) and made in a
tight loop. Loop-side state, like the accumulator's: nothing locks.
Compiled with the accumulator (``speedups.HOT_MODULES``): it reads the batches' and the
builders' fields in place.
"""

from __future__ import annotations

import collections
from typing import Any

from .accumulator import Accumulator, ProducerBatch, TopicPartition
from .protocol.columnar import CODEC, BinaryColumn, encode_batches
from .protocol.record_encoder import INT64_MAX, INT64_MIN
from .protocol.records import RECORD_BATCH_OVERHEAD

__all__ = ["append_run"]


def append_run(
    acc: Accumulator,
    topic: str,
    partition: int,
    timestamp_ms: int,
    keys: Any,
    values: Any,
    headers: Any,
    start: int,
    stop: int,
    reserved: int,
    now: float,
    spans: list[tuple[ProducerBatch, int, int]],
    pieces: list[tuple[int, Any, Any]] | None = None,
    fills: bool = False,
) -> tuple[int, int, bool]:
    """Append ``values[start:stop]`` to ``partition``'s batches, whose ``reserved``
    bytes (an upper bound of their size) are already reserved.

    ``pieces``: the run already encoded into new batches (see
    :meth:`~aioproducer.intake.Intake.encode_ahead`): they become batches of their own
    after the partition's open batch, which takes no more records. ``fills``: the run's
    last record fills a batch that its records fill from empty (``ColumnRun.fills``);
    if they went into new batches, the last one then takes no more records either.

    ``keys``/``values``/``headers`` are sequences (encoded by
    ``RecordBatchBuilder.append_many``, or, lists without headers, by the compiled
    ``encode_sequence_batches`` into new batches) or, for a bulk send of columns,
    :class:`~aioproducer.protocol.columnar.BinaryColumn` s (``append_columns``).

    Adds one ``(batch, index of the first record in it, record count)`` per batch
    touched to ``spans``, and gives back what the reservation over-estimated in one
    go. Returns ``(records appended, bytes they added, wake the sender)``. If a record is invalid, the
    ones before it stay appended (their spans are in ``spans``), the reservation of the
    rest is given back and its error is raised.
    """
    tp = (topic, partition)
    dq = acc.batches.get(tp)
    batch = dq[-1] if dq else None
    budget = acc.budget
    wake = False
    pos = start
    added_total = 0
    columnar = isinstance(values, BinaryColumn)
    # Columns whose timestamp needs no check fill new batches in one encoder call
    # (_fresh_batches); the loop below then fills only the partition's open batch. So do
    # lists of bytes without headers, where the compiled encoder runs.
    fresh = INT64_MIN <= timestamp_ms <= INT64_MAX and (
        columnar
        or (
            CODEC is not None
            and headers is None
            and type(values) is list
            and (keys is None or type(keys) is list)
        )
    )
    try:
        if pieces is not None and fresh:
            if batch is not None and not batch.full:
                batch.full = True
                acc.settle(batch)
            added_total, last = _adopt(acc, tp, timestamp_ms, pieces, now, spans)
            last.full = last.reserved >= last.limit
            return stop - start, added_total, True
        while pos < stop:
            if fresh and (batch is None or batch.full):
                fresh_run = _fresh_batches(
                    acc, tp, timestamp_ms, (values, keys, headers), (pos, stop), now, spans
                )
                if fresh_run is not None:
                    count, added, batch = fresh_run
                    if fills and pos == start and batch.limit <= acc.batch_size:
                        # Cut where this batch fills (at batch_size: with compression a
                        # batch may take more): no need to try the next record.
                        batch.full = True
                    pos += count
                    added_total += added
                    wake = True
                    break
                # An item that is not bytes: the loop below appends the records before
                # it and raises its typed error.
                fresh = False
            if batch is None or batch.full:
                batch = acc.new_batch(topic, partition, now)
                if dq is None:
                    dq = acc.batches[tp] = collections.deque()
                dq.append(batch)
                wake = True
                # The header is charged to the batch, outside the records' estimates.
                budget.charge(RECORD_BATCH_OVERHEAD)
                batch.reserved += RECORD_BATCH_OVERHEAD
            builder = batch.builder
            first = builder.record_count
            before = builder.size_in_bytes
            try:
                if columnar:
                    count, added = builder.append_columns(
                        timestamp_ms, keys, values, headers, pos, stop, batch.limit
                    )
                elif fresh:
                    # Lists of bytes where the compiled encoder runs: the open batch is
                    # filled by it too (TypeError: an item that is not bytes, nothing
                    # appended; the record-at-a-time path below then names it).
                    try:
                        count, added = builder.append_lists(
                            timestamp_ms, keys, values, pos, stop, batch.limit
                        )
                    except TypeError:
                        fresh = False
                        count, added = builder.append_many(
                            timestamp_ms, keys, values, headers, pos, stop, batch.limit
                        )
                else:
                    count, added = builder.append_many(
                        timestamp_ms, keys, values, headers, pos, stop, batch.limit
                    )
            except BaseException:
                count = builder.record_count - first
                if not builder.record_count:
                    # A batch opened for the bad record alone must not reach the
                    # sender empty.
                    assert dq is not None
                    dq.pop()
                    if not dq:
                        del acc.batches[tp]
                    del acc.incomplete[batch]
                    budget.release(batch.reserved)
                    batch.reserved = 0
                elif count:
                    # The builder kept the records before the bad one: account for
                    # them exactly as for a normal run.
                    added = builder.size_in_bytes - before
                    batch.reserved += added
                    added_total += added
                    spans.append((batch, first, count))
                pos += count
                raise
            if count:
                batch.reserved += added
                added_total += added
                spans.append((batch, first, count))
                pos += count
            if pos < stop or builder.size_in_bytes >= batch.limit:
                # The next record did not fit (or nothing more can): the batch is done.
                batch.full = True
                acc.settle(batch)
                wake = True
    finally:
        # Give back what the estimates over-reserved, for appended and unappended
        # records alike, so the budget stays exact whichever way this ends.
        budget.release(reserved - added_total)
    return pos - start, added_total, wake


def _fresh_batches(
    acc: Accumulator,
    tp: TopicPartition,
    timestamp_ms: int,
    columns: tuple[Any, Any, Any],
    rows: tuple[int, int],
    now: float,
    spans: list[tuple[ProducerBatch, int, int]],
) -> tuple[int, int, ProducerBatch] | None:
    """:func:`append_run`'s ``columns`` (values, keys, headers: binary columns, or lists
    of bytes without headers), rows ``start:stop`` (``rows``), into new batches of
    ``tp``, all encoded by one call (``encode_batches`` or ``encode_sequence_batches``)
    and then given their batches in a tight loop; returns ``(records, bytes added, the
    last batch)``, or None (nothing done) if a list holds an item that is not bytes.
    Every batch but the last is full; the budget is charged their headers at once."""
    limit = acc.fill_limit(tp[0])
    # Every record of the run has the same timestamp, so in a batch it starts it is
    # the base and each record's delta is 0 (encoded b"\x00").
    values, keys, headers = columns
    start, stop = rows
    if isinstance(values, BinaryColumn):
        pieces = encode_batches(
            values, keys, headers, start, stop, b"\x00", RECORD_BATCH_OVERHEAD, limit
        )
    else:
        # Lists of bytes: append_run took this way only where the compiled encoder runs.
        codec = CODEC
        assert codec is not None
        try:
            pieces = codec.encode_sequence_batches(
                values, keys, start, stop, b"\x00", RECORD_BATCH_OVERHEAD, limit
            )
        except TypeError:
            # Nothing was appended yet: the caller appends record by record instead.
            return None
    added_total, batch = _adopt(
        acc, tp, timestamp_ms, [(count, encoded, None) for count, encoded in pieces], now, spans
    )
    # The last batch takes more records (the next run's) unless it is full.
    batch.full = batch.reserved >= limit
    return stop - start, added_total, batch


def _adopt(
    acc: Accumulator,
    tp: TopicPartition,
    timestamp_ms: int,
    pieces: list[tuple[int, Any, Any]],
    now: float,
    spans: list[tuple[ProducerBatch, int, int]],
) -> tuple[int, ProducerBatch]:
    """New full batches of ``tp`` for encoded ``pieces`` (records, their bytes as a
    ``bytearray``, the bytes compressed with this accumulator's codec or None), in a
    tight loop; returns (bytes added, the last batch). The budget is charged the
    headers at once."""
    topic = tp[0]
    dq = acc.batches.get(tp)
    if dq is None:
        dq = acc.batches[tp] = collections.deque()
    acc.budget.charge(RECORD_BATCH_OVERHEAD * len(pieces))
    added_total = 0
    batch: ProducerBatch | None = None
    for count, encoded, compressed in pieces:
        batch = acc.new_batch(topic, tp[1], now)
        dq.append(batch)
        batch.builder.adopt_encoded(count, encoded, timestamp_ms, compressed)
        added = len(encoded)
        batch.reserved = RECORD_BATCH_OVERHEAD + added
        batch.full = True
        added_total += added
        spans.append((batch, 0, count))
    assert batch is not None
    return added_total, batch
