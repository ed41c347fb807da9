"""Ask brokers in turn without waiting out one that never answers.

A metadata refresh asks the least loaded broker first. A broker that takes requests but
never answers them (stopped with SIGSTOP, swamped, or reached through an idle bootstrap
connection) would hold the refresh for a whole request timeout, while the healthy brokers
already know where its partitions moved. :func:`first_answer` asks the next broker as soon
as an attempt fails, or when none has answered within a hedge delay, and returns the first
answer. Attempts still running then finish in the background and their outcomes are
dropped: cancelling them would also cancel a connection attempt other tasks may wait on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from .errors import AuthenticationError, KafkaError

__all__ = ["first_answer"]

T = TypeVar("T")


async def first_answer(
    attempts: Sequence[Callable[[], Awaitable[T]]],
    hedge_s: float,
    task_group: anyio.abc.TaskGroup,
) -> T:
    """The result of the first of ``attempts`` to succeed.

    Attempt ``i + 1`` starts when every earlier one has failed with a retriable
    :class:`KafkaError` or ``hedge_s`` seconds after the latest start, whichever comes first.
    An :class:`AuthenticationError` or an exception that is not a :class:`KafkaError` is
    raised at once; if every attempt fails, the last failure is raised. Attempts run in
    ``task_group`` so that those still running when this returns may finish there.
    """
    if not attempts:
        raise ValueError("first_answer needs at least one attempt")
    send, receive = anyio.create_memory_object_stream[tuple[bool, Any]](len(attempts))

    async def run(attempt: Callable[[], Awaitable[T]], out: MemoryObjectSendStream[Any]) -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, await attempt())
        except Exception as exc:
            outcome = (False, exc)
        # Once an answer was taken the receiver is closed: later outcomes are dropped.
        with out, contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            out.send_nowait(outcome)

    started = finished = 0
    start_next = True
    with send, receive:
        while True:
            if start_next and started < len(attempts):
                task_group.start_soon(run, attempts[started], send.clone())
                started += 1
            start_next = False
            wait = hedge_s if started < len(attempts) else math.inf
            outcome: tuple[bool, Any] | None = None
            with anyio.move_on_after(wait):
                outcome = await receive.receive()
            # The hedge delay passed, or an attempt failed: ask the next broker too.
            start_next = True
            if outcome is None:
                continue
            finished += 1
            ok, value = outcome
            if ok:
                return cast(T, value)
            if isinstance(value, AuthenticationError) or not isinstance(value, KafkaError):
                raise value
            if finished == len(attempts):
                raise value
