"""``python -m bench.send_cpu``: CPU per record of ``await Producer.send()``, no real broker.

Sends 100-byte keyless records (or keyed ones with ``--keyed``) to a 12-partition topic of
an in-process :class:`~aioproducer.testing.FakeCluster` and reports the CPU time of the
thread running the producer's event loop (the fake brokers run on a thread of their own
and are left out) per record: ``send`` for the loop of ``send()`` calls alone (the
sender's per-batch work that runs in between included), ``total`` until every record is
acknowledged. ``--profile`` prints a cProfile of the send loop instead.

``--instructions`` counts machine instructions per ``await send()`` instead, which a busy
machine does not skew: it runs the send loop with no sender and no sockets (a started
producer whose topic metadata is filled in by hand, so records only pile up in batches)
under valgrind's callgrind, for 5,000 and for 25,000 records, and divides the difference
by 20,000 (start-up cancels out). It needs ``valgrind`` on the PATH.

``--requests`` counts, with callgrind, the instructions of the whole path per record and
per produce request: ``await send()`` of every record (each handle kept), then every handle
awaited (``--check exception`` reads each one's ``exception()`` instead, as the bench's
clients do, which builds no metadata), to a 6-partition topic of fake brokers in a process of their own, so the sender's
draining, request encoding, socket writes and reads, response decoding and completion are
all counted, and the bench's own loop too (a ``for`` over a list of handles). Again the
difference of two runs (40,000 and 10,000 records), divided by the difference of their
records and of their produce requests (the linger is long, so that batches leave full as
they do live rather than after a few records of valgrind's slowdown). ``--callgrind-out``
keeps the larger run's profile for ``callgrind_annotate``.

``--sync`` measures :meth:`aioproducer.SyncProducer.send` instead: the CPU of the calling
thread and of the producer's loop thread together (the fake brokers left out), from the
first ``send()`` until every record is acknowledged and every future checked; with
``--instructions`` the fake brokers run in a process of their own and callgrind counts
the instructions of the producer's process per record (sender and checks included), again
as the difference of a 25,000- and a 5,000-record run.

For an A/B comparison of two trees, run it once per tree with ``PYTHONPATH`` pointing at
each, alternating, and compare the medians; ``--rounds`` repeats inside one process.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio

from aioproducer import Producer
from aioproducer.testing import FakeCluster

TOPIC = "cpu"


async def _run(bootstrap: str, records: int, keyed: bool, profile: bool) -> tuple[float, float]:
    value = b"x" * 100
    keys = [f"key-{i:06d}".encode() for i in range(1000)] if keyed else None
    async with Producer(bootstrap, linger_ms=5, batch_size=16384) as producer:
        await producer.send_and_wait(TOPIC, b"warm")
        send = producer.send
        profiler = cProfile.Profile() if profile else None
        start = time.thread_time()
        if profiler is not None:
            profiler.enable()
        if keys is None:
            for _ in range(records):
                await send(TOPIC, value)
        else:
            for i in range(records):
                await send(TOPIC, value, key=keys[i % 1000])
        if profiler is not None:
            profiler.disable()
        sent = time.thread_time()
        await producer.flush()
        done = time.thread_time()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return (sent - start) / records * 1e6, (done - start) / records * 1e6


async def _offline(records: int, keyed: bool) -> None:
    # The send loop alone: a producer marked running, with its topic's metadata set by
    # hand and no sender task, so nothing but send() runs (batches only accumulate).
    from aioproducer import producer as producer_module
    from aioproducer.cluster import ClusterSnapshot, TopicInfo

    parts = tuple(range(12))
    info = TopicInfo(TOPIC, parts, dict.fromkeys(parts, 0), dict.fromkeys(parts, 0), parts)
    producer = Producer("127.0.0.1:9", linger_ms=5, batch_size=16384, buffer_memory=1 << 30)
    producer._state = producer_module._RUNNING
    producer.intake.accepting = True
    producer._cluster.snapshot = ClusterSnapshot({0: ("127.0.0.1", 9)}, {TOPIC: info}, {})
    value = b"x" * 100
    send = producer.send
    try:
        if keyed:
            keys = [f"key-{i:06d}".encode() for i in range(1000)]
            for i in range(records):
                await send(TOPIC, value, key=keys[i % 1000])
        else:
            for _ in range(records):
                await send(TOPIC, value)
    finally:
        producer._state = producer_module._CLOSED


TOPIC6 = "cpu6"


async def _acked(bootstrap: str, records: int, check: str) -> None:
    # The bench's asyncio client in miniature: send every record, keep its handle, then
    # flush and await every handle. Prints the produce requests sent, for the caller.
    # Live, keyless records fill their sticky partition's batch well within a 5 ms linger,
    # so batches leave full; under valgrind's slowdown a 5 ms linger would send a few
    # records a request. A linger valgrind cannot outlast keeps the live batching.
    value = b"x" * 100
    async with Producer(bootstrap, linger_ms=2000, batch_size=16384) as producer:
        await producer.partitions_for(TOPIC6)
        await producer.send_and_wait(TOPIC6, b"warm")
        before = producer.metrics()["requests_sent"]
        send = producer.send
        handles = [await send(TOPIC6, value) for _ in range(records)]
        await producer.flush()
        if check == "await":
            for handle in handles:
                await handle
        else:  # as the bench's clients check them: done once flushed, no metadata built
            for handle in handles:
                if handle.exception() is not None:
                    raise RuntimeError(f"a record failed: {handle.exception()!r}")
        print(f"requests={producer.metrics()['requests_sent'] - before:.0f}", flush=True)


def _sync_run(bootstrap: str, records: int, keyed: bool) -> float:
    """``SyncProducer.send`` of ``records`` records, then flush and check every future:
    the CPU of the calling thread and the loop thread per record, in µs."""
    from aioproducer import SyncProducer
    from aioproducer.runner import LoopRunner

    runner = LoopRunner()
    value = b"x" * 100
    keys = [f"key-{i:06d}".encode() for i in range(1000)]
    with SyncProducer(bootstrap, runner=runner, linger_ms=5, batch_size=16384) as producer:
        producer.send(TOPIC, b"warm").result(30)
        thread = runner.thread
        assert thread is not None and thread.ident is not None
        clock = time.pthread_getcpuclockid(thread.ident)
        send = producer.send
        start = time.thread_time() + time.clock_gettime(clock)
        if keyed:
            futures = [send(TOPIC, value, keys[i % 1000]) for i in range(records)]
        else:
            futures = [send(TOPIC, value) for _ in range(records)]
        producer.flush()
        for future in futures:
            if future.exception(timeout=120) is not None:
                raise RuntimeError(f"a record failed: {future.exception()!r}")
        used = time.thread_time() + time.clock_gettime(clock) - start
    return used / records * 1e6


def _serve() -> None:
    # A fake cluster for --sync --instructions, outside the measured process.
    with FakeCluster(brokers=1) as fc:
        fc.create_topic(TOPIC, partitions=12)
        fc.create_topic(TOPIC6, partitions=6)
        print(fc.bootstrap_servers, flush=True)
        sys.stdin.read()


@contextlib.contextmanager
def _fake_brokers() -> Iterator[str]:
    """Fake brokers in a process of their own (``--serve``), outside what callgrind
    counts: yields their bootstrap address, and stops them on exit."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.send_cpu", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(30)


