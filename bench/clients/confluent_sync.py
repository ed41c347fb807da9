"""confluent-kafka's (librdkafka's) synchronous ``Producer``: the usual produce/poll loop.

``produce()`` never blocks; when librdkafka's queue is full it raises ``BufferError``, and the
documented answer is to serve delivery reports with ``poll()`` and try again. ``poll(0)`` after
each ``produce()`` serves delivery reports as they arrive, as confluent's examples do.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ._common import BATCH_SIZE, LINGER_MS, ClientArgs, Meter, iter_values, main_sync


def config(bootstrap_servers: str) -> dict[str, Any]:
    """The librdkafka configuration: the shared settings, everything else at its default."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": LINGER_MS,
        "batch.size": BATCH_SIZE,
    }


def produce(args: ClientArgs, meter: Meter) -> int:
    """Produce every record, flush, and count failed delivery reports (and missing ones)."""
    delivered = failed = 0

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1
            meter.note_failure(err)

    producer = Producer({**config(args.bootstrap_servers), "on_delivery": on_delivery})
    # Connect and load the topic's metadata before the clock starts.
    producer.list_topics(args.topic, timeout=30)
    topic = args.topic
    send = producer.produce
    poll = producer.poll
    meter.start()
    for value in iter_values(args.records, args.value_size):
        while True:
            try:
                send(topic, value)
                break
            except BufferError:
                # Queue full: wait for delivery reports (returns as soon as some arrive).
                poll(1.0)
        poll(0)
    remaining = producer.flush(120)
    # Failed = every record without a successful delivery report, including any missing one.
    failed = args.records - delivered
    meter.stop()
    if remaining:
        raise SystemExit(f"flush() left {remaining} records undelivered")
    return failed


if __name__ == "__main__":
    raise SystemExit(main_sync("confluent-sync", "confluent-kafka", produce))
