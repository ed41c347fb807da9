"""What a test cluster borrows from the machine, and how it is handed back: free ports on
the loopback address, temporary work directories (including those left behind by an owner
that died), and the clusters still running when the interpreter exits.

Package-internal: every name in ``__all__`` is its interface.

A temporary work dir is ``<tmp>/aioproducer-kafka-*`` holding ``owner.pid`` (the Python
process that made it) and one ``node-<id>/`` directory per broker, with ``broker.pid`` while
that broker runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Protocol

__all__ = [
    "HOST",
    "Stoppable",
    "broker_pid_file",
    "free_ports",
    "new_work_dir",
    "node_dir",
    "register",
    "unregister",
]

#: The address every broker listens on and advertises.
HOST = "127.0.0.1"

_TEMP_PREFIX = "aioproducer-kafka-"
_OWNER_FILE = "owner.pid"
_NODE_PREFIX = "node-"
_PID_FILE = "broker.pid"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (the OS picks them)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def node_dir(work_dir: Path, node_id: int) -> Path:
    """The directory of node ``node_id`` inside ``work_dir``."""
    return work_dir / f"{_NODE_PREFIX}{node_id}"


def broker_pid_file(directory: Path) -> Path:
    """The file that holds the pid of the broker running in node directory ``directory``."""
    return directory / _PID_FILE


def new_work_dir() -> Path:
    """A new temporary work dir owned by this process.

    Work dirs of owners that died without cleaning up are removed first.
    """
    _remove_stale_work_dirs()
    work_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
    (work_dir / _OWNER_FILE).write_text(f"{os.getpid()}\n", encoding="ascii")
    return work_dir


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed orphan stays a zombie until init reaps it; it is dead all the same.
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:
        return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _remove_stale_work_dirs() -> None:
    """Delete temporary work dirs whose owning Python process died without cleaning up.

    That happens when the owner is SIGKILLed: the kernel kills its brokers, but nobody
    removes their data. A directory is only removed when its owner and all its brokers are
    gone; one without an owner file (still being created) is left alone.
    """
    for candidate in Path(tempfile.gettempdir()).glob(_TEMP_PREFIX + "*"):
        owner = _read_pid(candidate / _OWNER_FILE)
        if owner is None or _pid_alive(owner):
            continue
        brokers = (_read_pid(p) for p in candidate.glob(f"{_NODE_PREFIX}*/{_PID_FILE}"))
        if any(pid is not None and _pid_alive(pid) for pid in brokers):
            continue
        shutil.rmtree(candidate, ignore_errors=True)


# -- process-wide registry: whatever is still running at interpreter exit gets stopped --------


class Stoppable(Protocol):
    """Something that holds processes and lets them go on :meth:`stop`."""

    def stop(self) -> None:
        """Stop its processes; safe to call more than once."""


# Each running cluster, with the pid of the process that may stop it: a forked child
# inherits this registry but not the right to stop its parent's brokers.
_LIVE: dict[Stoppable, int] = {}
_LIVE_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def register(cluster: Stoppable, owner_pid: int) -> None:
    """Stop ``cluster`` at interpreter exit of process ``owner_pid`` unless it is
    :func:`unregister`-ed first."""
    global _ATEXIT_REGISTERED
    with _LIVE_LOCK:
        _LIVE[cluster] = owner_pid
        if not _ATEXIT_REGISTERED:
            atexit.register(_stop_all)
            _ATEXIT_REGISTERED = True


def unregister(cluster: Stoppable) -> None:
    """Forget ``cluster``: it has stopped."""
    with _LIVE_LOCK:
        _LIVE.pop(cluster, None)


def _stop_all() -> None:
    with _LIVE_LOCK:
        clusters = [c for c, owner in _LIVE.items() if owner == os.getpid()]
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.stop()
