"""bench.spark_compare's CPU counters: a worker that has exited still counts (through its
daemon's reaped-children time), and processes of other roles do not."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.spark_compare import cpu_by_role

# Burns about 0.15 s of CPU in a child, then waits: the parent's command line names
# pyspark.daemon (as Spark's daemon does), the child's pyspark.worker.
_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.15:\n    pass\n"
_DAEMON = (
    "import subprocess, sys\n"
    f"subprocess.run([sys.executable, '-c', {_BURN!r}, 'pyspark.worker'], check=True)\n"
    "sys.stdin.read()\n"
)


def test_a_reaped_worker_counts_as_python_and_nothing_else() -> None:
    before = cpu_by_role()
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, "pyspark.daemon"], stdin=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 20
        # The worker has exited and been reaped once the daemon's children's time shows it.
        while cpu_by_role()["python"] - before["python"] < 0.12:
            assert time.monotonic() < deadline, "the worker's CPU never showed"
            time.sleep(0.05)
        assert cpu_by_role()["python"] - before["python"] < 2.0
    finally:
        assert daemon.stdin is not None
        daemon.stdin.close()
        daemon.wait(10)


def test_unrelated_processes_are_not_counted() -> None:
    pytest.importorskip("pyspark")  # the file lives with the Spark tests
    before = cpu_by_role()
    subprocess.run([sys.executable, "-c", _BURN], check=True)
    after = cpu_by_role()
    assert after["python"] - before["python"] < 0.1
