"""Run by ``test_speedups.py`` in a subprocess, once compiled and once pure Python: puts
the same hypothesis-generated records through the intake into batches, and others straight
into the record encoder (``RecordBatchBuilder.append`` and ``append_many``), and prints a digest of everything
observable (handles, errors, budget, batch bytes) and the example count.

Hypothesis runs derandomized, so both processes see exactly the same examples.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Record timestamps left to the producer come from the wall clock: fix it.
time.time = lambda: 1_700_000_000.123

PARTITIONS = 6
LEADERS = {p: p % 3 + 1 for p in range(PARTITIONS)}

# Mostly valid records, with every kind of bad input now and then.
key_or_value = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.binary(max_size=3),
    st.text(max_size=20),
    st.binary(min_size=200, max_size=2000),
    st.integers(),
)
headers = st.one_of(
    st.none(),
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10), st.text())),
        max_size=3,
    ),
    st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=2),
    st.integers(),
)
record = st.tuples(
    key_or_value,
    key_or_value,
    headers,
    st.one_of(
        st.none(),
        st.none(),
        st.integers(0, PARTITIONS - 1),
        st.integers(-1, PARTITIONS),
        st.just("1"),
    ),
    st.one_of(st.none(), st.none(), st.integers(0, 2**45), st.integers(-5, 5), st.just(1.5)),
)

examples: list[tuple[list[Any], int, bool]] = []

# For the encoder alone: every kind of bytes-like input and the edges of its varint table
# and of int64 timestamps.
blob = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.binary(min_size=16380, max_size=16400),
    st.builds(bytearray, st.binary(max_size=20)),
    st.builds(memoryview, st.binary(max_size=20)),
    st.just(memoryview(b"abcdefgh").cast("B", (2, 4))),
    st.integers(),
    st.text(max_size=3),
)
timestamp = st.one_of(
    st.integers(0, 2**45),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**62 - 1, 2**62, -(2**62), 2**63 - 1, -(2**63), 2**63, -(2**63) - 1]),
    st.just(1.0),
)
encoder_headers = st.one_of(
    st.just(()),
    st.lists(
        st.tuples(
            st.one_of(st.text(max_size=5), st.just("\udc80"), st.just(b"k")),
            st.one_of(st.none(), st.binary(max_size=10), st.builds(bytearray, st.binary())),
        ),
        max_size=3,
    ),
    st.lists(st.tuples(st.text(max_size=2)), max_size=1),
)
encoder_examples: list[list[Any]] = []


# Examples are drawn before aioproducer is imported: Hypothesis biases its choices with
# constants it reads from the sources of loaded local modules, and compiled modules have
# none, so drawing them later would give the two runs different examples.
@settings(
    derandomize=True,
    database=None,
    max_examples=300,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    records=st.lists(record, max_size=80),
    batch_size=st.sampled_from([0, 200, 1000, 16384]),
    ignore_keys=st.booleans(),
)
def collect(records: list[Any], batch_size: int, ignore_keys: bool) -> None:
    examples.append((records, batch_size, ignore_keys))


@settings(
    derandomize=True,
    database=None,
    max_examples=300,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(st.tuples(timestamp, blob, blob, encoder_headers), max_size=20))
def collect_encoder(records: list[Any]) -> None:
    encoder_examples.append(records)


def replay_encoder() -> list[str]:
    """The encoder's bytes (and errors) for every example, a line each."""
    from aioproducer.protocol.records import RecordBatchBuilder

    observed: list[str] = []
    for records in encoder_examples:
        builder = RecordBatchBuilder()
        for ts, key, value, hdrs in records:
            try:
                observed.append(repr(builder.append(ts, key, value, hdrs)))
            except Exception as exc:
                observed.append(repr((type(exc).__name__, str(exc))))
        observed.append(repr(builder.build() if builder.record_count else builder.size_in_bytes))
        # The same records as one run (append_many), stamped alike, cut at 2000 bytes.
        builder = RecordBatchBuilder()
        stamp = records[0][0] if records and type(records[0][0]) is int else 0
        columns = [list(column) for column in zip(*records, strict=True)] or [[], [], [], []]
        try:
            outcome: object = builder.append_many(
                stamp, columns[1], columns[2], columns[3], 0, len(records), 2000
            )
        except Exception as exc:
            outcome = (type(exc).__name__, str(exc), builder.record_count)
        observed.append(repr(outcome))
        observed.append(repr(builder.build() if builder.record_count else builder.size_in_bytes))
    return observed


def replay() -> list[str]:
    """Everything observable of every example, a line each."""
    from aioproducer.accumulator import Accumulator
    from aioproducer.adaptive import PartitionLoad
    from aioproducer.budget import MemoryBudget
    from aioproducer.cluster import Cluster, TopicInfo
    from aioproducer.config import ProducerConfig
    from aioproducer.errors import KafkaError
    from aioproducer.intake import Intake
    from aioproducer.partitioner import StickyPartitioner

    info = TopicInfo(
        "t", tuple(range(PARTITIONS)), LEADERS, dict.fromkeys(LEADERS, 0), (0, 2, 3, 5)
    )
    observed: list[str] = []
    observe = observed.append
    for records, batch_size, ignore_keys in examples:
        config = ProducerConfig(
            batch_size=batch_size, partitioner_ignore_keys=ignore_keys, buffer_memory=1 << 20
        )
        budget = MemoryBudget(config.buffer_memory)
        acc = Accumulator(
            batch_size=config.batch_size,
            linger=0.005,
            delivery_timeout=120.0,
            codec=config.codec,
            compression_level=None,
            budget=budget,
        )
        intake = Intake(config, budget, acc, Cluster(config), lambda: None)
        intake.accepting = True
        # The same choices in both runs: a seeded sticky partitioner, weighing the queues.
        load = PartitionLoad(acc.batches, lambda topic: LEADERS)
        intake._sticky = StickyPartitioner(config.batch_size, random.Random(7), load)
        for key, value, hdrs, partition, timestamp in records:
            try:
                prepared = intake.record("t", key, value, hdrs, partition, timestamp)
                if partition is not None:
                    intake.check_partition("t", partition, info)
                if not budget.try_reserve(prepared.size):
                    observe("full")
                    continue
                handle, wake = intake.append(prepared, info)
            except KafkaError as exc:
                observe(repr((type(exc).__name__, str(exc))))
                continue
            item = (handle.partition, handle.timestamp_ms, handle.key_size, handle.value_size, wake)
            observe(repr(item))
        observe(repr(budget.used))
        for tp, queue in sorted(acc.batches.items()):
            for batch in queue:
                built = batch.builder.build(1000, 0, 0)
                observe(repr((tp, batch.record_count, batch.full, built)))
    return observed


if __name__ == "__main__":
    collect()
    collect_encoder()
    lines = replay() + replay_encoder()
    if len(sys.argv) > 1:  # for looking into a difference: everything observed, a line each
        with open(sys.argv[1], "w") as out:
            out.write("\n".join(lines))
    from aioproducer import speedups

    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    print(speedups.ACTIVE, len(examples), len(lines), digest)
