"""Keyed records land where Java's default partitioner puts them; keyless ones stick evenly."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioproducer import Producer, partitioner
from aioproducer.adaptive import DrainClock, PartitionLoad, cumulative_weights, weighted_choice
from aioproducer.partitioner import (
    StickyPartitioner,
    murmur2,
    partition_for_key,
    partitions_for_keys,
)
from aioproducer.testing import KafkaCluster

# From the Java client's UtilsTest.testMurmur2.
UPSTREAM_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), UPSTREAM_VECTORS)
def test_murmur2_matches_the_java_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@settings(deadline=None)  # the first example pays for importing kafka-python
@given(st.binary(max_size=300))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    from kafka.partitioner.default import murmur2 as oracle

    # kafka-python returns the unsigned-masked value; compare as 32-bit patterns.
    assert murmur2(data) & 0xFFFFFFFF == oracle(data) & 0xFFFFFFFF


@given(st.lists(st.binary(max_size=40), max_size=20), st.binary(max_size=8))
def test_every_murmur2_loop_agrees_whichever_runs_here(keys: list[bytes], pad: bytes) -> None:
    # Compiled, murmur2 runs the byte loop; interpreted, the struct one: both are checked
    # against each other here in either build, and the column loop against them.
    raw = pad + b"".join(keys)
    starts = [len(pad)]
    for key in keys:
        starts.append(starts[-1] + len(key))
    for key, a, b in zip(keys, starts, starts[1:], strict=False):
        assert partitioner._murmur2(raw, a, b) == partitioner._murmur2_words(key)
        assert partitioner._murmur2_words(key) == murmur2(key) & 0xFFFFFFFF
    offsets = b"".join(start.to_bytes(8, "little") for start in starts)
    assert partitioner._column_partitions(raw, offsets, len(keys), 7) == bytes(
        partition_for_key(key, 7) for key in keys
    )
    # Over 256 partitions, two bytes per key (little-endian).
    wide = partitioner._column_partitions(raw, offsets, len(keys), 1000)
    assert [int.from_bytes(wide[2 * i : 2 * i + 2], "little") for i in range(len(keys))] == [
        partition_for_key(key, 1000) for key in keys
    ]


def test_partition_uses_to_positive_not_abs() -> None:
    # murmur2 is negative here: Java masks the sign bit (abs() would give another partition).
    assert murmur2(b"21") < 0
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


# Short keys go through the numpy matrix, keys over 256 bytes through the per-key fallback.
_KEYS = st.lists(
    st.one_of(st.none(), st.binary(max_size=12), st.binary(min_size=250, max_size=300)),
    max_size=40,
)


def _expected(keys: list[bytes | None], num_partitions: int) -> list[int | None]:
    return [None if k is None else partition_for_key(k, num_partitions) for k in keys]


# No deadline: the first example pays for importing numpy and pyarrow.
@settings(deadline=None)
@given(
    _KEYS,
    st.one_of(st.integers(1, 5000), st.integers(65530, 70000)),
    st.sampled_from(["binary", "large_binary"]),
    st.data(),
)
def test_partitions_for_keys_equals_partition_for_key(
    keys: list[bytes | None], num_partitions: int, kind: str, data: st.DataObject
) -> None:
    pa = pytest.importorskip("pyarrow")
    column = pa.array(keys, type=getattr(pa, kind)())
    assert partitions_for_keys(column, num_partitions) == _expected(keys, num_partitions)
    # A slice starts inside the buffers (a non-zero Arrow offset).
    start = data.draw(st.integers(0, len(keys)))
    stop = data.draw(st.integers(start, len(keys)))
    sliced = column.slice(start, stop - start)
    assert partitions_for_keys(sliced, num_partitions) == _expected(
        keys[start:stop], num_partitions
    )


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=80)), max_size=30), st.integers(1, 64))
def test_partitions_for_keys_reads_string_columns_as_utf8(
    keys: list[str | None], num_partitions: int
) -> None:
    pa = pytest.importorskip("pyarrow")
    encoded = [None if k is None else k.encode() for k in keys]
    expected = _expected(encoded, num_partitions)
    for kind in (pa.string(), pa.large_string()):
        assert partitions_for_keys(pa.array(keys, type=kind), num_partitions) == expected


def test_partitions_for_keys_takes_chunked_arrays_and_sequences() -> None:
    pa = pytest.importorskip("pyarrow")
    keys = [b"", None, b"21", b"foobar", b"x" * 1000, b"abc"]
    expected = _expected(keys, 7)
    assert partitions_for_keys(keys, 7) == expected
    assert partitions_for_keys(pa.chunked_array([keys[:2], keys[2:]], pa.binary()), 7) == expected
    assert partitions_for_keys(pa.array([], pa.binary()), 7) == []
    assert partitions_for_keys([None, None], 3) == [None, None]
    assert partitions_for_keys([b""] * 3, 1) == [0, 0, 0]


def test_partitions_for_keys_ignores_the_bytes_under_a_null() -> None:
    pa = pytest.importorskip("pyarrow")
    full = pa.array([b"x" * 300, b"abcde", b"k" * 7], pa.binary())
    _validity, offsets, data = full.buffers()
    # Arrow lets a null slot span bytes; mark the long key and the short one null.
    validity = pa.py_buffer(bytes([0b100]))
    column = pa.Array.from_buffers(pa.binary(), 3, [validity, offsets, data], null_count=2)
    assert column.to_pylist() == [None, None, b"k" * 7]
    assert partitions_for_keys(column, 5) == [None, None, partition_for_key(b"k" * 7, 5)]


def test_partitions_for_keys_rejects_bad_input() -> None:
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(TypeError, match="binary or string"):
        partitions_for_keys(pa.array([1, 2]), 3)
    with pytest.raises(ValueError, match="at least 1"):
        partitions_for_keys([b"k"], 0)


def test_partitions_for_keys_names_what_is_missing() -> None:
    # In a fresh interpreter where numpy cannot be imported: a module once imported stays
    # cached in compiled code, so removing it from sys.modules here would prove nothing.
    code = textwrap.dedent(
        """
        import importlib.abc, sys

        class NoNumpy(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "numpy":
                    raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

        sys.meta_path.insert(0, NoNumpy())
        from aioproducer.partitioner import partitions_for_keys

        try:
            partitions_for_keys([b"k"], 3)
        except ImportError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert re.search(r"numpy and pyarrow.*'spark' extra", result.stdout), result


def test_sticky_partitioner_switches_after_batch_size_bytes() -> None:
    sticky = StickyPartitioner(batch_size=1000, rng=random.Random(1))
    available = list(range(6))
    first = sticky.partition("t", available, 6)
    for _ in range(9):  # 900 bytes: stays
        sticky.on_append("t", first, 100, batch_full=False, available=available, num_partitions=6)
    assert sticky.partition("t", available, 6) == first
    # batch_size reached but the batch is not full yet: stays until 2 * batch_size.
    sticky.on_append("t", first, 100, batch_full=False, available=available, num_partitions=6)
    assert sticky.partition("t", available, 6) == first
    sticky.on_append("t", first, 100, batch_full=True, available=available, num_partitions=6)
    second = sticky.partition("t", available, 6)
    assert second != first


def test_sticky_partitioner_spreads_load_uniformly() -> None:
    sticky = StickyPartitioner(batch_size=100, rng=random.Random(7))
    available = list(range(4))
    counts: Counter[int] = Counter()
    for _ in range(40_000):
        p = sticky.partition("t", available, 4)
        counts[p] += 10
        sticky.on_append("t", p, 10, batch_full=False, available=available, num_partitions=4)
    assert set(counts) == set(available)
    assert max(counts.values()) / min(counts.values()) < 1.2


def test_sticky_partitioner_only_picks_partitions_with_a_leader() -> None:
    sticky = StickyPartitioner(batch_size=10, rng=random.Random(3))
    seen = set()
    for _ in range(500):
        p = sticky.partition("t", [1, 3], 5)
        seen.add(p)
        sticky.on_append("t", p, 25, batch_full=True, available=[1, 3], num_partitions=5)
    assert seen == {1, 3}


@pytest.mark.anyio
async def test_keyed_records_land_where_librdkafka_murmur2_puts_them(
    kafka: KafkaCluster,
) -> None:
    """Cross-check on a real topic against librdkafka's Java-compatible partitioner."""
    import confluent_kafka

    topic = f"p-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions=7)
    keys = [f"user-{i}".encode() for i in range(300)] + [b"", b"\x00\xff" * 9]
    ours: dict[bytes, int] = {}
    async with Producer(kafka.bootstrap_servers) as producer:
        for key in keys:
            meta = await producer.send_and_wait(topic, b"v", key=key)
            ours[key] = meta.partition

    theirs: dict[bytes, int] = {}

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        assert err is None
        theirs[msg.key()] = msg.partition()

    rdk = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    for key in keys:
        rdk.produce(topic, b"v", key=key, on_delivery=on_delivery)
    assert rdk.flush(30) == 0
    assert ours == theirs
    assert ours == {k: partition_for_key(k, 7) for k in keys}
    assert len(set(ours.values())) == 7


# -- adaptive partitioning (KIP-794) ----------------------------------------------------------


def test_weights_are_the_inverted_queue_depths_as_running_sums() -> None:
    # Depths 0, 3, 1 -> weights 4, 1, 3 (deepest + 1 - depth).
    assert cumulative_weights([0, 3, 1]) == [4, 5, 8]
    assert cumulative_weights([2, 0]) == [1, 4]


def test_equal_queues_leave_the_choice_uniform() -> None:
    assert cumulative_weights([]) is None
    assert cumulative_weights([3, 3, 3]) is None
    # ... unless partitions were left out: the rest must then be weighted explicitly.
    assert cumulative_weights([3, 3], excluded=True) == [1, 2]
    assert cumulative_weights([], excluded=True) is None


def test_weighted_choice_follows_the_weights() -> None:
    rng = random.Random(11)
    ids = [10, 20, 30]
    table = cumulative_weights([0, 3, 1])  # weights 4 : 1 : 3
    assert table is not None
    counts = Counter(weighted_choice(table, ids, rng) for _ in range(80_000))
    assert counts[10] / 80_000 == pytest.approx(4 / 8, abs=0.01)
    assert counts[20] / 80_000 == pytest.approx(1 / 8, abs=0.01)
    assert counts[30] / 80_000 == pytest.approx(3 / 8, abs=0.01)


def _switches(sticky: StickyPartitioner, available: list[int], rounds: int) -> Counter[int]:
    """Where the sticky partition goes over ``rounds`` full batches of 100 bytes."""
    counts: Counter[int] = Counter()
    for _ in range(rounds):
        p = sticky.partition("t", available, len(available))
        counts[p] += 1
        sticky.on_append("t", p, 100, True, available, len(available))
    return counts


def test_sticky_partitioner_avoids_deep_queues() -> None:
    # Partition 1 has 9 batches waiting (its broker is slow), the others none.
    queues: dict[tuple[str, int], list[object]] = {("t", 1): [object()] * 9}
    load = PartitionLoad(queues, lambda topic: {0: 1, 1: 2, 2: 3, 3: 1})
    sticky = StickyPartitioner(batch_size=100, rng=random.Random(5), load=load)
    counts = _switches(sticky, [0, 1, 2, 3], 20_000)
    # Weights 10 : 1 : 10 : 10.
    assert counts[1] / 20_000 == pytest.approx(1 / 31, abs=0.01)
    for p in (0, 2, 3):
        assert counts[p] / 20_000 == pytest.approx(10 / 31, abs=0.02)


def test_drain_clock_marks_a_broker_stalled_after_the_timeout() -> None:
    clock = DrainClock(timeout=0.5)
    assert not clock.stalled(1)  # never seen
    clock.waiting(1, 10.0)
    clock.waiting(1, 10.5)
    assert not clock.stalled(1)  # waited exactly the timeout
    clock.waiting(1, 10.6)
    assert clock.stalled(1)
    clock.drained(1, 10.7)
    assert not clock.stalled(1)
    clock.waiting(2, 11.0)  # another broker starts its own count
    assert not clock.stalled(2)


def test_partitions_of_a_stalled_broker_are_left_out() -> None:
    clock = DrainClock(timeout=0.1)
    clock.waiting(2, 0.0)
    clock.waiting(2, 1.0)
    leaders = {0: 1, 1: 2, 2: 1, 3: 2}
    load = PartitionLoad({}, lambda topic: leaders, clock)
    sticky = StickyPartitioner(batch_size=100, rng=random.Random(9), load=load)
    counts = _switches(sticky, [0, 1, 2, 3], 2_000)
    assert set(counts) == {0, 2}
    assert counts[0] / 2_000 == pytest.approx(0.5, abs=0.05)
    # When every broker stalled there is nothing better to do than the uniform choice.
    clock.waiting(1, 0.0)
    clock.waiting(1, 1.0)
    assert load.choose("t", [0, 1, 2, 3], random.Random(1)) is None
    # Once broker 2 drains again, its partitions come back.
    clock.drained(2, 1.1)
    assert load.choose("t", [0, 1, 2, 3], random.Random(1)) in (1, 3)
