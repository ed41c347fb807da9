"""aiokafka's ``AIOKafkaProducer``: one task awaiting ``send()`` per record.

``await send()`` buffers the record and returns an ``asyncio.Future``; ``flush()`` waits
until "all batches are delivered and futures resolved" (its docstring), after which each
future's state is read. That is cheaper than ``asyncio.gather()`` over every future (one loop
callback per record) and gives the same per-record check, so aiokafka gets the faster path.
The same :func:`produce` runs on uvloop (:mod:`.aiokafka_uvloop`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer

from ._common import (
    BATCH_SIZE,
    LINGER_MS,
    AsyncOps,
    ClientArgs,
    Meter,
    count_failed_futures,
    main_async,
    run_async,
)

CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "max_batch_size": BATCH_SIZE,
}


def _on_done(future: asyncio.Future[Any], callback: Any) -> None:
    future.add_done_callback(callback)


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record with ``await send()``, flush, then check every future."""
    compression = None if args.compression == "none" else args.compression
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap_servers, compression_type=compression, **CONFIG
    )
    await producer.start()
    try:
        await producer.partitions_for(args.topic)
        ops = AsyncOps(
            send=producer.send,
            flush=producer.flush,
            count_failed=count_failed_futures,
            on_done=_on_done,
        )
        return await run_async(args, meter, ops)
    finally:
        await producer.stop()


if __name__ == "__main__":
    raise SystemExit(main_async("aiokafka", "aiokafka", produce, loop="asyncio"))
