"""aiokafka's ``AIOKafkaProducer``: one task awaiting ``send()`` per record.

``await send()`` buffers the record and returns an ``asyncio.Future``; ``flush()`` waits
until "all batches are delivered and futures resolved" (its docstring), after which each
future's state is read. That is cheaper than ``asyncio.gather()`` over every future (one loop
callback per record) and gives the same per-record check, so aiokafka gets the faster path.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer

from ._common import (
    BATCH_SIZE,
    LINGER_MS,
    ClientArgs,
    Meter,
    count_failed_futures,
    iter_values,
    main_async,
)

CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "max_batch_size": BATCH_SIZE,
}


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record with ``await send()``, flush, then check every future."""
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap_servers, **CONFIG)
    await producer.start()
    try:
        await producer.partitions_for(args.topic)
        topic = args.topic
        futures: list[asyncio.Future[Any]] = []
        append = futures.append
        send = producer.send
        meter.start()
        for value in iter_values(args.records, args.value_size):
            append(await send(topic, value))
        await producer.flush()
        failed = await count_failed_futures(futures, meter)
        meter.stop()
    finally:
        await producer.stop()
    return failed


if __name__ == "__main__":
    raise SystemExit(main_async("aiokafka", "aiokafka", produce, loop="asyncio"))
