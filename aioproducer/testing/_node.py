"""One node of a test cluster: its directory, storage, JVM process and log.

Package-internal: :class:`Node`, :func:`format_storage` and :func:`log_excerpt` are its
interface.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ._host import HOST, broker_pid_file
from ._install import KafkaSetupError, file_tail
from ._proc import signal_group, spawn

__all__ = ["Node", "format_storage", "log_excerpt"]


@dataclass
class Node:
    """A combined broker+controller node: where it lives, its ports and its process."""

    node_id: int
    broker_port: int
    controller_port: int
    directory: Path
    #: The address its listeners bind and advertise.
    host: str = HOST
    #: Port of each extra client listener, by listener name.
    listener_ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    log_offset: int = 0
    _log_handle: IO[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.broker_port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def open_log(self) -> IO[bytes]:
        self.close_log()
        handle = open(self.log_path, "ab")  # noqa: SIM115 - owned by the node until it stops
        self.log_offset = handle.tell()
        self._log_handle = handle
        return handle

    def recent_log(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self.log_offset)
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def launch(self, command: list[str]) -> None:
        """Start the node's JVM with ``command``, its output appended to :attr:`log_path`."""
        log = self.open_log()
        try:
            self.proc = spawn(command, cwd=self.directory, stdout=log)
        except OSError as exc:
            self.close_log()
            raise KafkaSetupError(f"could not start {command[0]}: {exc}") from exc
        self.paused = False
        broker_pid_file(self.directory).write_text(f"{self.proc.pid}\n", encoding="ascii")

    def stop(self, *, graceful: bool, timeout: float) -> None:
        """Stop the JVM and reap it: SIGTERM and up to ``timeout`` seconds to exit if
        ``graceful``, then SIGKILL. A paused JVM is continued first so that it can exit."""
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                if self.paused:
                    signal_group(proc, signal.SIGCONT)
                if graceful:
                    signal_group(proc, signal.SIGTERM)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=timeout)
                signal_group(proc, signal.SIGKILL)
            proc.wait()
        self.proc = None
        self.paused = False
        self.close_log()
        with contextlib.suppress(OSError):
            broker_pid_file(self.directory).unlink()


def format_storage(
    nodes: Sequence[Node], command: Callable[[Node, str], list[str]], timeout: float
) -> None:
    """Format the data directory of every node that has none yet (all in parallel).

    ``command(node, cluster_id)`` is the ``StorageTool format`` command line for a node. The
    cluster id is the one already on disk, if any node has one, or else a new one.
    """
    pending = [n for n in nodes if not (n.data_dir / "meta.properties").exists()]
    if not pending:
        return
    cluster_id = _existing_cluster_id(nodes) or _new_cluster_id()
    running: list[tuple[Node, subprocess.Popen[bytes], Path]] = []
    try:
        for node in pending:
            log_path = node.directory / "format.log"
            with open(log_path, "wb") as log:
                proc = spawn(command(node, cluster_id), cwd=node.directory, stdout=log)
            running.append((node, proc, log_path))
        deadline = time.monotonic() + timeout
        for node, proc, log_path in running:
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise KafkaSetupError(
                    f"formatting the storage of node {node.node_id} timed out; "
                    f"last lines of its output:\n{file_tail(log_path, 30)}"
                ) from None
            if code != 0:
                raise KafkaSetupError(
                    f"formatting the storage of node {node.node_id} failed "
                    f"(exit code {code}); last lines of its output:\n{file_tail(log_path, 30)}"
                )
    finally:
        for _, proc, _ in running:
            if proc.poll() is None:
                signal_group(proc, signal.SIGKILL)
                proc.wait()


def _existing_cluster_id(nodes: Sequence[Node]) -> str | None:
    for node in nodes:
        meta = node.data_dir / "meta.properties"
        with contextlib.suppress(OSError):
            for line in meta.read_text(encoding="latin-1").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id" and value.strip():
                    return value.strip()
    return None


def _new_cluster_id() -> str:
    """A random Kafka ``Uuid`` string, as ``kafka-storage.sh random-uuid`` prints it."""
    while True:
        raw = os.urandom(16)
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue  # reserved by Kafka (ZERO_UUID, ONE_UUID)
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        # Kafka re-rolls ids that would look like a command-line option.
        if not text.startswith("-"):
            return text


def log_excerpt(text: str, *, tail: int = 30) -> str:
    """The error lines of a broker log followed by its last lines: the cause is usually in
    the former, while the latter are mostly shutdown chatter and stack frames."""
    lines = text.splitlines()
    errors: list[str] = []
    for line in lines:
        stripped = line.strip()
        if (
            " ERROR " in line
            or " FATAL " in line
            or stripped.startswith(("Caused by:", "Error:", "Exception in thread"))
        ) and stripped not in errors:
            errors.append(stripped)
    parts = []
    if errors:
        parts.append("Errors logged:\n  " + "\n  ".join(errors[:10]))
    parts.append(f"Last {min(tail, len(lines))} lines:\n" + "\n".join(lines[-tail:]))
    return "\n".join(parts)
