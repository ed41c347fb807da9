"""Re-authentication (KIP-368) under steady load, against a listener whose sessions last
:data:`~.conftest.REAUTH_MS`: every record arrives once and in order, and the producer keeps
its connections (it re-authenticates on them instead of being disconnected).

The control test switches re-authentication off and shows that the broker then does close
the connections, so the main test cannot pass by accident.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.connection import BrokerConnection
from aioproducer.oauth import OAuthToken
from aioproducer.testing.tokens import unsecured_token
from aioproducer.testing.verify import consume_all

from .conftest import REAUTH_MS, USERS, SecureKafka

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

#: How long each load test sends, and at what pace.
DURATION = 9.0
RECORDS_PER_TICK = 40
TICK = 0.1


@pytest.fixture
def anyio_backend() -> str:
    """Load tests run on asyncio only (the connection code is backend-neutral)."""
    return "asyncio"


@dataclasses.dataclass
class Connections:
    """The broker connections the producer opened."""

    opened: list[BrokerConnection] = dataclasses.field(default_factory=list)

    @property
    def reauthentications(self) -> int:
        """Re-authentications completed on all of them."""
        return sum(conn.reauthentications for conn in self.opened)


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[Connections]:
    """Records every connection the producer opens successfully."""
    seen = Connections()
    original = BrokerConnection.open

    async def recording_open(self: BrokerConnection, *args: Any, **kwargs: Any) -> None:
        await original(self, *args, **kwargs)
        seen.opened.append(self)

    monkeypatch.setattr(BrokerConnection, "open", recording_open)
    yield seen


def _config(mechanism: str, provider_calls: list[float]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "max_block_ms": 20000,
        "linger_ms": 2,
    }
    if mechanism == "OAUTHBEARER":

        def provider() -> OAuthToken:
            provider_calls.append(time.monotonic())
            # Shorter-lived than the listener's session cap, so re-authentications must
            # present refreshed tokens.
            return unsecured_token("alice", lifetime=4.0)

        config["sasl_oauth_token_provider"] = provider
    else:
        config["sasl_username"] = "alice"
        config["sasl_password"] = USERS["alice"]
    return config


async def _steady_load(producer: Producer, topic: str, duration: float) -> list[bytes]:
    """Send keyed records at a steady pace for ``duration`` seconds; returns what was sent."""
    sent: list[bytes] = []
    handles = []
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        for _ in range(RECORDS_PER_TICK):
            value = f"record {len(sent):06d}".encode()
            handles.append(await producer.send(topic, value, key=b"k"))
            sent.append(value)
        await anyio.sleep(TICK)
    await producer.flush()
    offsets = [(await handle).offset for handle in handles]
    assert offsets == list(range(len(sent)))
    return sent


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"])
async def test_reauthentication_keeps_connections_and_order(
    secure_kafka: SecureKafka, connections: Connections, mechanism: str
) -> None:
    topic = secure_kafka.new_topic(f"reauth-{mechanism}")
    provider_calls: list[float] = []
    config = _config(mechanism, provider_calls)
    async with Producer(secure_kafka.servers("REAUTH"), **config) as producer:
        sent = await _steady_load(producer, topic, DURATION)
        opened = list(connections.opened)
        assert all(not conn.closed for conn in opened), "a connection was closed"
    assert len(sent) > 2000
    # Bootstrap and leader connection: opened once, re-authenticated several times each.
    assert len(opened) <= 2, opened
    leader = next(conn for conn in opened if conn.node_id >= 0)
    assert leader.reauthentications >= int(DURATION * 1000 / REAUTH_MS) - 1
    if mechanism == "OAUTHBEARER":
        # 4 s tokens are refreshed after 3.2 s: re-authentication fetched new ones.
        assert len(provider_calls) >= 2
    records = consume_all(
        secure_kafka.cluster.bootstrap_servers, topic, expected=len(sent), timeout=60
    )
    assert [r.value for r in records] == sent


async def test_without_reauthentication_the_broker_disconnects(
    secure_kafka: SecureKafka, connections: Connections, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with re-authentication off, expired sessions cost connections."""

    async def never(self: BrokerConnection, began: float, lifetime_ms: int) -> None:
        pass

    monkeypatch.setattr(BrokerConnection, "_reauthenticate_periodically", never)
    topic = secure_kafka.new_topic("reauth-off")
    config = _config("PLAIN", [])
    async with Producer(secure_kafka.servers("REAUTH"), **config) as producer:
        sent = await _steady_load(producer, topic, REAUTH_MS / 1000 * 2)
        opened = list(connections.opened)
    assert connections.reauthentications == 0
    assert any(conn.closed and conn.node_id >= 0 for conn in opened[:2])
    assert len(opened) > 2, "the broker kept connections whose session had expired"
    # Idempotent retries still deliver everything once, in order.
    records = consume_all(
        secure_kafka.cluster.bootstrap_servers, topic, expected=len(sent), timeout=60
    )
    assert [r.value for r in records] == sent
