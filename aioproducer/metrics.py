"""Plain counters a producer keeps about itself; :meth:`Metrics.snapshot` is what users see."""

from __future__ import annotations

__all__ = ["Metrics"]


class Metrics:
    """Counters updated by the producer's loop; cheap to keep, read with :meth:`snapshot`."""

    __slots__ = (
        "batches_compressed_off_loop",
        "batches_sent",
        "batches_split",
        "bytes_sent",
        "latency_count",
        "latency_max",
        "latency_sum",
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
        # Idempotence recoveries: renumbering under a bumped epoch, or under a fresh id.
        self.producer_epoch_bumps = 0
        self.producer_id_resets = 0

    def observe_latency(self, seconds: float) -> None:
        """Record the time from writing a produce request to its response."""
        self.latency_sum += seconds
        self.latency_count += 1
        if seconds > self.latency_max:
            self.latency_max = seconds

    def snapshot(
        self, *, buffer_bytes: int, buffer_limit: int, requests_in_flight: int
    ) -> dict[str, float]:
        """The counters as a plain dict, with derived means."""
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
            "buffer_bytes_in_use": buffer_bytes,
            "buffer_bytes_limit": buffer_limit,
            "throttle_time_ms": self.throttle_time_ms,
            "producer_epoch_bumps": self.producer_epoch_bumps,
            "producer_id_resets": self.producer_id_resets,
        }
