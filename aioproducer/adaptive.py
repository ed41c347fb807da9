"""Adaptive partitioning for keyless records (KIP-794): lean away from deep queues.

When the sticky partitioner (``partitioner.py``) moves on to a new partition, it asks
:class:`PartitionLoad` for weights instead of choosing uniformly. A partition's weight is
``deepest + 1 - depth``, where ``depth`` is the number of its batches waiting to be sent
(in flight ones are not counted): a broker that drains slowly accumulates batches for its
partitions and so receives fewer new ones, while equal queues give the uniform choice.

With ``partitioner_availability_timeout_ms``, a broker that had batches waiting but took
no request for longer than that is left out altogether until it drains again; the
sender, which sees both events, keeps that time in a :class:`DrainClock`.

Everything here runs on the producer's loop; the weights are computed once per switch of
partition (once per batch of a topic), never per record.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DrainClock", "PartitionLoad", "cumulative_weights", "weighted_choice"]


def cumulative_weights(depths: Sequence[int], excluded: bool = False) -> list[int] | None:
    """Running sums of the weights ``max(depths) + 1 - depth``, or None when a uniform
    choice is the same thing: no partition, or every depth equal and none ``excluded``
    (left out of ``depths`` because its broker stalled).

    A uniform random ``r`` in ``[0, table[-1])`` then picks index ``i``, the first whose
    sum is greater than ``r`` (see :func:`weighted_choice`).
    """
    if not depths:
        return None
    deepest = max(depths)
    if not excluded and deepest == min(depths):
        return None
    top = deepest + 1
    table: list[int] = []
    total = 0
    for depth in depths:
        total += top - depth
        table.append(total)
    return table


def weighted_choice(table: Sequence[int], ids: Sequence[int], rng: random.Random) -> int:
    """The id of ``ids`` whose share of ``table`` (from :func:`cumulative_weights`) a
    uniform random draw falls in."""
    return ids[bisect.bisect_right(table, rng.randrange(table[-1]))]


class DrainClock:
    """When each broker last had batches waiting and last took a request from us.

    Written by the sender on each pass over the ready batches, read by
    :class:`PartitionLoad`: a broker is *stalled* when the two are more than ``timeout``
    seconds apart, i.e. it has had work for that long and taken none of it.
    """

    __slots__ = ("_drained", "_timeout", "_waiting")

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        # node id -> monotonic time of the latest pass it had batches ready for it.
        self._waiting: dict[int, float] = {}
        # node id -> monotonic time it was last sent a request (or first seen waiting).
        self._drained: dict[int, float] = {}

    def waiting(self, node: int, now: float) -> None:
        """``node`` has batches ready that it could not be sent now."""
        self._waiting[node] = now
        self._drained.setdefault(node, now)

    def drained(self, node: int, now: float) -> None:
        """A request was just sent to ``node``."""
        self._waiting[node] = now
        self._drained[node] = now

    def stalled(self, node: int) -> bool:
        """Whether ``node`` has had batches waiting for longer than the timeout."""
        waiting = self._waiting.get(node)
        return waiting is not None and waiting - self._drained[node] > self._timeout


class PartitionLoad:
    """The weighted choice among a topic's partitions, from the accumulator's queues.

    ``queues`` maps ``(topic, partition)`` to its queued batches (the accumulator's
    ``batches``, where only non-empty queues are kept); ``leaders`` gives a topic's
    partition leaders (None while its metadata is unknown); ``clock``, when the
    availability timeout is on, says which brokers stalled.
    """

    __slots__ = ("_clock", "_leaders", "_queues")

    def __init__(
        self,
        queues: Mapping[tuple[str, int], Sequence[Any]],
        leaders: Callable[[str], Mapping[int, int] | None],
        clock: DrainClock | None = None,
    ) -> None:
        self._queues = queues
        self._leaders = leaders
        self._clock = clock

    def choose(self, topic: str, available: Sequence[int], rng: random.Random) -> int | None:
        """The next sticky partition of ``topic`` among ``available``, or None to choose
        uniformly (queues all equally deep, or no partition left)."""
        get = self._queues.get
        clock = self._clock
        if clock is None:
            ids: Sequence[int] = available
            excluded = False
        else:
            leaders = self._leaders(topic) or {}
            stalled = clock.stalled
            ids = [p for p in available if not stalled(leaders.get(p, -1))]
            excluded = len(ids) < len(available)
        table = cumulative_weights([len(get((topic, p), ())) for p in ids], excluded)
        if table is None:
            return None
        return weighted_choice(table, ids, rng)
