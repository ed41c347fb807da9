"""aiokafka, one task awaiting ``send()`` per record, on uvloop."""

from __future__ import annotations

from ._common import main_async
from .aiokafka_producer import produce

if __name__ == "__main__":
    raise SystemExit(main_async("aiokafka-uvloop", "aiokafka", produce, loop="uvloop"))
