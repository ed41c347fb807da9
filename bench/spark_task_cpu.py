"""CPU per row of aioproducer.spark's task body, thread by thread, without Spark.

::

    python -m bench.spark_task_cpu [--rows 300000] [--value-size 1000] [--compression lz4]
        [--reps 2] [--same-topic] [--keys 50] [--keyless] [--profile]

Feeds ``aioproducer.spark._tasks.write_arrow`` (what each ``spark.write`` task runs) Arrow
batches shaped like the ones Spark hands a ``spark.write`` task (Spark's default of 10,000
rows, which the task joins before sending; a string key, the row's number modulo
``--keys`` (0: the number itself), and a string value that starts with the row's number,
as in ``bench.spark_compare``), keyed, to a fresh 12-partition topic of one local broker,
with ``spark_compare``'s producer settings (``--keyless``: the value column alone).
Reports the process's CPU per row and each thread's (the task thread, the producer's loop,
its worker threads) from ``/proc``: CPU counters, which other work on the machine disturbs
far less than wall time, and minor page faults per 100k rows (first touches of fresh
memory, 2-14 µs each on the VMs measured). ``--same-topic`` writes every rep after the
first to the first rep's topic (its compression ratio estimate already learnt);
``--profile`` adds cProfile tables of the task thread and the loop thread (last rep).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import threading
import time
import uuid
from typing import Any


def _batches(rows: int, value_size: int, keys: int) -> list[Any]:
    import pyarrow as pa

    from bench.spark_compare import key_of

    per_batch = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default
    filler = "." * (value_size - 12)
    out = []
    for start in range(0, rows, per_batch):
        ids = range(start, min(rows, start + per_batch))
        key_column = pa.array([key_of(i, keys).decode() for i in ids], pa.string())
        values = pa.array([f"{i:012d}{filler}" for i in ids], pa.string())
        out.append(pa.RecordBatch.from_arrays([key_column, values], ["key", "value"]))
    return out


def _thread_cpu() -> dict[tuple[str, str], tuple[float, int]]:
    # Each thread's CPU seconds and minor page faults, from /proc.
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        out[(tid, names.get(tid, "?"))] = (cpu, int(fields[7]))
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the reps and print their CPU figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark_task_cpu", description=__doc__)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--value-size", type=int, default=1000)
    parser.add_argument("--compression", default="lz4")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--same-topic", action="store_true")
    parser.add_argument("--keys", type=int, default=50, help="distinct keys (0: one per row)")
    parser.add_argument("--keyless", action="store_true")
    parser.add_argument("--profile", action="store_true")
    ns = parser.parse_args(argv)

    from pyspark.sql import types as T

    from aioproducer.runner import default_runner
    from aioproducer.spark import _tasks
    from aioproducer.testing import KafkaCluster
    from bench.spark_compare import Settings, task_spec

    data = _batches(ns.rows, ns.value_size, ns.keys)
    fields = {"key": T.StringType(), "value": T.StringType()}
    if ns.keyless:
        data = [batch.select(["value"]) for batch in data]
        del fields["key"]
    with KafkaCluster(nodes=1, heap="1g") as kc:
        settings = Settings(16384, ns.compression)

        def spec(topic: str) -> Any:
            return task_spec(fields, topic, kc.bootstrap_servers, not ns.keyless, settings)

        warm = f"task-cpu-warm-{uuid.uuid4().hex[:6]}"
        kc.create_topic(warm, partitions=12)
        list(_tasks.write_arrow(spec(warm), iter(data[:4])))  # start the producer
        topic = ""
        for rep in range(ns.reps):
            if not (ns.same_topic and rep):
                topic = f"task-cpu-{uuid.uuid4().hex[:6]}"
                kc.create_topic(topic, partitions=12)
            rep_spec = spec(topic)
            profiler, loop_profiler = cProfile.Profile(), cProfile.Profile()

            async def switch(on: bool, p: cProfile.Profile = loop_profiler) -> None:
                p.enable() if on else p.disable()

            profile = ns.profile and rep == ns.reps - 1
            if profile:
                default_runner().call(switch, True)
                profiler.enable()
            before, cpu0, wall0 = _thread_cpu(), time.process_time(), time.perf_counter()
            stats = next(iter(_tasks.write_arrow(rep_spec, iter(data)))).to_pylist()[0]
            after, cpu1, wall1 = _thread_cpu(), time.process_time(), time.perf_counter()
            if profile:
                profiler.disable()
                default_runner().call(switch, False)
            if stats["delivered"] != ns.rows:
                raise SystemExit(f"delivered {stats['delivered']} of {ns.rows}: {stats}")
            producer = _tasks._idle[rep_spec.cache_key][0]
            m = producer.metrics()
            cpu = cpu1 - cpu0
            print(
                f"rep {rep}: process CPU {cpu / ns.rows * 1e6:.2f} us/row, wall "
                f"{wall1 - wall0:.2f} s, load {os.getloadavg()[0]:.1f}; so far "
                f"{m['batches_sent']:,} batches of {m['records_per_batch_mean']:.0f} records "
                f"on average, {m['batches_compressed_off_loop']:,} built on worker threads, "
                f"{m['requests_sent']:,} requests"
            )
            for key, (total, faults) in sorted(after.items(), key=lambda kv: -kv[1][0]):
                total_before, faults_before = before.get(key, (0.0, 0))
                spent = total - total_before
                faulted = faults - faults_before
                if spent >= 0.01:
                    print(
                        f"    {key[1][:28]:<28} {spent / ns.rows * 1e6:5.2f} us/row, "
                        f"{faulted * 1e5 / ns.rows:6.0f} faults/100k rows"
                    )
            if profile:
                for title, p in (("task thread", profiler), ("loop thread", loop_profiler)):
                    out = io.StringIO()
                    pstats.Stats(p, stream=out).sort_stats("tottime").print_stats(15)
                    lines = [line for line in out.getvalue().splitlines() if line.strip()]
                    print(f"--- {title}\n" + "\n".join(lines))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the process (rows included): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
