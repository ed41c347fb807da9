"""Plumbing shared by every benchmark client: arguments, record values, measuring, reporting.

A client module only writes its produce phase::

    async def produce(args: ClientArgs, meter: Meter) -> int:
        ...                      # create and connect the producer, load the topic's metadata
        meter.start()            # just before the first send
        ...                      # send args.records values, wait for every acknowledgement
        meter.stop()             # after the last acknowledgement has been checked
        return failed            # number of records whose delivery failed

and hands it to :func:`main_async` (or a blocking one to :func:`main_sync`), which parses
the command line, runs it and prints one JSON line (:func:`emit`) that the harness reads.
Start-up (imports, connecting, metadata) and shutdown are outside the measured window, so
the numbers are about producing, and the same for every client.

Most clients do not write the loops themselves: they describe their producer's calls as
:class:`AsyncOps` / :class:`SyncOps` and hand them to :func:`run_async` / :func:`run_sync`,
which implement every workload shape (keys, several senders, a fixed rate with per-record
latency) identically for every client. The loops call the library's own bound methods, so
no wrapper sits between the loop and the library on the hot path.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib.metadata
import json
import logging
import os
import platform
import random
import resource
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BATCH_SIZE",
    "EXIT_UNAVAILABLE",
    "LINGER_MS",
    "NUM_KEYS",
    "SEQ_DIGITS",
    "AsyncOps",
    "ClientArgs",
    "LatencyLog",
    "Meter",
    "SyncOps",
    "count_failed_futures",
    "emit",
    "iter_chunks",
    "iter_records",
    "iter_values",
    "key_for",
    "latency_figures",
    "latency_warmup",
    "main_async",
    "main_sync",
    "make_value",
    "parse_args",
    "parse_seq",
    "run_async",
    "run_sync",
    "unavailable",
]

#: Settings every client gets (where it has the setting): Kafka 4.x Java producer defaults.
LINGER_MS = 5
BATCH_SIZE = 16384

#: Every value starts with its sequence number as this many ASCII digits.
SEQ_DIGITS = 12

#: Keyed workloads use this many distinct keys (``key-000000`` ...), so every partition of a
#: 12-partition topic gets keys and no key is rare.
NUM_KEYS = 1000

#: Exit status of a client whose library (or API) is not installed: reported as
#: "unavailable", not as a failure.
EXIT_UNAVAILABLE = 3

# The rest of each value comes from a fixed pseudo-random corpus of letters A-Z, sliced at a
# different place for every record. Random letters compress about as well as the Java tool's
# payloads (also random A-Z), so lz4/zstd do real work; a constant filler would compress to
# almost nothing and make compression look free. The stride keeps the records that end up in
# one batch from sharing text, which would also flatter the compressors.
_CORPUS_SIZE = 1 << 20
_CORPUS_STRIDE = 7919
_CORPUS_SEED = 20261121
_LETTERS = bytes(65 + i % 26 for i in range(256))
_corpus_cache: list[bytes] = []


def _corpus() -> bytes:
    if not _corpus_cache:
        raw = random.Random(_CORPUS_SEED).randbytes(_CORPUS_SIZE)
        _corpus_cache.append(raw.translate(_LETTERS))
    return _corpus_cache[0]


Loop = Literal["asyncio", "uvloop", "trio"]

#: The event loop :func:`main_async` runs on (trio needs its own sleep and nursery).
_RUNNING_LOOP: Loop = "asyncio"


@dataclass(frozen=True)
class ClientArgs:
    """What a client is asked to do (its command line)."""

    bootstrap_servers: str
    topic: str
    records: int
    value_size: int
    chunk_size: int
    profile: str | None
    log_level: str
    compression: str = "none"
    keyed: bool = False
    senders: int = 1
    rate: float = 0.0
    latency_out: str | None = None


def parse_args(client: str, argv: list[str] | None = None) -> ClientArgs:
    """Parse a client's command line (``--help`` lists the options)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    parser = argparse.ArgumentParser(
        prog=f"python -m {main_spec.name}" if main_spec is not None else client,
        description=f"Produce records with {client} and print one JSON line with the result.",
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=10_000,
        help="records per call, for clients with a bulk API (default 10000)",
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="run the produce phase under cProfile and write the stats to PATH",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level of the client library, logged to stderr (default WARNING)",
    )
    parser.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type (default none)",
    )
    parser.add_argument(
        "--keyed",
        action="store_true",
        help=f"give every record a key ({NUM_KEYS} distinct keys); default keyless",
    )
    parser.add_argument(
        "--senders",
        type=int,
        default=1,
        help="concurrent senders: tasks for async clients, threads for blocking ones",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="records/s to send at, recording each record's send-to-ack latency "
        "(default 0: as fast as possible)",
    )
    parser.add_argument(
        "--latency-out",
        metavar="PATH",
        help="with --rate: also write every record's send and ack times to PATH (JSON), "
        "for the harness to compute its own percentiles",
    )
    ns = parser.parse_args(argv)
    if ns.senders < 1 or ns.rate < 0:
        parser.error("--senders must be at least 1 and --rate not negative")
    if ns.rate and ns.senders != 1:
        parser.error("--rate is measured with one sender")
    if ns.records < 1:
        parser.error("--records must be at least 1")
    if ns.value_size < SEQ_DIGITS:
        parser.error(f"--value-size must be at least {SEQ_DIGITS} (the sequence number)")
    if ns.chunk_size < 1:
        parser.error("--chunk-size must be at least 1")
    return ClientArgs(
        bootstrap_servers=ns.bootstrap_servers,
        topic=ns.topic,
        records=ns.records,
        value_size=ns.value_size,
        chunk_size=ns.chunk_size,
        profile=ns.profile,
        log_level=ns.log_level,
        compression=ns.compression,
        keyed=ns.keyed,
        senders=ns.senders,
        rate=ns.rate,
        latency_out=ns.latency_out,
    )


