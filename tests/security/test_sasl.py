"""SASL PLAIN and SCRAM-SHA-256/512 against real Kafka listeners, over plaintext and TLS.

Records are read back with an independent client and compared; wrong credentials must fail
fast with :class:`AuthenticationError` and without hammering the broker, which is checked
both by counting the producer's connection attempts and the broker's own log lines.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.connection import BrokerConnection
from aioproducer.errors import AuthenticationError
from aioproducer.testing.verify import consume_all

from .conftest import USERS, WRONG_PASSWORD, SecureKafka

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

FAST = 5.0
MAX_BLOCK_MS = 20000
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PROTOCOLS = ["SASL_PLAINTEXT", "SASL_SSL"]


def _config(
    secure: SecureKafka, protocol: str, mechanism: str, user: str, password: str
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": password,
        "max_block_ms": MAX_BLOCK_MS,
    }
    if protocol == "SASL_SSL":
        config["ssl_context"] = secure.context()
    return config


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_sasl_round_trip(secure_kafka: SecureKafka, protocol: str, mechanism: str) -> None:
    topic = secure_kafka.new_topic(f"sasl-{protocol}-{mechanism}")
    sent = [f"{mechanism} over {protocol} #{i}".encode() for i in range(10)]
    config = _config(secure_kafka, protocol, mechanism, "bob", USERS["bob"])
    async with Producer(secure_kafka.servers(protocol), **config) as producer:
        handles = [await producer.send(topic, value, key=b"bob") for value in sent]
        offsets = [(await handle).offset for handle in handles]
    assert offsets == list(range(10))
    records = consume_all(secure_kafka.cluster.bootstrap_servers, topic, expected=10, timeout=30)
    assert [(r.key, r.value) for r in records] == [(b"bob", v) for v in sent]


def test_independent_client_reads_back_over_sasl_ssl(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """librdkafka with SCRAM-SHA-512 over SASL_SSL reads what aioproducer wrote over the same
    listener: the broker side of the listener is set up as a real client expects."""
    import confluent_kafka

    topic = secure_kafka.new_topic("sasl-ssl-readback")
    values = [f"secret record {i}".encode() for i in range(5)]

    async def produce() -> None:
        config = _config(secure_kafka, "SASL_SSL", "SCRAM-SHA-512", "alice", USERS["alice"])
        async with Producer(secure_kafka.servers("SASL_SSL"), **config) as producer:
            for value in values:
                await producer.send_and_wait(topic, value)

    anyio.run(produce)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(secure_kafka.ca.certificate_pem, encoding="ascii")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": secure_kafka.servers("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
            "ssl.ca.location": str(ca_file),
            "ssl.endpoint.identification.algorithm": "https",
            "group.id": f"readback-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == values


async def wait_until(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds.

    For conditions nothing can signal, such as what another process writes to a file.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await anyio.sleep(0.05)


@dataclasses.dataclass
class OpenAttempts:
    """The producer's attempts to open a broker connection."""

    #: When (monotonic) each attempt started.
    started: list[float] = dataclasses.field(default_factory=list)
    #: How many ended in an authentication failure.
    rejected: int = 0


@pytest.fixture
def open_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAttempts]:
    """Records every attempt of the producer to open a broker connection."""
    attempts = OpenAttempts()
    original = BrokerConnection.open

    async def counting_open(self: BrokerConnection, *args: Any, **kwargs: Any) -> None:
        attempts.started.append(time.monotonic())
        try:
            await original(self, *args, **kwargs)
        except AuthenticationError:
            attempts.rejected += 1
            raise

    monkeypatch.setattr(BrokerConnection, "open", counting_open)
    yield attempts


