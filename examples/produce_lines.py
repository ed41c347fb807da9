"""Send each line of a file or of stdin to a topic, then print a delivery summary.

    seq 1000 | python examples/produce_lines.py --topic numbers   # starts a local broker
    python examples/produce_lines.py events.jsonl --json --key-field user \\
        --topic events --bootstrap-servers host:9092

One line is one record, without its line ending. With ``--json`` every non-blank line must
be valid JSON and is sent as it is; ``--key-field user`` keys each record by the object's
``user`` field, so all records of a user land on one partition, in input order. A progress
bar is drawn on stderr when it is a terminal (``--quiet`` turns it off). The exit status
is 1 if any record failed: the summary shows how many and the first error, for example a
line longer than the producer's ``max_request_size`` (1 MiB by default). Ctrl-C stops
reading; what was read is still delivered and summed up, and the exit status is 130.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import queue
import signal
import stat
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread
from _local import add_broker_argument, kafka

from aioproducer import DeliveryHandle, KafkaError, Producer, RecordTooLargeError


class InputError(ValueError):
    """A line that cannot become a record."""


@dataclass
class Summary:
    """Every line's outcome, counted as it arrives."""

    lines: int = 0
    delivered: int = 0
    failed: int = 0
    per_partition: Counter[int] = field(default_factory=Counter)
    first_error: str | None = None
    interrupted: bool = False

    def fail(self, line_no: int, error: BaseException) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"line {line_no}: {type(error).__name__}: {error}"

    def on_done(self, line_no: int, handle: DeliveryHandle) -> None:
        """Record a delivery outcome (called once per record, when its batch completes)."""
        error = handle.exception()
        if error is None:
            self.delivered += 1
            self.per_partition[handle.partition] += 1
        else:
            self.fail(line_no, error)

    def report(self, topic: str) -> None:
        partitions = ", ".join(f"{p}: {n:,}" for p, n in sorted(self.per_partition.items()))
        print(f"topic        {topic}")
        print(f"delivered    {self.delivered:,} of {self.lines:,} lines")
        print(f"failed       {self.failed:,}")
        print(f"partitions   {partitions or '-'}")
        if self.first_error:
            print(f"first error  {self.first_error}")
        if self.interrupted:
            print("stopped      by Ctrl-C; the rest of the input was not read")


class LineReader:
    """The lines of a file or pipe, read in chunks on a thread of its own.

    The thread keeps the event loop, and so the producer, running while the input is slow;
    ``os.read`` returns what is available rather than waiting for a full chunk, so lines
    arriving through a pipe are sent as they come. The thread is a daemon and reads the
    descriptor, not the buffered stream: a read waiting on a quiet pipe when the user
    presses Ctrl-C can be left behind without holding up the exit or the stream's close.
    """

    def __init__(self, stream: io.BufferedReader) -> None:
        self._stream = stream
        info = os.fstat(stream.fileno())
        self.size = info.st_size if stat.S_ISREG(info.st_mode) else None
        self.bytes_read = 0
        self._chunks: queue.Queue[bytes] = queue.Queue(maxsize=4)
        self._stopped = False

    def _read(self) -> None:
        fd = self._stream.fileno()
        while chunk := os.read(fd, 1 << 16):
            self._chunks.put(chunk)
        self._chunks.put(b"")

    def stop(self) -> None:
        """End :meth:`lines` now, even if the input is a pipe that stays open and quiet."""
        self._stopped = True
        with contextlib.suppress(queue.Full):  # a full queue: the next get does not wait
            self._chunks.put_nowait(b"")

    async def lines(self) -> AsyncGenerator[bytes, None]:
        threading.Thread(target=self._read, name="line-reader", daemon=True).start()
        rest = b""
        while chunk := await anyio.to_thread.run_sync(self._chunks.get):
            if self._stopped:
                return  # what is left of an interrupted input is not sent
            self.bytes_read += len(chunk)
            *complete, rest = (rest + chunk).split(b"\n")
            for line in complete:
                yield line.removesuffix(b"\r")
        if rest and not self._stopped:
            yield rest.removesuffix(b"\r")