# -- record values ----------------------------------------------------------------------------


def make_value(seq: int, size: int) -> bytes:
    """The value of record ``seq``: its sequence number in ASCII, then ``size - 12`` letters.

    Values are built while producing (not up front) so that peak RSS shows what the client
    buffers rather than a pre-built list of every value; the cost is the same for all.
    """
    corpus = _corpus()
    start = (seq * _CORPUS_STRIDE) % (_CORPUS_SIZE - size)
    return b"%0*d" % (SEQ_DIGITS, seq) + corpus[start : start + size - SEQ_DIGITS]


def key_for(seq: int) -> bytes:
    """The key of record ``seq`` in keyed workloads."""
    return b"key-%06d" % (seq % NUM_KEYS)


def parse_seq(value: bytes) -> int:
    """The sequence number a value made by :func:`make_value` carries."""
    return int(value[:SEQ_DIGITS])


def iter_values(records: int, size: int) -> Iterator[bytes]:
    """The values of records ``0 .. records-1``, one at a time."""
    for value, _key in iter_records(records, size, False):
        yield value


def iter_records(
    records: int, size: int, keyed: bool, start: int = 0, step: int = 1
) -> Iterator[tuple[bytes, bytes | None]]:
    """``(value, key)`` of records ``start, start+step, ... < records``; key None if keyless."""
    corpus = _corpus()
    span = _CORPUS_SIZE - size
    fill = size - SEQ_DIGITS
    for seq in range(start, records, step):
        offset = (seq * _CORPUS_STRIDE) % span
        value = b"%0*d" % (SEQ_DIGITS, seq) + corpus[offset : offset + fill]
        yield value, (b"key-%06d" % (seq % NUM_KEYS) if keyed else None)


def iter_chunks(records: int, size: int, chunk: int) -> Iterator[list[bytes]]:
    """The same values as :func:`iter_values`, in lists of at most ``chunk``."""
    for start in range(0, records, chunk):
        yield [make_value(seq, size) for seq in range(start, min(start + chunk, records))]


# -- measuring --------------------------------------------------------------------------------


def _maxrss_mib(ru: resource.struct_rusage) -> float:
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    return ru.ru_maxrss / (1024 * 1024) if sys.platform == "darwin" else ru.ru_maxrss / 1024


