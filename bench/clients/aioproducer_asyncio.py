"""aioproducer, one task awaiting ``send()`` per record, on the default asyncio loop.

The same :func:`produce` runs under uvloop and trio (:mod:`.aioproducer_uvloop`,
:mod:`.aioproducer_trio`): it uses only aioproducer's API, which is backend-neutral.
"""

from __future__ import annotations

import contextlib

from aioproducer import DeliveryHandle, KafkaError, Producer

from ._common import BATCH_SIZE, LINGER_MS, ClientArgs, Meter, iter_values, main_async

#: Passed explicitly although they are aioproducer's defaults, so the settings are visible.
CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "batch_size": BATCH_SIZE,
}


async def count_failed(handles: list[DeliveryHandle], meter: Meter) -> int:
    """How many records failed; after ``flush()`` every handle is done, so nothing waits."""
    failed = 0
    for handle in handles:
        if not handle.done():
            with contextlib.suppress(KafkaError):
                await handle
        error = handle.exception()
        if error is not None:
            failed += 1
            meter.note_failure(error)
    return failed


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record with ``await send()``, flush, then check every handle."""
    async with Producer(args.bootstrap_servers, **CONFIG) as producer:
        # Connect and load the topic's metadata before the clock starts.
        await producer.partitions_for(args.topic)
        topic = args.topic
        handles: list[DeliveryHandle] = []
        append = handles.append
        send = producer.send
        meter.start()
        for value in iter_values(args.records, args.value_size):
            append(await send(topic, value))
        await producer.flush()
        failed = await count_failed(handles, meter)
        meter.stop()
    return failed


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer", "aioproducer", produce, loop="asyncio"))