def _failed_authentications(log: Path, since: int) -> int:
    """Lines in which the broker reports a failed authentication, after byte ``since``."""
    with open(log, "rb") as handle:
        handle.seek(since)
        text = handle.read().decode("utf-8", errors="replace")
    return text.count("Failed authentication with")


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("PLAIN", "alice", WRONG_PASSWORD),
        ("SCRAM-SHA-256", "alice", WRONG_PASSWORD),
        ("SCRAM-SHA-512", "nobody", WRONG_PASSWORD),
    ],
    ids=["plain-wrong-password", "scram256-wrong-password", "scram512-unknown-user"],
)
async def test_wrong_credentials_fail_fast_without_a_retry_storm(
    secure_kafka: SecureKafka,
    open_attempts: OpenAttempts,
    mechanism: str,
    user: str,
    password: str,
) -> None:
    log = secure_kafka.cluster.log_path(1)
    log_start = log.stat().st_size
    topic = secure_kafka.new_topic(f"sasl-bad-{mechanism}")
    config = _config(secure_kafka, "SASL_PLAINTEXT", mechanism, user, password)
    async with Producer(secure_kafka.servers("SASL_PLAINTEXT"), **config) as producer:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as excinfo:
            await producer.send_and_wait(topic, b"never written")
        assert time.monotonic() - started < FAST
        assert user in str(excinfo.value)
        # Later sends fail at once too: the producer neither hangs nor buffers them.
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            await producer.send(topic, b"never written either")
        assert time.monotonic() - started < 0.5
        # The window in which the reconnect rate is measured: background reconnects
        # must keep to a backoff while the producer stays open.
        await anyio.sleep(2.5)
    started = open_attempts.started
    window = time.monotonic() - started[0]
    gaps = [b - a for a, b in itertools.pairwise(started)]
    # At most one attempt per (jittered) reconnect_backoff_max_ms of 1 s, plus the first.
    assert 1 <= len(started) <= 2 + int(window / 0.8), started
    assert all(gap >= 0.7 for gap in gaps), gaps
    # The broker saw the same: it logs every attempt it rejected (its log may lag a little
    # behind), and no more attempts than the producer made.
    rejected = open_attempts.rejected
    assert rejected >= 1
    await wait_until(
        lambda: _failed_authentications(log, log_start) >= rejected,
        timeout=10,
        what=f"the broker to log {rejected} failed authentication(s)",
    )
    assert _failed_authentications(log, log_start) <= len(started)
    assert consume_all(secure_kafka.cluster.bootstrap_servers, topic, timeout=30) == []


async def test_sasl_client_on_a_listener_without_sasl(secure_kafka: SecureKafka) -> None:
    """A listener that does not do SASL refuses the handshake: a fast, typed failure."""
    topic = secure_kafka.new_topic("sasl-on-ssl-listener")
    config = _config(secure_kafka, "SASL_SSL", "PLAIN", "alice", USERS["alice"])
    async with Producer(secure_kafka.servers("SSL"), **config) as producer:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as excinfo:
            await producer.send_and_wait(topic, b"x")
        assert time.monotonic() - started < FAST
    assert "PLAIN" in str(excinfo.value)


async def test_producer_recovers_once_the_broker_accepts_it_again(
    secure_kafka: SecureKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An authentication failure fails the waiting sends, but is not forever: when a later
    attempt succeeds (credentials fixed on the broker side) sending resumes."""
    rejections = [1]
    accepted = anyio.Event()
    original = BrokerConnection.open

    async def reject_once(self: BrokerConnection, *args: Any, **kwargs: Any) -> None:
        if rejections:
            rejections.pop()
            raise AuthenticationError("simulated rejection")
        await original(self, *args, **kwargs)
        accepted.set()

    monkeypatch.setattr(BrokerConnection, "open", reject_once)
    topic = secure_kafka.new_topic("auth-recovery")
    async with Producer(secure_kafka.cluster.bootstrap_servers, max_block_ms=MAX_BLOCK_MS) as p:
        with pytest.raises(AuthenticationError, match="simulated"):
            await p.send_and_wait(topic, b"lost")
        # The producer reconnects by itself after its backoff; once the broker has let a
        # connection in, the producer no longer holds the rejection against new sends.
        with anyio.fail_after(FAST):
            await accepted.wait()
        meta = await p.send_and_wait(topic, b"after recovery")
    assert meta.offset == 0
    records = consume_all(secure_kafka.cluster.bootstrap_servers, topic, expected=1, timeout=30)
    assert [r.value for r in records] == [b"after recovery"]
