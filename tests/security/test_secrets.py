"""Passwords, OAuth tokens and client secrets never show up in logs, reprs or error
messages, for good and bad logins."""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import AuthenticationError
from aioproducer.oauth import OAuthClientCredentials
from aioproducer.testing.tokens import unsecured_token

from .conftest import USERS, WRONG_PASSWORD, SecureKafka

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


def _describe(exc: BaseException) -> list[str]:
    """Everything a user could print about an exception: str, repr, causes, traceback."""
    out = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    seen: BaseException | None = exc
    while seen is not None:
        out += [str(seen), repr(seen), repr(seen.args)]
        seen = seen.__cause__ or seen.__context__
    return out


async def test_passwords_stay_out_of_logs_reprs_and_errors(
    secure_kafka: SecureKafka, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = secure_kafka.new_topic("secrets")
    seen: list[str] = []

    def config(mechanism: str, password: str) -> dict[str, Any]:
        return {
            "security_protocol": "SASL_SSL",
            "ssl_context": secure_kafka.context(),
            "sasl_mechanism": mechanism,
            "sasl_username": "alice",
            "sasl_password": password,
            "max_block_ms": 20000,
        }

    # A good login for each mechanism.
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        producer = Producer(secure_kafka.servers("SASL_SSL"), **config(mechanism, USERS["alice"]))
        assert producer.config.sasl_password == USERS["alice"]  # the secret is in there
        async with producer:
            await producer.send_and_wait(topic, mechanism.encode())
            seen += [repr(producer), repr(producer.config), str(producer.config)]
            seen.append(repr(producer.metrics()))
        seen.append(repr(producer))

    # A bad login for each mechanism: the wrong password must not leak either.
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        producer = Producer(secure_kafka.servers("SASL_SSL"), **config(mechanism, WRONG_PASSWORD))
        async with producer:
            with pytest.raises(AuthenticationError) as excinfo:
                await producer.send_and_wait(topic, b"never")
            seen += _describe(excinfo.value)
            seen += [repr(producer), repr(producer.config)]

    records = [r for r in caplog.records if r.name.startswith("aioproducer")]
    seen.append(caplog.text)
    for record in records:
        seen.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            seen += _describe(record.exc_info[1])
    text = "\n".join(seen)

    # The material is not empty: debug logging ran and the failures name the user.
    assert any("failed" in r.getMessage() for r in records), "no DEBUG records captured"
    assert "'alice'" in text and "AuthenticationError" in text
    for secret in (USERS["alice"], WRONG_PASSWORD):
        assert secret not in text
        # Nor the random part alone (e.g. a truncated or re-quoted rendering).
        assert secret.rsplit("-", 1)[1] not in text


async def test_oauth_tokens_and_client_secrets_stay_out_of_logs_and_errors(
    secure_kafka: SecureKafka, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = secure_kafka.new_topic("oauth-secrets")
    good = unsecured_token("alice", lifetime=600)
    bad = "garbage-token-" + uuid.uuid4().hex
    client_secret = "client-secret-" + uuid.uuid4().hex
    seen: list[str] = []

    def config(provider: Any) -> dict[str, Any]:
        return {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": provider,
            "max_block_ms": 20000,
        }

    producer = Producer(secure_kafka.servers("OAUTH"), **config(lambda: good))
    async with producer:
        await producer.send_and_wait(topic, b"with a good token")
        seen += [repr(producer), repr(producer.config), repr(producer.metrics()), repr(good)]

    producer = Producer(secure_kafka.servers("OAUTH"), **config(lambda: (bad, time.time() + 600)))
    async with producer:
        with pytest.raises(AuthenticationError) as excinfo:
            await producer.send_and_wait(topic, b"never")
        seen += _describe(excinfo.value)

    # An identity provider that refuses the client: its secret must not leak either.
    creds = OAuthClientCredentials("http://127.0.0.1:9/token", "svc", client_secret, timeout=2)
    producer = Producer(secure_kafka.servers("OAUTH"), **config(creds))
    async with producer:
        with pytest.raises(AuthenticationError) as excinfo:
            await producer.send_and_wait(topic, b"never")
        seen += [*_describe(excinfo.value), repr(creds), repr(producer.config)]

    seen.append(caplog.text)
    for record in caplog.records:
        seen.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            seen += _describe(record.exc_info[1])
    text = "\n".join(seen)
    assert "rejected the token" in text and "cannot reach token endpoint" in text
    for secret in (good.value, good.value.split(".")[1], bad, client_secret):
        assert secret not in text
    assert bad.rsplit("-", 1)[1] not in text and client_secret.rsplit("-", 1)[1] not in text
