"""Passwords never show up in logs, reprs or error messages, for good and bad logins."""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import AuthenticationError

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
