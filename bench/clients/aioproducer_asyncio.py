"""aioproducer, ``await send()`` per record, on the default asyncio loop.

The same :func:`produce` runs under uvloop and trio (:mod:`.aioproducer_uvloop`,
:mod:`.aioproducer_trio`): it uses only aioproducer's API, which is backend-neutral.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aioproducer import DeliveryHandle, KafkaError, Producer

from ._common import BATCH_SIZE, LINGER_MS, AsyncOps, ClientArgs, Meter, main_async, run_async

#: Passed explicitly although they are aioproducer's defaults, so the settings are visible.
CONFIG = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": LINGER_MS,
    "batch_size": BATCH_SIZE,
}


def config(args: ClientArgs) -> dict[str, Any]:
    """The producer settings for this run."""
    return {**CONFIG, "compression_type": args.compression}


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


def _on_done(handle: DeliveryHandle, callback: Any) -> None:
    handle.add_done_callback(callback)


async def produce(args: ClientArgs, meter: Meter, *, bulk: bool = False) -> int:
    """Send every record (``send()``, or ``send_many()`` if ``bulk``), flush, check handles."""
    async with Producer(args.bootstrap_servers, **config(args)) as producer:
        # Connect and load the topic's metadata before the clock starts.
        await producer.partitions_for(args.topic)
        ops = AsyncOps(
            send=producer.send,
            flush=producer.flush,
            count_failed=count_failed,
            send_many=producer.send_many if bulk else None,
            on_done=_on_done,
        )
        return await run_async(args, meter, ops)


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer", "aioproducer", produce, loop="asyncio"))