def _peak_rss_mib(ru: resource.struct_rusage) -> float:
    """This process's own peak resident set size.

    On Linux, ``ru_maxrss`` of a child starts at its parent's peak RSS at fork time (the
    kernel carries the old address space's high-water mark over ``exec``), so a harness that
    has just read 300,000 records back would inflate every client's figure. ``VmHWM`` is the
    high-water mark of this process's own address space, which is what is wanted here.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # "VmHWM:   12345 kB"
    except OSError:
        pass
    return _maxrss_mib(ru)


class Meter:
    """Wall time, CPU time (all threads of this process) and peak RSS around the produce phase.

    CPU comes from ``getrusage(RUSAGE_SELF)``, so it includes background threads (librdkafka's,
    kafka-python's sender, thread pools): a client that offloads work to threads pays for it
    here too. With ``profile_path`` the window also runs under cProfile (main thread only);
    profiled timings are inflated and not comparable to unprofiled ones.
    """

    def __init__(self, profile_path: str | None = None) -> None:
        self._profile_path = profile_path
        self._profiler: cProfile.Profile | None = None
        self._t0 = self._t1 = self._rss0 = 0.0
        self._ru0: resource.struct_rusage | None = None
        self._ru1: resource.struct_rusage | None = None
        self.error_samples: list[str] = []
        #: Set by the drivers in fixed-rate runs, before the first send.
        self.latency: LatencyLog | None = None
        #: Facts about the client worth keeping in the report (e.g. optional accelerators).
        self.notes: dict[str, Any] = {}

    def note_failure(self, error: object) -> None:
        """Keep a few distinct delivery errors for the report (the count is the client's)."""
        text = repr(error)
        if len(self.error_samples) < 3 and text not in self.error_samples:
            self.error_samples.append(text)

    def start(self) -> None:
        """Start the window: call right before the first record is sent."""
        if self._ru0 is not None:
            raise RuntimeError("Meter.start() called twice")
        self._ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self._rss0 = _peak_rss_mib(self._ru0)
        self._t0 = time.perf_counter()
        if self._profile_path is not None:
            self._profiler = cProfile.Profile()
            self._profiler.enable()

    def stop(self) -> None:
        """End the window: call once every acknowledgement has been received and checked."""
        if self._ru0 is None or self._ru1 is not None:
            raise RuntimeError("Meter.stop() without a matching start()")
        if self._profiler is not None:
            self._profiler.disable()
        self._t1 = time.perf_counter()
        self._ru1 = resource.getrusage(resource.RUSAGE_SELF)
        if self._profiler is not None and self._profile_path is not None:
            self._profiler.dump_stats(self._profile_path)

    def result(self) -> dict[str, float]:
        """The measurements, for the JSON report."""
        ru0, ru1 = self._ru0, self._ru1
        if ru0 is None or ru1 is None:
            raise RuntimeError("the client never called Meter.start() and Meter.stop()")
        out: dict[str, Any] = {
            "elapsed_s": self._t1 - self._t0,
            "cpu_user_s": ru1.ru_utime - ru0.ru_utime,
            "cpu_sys_s": ru1.ru_stime - ru0.ru_stime,
            "rss_at_start_mib": self._rss0,
            "peak_rss_mib": _peak_rss_mib(ru1),
            "ru_maxrss_mib": _maxrss_mib(ru1),
        }
        if self.latency is not None:
            out["latency"] = self.latency.summary()
        return out


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ascending values, nearest-rank (as HdrHistogram)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n*q/100), at least 1
    return sorted_values[int(min(rank, len(sorted_values))) - 1]


def latency_figures(lat: list[float]) -> dict[str, float]:
    """Percentiles, maximum and mean of ascending latencies (ms), as the reports name them."""
    return {
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
        "p99_ms": percentile(lat, 99),
        "p999_ms": percentile(lat, 99.9),
        "max_ms": lat[-1] if lat else float("nan"),
        "mean_ms": sum(lat) / len(lat) if lat else float("nan"),
    }


def latency_warmup(rate: float, records: int) -> int:
    """How many first records of a paced run the latency figures leave out: one second's
    worth (start-up effects such as a producer id still being fetched), at most a quarter.
    """
    return min(int(rate), records // 4)


@dataclass
class LatencyLog:
    """Per-record send and acknowledgement times (``perf_counter`` seconds) of a paced run.

    ``sent[i]`` is taken just before the client's send call for record ``i``; ``acked[i]``
    in the client's delivery callback (or done-callback of its handle/future), so the
    latency is send-to-ack as the application sees it, including time spent in the client's
    own queues and its callback dispatch. This is the same definition the Java tool uses.
    """

    records: int
    rate: float
    sent: list[float] = field(default_factory=list)
    acked: list[float] = field(default_factory=list)
    started: float = 0.0
    #: Where :meth:`summary` also writes the per-record times (``--latency-out``).
    out_path: str | None = None

    def __post_init__(self) -> None:
        self.sent = [0.0] * self.records
        self.acked = [0.0] * self.records
        self._gc: list[tuple[str, int, float]] = []
        if self.out_path or os.environ.get("BENCH_LATENCY_DUMP"):
            gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        self._gc.append((phase, info["generation"], time.perf_counter()))

    def summary(self) -> dict[str, Any]:
        """Percentiles in milliseconds, and whether the sender kept to the schedule."""
        # The run is over: later collections are not its, and a process that outlives
        # the log (the tests') must not keep its callback.
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._dump()
        missing = sum(1 for a in self.acked if a <= 0.0)
        skip = latency_warmup(self.rate, self.records)
        lat = sorted(
            (a - s) * 1000.0
            for s, a in zip(self.sent[skip:], self.acked[skip:], strict=True)
            if a > 0.0
        )
        # The last record was due at started + (n-1)/rate; being late means the client (or
        # the machine) could not keep up with the requested rate.
        scheduled = (self.records - 1) / self.rate
        actual = max(self.sent) - self.started
        return {
            "target_rate": self.rate,
            "achieved_rate": (self.records - 1) / actual if actual > 0 else float("inf"),
            "send_lag_s": max(0.0, actual - scheduled),
            "kept_rate": actual <= scheduled * 1.05 + 0.05,
            "unacked": missing,
            "warmup_records": skip,
            **latency_figures(lat),
        }

    def _dump(self) -> None:
        """Write every record's send and ack times (seconds from the first send; ``null`` if
        never acknowledged) and the process's garbage collections during the run to
        ``out_path``, and, with ``BENCH_LATENCY_DUMP`` set to a directory, to a file there
        too (for looking at where in a run the slow records fall)."""
        paths = [Path(self.out_path)] if self.out_path else []
        if where := os.environ.get("BENCH_LATENCY_DUMP"):
            paths.append(Path(where) / f"latency-{os.getpid()}-{time.time_ns()}.json")
        if not paths:
            return
        t0 = self.started
        text = json.dumps(
            {
                "argv": sys.argv,
                "rate": self.rate,
                "started_unix": time.time() - (time.perf_counter() - t0),
                "warmup_records": latency_warmup(self.rate, self.records),
                "sent": [round(s - t0, 6) for s in self.sent],
                "acked": [round(a - t0, 6) if a > 0.0 else None for a in self.acked],
                "gc": [(phase, gen, round(t - t0, 6)) for phase, gen, t in self._gc],
            }
        )
        for path in paths:
            path.write_text(text)


async def count_failed_futures(futures: Iterable[asyncio.Future[Any]], meter: Meter) -> int:
    """How many of ``futures`` failed or were cancelled, after waiting for any still pending.

    After a successful ``flush()`` every future should already be done, so this normally
    only reads their state; it never awaits them one by one.
    """
    futures = list(futures)
    pending = [f for f in futures if not f.done()]
    if pending:
        await asyncio.wait(pending)
    failed = 0
    for future in futures:
        error = "cancelled" if future.cancelled() else future.exception()
        if error is not None:
            failed += 1
            meter.note_failure(error)
    return failed


# -- the produce loops -----------------------------------------------------------------------


@dataclass
class AsyncOps:
    """An async producer's calls, for :func:`run_async`.

    ``send(topic, value, key)`` buffers one record and returns its handle/future;
    ``send_many(topic, values, keys)``, if given, is used instead (the bulk path);
    ``count_failed(handles, meter)`` runs after ``flush()`` and returns how many failed;
    ``on_done(handle, callback)`` registers ``callback(handle)`` for when the record is done.
    """

    send: Callable[[str, bytes, bytes | None], Awaitable[Any]]
    flush: Callable[[], Awaitable[Any]]
    count_failed: Callable[[list[Any], Meter], Awaitable[int]]
    send_many: Callable[[str, list[bytes], list[bytes] | None], Awaitable[list[Any]]] | None = None
    on_done: Callable[[Any, Callable[[Any], None]], None] | None = None


@dataclass
class SyncOps:
    """A blocking producer's calls, for :func:`run_sync`.

    ``poll``, if given, is called with 0 after every send and with a timeout while waiting
    (librdkafka serves delivery reports only in ``poll()``); a ``BufferError`` from ``send``
    (librdkafka's queue is full) is answered with ``poll(1.0)`` and a retry. ``on_done`` is
    ``None`` for a client that records acknowledgements itself (see :attr:`Meter.latency`).
    """

    send: Callable[[str, bytes, bytes | None], Any]
    flush: Callable[[], Any]
    count_failed: Callable[[list[Any], Meter], int]
    on_done: Callable[[Any, Callable[[Any], None]], None] | None = None
    poll: Callable[[float], Any] | None = None


#: Paced senders never wait less than this: shorter timeouts round down to zero in epoll,
#: uvloop and librdkafka's poll(), which would turn the wait into a busy loop whose CPU would
#: be charged to the client. Records that fall due meanwhile go out together (the Java
#: tool's throttle similarly sleeps only once it is at least 2 ms ahead).
_MIN_SLEEP = 0.001


def _ack_setter(log: LatencyLog, seq: int) -> Callable[[Any], None]:
    acked = log.acked
    clock = time.perf_counter

    def done(_handle: Any) -> None:
        acked[seq] = clock()

    return done


async def _async_sender(
    ops: AsyncOps, args: ClientArgs, start: int, step: int, out: list[Any]
) -> None:
    topic = args.topic
    append = out.append
    if ops.send_many is not None:
        send_many = ops.send_many
        chunk: list[bytes] = []
        keys: list[bytes] | None = [] if args.keyed else None
        for value, key in iter_records(args.records, args.value_size, args.keyed, start, step):
            chunk.append(value)
            if keys is not None and key is not None:
                keys.append(key)
            if len(chunk) >= args.chunk_size:
                out += await send_many(topic, chunk, keys)
                chunk, keys = [], ([] if args.keyed else None)
        if chunk:
            out += await send_many(topic, chunk, keys)
        return
    send = ops.send
    for value, key in iter_records(args.records, args.value_size, args.keyed, start, step):
        append(await send(topic, value, key))


async def _sleep(seconds: float) -> None:
    if _RUNNING_LOOP == "trio":
        import trio

        await trio.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


async def _async_paced(ops: AsyncOps, args: ClientArgs, meter: Meter, out: list[Any]) -> None:
    """Send at ``args.rate`` records/s: each time, everything that is due, then sleep.

    Sleeping per record is impossible at these rates (timer resolution), so records due
    during a sleep go out together when it ends, as in the Java tool's throttle.
    """
    log = meter.latency = LatencyLog(args.records, args.rate, out_path=args.latency_out)
    on_done = ops.on_done
    if on_done is None:
        raise RuntimeError("a paced run needs AsyncOps.on_done")
    topic, rate, n = args.topic, args.rate, args.records
    sent = log.sent
    clock = time.perf_counter
    records = iter_records(n, args.value_size, args.keyed)
    seq = 0
    log.started = t0 = clock()
    while seq < n:
        due = min(n, int((clock() - t0) * rate) + 1)
        if ops.send_many is not None and due > seq:
            values, keys = [], []
            for _ in range(due - seq):
                value, key = next(records)
                values.append(value)
                keys.append(key)
            now = clock()
            for i in range(seq, due):
                sent[i] = now
            handles = await ops.send_many(topic, values, keys if args.keyed else None)  # type: ignore[arg-type]
            for i, handle in enumerate(handles, seq):
                on_done(handle, _ack_setter(log, i))
            out += handles
            seq = due
        while seq < due:
            value, key = next(records)
            sent[seq] = clock()
            handle = await ops.send(topic, value, key)
            on_done(handle, _ack_setter(log, seq))
            out.append(handle)
            seq += 1
        if seq < n:
            await _sleep(max(_MIN_SLEEP, t0 + seq / rate - clock()))


async def run_async(args: ClientArgs, meter: Meter, ops: AsyncOps) -> int:
    """Produce the workload ``args`` describes; returns the number of failed records.

    Several senders are tasks sharing one producer; sender ``j`` sends records ``j, j+S,
    j+2S, ...``. The window ends after ``flush()`` and the check of every handle.
    """
    handles: list[Any] = []
    meter.start()
    if args.rate:
        await _async_paced(ops, args, meter, handles)
    elif args.senders == 1:
        await _async_sender(ops, args, 0, 1, handles)
    else:
        parts: list[list[Any]] = [[] for _ in range(args.senders)]
        if _RUNNING_LOOP == "trio":
            import trio

            async with trio.open_nursery() as nursery:
                for j in range(args.senders):
                    nursery.start_soon(_async_sender, ops, args, j, args.senders, parts[j])
        else:
            await asyncio.gather(
                *(_async_sender(ops, args, j, args.senders, parts[j]) for j in range(args.senders))
            )
        for part in parts:
            handles += part
    await ops.flush()
    failed = await ops.count_failed(handles, meter)
    meter.stop()
    return failed


def _sync_sender(ops: SyncOps, args: ClientArgs, start: int, step: int, out: list[Any]) -> None:
    topic = args.topic
    send = ops.send
    append = out.append
    poll = ops.poll
    for value, key in iter_records(args.records, args.value_size, args.keyed, start, step):
        if poll is None:
            append(send(topic, value, key))
            continue
        while True:
            try:
                append(send(topic, value, key))
                break
            except BufferError:
                # librdkafka's queue is full: serve delivery reports, then try again.
                poll(1.0)
        poll(0)


def _sync_paced(ops: SyncOps, args: ClientArgs, meter: Meter, out: list[Any]) -> None:
    log = meter.latency = LatencyLog(args.records, args.rate, out_path=args.latency_out)
    topic, rate, n = args.topic, args.rate, args.records
    sent = log.sent
    clock = time.perf_counter
    poll = ops.poll
    records = iter_records(n, args.value_size, args.keyed)
    seq = 0
    log.started = t0 = clock()
    while seq < n:
        due = min(n, int((clock() - t0) * rate) + 1)
        while seq < due:
            value, key = next(records)
            sent[seq] = clock()
            while True:
                try:
                    handle = ops.send(topic, value, key)
                    break
                except BufferError:
                    if poll is None:
                        raise
                    poll(1.0)
            if ops.on_done is not None:
                ops.on_done(handle, _ack_setter(log, seq))
            out.append(handle)
            seq += 1
            if poll is not None:
                poll(0)
        if seq < n:
            delay = max(_MIN_SLEEP, t0 + seq / rate - clock())
            # librdkafka delivers reports only inside poll(), so it waits there, not asleep.
            if poll is not None:
                poll(delay)
            else:
                time.sleep(delay)


def run_sync(args: ClientArgs, meter: Meter, ops: SyncOps) -> int:
    """Like :func:`run_async`, for a blocking client; several senders are threads."""
    handles: list[Any] = []
    meter.start()
    if args.rate:
        _sync_paced(ops, args, meter, handles)
    elif args.senders == 1:
        _sync_sender(ops, args, 0, 1, handles)
    else:
        parts: list[list[Any]] = [[] for _ in range(args.senders)]
        errors: list[BaseException] = []

        def work(j: int) -> None:
            try:
                _sync_sender(ops, args, j, args.senders, parts[j])
            except BaseException as exc:  # reported below, in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(j,)) for j in range(args.senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        for part in parts:
            handles += part
    ops.flush()
    failed = ops.count_failed(handles, meter)
    meter.stop()
    return failed


def unavailable(client: str, reason: str) -> int:
    """Report that this client cannot run here (e.g. its library is missing)."""
    emit({"client": client, "unavailable": reason})
    return EXIT_UNAVAILABLE


# -- running and reporting --------------------------------------------------------------------


def emit(report: dict[str, Any]) -> None:
    """Print the report as the last line of stdout: the harness reads only that line."""
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()


def _report(
    client: str, library: str, args: ClientArgs, meter: Meter, errors: int, loop: str
) -> dict[str, Any]:
    return {
        "client": client,
        "library": library,
        "library_version": importlib.metadata.version(library),
        "python": platform.python_version(),
        "loop": loop,
        "records": args.records,
        "value_size": args.value_size,
        "compression": args.compression,
        "keyed": args.keyed,
        "senders": args.senders,
        "rate": args.rate,
        "errors": errors,
        "error_samples": meter.error_samples,
        "notes": meter.notes,
        **meter.result(),
    }


def main_sync(
    client: str,
    library: str,
    produce: Callable[[ClientArgs, Meter], int],
    argv: list[str] | None = None,
) -> int:
    """Entry point of a blocking client: parse arguments, produce, print the report."""
    args = parse_args(client, argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    meter = Meter(args.profile)
    errors = produce(args, meter)
    emit(_report(client, library, args, meter, errors, "threads"))
    return 0


def main_async(
    client: str,
    library: str,
    produce: Callable[[ClientArgs, Meter], Awaitable[int]],
    *,
    loop: Loop = "asyncio",
    argv: list[str] | None = None,
) -> int:
    """Entry point of an async client: run ``produce`` on ``loop``, then print the report."""
    args = parse_args(client, argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    meter = Meter(args.profile)
    global _RUNNING_LOOP
    _RUNNING_LOOP = loop

    async def run() -> int:
        return await produce(args, meter)

    if loop == "asyncio":
        errors = asyncio.run(run())
    elif loop == "uvloop":
        import uvloop

        errors = uvloop.run(run())
    elif loop == "trio":
        import trio

        errors = trio.run(run)
    else:  # pragma: no cover - Literal exhausts the choices
        raise ValueError(f"unknown loop {loop!r}")
    emit(_report(client, library, args, meter, errors, loop))
    return 0
