"""A done-callback that raises harms nothing but itself.

Callbacks added to a :class:`~aioproducer.DeliveryHandle` or a
:class:`~aioproducer.BulkDelivery` run on the producer's loop, inside the completion of a
batch. An error there used to escape into the sender's task, stopping the producer and
skipping the batch's other callbacks; it is now logged to the ``aioproducer`` logger and
everything else goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import BulkDelivery, DeliveryHandle, Producer
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=1)
        yield fc


def _boom(_arg: Any) -> None:
    raise ValueError("callback failed on purpose")


async def test_a_raising_handle_callback_is_logged_and_harms_no_other_record(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def note(handle: DeliveryHandle) -> None:
        seen.append(handle.result().offset)

    caplog.set_level(logging.ERROR, logger="aioproducer")
    async with Producer(fake.bootstrap_servers, linger_ms=50) as producer:
        # One batch: the raising callback sits between two others of the same batch.
        first = await producer.send("t", b"a")
        second = await producer.send("t", b"b")
        third = await producer.send("t", b"c")
        first.add_done_callback(note)
        second.add_done_callback(_boom)
        third.add_done_callback(note)
        assert [(await h).offset for h in (first, second, third)] == [0, 1, 2]
        # The producer still works after the error.
        assert (await (await producer.send("t", b"d"))).offset == 3
        # A callback added once the record is done runs at once, and is logged the same.
        third.add_done_callback(_boom)
    assert seen == [0, 2]
    errors = [r for r in caplog.records if "DeliveryHandle done-callback raised" in r.message]
    assert len(errors) == 2
    assert all(isinstance(r.exc_info[1], ValueError) for r in errors if r.exc_info)
    assert [r.value for r in fake.records("t", 0)] == [b"a", b"b", b"c", b"d"]


async def test_a_raising_bulk_callback_is_logged_and_the_others_run(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    def note(bulk: BulkDelivery) -> None:
        ran.append(bulk.delivered)

    caplog.set_level(logging.ERROR, logger="aioproducer")
    async with Producer(fake.bootstrap_servers, linger_ms=5) as producer:
        bulk = await producer.send_bulk("t", [b"x", b"y", b"z"])
        bulk.add_done_callback(_boom)
        bulk.add_done_callback(note)
        await bulk
        assert (await (await producer.send("t", b"after"))).offset == 3
    assert ran == [3]
    assert any("BulkDelivery done-callback raised" in r.message for r in caplog.records)
