"""The error-code table: numbers and names as Kafka defines them, one exception class each."""

from __future__ import annotations

import inspect

import pytest

import aioproducer.testing.fake
from aioproducer.errors import (
    BrokerResponseError,
    MessageSizeTooLargeError,
    UnknownServerError,
    error_class_for_code,
    error_for_code,
)
from aioproducer.protocol.error_codes import ErrorCode

# kafka-python spells a few codes the way older Kafka releases did; the numbers agree.
_KAFKA_PYTHON_SPELLING = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UNKNOWN",
    ErrorCode.NONE: "NO_ERROR",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_FOR_PARTITION",
    ErrorCode.MESSAGE_TOO_LARGE: "MESSAGE_SIZE_TOO_LARGE",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "INVALID_TOPIC",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "INVALID_REPLICATION_ASSIGNMENT",
}


@pytest.mark.parametrize("code", [c for c in ErrorCode if c is not ErrorCode.NONE], ids=str)
def test_every_error_code_has_its_own_exception_class(code: ErrorCode) -> None:
    cls = error_class_for_code(code)
    assert (cls.code, cls.name) == (int(code), code.name)
    assert type(cls.code) is int
    assert (cls.__doc__ or "").strip()
    assert error_class_for_code(int(code)) is cls


def test_no_two_codes_share_a_class() -> None:
    classes = [error_class_for_code(c) for c in ErrorCode if c is not ErrorCode.NONE]
    assert len(set(classes)) == len(classes)


def test_codes_outside_the_table_are_unknown_server_errors() -> None:
    assert error_class_for_code(ErrorCode.NONE) is UnknownServerError
    assert error_class_for_code(32767) is UnknownServerError
    error = error_for_code(32767, "why")
    assert type(error) is UnknownServerError
    assert str(error) == "UNKNOWN_SERVER_ERROR: error code 32767: why"
    assert str(error_for_code(ErrorCode.MESSAGE_TOO_LARGE, "big")) == "MESSAGE_TOO_LARGE: big"
    assert isinstance(error_for_code(10), MessageSizeTooLargeError)


def test_numbers_agree_with_kafka_python() -> None:
    errors = pytest.importorskip("kafka.errors")
    names = {
        cls.errno: cls.message
        for cls in vars(errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, errors.BrokerResponseError)
        and getattr(cls, "errno", None) is not None
    }
    for code in ErrorCode:
        assert names.get(int(code)) == _KAFKA_PYTHON_SPELLING.get(code, code.name), code


def test_fake_cluster_codes_agree_with_the_table() -> None:
    fake_codes = aioproducer.testing.fake.ErrorCode
    for code in fake_codes:
        assert ErrorCode[code.name] == code


def test_broker_errors_are_keyed_by_the_enum() -> None:
    assert BrokerResponseError.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert BrokerResponseError.name == ErrorCode.UNKNOWN_SERVER_ERROR.name
