"""``python -m bench``: runs the producer comparison (:mod:`bench.producer_compare`)."""

from __future__ import annotations

from .producer_compare import main

if __name__ == "__main__":
    raise SystemExit(main())
