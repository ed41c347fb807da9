"""aioproducer's one-outcome bulk path: ``await send_bulk()`` with chunks of ``--chunk-size``.

Each call buffers a chunk and returns one :class:`aioproducer.BulkDelivery` for all its
records (no handle per record). The chunking and the senders are :func:`run_async`'s, with
the chunk's ``BulkDelivery`` in place of a list of handles. A fixed-rate run is refused:
with one outcome per chunk, no record's send-to-ack latency can be observed.
"""

from __future__ import annotations

from aioproducer import BulkDelivery, Producer

from ._common import AsyncOps, ClientArgs, Meter, main_async, run_async
from .aioproducer_asyncio import config


async def count_failed(deliveries: list[BulkDelivery], meter: Meter) -> int:
    """How many records failed, from each chunk's outcome (done after ``flush()``)."""
    failed = 0
    for bulk in deliveries:
        if not bulk.done():
            await bulk
        lost = bulk.failed
        if lost:
            failed += lost
            meter.note_failure(bulk.first_error)
    return failed


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send the records in chunks with ``send_bulk()``, flush, then check every chunk."""
    if args.rate:
        raise SystemExit("aioproducer-sendbulk: --rate needs per-record outcomes")
    async with Producer(args.bootstrap_servers, **config(args)) as producer:
        # Connect and load the topic's metadata before the clock starts.
        await producer.partitions_for(args.topic)
        send_bulk = producer.send_bulk

        async def send_chunk(
            topic: str, values: list[bytes], keys: list[bytes] | None
        ) -> list[BulkDelivery]:
            return [await send_bulk(topic, values, keys)]

        ops = AsyncOps(
            send=producer.send,
            flush=producer.flush,
            count_failed=count_failed,
            send_many=send_chunk,
        )
        return await run_async(args, meter, ops)


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer-sendbulk", "aioproducer", produce, loop="asyncio"))
