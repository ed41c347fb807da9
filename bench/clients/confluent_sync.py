"""confluent-kafka's (librdkafka's) synchronous ``Producer``: the usual produce/poll loop.

``produce()`` never blocks; when librdkafka's queue is full it raises ``BufferError``, and the
documented answer is to serve delivery reports with ``poll()`` and try again. ``poll(0)`` after
each ``produce()`` serves delivery reports as they arrive, as confluent's examples do. One
delivery-report callback (set in the configuration) counts outcomes and, in fixed-rate runs,
records each record's acknowledgement time. Several senders are threads sharing the producer.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ._common import (
    BATCH_SIZE,
    LINGER_MS,
    ClientArgs,
    Meter,
    SyncOps,
    main_sync,
    parse_seq,
    run_sync,
)


def config(bootstrap_servers: str, compression: str = "none") -> dict[str, Any]:
    """The librdkafka configuration: the shared settings, everything else at its default."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": LINGER_MS,
        "batch.size": BATCH_SIZE,
        "compression.type": compression,
    }


def produce(args: ClientArgs, meter: Meter) -> int:
    """Produce every record, flush, and count failed delivery reports (and missing ones)."""
    # Delivery reports run in whichever thread calls poll(): with several sender threads a
    # plain `delivered += 1` could lose increments, so successes are counted with
    # itertools.count, whose next() is atomic in CPython.
    delivered = itertools.count()
    count_delivered = delivered.__next__
    clock = time.perf_counter

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            count_delivered()
            log = meter.latency
            if log is not None:
                value = msg.value()
                if value is not None:
                    log.acked[parse_seq(value)] = clock()
        else:
            meter.note_failure(err)

    producer = Producer(
        {**config(args.bootstrap_servers, args.compression), "on_delivery": on_delivery}
    )
    # Connect and load the topic's metadata before the clock starts.
    producer.list_topics(args.topic, timeout=30)
    remaining = 0

    def flush() -> None:
        nonlocal remaining
        remaining = producer.flush(120)

    def count_failed(_handles: list[Any], _meter: Meter) -> int:
        # Failed = every record without a successful delivery report, including missing ones.
        return args.records - next(delivered)

    ops = SyncOps(send=producer.produce, flush=flush, count_failed=count_failed, poll=producer.poll)
    failed = run_sync(args, meter, ops)
    if remaining:
        raise SystemExit(f"flush() left {remaining} records undelivered")
    return failed


if __name__ == "__main__":
    raise SystemExit(main_sync("confluent-sync", "confluent-kafka", produce))
