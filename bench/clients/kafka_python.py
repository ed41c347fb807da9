"""kafka-python's ``KafkaProducer``: ``send()`` per record from one thread, then ``flush()``.

``send()`` returns a future; ``flush()`` guarantees every earlier future is done, after which
each is checked. The background sender thread's CPU counts towards the process's CPU time.
"""

from __future__ import annotations

from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

from ._common import BATCH_SIZE, LINGER_MS, ClientArgs, Meter, iter_values, main_sync

CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "batch_size": BATCH_SIZE,
}


def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record, flush, then count the futures that failed (or never finished)."""
    producer = KafkaProducer(bootstrap_servers=args.bootstrap_servers, **CONFIG)
    try:
        # Connect and load the topic's metadata before the clock starts.
        producer.partitions_for(args.topic)
        topic = args.topic
        futures: list[FutureRecordMetadata] = []
        append = futures.append
        send = producer.send
        meter.start()
        for value in iter_values(args.records, args.value_size):
            append(send(topic, value))
        producer.flush()
        failed = 0
        for future in futures:
            if not future.succeeded():
                failed += 1
                meter.note_failure(future.exception or "not done after flush()")
        meter.stop()
    finally:
        producer.close()
    return failed


if __name__ == "__main__":
    raise SystemExit(main_sync("kafka-python", "kafka-python", produce))
