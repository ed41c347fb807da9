"""A broker that cannot be reached is reported once, in plain words, not once per retry."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from aioproducer import Producer
from aioproducer.cluster import _UnreachableLog, _why_unreachable
from aioproducer.errors import ConnectionError, KafkaTimeoutError


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("aioproducer") and r.levelno >= logging.WARNING
    ]


@pytest.mark.anyio
async def test_unreachable_bootstrap_gives_one_plain_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aioproducer")
    address = f"127.0.0.1:{unused_port()}"
    # Long enough for many connection attempts (the reconnect backoff tops out at 1 s) and
    # for the producer id request to fail more than five times.
    async with Producer(address, max_block_ms=3000) as producer:
        with pytest.raises(KafkaTimeoutError, match="no broker reachable"):
            await producer.send("any-topic", b"v")

    assert warnings_of(caplog) == [
        f"cannot connect to {address} (connection refused): is Kafka running there?"
    ]
    # Every attempt is still there for whoever turns on DEBUG.
    attempts = [r for r in caplog.records if "connecting to node" in r.getMessage()]
    assert len(attempts) >= 3
    assert all(r.levelno == logging.DEBUG for r in attempts)


def test_repeats_are_rate_limited_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    refused = refused_error("127.0.0.1:1")
    log = _UnreachableLog(interval=0.2)
    for _ in range(5):
        log.failed("127.0.0.1:1", refused)
    log.failed("127.0.0.1:2", refused)  # another address has its own schedule
    time.sleep(0.25)
    log.failed("127.0.0.1:1", refused)
    log.connected("127.0.0.1:1")
    log.connected("127.0.0.1:3")  # never failed: nothing to say

    assert [r.getMessage() for r in caplog.records] == [
        "cannot connect to 127.0.0.1:1 (connection refused): is Kafka running there?",
        "cannot connect to 127.0.0.1:2 (connection refused): is Kafka running there?",
        "cannot connect to 127.0.0.1:1 (connection refused): is Kafka running there?"
        " (4 more failed attempts since the last warning)",
        "connected to 127.0.0.1:1",
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 3 + [logging.INFO]


def refused_error(address: str) -> ConnectionError:
    # Built as the connection builds it: raised from None inside the handler of the
    # OSError that anyio raises from the per-address errors.
    try:
        try:
            raise OSError("All connection attempts failed") from ConnectionRefusedError(
                111, "Connect call failed"
            )
        except OSError as exc:
            raise ConnectionError(f"cannot connect to {address}: {exc}") from None
    except ConnectionError as error:
        return error


def caused_by(cause: BaseException) -> ConnectionError:
    try:
        try:
            raise cause
        except BaseException:
            raise ConnectionError("connecting failed") from None
    except ConnectionError as error:
        return error


def test_reasons_are_told_in_plain_words() -> None:
    assert _why_unreachable(refused_error("h:1")) == (
        "connection refused",
        "is Kafka running there?",
    )
    reason, advice = _why_unreachable(caused_by(socket.gaierror(-2, "Name or service not known")))
    assert (reason, advice) == (
        "unknown host name",
        "is the address in bootstrap_servers spelled right?",
    )
    reason, advice = _why_unreachable(caused_by(TimeoutError()))
    assert reason == "no answer"
    assert "firewall" in advice
    reason, _ = _why_unreachable(caused_by(OSError(113, "No route to host")))
    assert reason == "no route to host"
    reason, _ = _why_unreachable(ConnectionError("closed the connection during the handshake"))
    assert reason == "closed the connection during the handshake"


def test_a_flapping_broker_gets_a_warning_and_an_all_clear_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aioproducer")
    refused = refused_error("127.0.0.1:1")
    log = _UnreachableLog(interval=0.2)
    for _ in range(10):  # drops and comes back, over and over
        log.failed("127.0.0.1:1", refused)
        log.connected("127.0.0.1:1")
    time.sleep(0.25)
    log.failed("127.0.0.1:1", refused)
    log.connected("127.0.0.1:1")

    assert [r.getMessage() for r in caplog.records] == [
        "cannot connect to 127.0.0.1:1 (connection refused): is Kafka running there?",
        "connected to 127.0.0.1:1",
        "cannot connect to 127.0.0.1:1 (connection refused): is Kafka running there?"
        " (9 more failed attempts since the last warning)",
        "connected to 127.0.0.1:1",
    ]
