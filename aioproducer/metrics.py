"""Plain counters a producer keeps about itself; :meth:`Metrics.snapshot` is what users see.

The sender reports each batch's outcome and each request's latency here, once per batch
or request, never per record. A :class:`Metrics` may carry a ``listener`` (the
OpenTelemetry instrumentation in ``otel.py`` installs one) that hears the same events.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .accumulator import ProducerBatch

__all__ = ["LatencyHistogram", "Metrics"]

# Log-scale buckets for request latency: four per doubling from 1 microsecond, so a
# percentile read from them is within about 19% of the true value; the last bucket
# (about 2^24 microseconds, 17 s) takes everything slower.
_BUCKETS_PER_DOUBLING = 4
_BUCKETS = 24 * _BUCKETS_PER_DOUBLING + 1


class LatencyHistogram:
    """Counts of latencies in fixed log-scale buckets: constant memory and a few
    arithmetic operations per sample, from which percentiles are read."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0

    def add(self, seconds: float) -> None:
        """Count one latency."""
        micros = seconds * 1e6
        index = (
            min(_BUCKETS - 1, int(math.log2(micros) * _BUCKETS_PER_DOUBLING)) if micros > 1 else 0
        )
        self.counts[index] += 1
        self.total += 1

    def percentile(self, fraction: float) -> float:
        """The latency (seconds) below which ``fraction`` of the samples fall, as its
        bucket's upper bound; 0.0 without samples."""
        if not self.total:
            return 0.0
        rank = max(1, math.ceil(fraction * self.total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return float(2 ** ((index + 1) / _BUCKETS_PER_DOUBLING)) / 1e6
        return float(2 ** (_BUCKETS / _BUCKETS_PER_DOUBLING)) / 1e6  # pragma: no cover


class Metrics:
    """Counters updated by the producer's loop; cheap to keep, read with :meth:`snapshot`."""

    __slots__ = (
        "batches_compressed_off_loop",
        "batches_sent",
        "batches_split",
        "bytes_sent",
        "latency",
        "latency_count",
        "latency_max",
        "latency_sum",
        "listener",
        "producer_epoch_bumps",
        "producer_id_resets",
        "records_failed",
        "records_retried",
        "records_sent",
        "requests_sent",
        "throttle_time_ms",
    )

    def __init__(self) -> None:
        self.records_sent = 0
        self.records_failed = 0
        self.records_retried = 0
        self.batches_sent = 0
        self.batches_split = 0
        self.batches_compressed_off_loop = 0
        self.bytes_sent = 0
        self.requests_sent = 0
        self.throttle_time_ms = 0
        self.latency_sum = 0.0
        self.latency_max = 0.0
        self.latency_count = 0
        self.latency = LatencyHistogram()
        # Idempotence recoveries: renumbering under a bumped epoch, or under a fresh id.
        self.producer_epoch_bumps = 0
        self.producer_id_resets = 0
        #: Hears every event below as well (``batch_sent(batch, nbytes)``,
        #: ``batch_failed(batch, exc)``, ``batch_retried(batch)``, ``request(seconds, node_id)``),
        #: or None.
        self.listener: Any = None

    def observe_latency(self, seconds: float, node_id: int = -1) -> None:
        """Record the time from writing a produce request to its response."""
        self.latency_sum += seconds
        self.latency_count += 1
        if seconds > self.latency_max:
            self.latency_max = seconds
        self.latency.add(seconds)
        if self.listener is not None:
            self.listener.request(seconds, node_id)

    def batch_sent(self, batch: ProducerBatch) -> None:
        """Count an acknowledged batch (before it completes: its bytes are still there)."""
        nbytes = len(batch.built) if batch.built is not None else 0
        self.records_sent += batch.record_count
        self.batches_sent += 1
        self.bytes_sent += nbytes
        if self.listener is not None:
            self.listener.batch_sent(batch, nbytes)

    def batch_failed(self, batch: ProducerBatch, exc: BaseException) -> None:
        """Count a batch whose records fail with ``exc`` (before it completes)."""
        self.records_failed += batch.record_count
        if self.listener is not None:
            self.listener.batch_failed(batch, exc)

    def batch_retried(self, batch: ProducerBatch) -> None:
        """Count a batch going back to its queue for another attempt."""
        self.records_retried += batch.record_count
        if self.listener is not None:
            self.listener.batch_retried(batch)

    def snapshot(
        self,
        *,
        buffer_bytes: int,
        buffer_limit: int,
        requests_in_flight: int,
        topics_tracked: int = 0,
        partitions_tracked: int = 0,
    ) -> dict[str, float]:
        """The counters as a plain dict, with derived means and latency percentiles."""
        batches = self.batches_sent
        count = self.latency_count
        return {
            "records_sent": self.records_sent,
            "records_failed": self.records_failed,
            "records_retried": self.records_retried,
            "batches_sent": batches,
            "batches_split": self.batches_split,
            "batches_compressed_off_loop": self.batches_compressed_off_loop,
            "bytes_sent": self.bytes_sent,
            "records_per_batch_mean": self.records_sent / batches if batches else 0.0,
            "bytes_per_batch_mean": self.bytes_sent / batches if batches else 0.0,
            "requests_sent": self.requests_sent,
            "requests_in_flight": requests_in_flight,
            "request_latency_ms_mean": 1000 * self.latency_sum / count if count else 0.0,
            "request_latency_ms_max": 1000 * self.latency_max,
            # Bucket bounds, so never above the largest latency seen.
            "request_latency_ms_p50": 1000 * min(self.latency.percentile(0.5), self.latency_max),
            "request_latency_ms_p99": 1000 * min(self.latency.percentile(0.99), self.latency_max),
            "buffer_bytes_in_use": buffer_bytes,
            "buffer_bytes_limit": buffer_limit,
            "throttle_time_ms": self.throttle_time_ms,
            "producer_epoch_bumps": self.producer_epoch_bumps,
            "producer_id_resets": self.producer_id_resets,
            "topics_tracked": topics_tracked,
            "partitions_tracked": partitions_tracked,
        }
