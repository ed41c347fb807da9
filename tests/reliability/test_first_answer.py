"""first_answer: ask brokers in turn, without waiting out one that never answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from aioproducer.errors import AuthenticationError
from aioproducer.errors import ConnectionError as KafkaConnectionError
from aioproducer.hedge import first_answer

pytestmark = pytest.mark.anyio

_NEVER = 3600.0


def _attempt(
    log: list[str], name: str, delay: float, result: str | Exception
) -> Callable[[], Awaitable[str]]:
    async def attempt() -> str:
        log.append(f"start {name}")
        await anyio.sleep(delay)
        if isinstance(result, Exception):
            raise result
        return result

    return attempt


async def test_a_silent_first_broker_is_hedged_and_the_first_answer_wins() -> None:
    log: list[str] = []
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            got = await first_answer(
                [_attempt(log, "silent", _NEVER, "stale"), _attempt(log, "b", 0, "fresh")],
                0.05,
                tg,
            )
        assert got == "fresh"
        assert log == ["start silent", "start b"]
        tg.cancel_scope.cancel()  # the silent attempt still runs in the background


async def test_a_failure_moves_on_at_once_and_the_last_failure_is_raised() -> None:
    log: list[str] = []
    boom = KafkaConnectionError("refused")
    last = KafkaConnectionError("also refused")
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError) as info:
            # A hedge delay of an hour: only failing at once can reach the second attempt.
            await first_answer(
                [_attempt(log, "a", 0, boom), _attempt(log, "b", 0, last)], _NEVER, tg
            )
    assert info.value is last
    assert log == ["start a", "start b"]


async def test_a_rejected_credential_is_raised_without_asking_further() -> None:
    log: list[str] = []
    rejected = AuthenticationError("bad password")
    async with anyio.create_task_group() as tg:
        with pytest.raises(AuthenticationError):
            await first_answer(
                [_attempt(log, "a", 0, rejected), _attempt(log, "b", 0, "fine")], _NEVER, tg
            )
    assert log == ["start a"]


async def test_an_unexpected_error_is_not_swallowed() -> None:
    async with anyio.create_task_group() as tg:
        with pytest.raises(ZeroDivisionError):
            await first_answer([_attempt([], "a", 0, ZeroDivisionError("bug"))], 1.0, tg)
