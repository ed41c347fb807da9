"""``python -m bench [--suite quick|full] ...``: the benchmark suites (:mod:`bench.suite`).

``python -m bench.producer_compare`` is the older single-workload throughput comparison of
the Python clients; it keeps working with its own options.
"""

from __future__ import annotations

from .suite import main

if __name__ == "__main__":
    raise SystemExit(main())
