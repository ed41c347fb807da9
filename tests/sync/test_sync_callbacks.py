"""``DeliveryFuture.add_done_callback`` at each stage of a record: handed over but not yet
taken by the loop, taken but not delivered, and done; a callback that raises is logged
and harms no other (fault-free FakeCluster: what is checked is where callbacks run)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from aioproducer import DeliveryFuture, SyncProducer
from aioproducer.testing import FakeCluster


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=1)
        yield fc


def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_callbacks_run_once_at_every_stage_and_one_that_raises_harms_none(
    fake: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def noting(label: str) -> Callable[[DeliveryFuture], None]:
        def callback(future: DeliveryFuture) -> None:
            with lock:
                seen.append((label, future.result(0).offset, threading.current_thread().name))

        return callback

    def raising(_future: DeliveryFuture) -> None:
        raise RuntimeError("a bad callback")

    with SyncProducer(fake.bootstrap_servers, linger_ms=30_000) as producer:
        # Handed over: added at once, before the loop can have taken the record.
        first = producer.send("t", b"first")
        first.add_done_callback(raising)
        first.add_done_callback(noting("pending"))
        # Taken by the loop but lingering: not yet delivered.
        second = producer.send("t", b"second")
        _until(lambda: second._outcome() is not None)
        assert not second.done()
        second.add_done_callback(noting("taken"))
        second.add_done_callback(raising)
        assert seen == []
        with caplog.at_level(logging.ERROR, logger="aioproducer.sync"):
            producer.flush()
            _until(lambda: len(seen) == 2)
        # Done: runs at once, in the caller's thread.
        second.add_done_callback(noting("done"))
        loop_thread = seen[0][2]
    assert sorted(seen[:2]) == [("pending", 0, loop_thread), ("taken", 1, loop_thread)]
    assert loop_thread != threading.current_thread().name
    assert seen[2] == ("done", 1, threading.current_thread().name)
    raised = [r for r in caplog.records if "a DeliveryFuture callback raised" in r.getMessage()]
    assert len(raised) == 2
