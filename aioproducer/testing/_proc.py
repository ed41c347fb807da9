"""Starting child processes that cannot outlive the Python process that started them.

Three layers keep broker JVMs from lingering:

* every child is the leader of a new session and process group, so signals can be sent to
  the whole group and a terminal's Ctrl-C does not reach the JVMs behind the owner's back;
* on Linux every child asks the kernel for ``SIGKILL`` when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``), which covers the owner being SIGKILLed or crashing;
* the owner stops its children explicitly (``stop()``, context exit, ``atexit``).

``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the process.
Children are therefore forked from one long-lived daemon thread: forking from a short-lived
worker (``asyncio.to_thread``, an anyio worker, a pytest-timeout thread) would get the broker
killed as soon as that worker retired.

On macOS and other systems without ``prctl`` only the first and last layers apply: a broker
survives if its owner is killed with SIGKILL and must then be stopped by hand; its pid (also
its process group id) is in ``<work dir>/node-<id>/broker.pid``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

__all__ = ["signal_group", "spawn", "wait_stopped"]

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return prctl


# Resolved once in the parent: the child between fork and exec must not import or look up
# symbols (other threads may have held the import lock or malloc locks at fork time).
_PRCTL = _load_prctl()


def _make_preexec(parent_pid: int) -> Callable[[], None] | None:
    prctl = _PRCTL
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The parent may have died between fork() and prctl(); then nobody would ever
        # deliver the death signal.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class _Spawner:
    """Runs every ``Popen`` on one daemon thread that lives as long as the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def _run(self) -> None:
        while True:
            func, future = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(func())
            except BaseException as exc:
                future.set_exception(exc)

    def submit(self, func: Callable[[], Any]) -> Any:
        with self._lock:
            # After fork() the thread does not exist in the child process.
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="aioproducer-kafka-spawner", daemon=True
                )
                self._thread.start()
            future: Future[Any] = Future()
            self._queue.put((func, future))
        return future.result()


_SPAWNER = _Spawner()


def spawn(
    args: Sequence[str],
    *,
    cwd: Path,
    stdout: IO[bytes] | int,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start *args* in a new process group that dies with this process (on Linux)."""
    preexec = _make_preexec(os.getpid())

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(args),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
        )

    proc: subprocess.Popen[bytes] = _SPAWNER.submit(start)
    return proc


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> bool:
    """Send *signum* to the process group led by *proc*; False if it is already gone.

    Signalling a group whose leader has been reaped could hit an unrelated group that
    reused the id, so nothing is sent once ``proc`` has been waited for.
    """
    if proc.returncode is not None:
        return False
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A zombie group leader can make killpg fail on some systems; the process itself
        # is still ours.
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            return False
    return True


def wait_stopped(pid: int, timeout: float = 5.0) -> bool:
    """Wait until every thread of ``pid`` is stopped (state ``T``) after SIGSTOP.

    ``kill()`` returns before the signal has reached each thread, so a busy JVM can still
    answer a request or two right after it; a pause must mean "answers nothing". Returns
    False where ``/proc`` is not available (the caller then cannot be sure).
    """
    task_dir = f"/proc/{pid}/task"
    if not os.path.isdir(task_dir):
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = False
        try:
            for tid in os.listdir(task_dir):
                try:
                    with open(f"{task_dir}/{tid}/stat", "rb") as fh:
                        stat = fh.read()
                except FileNotFoundError:
                    continue  # the thread exited
                # The state follows the parenthesised command name, which may hold spaces.
                state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]
                if state not in (b"T", b"t", b"Z", b"X"):
                    running = True
                    break
        except FileNotFoundError:
            return True  # the process is gone
        if not running:
            return True
        time.sleep(0.002)
    return False
