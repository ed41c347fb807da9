"""aioproducer's bulk path: ``await send_many()`` with chunks of ``--chunk-size`` records.

In a fixed-rate run each call carries the records that became due since the last one.
"""

from __future__ import annotations

from ._common import ClientArgs, Meter, main_async
from .aioproducer_asyncio import produce as produce_one


async def produce(args: ClientArgs, meter: Meter) -> int:
    """Send the records in chunks with ``send_many()``, flush, then check every handle."""
    return await produce_one(args, meter, bulk=True)


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer-bulk", "aioproducer", produce, loop="asyncio"))