class Progress:
    """A one-line progress bar on stderr, redrawn at most five times a second."""

    def __init__(self, summary: Summary, reader: LineReader) -> None:
        self._summary = summary
        self._reader = reader
        self._started = self._drawn = time.monotonic()

    def update(self) -> None:
        if time.monotonic() - self._drawn >= 0.2:
            self.draw()

    def draw(self) -> None:
        self._drawn = time.monotonic()
        s, size = self._summary, self._reader.size
        rate = s.delivered / max(time.monotonic() - self._started, 1e-3)
        bar = ""
        if size:  # a regular file (also as stdin) has a known size; a pipe does not
            done = min(1.0, self._reader.bytes_read / size)
            bar = f"[{'#' * int(30 * done):.<30}] {done:4.0%} "
        sys.stderr.write(
            f"\r{bar}{s.lines:,} lines, {s.delivered:,} delivered, {s.failed:,} failed, "
            f"{rate:,.0f}/s "
        )
        sys.stderr.flush()

    def finish(self) -> None:
        self.draw()
        sys.stderr.write("\n")


def to_record(line: bytes, key_field: str | None) -> tuple[str | None, bytes]:
    """The key and value of a JSON line (the value is the line itself, unchanged)."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc})") from None
    if key_field is None:
        return None, line
    if not isinstance(obj, dict) or key_field not in obj:
        raise InputError(f"no field {key_field!r} in {line[:80]!r}")
    key = obj[key_field]
    if key is None or isinstance(key, str):  # null: a record without a key
        return key, line
    return json.dumps(key, separators=(",", ":")), line


async def stop_reading_on_ctrl_c(
    reader: LineReader,
    summary: Summary,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Turn the first Ctrl-C into the end of the input (a second one interrupts at once)."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            summary.interrupted = True
            reader.stop()
            return


async def send_lines(
    producer: Producer,
    reader: LineReader,
    args: argparse.Namespace,
    summary: Summary,
    progress: Progress | None,
) -> None:
    async with contextlib.aclosing(reader.lines()) as lines:
        async for line in lines:
            if progress:
                progress.update()
            if args.json and not line.strip():
                continue  # blank lines are common at the end of JSON-lines files
            summary.lines += 1
            try:
                key, value = to_record(line, args.key_field) if args.json else (None, line)
                # send() returns as soon as the record is buffered; outcomes arrive through
                # the callback, a whole batch at a time.
                handle = await producer.send(args.topic, value, key=key)
            except (InputError, RecordTooLargeError) as exc:
                summary.fail(summary.lines, exc)  # this line alone fails
                continue
            handle.add_done_callback(functools.partial(summary.on_done, summary.lines))


async def produce(
    args: argparse.Namespace, stream: io.BufferedReader, bootstrap_servers: str
) -> Summary:
    summary = Summary()
    reader = LineReader(stream)
    progress = None if args.quiet or not sys.stderr.isatty() else Progress(summary, reader)
    async with Producer(bootstrap_servers, client_id="produce-lines") as producer:
        async with anyio.create_task_group() as tg:
            await tg.start(stop_reading_on_ctrl_c, reader, summary)
            await send_lines(producer, reader, args, summary, progress)
            tg.cancel_scope.cancel()  # the input has ended: stop watching for Ctrl-C
        await producer.flush()
    if progress:
        progress.finish()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("input", nargs="?", default="-", help="a file (default: stdin)")
    parser.add_argument("--topic", default="lines")
    parser.add_argument("--json", action="store_true", help="each line is a JSON document")
    parser.add_argument("--key-field", help="with --json: the field that holds the key")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_broker_argument(parser)
    args = parser.parse_args()
    if args.key_field and not args.json:
        parser.error("--key-field needs --json")
    try:
        # Opened here, so that a missing file is reported before any broker is started.
        stream = open(sys.stdin.fileno() if args.input == "-" else args.input, "rb")  # noqa: SIM115
    except OSError as exc:
        parser.error(str(exc))
    with stream, kafka(args.bootstrap_servers, args.topic) as bootstrap_servers:
        try:
            summary = anyio.run(produce, args, stream, bootstrap_servers)
        except KafkaError as exc:  # no broker reachable, the topic does not exist, ...
            sys.exit(f"error: {exc}")
    summary.report(args.topic)
    if summary.interrupted:
        sys.exit(128 + signal.SIGINT)  # what a shell expects of a program ended by Ctrl-C
    sys.exit(1 if summary.failed else 0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # before the producer ran (starting the local broker), or twice
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
