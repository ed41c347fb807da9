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
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.metadata
import json
import logging
import platform
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BATCH_SIZE",
    "LINGER_MS",
    "SEQ_DIGITS",
    "ClientArgs",
    "Meter",
    "count_failed_futures",
    "emit",
    "iter_chunks",
    "iter_values",
    "main_async",
    "main_sync",
    "make_value",
    "parse_args",
    "parse_seq",
]

#: Settings every client gets (where it has the setting): Kafka 4.x Java producer defaults.
LINGER_MS = 5
BATCH_SIZE = 16384

#: Every value starts with its sequence number as this many ASCII digits.
SEQ_DIGITS = 12
_FILLER = b"."

Loop = Literal["asyncio", "uvloop", "trio"]


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
    ns = parser.parse_args(argv)
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
    )


# -- record values ----------------------------------------------------------------------------


def make_value(seq: int, size: int) -> bytes:
    """The value of record ``seq``: its sequence number in ASCII, padded to ``size`` bytes.

    Values are built while producing (not up front) so that peak RSS shows what the client
    buffers rather than a pre-built list of every value; the cost is the same for all.
    """
    return b"%0*d" % (SEQ_DIGITS, seq) + _FILLER * (size - SEQ_DIGITS)


def parse_seq(value: bytes) -> int:
    """The sequence number a value made by :func:`make_value` carries."""
    return int(value[:SEQ_DIGITS])


def iter_values(records: int, size: int) -> Iterator[bytes]:
    """The values of records ``0 .. records-1``, one at a time."""
    filler = _FILLER * (size - SEQ_DIGITS)
    for seq in range(records):
        yield b"%0*d" % (SEQ_DIGITS, seq) + filler


def iter_chunks(records: int, size: int, chunk: int) -> Iterator[list[bytes]]:
    """The same values as :func:`iter_values`, in lists of at most ``chunk``."""
    filler = _FILLER * (size - SEQ_DIGITS)
    for start in range(0, records, chunk):
        yield [
            b"%0*d" % (SEQ_DIGITS, seq) + filler
            for seq in range(start, min(start + chunk, records))
        ]


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
        return {
            "elapsed_s": self._t1 - self._t0,
            "cpu_user_s": ru1.ru_utime - ru0.ru_utime,
            "cpu_sys_s": ru1.ru_stime - ru0.ru_stime,
            "rss_at_start_mib": self._rss0,
            "peak_rss_mib": _peak_rss_mib(ru1),
            "ru_maxrss_mib": _maxrss_mib(ru1),
        }


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
        "errors": errors,
        "error_samples": meter.error_samples,
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
