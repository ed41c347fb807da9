"""Bookkeeping for fault tests: every record carries its partition and a per-partition
sequence number, so reading a topic back proves loss, duplication and order exactly.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import time
from array import array
from collections.abc import Iterable, Sequence

from aioproducer.results import DeliveryHandle
from aioproducer.testing.verify import ConsumedRecord

__all__ = ["Ledger", "Outcome"]


@dataclasses.dataclass
class Outcome:
    """What the producer reported and what an independent consumer read back."""

    sent: int = 0
    acked: int = 0
    failed: int = 0
    read_back: int = 0
    lost: int = 0  # acknowledged but not in the topic
    duplicated: int = 0  # read back more than once
    out_of_order: int = 0  # partitions whose sequence numbers are not increasing
    wrong_offset: int = 0  # read back at another offset than the handle reported
    failed_but_written: int = 0  # "not confirmed" is not "not written"
    gaps: int = 0  # partitions with a hole although nothing failed
    failures: dict[str, int] = dataclasses.field(default_factory=dict)

    def line(self, name: str, recovery: Sequence[float] = ()) -> str:
        text = (
            f"[{name}] sent={self.sent} acked={self.acked} failed={self.failed} "
            f"read_back={self.read_back} lost={self.lost} duplicated={self.duplicated} "
            f"out_of_order={self.out_of_order} failed_but_written={self.failed_but_written}"
        )
        if recovery:
            text += " recovery_s=[" + ", ".join(f"{r:.2f}" for r in recovery) + "]"
        if self.failures:
            text += f" failures={self.failures}"
        return text

    def assert_exact(self) -> None:
        """Nothing acknowledged is missing, nothing is there twice, order is send order."""
        assert self.lost == 0, f"{self.lost} acknowledged records are missing"
        assert self.duplicated == 0, f"{self.duplicated} records were written twice"
        assert self.out_of_order == 0, f"{self.out_of_order} partitions are out of order"
        assert self.wrong_offset == 0, f"{self.wrong_offset} records not at their offset"
        assert self.gaps == 0, f"{self.gaps} partitions have holes"


class Ledger:
    """Values ``b"<partition>:<seq>:"`` plus padding, and when each was sent and settled."""

    def __init__(self, partitions: int, pad: int = 24) -> None:
        self.partitions = partitions
        self._pad = b"x" * pad
        self.handles: list[list[DeliveryHandle]] = [[] for _ in range(partitions)]
        self.sent_at: list[array[float]] = [array("d") for _ in range(partitions)]
        self.done_at: list[array[float]] = [array("d") for _ in range(partitions)]

    @property
    def sent(self) -> int:
        return sum(len(h) for h in self.handles)

    def value(self, partition: int) -> bytes:
        """The value of the next record for ``partition``."""
        return b"%d:%d:" % (partition, len(self.handles[partition])) + self._pad

    def track(self, partition: int, handle: DeliveryHandle) -> None:
        """Remember ``handle`` (the record just sent to ``partition``) and time its outcome."""
        index = len(self.handles[partition])
        self.handles[partition].append(handle)
        self.sent_at[partition].append(time.monotonic())
        done = self.done_at[partition]
        done.append(-1.0)

        def settled(_handle: DeliveryHandle) -> None:
            done[index] = time.monotonic()

        handle.add_done_callback(settled)

    def pending(self) -> int:
        return sum(1 for hs in self.handles for h in hs if not h.done())

    def recovery(self, since: float, partitions: Iterable[int]) -> float:
        """Seconds from ``since`` until the first record sent after it to each of
        ``partitions`` was settled (the slowest partition counts); inf if none was."""
        worst = 0.0
        for p in partitions:
            i = bisect.bisect_left(self.sent_at[p], since)
            done = self.done_at[p]
            if i >= len(done) or done[i] < 0:
                return float("inf")
            worst = max(worst, done[i] - since)
        return worst

    def check(self, records: Iterable[ConsumedRecord]) -> Outcome:
        """Compare the settled handles with what was read back (call after every handle is
        done)."""
        out = Outcome()
        seen: list[list[tuple[int, int]]] = [[] for _ in range(self.partitions)]
        for rec in records:
            assert rec.value is not None
            p_text, seq_text, _rest = rec.value.split(b":", 2)
            p = int(p_text)
            assert p == rec.partition, f"record of partition {p} found in {rec.partition}"
            seen[p].append((int(seq_text), rec.offset))
            out.read_back += 1
        for p in range(self.partitions):
            handles = self.handles[p]
            out.sent += len(handles)
            seqs = [s for s, _ in seen[p]]
            offsets: dict[int, int] = {}
            for s, offset in seen[p]:
                if s in offsets:
                    out.duplicated += 1
                else:
                    offsets[s] = offset
            if any(a >= b for a, b in itertools.pairwise(seqs)):
                out.out_of_order += 1
            failed_here = 0
            for seq, handle in enumerate(handles):
                assert handle.done(), "check() called with records still pending"
                exc = handle.exception()
                if exc is None:
                    out.acked += 1
                    if seq not in offsets:
                        out.lost += 1
                    elif offsets[seq] != handle.result().offset:
                        out.wrong_offset += 1
                else:
                    out.failed += 1
                    failed_here += 1
                    name = type(exc).__name__
                    out.failures[name] = out.failures.get(name, 0) + 1
                    if seq in offsets:
                        out.failed_but_written += 1
            if not failed_here and sorted(offsets) != list(range(len(handles))):
                out.gaps += 1
        return out
