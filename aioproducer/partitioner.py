"""Choosing a partition: Java-compatible murmur2 for keys, uniform sticky for keyless records."""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 hash of ``data`` as a signed 32-bit int (identical to Java's ``Utils.murmur2``)."""
    data = bytes(data)
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    # Four bytes at a time, little-endian, as the Java implementation reads them.
    for k in struct.unpack_from(f"<{end >> 2}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for ``key`` among ``num_partitions``."""
    # toPositive is a mask, not abs(): it must match Java bit for bit.
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """KIP-794 "strictly uniform sticky" choice for records without a key.

    Each topic sticks to one partition until ``batch_size`` bytes went to it and its open
    batch is full, or unconditionally after ``2 * batch_size`` bytes; then it moves to a
    random partition that has a leader. Switching by bytes produced (not batches created)
    keeps the load uniform even when some partitions drain faster than others.
    """

    __slots__ = ("_batch_size", "_rng", "_state")

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self._batch_size = max(1, batch_size)
        self._rng = rng or random.Random()
        # topic -> [current partition, bytes produced to it]
        self._state: dict[str, list[int]] = {}

    def partition(self, topic: str, available: Sequence[int], num_partitions: int) -> int:
        """The current sticky partition for ``topic``, choosing one if there is none."""
        state = self._state.get(topic)
        if state is None or state[0] >= num_partitions:
            state = [self._choose(available, num_partitions, -1), 0]
            self._state[topic] = state
        return state[0]

    def on_append(
        self,
        topic: str,
        partition: int,
        size: int,
        batch_full: bool,
        available: Sequence[int],
        num_partitions: int,
    ) -> None:
        """Account ``size`` bytes appended to ``partition``; maybe switch to another one."""
        state = self._state.get(topic)
        if state is None or state[0] != partition:
            return
        state[1] += size
        produced = state[1]
        if produced >= 2 * self._batch_size or (produced >= self._batch_size and batch_full):
            state[0] = self._choose(available, num_partitions, partition)
            state[1] = 0

    def _choose(self, available: Sequence[int], num_partitions: int, current: int) -> int:
        candidates = available if available else range(num_partitions)
        if len(candidates) == 1:
            return candidates[0]
        while True:
            choice = candidates[self._rng.randrange(len(candidates))]
            if choice != current:
                return choice
