"""kafka-python's ``KafkaProducer``: ``send()`` per record, then ``flush()``.

``send()`` returns a future; ``flush()`` guarantees every earlier future is done, after which
each is checked. The background sender thread's CPU counts towards the process's CPU time.
kafka-python computes CRC-32C with the optional ``crc32c`` package when it is installed (the
report says whether it was). Several senders are threads sharing the producer.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

from ._common import (
    BATCH_SIZE,
    LINGER_MS,
    ClientArgs,
    Meter,
    SyncOps,
    main_sync,
    run_sync,
)

CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "batch_size": BATCH_SIZE,
}


def count_failed(futures: list[FutureRecordMetadata], meter: Meter) -> int:
    """How many futures failed (or, impossibly after ``flush()``, never finished)."""
    failed = 0
    for future in futures:
        if not future.succeeded():
            failed += 1
            meter.note_failure(future.exception or "not done after flush()")
    return failed


def _on_done(future: FutureRecordMetadata, callback: Any) -> None:
    # Callbacks run on kafka-python's sender thread; only successes get a timestamp.
    future.add_callback(callback)


def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record, flush, then count the futures that failed."""
    meter.notes["crc32c_package"] = importlib.util.find_spec("crc32c") is not None
    compression = None if args.compression == "none" else args.compression
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap_servers, compression_type=compression, **CONFIG
    )
    try:
        # Connect and load the topic's metadata before the clock starts.
        producer.partitions_for(args.topic)
        ops = SyncOps(
            send=producer.send, flush=producer.flush, count_failed=count_failed, on_done=_on_done
        )
        return run_sync(args, meter, ops)
    finally:
        producer.close()


if __name__ == "__main__":
    raise SystemExit(main_sync("kafka-python", "kafka-python", produce))
