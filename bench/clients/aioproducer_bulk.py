"""aioproducer's bulk path: ``await send_many()`` with chunks of ``--chunk-size`` records."""

from __future__ import annotations

from aioproducer import DeliveryHandle, Producer

from ._common import ClientArgs, Meter, iter_chunks, main_async
from .aioproducer_asyncio import CONFIG, count_failed


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send the records in chunks with ``send_many()``, flush, then check every handle."""
    async with Producer(args.bootstrap_servers, **CONFIG) as producer:
        await producer.partitions_for(args.topic)
        topic = args.topic
        handles: list[DeliveryHandle] = []
        meter.start()
        for chunk in iter_chunks(args.records, args.value_size, args.chunk_size):
            handles += await producer.send_many(topic, chunk)
        await producer.flush()
        failed = await count_failed(handles, meter)
        meter.stop()
    return failed


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer-bulk", "aioproducer", produce, loop="asyncio"))
