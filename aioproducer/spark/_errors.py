"""Package-internal: what a Spark write hands back, and its error (the bottom of
:mod:`aioproducer.spark`: it imports nothing else of it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import KafkaError


@dataclasses.dataclass(frozen=True)
class PartitionReport:
    """What one Spark task wrote: its partition, its counts and the producer it used.

    ``producer`` names the producer (``"<pid>-<n>"``) and ``producer_tasks`` counts the
    tasks it has served so far, this one included: above 1 means the worker reused it.
    """

    partition: int
    attempt: int
    pid: int
    records: int
    bytes: int
    delivered: int
    failed: int
    first_error: str | None
    producer: str
    producer_tasks: int
    elapsed_s: float


@dataclasses.dataclass(frozen=True)
class WriteReport:
    """The outcome of :func:`write`: totals, the first error and one entry per partition.

    ``bytes`` counts keys and values as sent (before compression and framing).
    """

    topic: str | None
    records: int
    bytes: int
    delivered: int
    failed: int
    first_error: str | None
    elapsed_s: float
    partitions: list[PartitionReport]

    @property
    def rows_per_second(self) -> float:
        """Records written per second of the whole write (driver wall time)."""
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def producers(self) -> int:
        """How many distinct producers the tasks used."""
        return len({p.producer for p in self.partitions})

    @property
    def reused_producer_tasks(self) -> int:
        """Tasks that ran on a producer an earlier task of the same worker had created."""
        return sum(1 for p in self.partitions if p.producer_tasks > 1)


class SparkWriteError(KafkaError):
    """Some records of a Spark write were not delivered.

    ``report`` is the full :class:`WriteReport`, or ``None`` when a task raised it (from
    :func:`partition_writer`, or a transactional task whose transaction was aborted: then
    :func:`write` raises it with the last failed attempt's message and ``first_error``);
    ``first_error``, ``failed`` and ``records`` summarise it.
    """

    def __init__(
        self,
        message: str,
        *,
        report: WriteReport | None = None,
        first_error: str | None = None,
        failed: int = 0,
        records: int = 0,
    ) -> None:
        super().__init__(message)
        self.report = report
        self.first_error = first_error
        self.failed = failed
        self.records = records

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised inside executors too: it must survive pickling with its figures.
        return (
            _rebuild_error,
            (str(self), self.report, self.first_error, self.failed, self.records),
        )


def _rebuild_error(
    message: str, report: WriteReport | None, first: str | None, failed: int, records: int
) -> SparkWriteError:
    return SparkWriteError(
        message, report=report, first_error=first, failed=failed, records=records
    )
