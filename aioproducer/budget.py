"""The ``buffer_memory`` budget: how many bytes buffered records may take, and who waits.

:class:`MemoryBudget` is the only writer of its ``used`` count: reservations, releases and
charges all go through its methods, which run on the producer's loop. Other threads may
read ``used`` and ``limit`` (a plain int read) to decide whether to hand records over.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

import anyio

from .errors import BufferFullError, ProducerClosedError

__all__ = ["MemoryBudget"]


class MemoryBudget:
    """The ``buffer_memory`` byte budget shared by all partitions.

    Waiters are served strictly first come, first served, and a release wakes only the
    waiters whose request now fits, with the bytes already handed to them, so a freed batch
    never wakes every blocked sender at once to fight over it.
    """

    __slots__ = ("_waiters", "closed", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes reserved now. Only the methods below change it (on the loop).
        self.used = 0
        self.closed = False
        # [bytes wanted, event, granted]
        self._waiters: collections.deque[list[Any]] = collections.deque()

    @property
    def available(self) -> int:
        """Bytes not reserved by anyone."""
        return self.limit - self.used

    @property
    def waiters(self) -> int:
        """Number of senders waiting for space."""
        return len(self._waiters)

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` now if that is possible without overtaking a waiter."""
        if self._waiters or self.used + nbytes > self.limit:
            return False
        self.used += nbytes
        return True

    async def reserve(self, nbytes: int, timeout: float) -> None:
        """Reserve ``nbytes``, waiting in line up to ``timeout`` seconds (BufferFullError)."""
        if self.closed:
            raise ProducerClosedError("the producer is closed")
        if self.try_reserve(nbytes):
            return
        waiter: list[Any] = [nbytes, anyio.Event(), False]
        self._waiters.append(waiter)
        try:
            with anyio.move_on_after(timeout):
                await waiter[1].wait()
        except BaseException:
            # Cancelled: give back what may already have been handed to us, so a cancelled
            # send() leaves nothing behind.
            self._leave(waiter)
            raise
        if not waiter[2]:
            self._leave(waiter)
            if self.closed:
                raise ProducerClosedError("the producer was closed while waiting for buffer space")
            raise BufferFullError(
                f"no room in buffer_memory ({self.limit} bytes) for {nbytes} bytes "
                f"within max_block_ms ({timeout * 1000:.0f} ms)"
            )

    def _leave(self, waiter: list[Any]) -> None:
        if waiter[2]:
            waiter[2] = False
            self.release(waiter[0])
            return
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)
        # We may have been the one holding up the line.
        self._serve()

    def close(self) -> None:
        """Refuse further waits and wake every waiter empty-handed."""
        self.closed = True
        waiters, self._waiters = self._waiters, collections.deque()
        for waiter in waiters:
            waiter[1].set()

    def charge(self, nbytes: int) -> None:
        """Take ``nbytes`` whether or not they fit: bytes admitted before they got here (a
        new batch's header, records other threads admitted against :attr:`used`)."""
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        """Return ``nbytes`` to the budget and serve waiters that now fit."""
        self.used -= nbytes
        if self._waiters:
            self._serve()

    def _serve(self) -> None:
        waiters = self._waiters
        while waiters and self.used + waiters[0][0] <= self.limit:
            waiter = waiters.popleft()
            self.used += waiter[0]
            waiter[2] = True
            waiter[1].set()
