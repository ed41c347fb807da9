"""One produce request to one broker, its batches built just before it is written.

The sender (``sender.py``) decides which batches go together; a :class:`ProduceCall`
builds (and, when large, compresses on a worker thread) their record batches when the
connection is about to write the request, so records appended meanwhile still join them.

Package-internal.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from .accumulator import ProducerBatch
from .metrics import Metrics
from .protocol.compression import Codec
from .protocol.messages import ProduceResponse
from .protocol.messages.produce import write_produce_body
from .protocol.primitives import Writer
from .protocol.records import RECORD_BATCH_OVERHEAD
from .protocol.versions import ApiKey

__all__ = ["ProduceCall"]


class ProduceCall:
    """A produce request in the making: its batches are built just before writing."""

    API_KEY = ApiKey.PRODUCE
    RESPONSE = ProduceResponse

    __slots__ = (
        "acks",
        "answered",
        "batches",
        "metrics",
        "node_id",
        "observe",
        "offload",
        "sent_at",
        "timeout_ms",
        "topics",
        "transactional_id",
    )

    def __init__(
        self,
        node_id: int,
        acks: int,
        timeout_ms: int,
        batches: list[ProducerBatch],
        offload: int,
        metrics: Metrics,
        transactional_id: str | None = None,
        observe: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.node_id = node_id
        #: Told (topic, uncompressed, compressed record bytes) of each compressed batch
        #: built here: the accumulator's compression ratio estimate.
        self.observe = observe
        self.metrics = metrics
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.batches = batches
        self.offload = offload
        self.sent_at = 0.0
        self.answered = False
        self.transactional_id = transactional_id
        self.topics: list[tuple[str, list[tuple[int, bytes]]]] = []

    async def prepare(self) -> None:
        """Build every batch not yet built (a retry keeps its bytes) and group them by
        topic; called by the connection just before it writes the request."""
        by_topic: dict[str, list[tuple[int, bytes]]] = {}
        for batch in self.batches:
            data = batch.built
            if data is None:
                builder = batch.builder
                args = (batch.producer_id, batch.producer_epoch, batch.sequence)
                # Compression releases the GIL: big batches compress on a worker thread
                # while the loop keeps accepting records. One compressed already (by the
                # sending thread) costs a header and a CRC here, less than the thread hop.
                if (
                    builder.codec != Codec.NONE
                    and builder.size_in_bytes >= self.offload
                    and not builder.holds_compression
                ):
                    data = await anyio.to_thread.run_sync(builder.build, *args)
                    self.metrics.batches_compressed_off_loop += 1
                else:
                    data = builder.build(*args)
                batch.built = data
                if self.observe is not None and builder.codec != Codec.NONE:
                    self.observe(
                        batch.topic,
                        builder.size_in_bytes - RECORD_BATCH_OVERHEAD,
                        len(data) - RECORD_BATCH_OVERHEAD,
                    )
            by_topic.setdefault(batch.topic, []).append((batch.partition, data))
        self.topics = list(by_topic.items())
        self.sent_at = time.monotonic()

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the request body, as a request message does."""
        write_produce_body(
            w, version, self.acks, self.timeout_ms, self.topics, self.transactional_id
        )
