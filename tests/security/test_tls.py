"""TLS against real Kafka listeners: CA verification, host-name checking, client certificates.

Every failure case must end quickly with a typed error (well inside ``max_block_ms``), and
each rejection is paired with a configuration that succeeds on the same listener, so the
test shows what the rejection depends on.
"""

from __future__ import annotations

import ssl
import time
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import AuthenticationError, KafkaTimeoutError
from aioproducer.testing.verify import consume_all

from .conftest import SecureKafka

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

#: Far above a rejected handshake (milliseconds), far below MAX_BLOCK_MS: a producer that
#: retried until max_block_ms would fail the "fast" assertions.
FAST = 5.0
MAX_BLOCK_MS = 20000


async def _produce_and_check(secure: SecureKafka, listener: str, topic: str, **config: Any) -> None:
    """Send 20 keyed records with headers over ``listener``, then read them back over
    PLAINTEXT with an independent client and compare every field."""
    sent = [(f"k{i}".encode(), f"value {i} via {listener}".encode()) for i in range(20)]
    async with Producer(secure.servers(listener), max_block_ms=MAX_BLOCK_MS, **config) as p:
        handles = [
            await p.send(topic, value, key=key, headers=[("via", listener.encode())])
            for key, value in sent
        ]
        offsets = [(await handle).offset for handle in handles]
    assert offsets == list(range(20))
    records = consume_all(secure.cluster.bootstrap_servers, topic, expected=20, timeout=30)
    assert [(r.key, r.value) for r in records] == sent
    assert {r.headers for r in records} == {(("via", listener.encode()),)}


async def _expect_rejection(secure: SecureKafka, listener: str, topic: str, **config: Any) -> str:
    """Assert that sending over ``listener`` fails with AuthenticationError within FAST
    seconds, twice in a row (the second time without waiting); return the message."""
    async with Producer(secure.servers(listener), max_block_ms=MAX_BLOCK_MS, **config) as p:
        started = time.monotonic()
        with pytest.raises(AuthenticationError) as first:
            await p.send_and_wait(topic, b"never written")
        assert time.monotonic() - started < FAST
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            await p.send(topic, b"never written either")
        assert time.monotonic() - started < FAST
    return str(first.value)


async def test_tls_round_trip_with_ca_and_host_name_checks(secure_kafka: SecureKafka) -> None:
    topic = secure_kafka.new_topic("tls-round-trip")
    context = secure_kafka.context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    await _produce_and_check(
        secure_kafka, "SSL", topic, security_protocol="SSL", ssl_context=context
    )


async def test_untrusted_ca_is_rejected_quickly(secure_kafka: SecureKafka) -> None:
    topic = secure_kafka.new_topic("tls-wrong-ca")
    message = await _expect_rejection(
        secure_kafka,
        "SSL",
        topic,
        security_protocol="SSL",
        ssl_context=secure_kafka.other_ca.client_context(),
    )
    assert "certificate verify failed" in message
    assert consume_all(secure_kafka.cluster.bootstrap_servers, topic, timeout=30) == []


async def test_system_trust_store_does_not_trust_the_test_ca(secure_kafka: SecureKafka) -> None:
    # No ssl_context: the producer must verify against the default (system) store.
    topic = secure_kafka.new_topic("tls-default-context")
    message = await _expect_rejection(secure_kafka, "SSL", topic, security_protocol="SSL")
    assert "certificate verify failed" in message


async def test_host_name_mismatch_is_rejected(secure_kafka: SecureKafka) -> None:
    topic = secure_kafka.new_topic("tls-wrong-name")
    # The certificate comes from the trusted CA but names kafka.invalid only.
    message = await _expect_rejection(
        secure_kafka,
        "WRONGNAME",
        topic,
        security_protocol="SSL",
        ssl_context=secure_kafka.context(),
    )
    assert "127.0.0.1" in message and "certificate verify failed" in message
    # Control: the same listener and CA work once the name check is off, so the rejection
    # above was the host-name check and nothing else.
    lax = secure_kafka.context()
    lax.check_hostname = False
    await _produce_and_check(
        secure_kafka, "WRONGNAME", topic, security_protocol="SSL", ssl_context=lax
    )


async def test_mutual_tls_requires_a_client_certificate(secure_kafka: SecureKafka) -> None:
    topic = secure_kafka.new_topic("mtls")
    message = await _expect_rejection(
        secure_kafka, "MTLS", topic, security_protocol="SSL", ssl_context=secure_kafka.context()
    )
    assert "client certificate" in message
    await _produce_and_check(
        secure_kafka,
        "MTLS",
        topic,
        security_protocol="SSL",
        ssl_context=secure_kafka.context(client_cert=True),
    )


async def test_client_certificate_from_an_unknown_ca_is_rejected(
    secure_kafka: SecureKafka,
) -> None:
    topic = secure_kafka.new_topic("mtls-foreign-cert")
    context = secure_kafka.context()
    from aioproducer.testing.certs import load_certificate

    load_certificate(context, secure_kafka.other_ca.issue_client("intruder"))
    await _expect_rejection(
        secure_kafka, "MTLS", topic, security_protocol="SSL", ssl_context=context
    )


async def test_plaintext_client_on_a_tls_listener_does_not_get_through(
    secure_kafka: SecureKafka,
) -> None:
    # The listener really is TLS: a client that does not speak it gets no metadata.
    async with Producer(secure_kafka.servers("SSL"), max_block_ms=1500) as p:
        with pytest.raises(KafkaTimeoutError):
            await p.send("anything", b"x")