def _instructions(
    records: int,
    keyed: bool,
    backend: str,
    bootstrap: str = "",
    *,
    acked: bool = False,
    out: str = "/dev/null",
    check: str = "await",
) -> tuple[int, int]:
    """Instructions callgrind counts for a whole ``--offline`` run of ``records`` (or,
    given ``bootstrap``, a ``--sync`` or, with ``acked``, a ``--requests`` run against
    it), and the produce requests the run reported (0 if it reports none)."""
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        "-m",
        "bench.send_cpu",
        "--offline",
        str(records),
        "--backend",
        backend,
    ]
    if keyed:
        cmd.append("--keyed")
    if bootstrap:
        cmd += ["--acked" if acked else "--sync", "--bootstrap", bootstrap, "--check", check]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{done.stderr}")
    requests = re.search(r"requests=(\d+)", done.stdout)
    return int(found.group(1)), int(requests.group(1)) if requests else 0


def _count(
    keyed: bool,
    backend: str,
    sync: bool,
    requests: bool = False,
    out: str = "",
    check: str = "await",
) -> int:
    import aioproducer.speedups as speedups

    if not sync and not requests:
        small, _ = _instructions(5_000, keyed, backend)
        large, _ = _instructions(25_000, keyed, backend)
        what = "await send()"
    elif requests:
        with _fake_brokers() as bootstrap:
            small, small_requests = _instructions(
                10_000, False, backend, bootstrap, acked=True, check=check
            )
            large, large_requests = _instructions(
                40_000, False, backend, bootstrap, acked=True, out=out or "/dev/null", check=check
            )
        requests_made = max(1, large_requests - small_requests)
        # The send loop alone, counted the same way, is what the records cost before the
        # sender takes over; the rest is the per-request path.
        send_only = (
            _instructions(40_000, False, backend)[0] - _instructions(10_000, False, backend)[0]
        )
        print(
            f"{(large - small) / 30_000:,.0f} instructions per record in all, "
            f"{send_only / 30_000:,.0f} of them in await send(); "
            f"{(large - small - send_only) / requests_made:,.0f} per produce request besides "
            f"({requests_made} requests for 30,000 records; handles checked by {check}; "
            f"{backend}; "
            f"{speedups.ACTIVE}: {speedups.REASON})"
        )
        return 0
    else:
        with _fake_brokers() as bootstrap:
            small, _ = _instructions(5_000, keyed, backend, bootstrap)
            large, _ = _instructions(25_000, keyed, backend, bootstrap)
        what = "SyncProducer.send() (both threads, sender and checks included)"
    print(
        f"{(large - small) / 20_000:,.0f} instructions per {what} "
        f"({speedups.ACTIVE}: {speedups.REASON})"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints one line per round and the medians."""
    parser = argparse.ArgumentParser(prog="python -m bench.send_cpu", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keyed", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--sync", action="store_true", help="SyncProducer.send instead")
    parser.add_argument(
        "--requests",
        action="store_true",
        help="instructions per record and per produce request of the whole path (callgrind)",
    )
    parser.add_argument("--callgrind-out", default="", help="keep the --requests profile here")
    parser.add_argument(
        "--check",
        default="await",
        choices=("await", "exception"),
        help="with --requests: await every handle (building its metadata), or only read "
        "exception() of each, as the bench's clients do",
    )
    parser.add_argument("--acked", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--offline", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default="", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve()
        return 0
    if args.offline and args.acked:
        anyio.run(_acked, args.bootstrap, args.offline, args.check, backend=args.backend)
        return 0
    if args.offline and args.sync:
        _sync_run(args.bootstrap, args.offline, args.keyed)
        return 0
    if args.offline:
        anyio.run(_offline, args.offline, args.keyed, backend=args.backend)
        return 0
    if args.requests:
        return _count(
            False, args.backend, False, requests=True, out=args.callgrind_out, check=args.check
        )
    if args.instructions:
        return _count(args.keyed, args.backend, args.sync)
    if args.sync:
        with FakeCluster(brokers=1) as fc:
            fc.create_topic(TOPIC, partitions=12)
            times = [
                _sync_run(fc.bootstrap_servers, args.records, args.keyed)
                for _ in range(args.rounds)
            ]
        for one in times:
            print(f"SyncProducer.send: {one:.3f} us/record (both threads, checks included)")
        print(f"median: {statistics.median(times):.3f} us/record")
        return 0
    results: list[tuple[float, float]] = []
    with FakeCluster(brokers=1) as fc:
        fc.create_topic(TOPIC, partitions=12)
        for _ in range(1 if args.profile else args.rounds):
            options: dict[str, Any] = {}
            result = anyio.run(
                _run,
                fc.bootstrap_servers,
                args.records,
                args.keyed,
                args.profile,
                backend=args.backend,
                backend_options=options,
            )
            print(f"send {result[0]:.3f} us/record, total {result[1]:.3f} us/record")
            results.append(result)
    if len(results) > 1:
        print(
            f"median: send {statistics.median(r[0] for r in results):.3f} us/record, "
            f"total {statistics.median(r[1] for r in results):.3f} us/record"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
