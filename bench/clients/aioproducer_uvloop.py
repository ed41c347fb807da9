"""aioproducer, one task awaiting ``send()`` per record, on uvloop."""

from __future__ import annotations

from ._common import main_async
from .aioproducer_asyncio import produce

if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer-uvloop", "aioproducer", produce, loop="uvloop"))
