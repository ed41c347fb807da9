"""An event loop in a daemon thread, for calling async code from synchronous code.

:class:`LoopRunner` is what :class:`~aioproducer.SyncProducer` runs on. It starts its
thread on first use, and a process that finds itself forked (its pid differs from the one
that started the loop) starts a loop of its own instead of touching the parent's: after
``fork()`` only the calling thread exists in the child, so the parent's loop thread is gone
there. The thread is a daemon thread so that it never keeps a process alive (PySpark's
Python workers, for one, never run interpreter shutdown).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["LoopRunner", "default_runner"]

T = TypeVar("T")


def _new_loop(use_uvloop: bool | None) -> asyncio.AbstractEventLoop:
    if use_uvloop is not False:
        try:
            import uvloop
        except ImportError:
            if use_uvloop:
                raise
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LoopRunner:
    """Owns one event loop running in a daemon thread; thread-safe and fork-safe.

    ``use_uvloop=None`` (the default) takes uvloop when it is installed, ``True`` requires
    it and ``False`` uses the standard asyncio loop. The loop starts lazily, on the first
    :meth:`call`, :meth:`submit` or :attr:`loop`.

    >>> runner = LoopRunner()
    >>> async def add(a, b):
    ...     return a + b
    >>> runner.call(add, 1, 2)
    3
    >>> runner.close()
    """

    def __init__(self, *, use_uvloop: bool | None = None, name: str = "aioproducer-loop") -> None:
        self._use_uvloop = use_uvloop
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._closed = False
        _RUNNERS.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock at fork() time; in the child
        # that thread does not exist and would never release it.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._loop is not None and self._pid == os.getpid():
            state = "running"
        else:
            state = "not started"
        return f"<LoopRunner {state}>"

    # -- starting ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether this process's loop thread is running."""
        return self._loop is not None and self._pid == os.getpid() and not self._closed

    @property
    def thread(self) -> threading.Thread | None:
        """This process's loop thread, if it has been started."""
        return self._thread if self._pid == os.getpid() else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """This process's event loop (started if needed)."""
        loop = self._loop
        if loop is not None and self._pid == os.getpid():
            return loop
        return self._start()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the LoopRunner is closed")
            pid = os.getpid()
            if self._loop is not None and self._pid == pid:
                return self._loop
            # A loop inherited over fork() has no thread behind it in this process: leave
            # it alone (closing it would close file descriptors the parent still uses the
            # twins of) and start a fresh one.
            loop = _new_loop(self._use_uvloop)
            running = threading.Event()
            thread = threading.Thread(
                target=self._run, args=(loop, running), name=self._name, daemon=True
            )
            thread.start()
            running.wait()
            self._loop, self._thread, self._pid = loop, thread, pid
            return loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, running: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(running.set)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                _cancel_remaining(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    # -- running coroutines ---------------------------------------------------------------

    def submit(
        self, async_fn: Callable[..., Awaitable[T]], *args: Any
    ) -> concurrent.futures.Future[T]:
        """Start ``async_fn(*args)`` on the loop; returns a ``concurrent.futures.Future``."""
        loop = self.loop
        if self.in_loop_thread():
            raise RuntimeError("LoopRunner.submit() was called from the loop's own thread")

        async def run() -> T:
            return await async_fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), loop)

    def call(self, async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``async_fn(*args)`` on the loop and return its result (or raise its error).

        If the calling thread is interrupted (``KeyboardInterrupt``) the coroutine is
        cancelled.
        """
        future = self.submit(async_fn, *args)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Schedule a plain ``callback(*args)`` on the loop from any thread."""
        self.loop.call_soon_threadsafe(callback, *args)

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this runner's loop thread."""
        return self._pid == os.getpid() and threading.current_thread() is self._thread

    # -- closing ----------------------------------------------------------------------------

    def close(self, timeout: float | None = 10.0) -> None:
        """Cancel what still runs on the loop, stop it and join its thread. Idempotent.

        Not to be called from the loop's own thread.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread, pid = self._loop, self._thread, self._pid
            self._loop = self._thread = None
        if loop is None or thread is None or pid != os.getpid():
            return
        if threading.current_thread() is thread:
            raise RuntimeError("LoopRunner.close() was called from the loop's own thread")
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


_default: LoopRunner | None = None
_default_lock = threading.Lock()
_RUNNERS: weakref.WeakSet[LoopRunner] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    global _default_lock
    _default_lock = threading.Lock()
    for runner in list(_RUNNERS):
        runner._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def default_runner() -> LoopRunner:
    """The process-wide runner that :class:`~aioproducer.SyncProducer` uses by default.

    One loop thread per process serves every producer that does not bring its own runner;
    a forked child gets a fresh loop on first use.
    """
    global _default
    runner = _default
    if runner is not None and not runner.closed:
        return runner
    with _default_lock:
        if _default is None or _default.closed:
            _default = LoopRunner(name="aioproducer-default-loop")
        return _default
