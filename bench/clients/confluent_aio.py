"""confluent-kafka's ``confluent_kafka.aio.AIOProducer``: one task awaiting ``produce()``.

``await produce()`` appends to a Python-side buffer and returns a future (so a record takes
two awaits); every ``batch_size`` (1000, a count of messages) buffered records are handed
to librdkafka with ``produce_batch()`` in a thread pool. ``flush()`` hands over the rest and
waits for librdkafka to deliver everything. Constructor arguments are left at their defaults
(``batch_size=1000``, ``buffer_timeout=1.0``, ``max_workers=4``), as its documentation shows;
at low fixed rates its buffer timeout therefore shows up in the latency.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka.aio import AIOProducer

from ._common import AsyncOps, ClientArgs, Meter, count_failed_futures, main_async, run_async
from .confluent_sync import config


def _on_done(future: asyncio.Future[Any], callback: Any) -> None:
    future.add_done_callback(callback)


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Produce every record with ``await produce()``, flush, then check every future."""
    producer = AIOProducer(config(args.bootstrap_servers, args.compression))
    remaining = 0
    try:
        await producer.list_topics(args.topic, timeout=30)

        async def flush() -> None:
            nonlocal remaining
            remaining = await producer.flush(120)

        ops = AsyncOps(
            send=producer.produce,
            flush=flush,
            count_failed=count_failed_futures,
            on_done=_on_done,
        )
        failed = await run_async(args, meter, ops)
    finally:
        await producer.close()
    if remaining:
        raise SystemExit(f"flush() left {remaining} records undelivered")
    return failed


if __name__ == "__main__":
    raise SystemExit(main_async("confluent-aio", "confluent-kafka", produce, loop="asyncio"))
