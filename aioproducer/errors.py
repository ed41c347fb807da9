"""Typed exceptions raised by aioproducer.

Every failure a user can see is a subclass of :class:`KafkaError`. Errors returned by a
broker are instances of :class:`BrokerResponseError` subclasses chosen by their Kafka error
code (see :func:`error_for_code`, and :class:`ErrorCode` for the codes' names);
``retriable`` says whether the producer may try again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .protocol.error_codes import ErrorCode

__all__ = [
    "AuthenticationError",
    "BrokerResponseError",
    "BufferFullError",
    "ClusterAuthorizationFailedError",
    "ConfigError",
    "ConnectionError",
    "CorruptMessageBrokerError",
    "CorruptRecordError",
    "DeliveryTimeoutError",
    "DuplicateSequenceNumberError",
    "ErrorCode",
    "InvalidArgumentError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "MetadataNotReadyError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OutOfOrderSequenceNumberError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProducerNotStartedError",
    "ProtocolError",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "ResponseTooLargeError",
    "SerializationError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionAbortedError",
    "TransactionFailedError",
    "TransactionStateError",
    "TransactionalIdAuthorizationFailedError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_class_for_code",
    "error_for_code",
]


class KafkaError(Exception):
    """Base class of every error aioproducer raises."""

    #: Whether retrying the same operation may succeed.
    retriable: bool = False


# -- client-side errors -------------------------------------------------------------------


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown or its value is not allowed."""


class SerializationError(KafkaError, TypeError):
    """A key, value or header could not be turned into bytes."""


class RecordTooLargeError(KafkaError, ValueError):
    """A single record is larger than ``max_request_size`` or ``buffer_memory``."""


class BufferFullError(KafkaError):
    """No room in the producer's buffer (``try_send``) or none freed within ``max_block_ms``.

    The record was not buffered: sending it again once deliveries have freed room may
    succeed, hence ``retriable``.
    """

    retriable = True


class InvalidArgumentError(KafkaError, ValueError):
    """An argument of a call is not valid (a partition out of range, a bad timestamp, ...)."""


class MetadataNotReadyError(KafkaError):
    """``try_send``: the topic's metadata is not loaded yet (``await send()`` would wait)."""

    retriable = True


class ProducerNotStartedError(KafkaError, RuntimeError):
    """The producer was used before ``start()`` (or outside ``async with``)."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not finish within its configured time."""

    retriable = True


class DeliveryTimeoutError(KafkaTimeoutError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""

    retriable = False


class ProducerClosedError(KafkaError):
    """The producer is closed (or closing) and can no longer deliver this record."""


class ConnectionError(KafkaError):
    """A broker connection could not be opened or was lost."""

    retriable = True


class ProtocolError(KafkaError):
    """Bytes received from a broker do not form a valid Kafka protocol message."""

    retriable = True


class CorruptRecordError(ProtocolError):
    """A record batch failed its CRC or structural checks."""


class ResponseTooLargeError(ProtocolError):
    """A broker announced a response larger than ``receive_message_max_bytes``.

    Refused on reading the size prefix, before any of it is buffered; the connection is
    closed and what was in flight on it is retried elsewhere or later, like after any
    other lost connection.
    """


class UnsupportedVersionError(KafkaError):
    """Client and broker share no version of an API the client needs."""


class AuthenticationError(KafkaError):
    """The broker rejected the credentials (SASL) or the TLS handshake failed."""


class TransactionStateError(KafkaError, RuntimeError):
    """A transactional call that the transaction's current state does not allow.

    For example ``send()`` on a transactional producer outside a transaction, a second
    ``begin_transaction()``, or a commit with no transaction open. Nothing was changed.
    """


class TransactionFailedError(KafkaError):
    """The current transaction hit an error and can no longer commit: abort it.

    Raised by ``commit_transaction()`` and by ``send()`` once the transaction is in this
    state; ``__cause__`` is the first error that made it so. After
    ``abort_transaction()`` the producer carries on with new transactions.
    """


class TransactionAbortedError(KafkaError):
    """The record was discarded because its transaction was aborted before it was sent."""


# -- errors returned by brokers -------------------------------------------------------------


class BrokerResponseError(KafkaError):
    """An error code returned by a broker. ``code`` is the Kafka error code.

    ``message`` says what was refused and why, with the context the client has: the
    topic and partition, the batch's record count and size, and the limit or the setting
    involved. ``topic`` and ``partition`` are set when the error concerns one.
    """

    code: int = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    name: str = ErrorCode.UNKNOWN_SERVER_ERROR.name

    def __init__(
        self, message: str | None = None, *, topic: str | None = None, partition: int | None = None
    ) -> None:
        text = self.name if not message else f"{self.name}: {message}"
        super().__init__(text)
        self.message = message
        #: The topic the error is about, if it is about one.
        self.topic = topic
        #: The partition the error is about, if it is about one.
        self.partition = partition


_BY_CODE: dict[int, type[BrokerResponseError]] = {}
_ErrT = TypeVar("_ErrT", bound=BrokerResponseError)


def _for_code(code: ErrorCode) -> Callable[[type[_ErrT]], type[_ErrT]]:
    """Give a class the number and name of ``code`` and make it the class raised for it."""

    def register(cls: type[_ErrT]) -> type[_ErrT]:
        # A plain int, so str() and repr() of ``code`` print a number on every Python version.
        cls.code = int(code)
        cls.name = code.name
        _BY_CODE[code] = cls
        return cls

    return register


@_for_code(ErrorCode.UNKNOWN_SERVER_ERROR)
class UnknownServerError(BrokerResponseError):
    """The broker hit an unexpected error (code -1) or returned an unknown code."""


def _define(code: ErrorCode, retriable: bool, doc: str) -> type[BrokerResponseError]:
    cls_name = "".join(part.capitalize() for part in code.name.split("_")) + "Error"
    cls = type(cls_name, (BrokerResponseError,), {"retriable": retriable, "__doc__": doc})
    return _for_code(code)(cls)


@_for_code(ErrorCode.CORRUPT_MESSAGE)
class CorruptMessageBrokerError(BrokerResponseError):
    """The broker found a record batch corrupt (CRC mismatch or bad structure)."""

    retriable = True


@_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
class UnknownTopicOrPartitionError(BrokerResponseError):
    """The topic or partition does not exist on this broker."""

    retriable = True


@_for_code(ErrorCode.INVALID_TOPIC_EXCEPTION)
class InvalidTopicError(BrokerResponseError):
    """The broker refused the topic name (INVALID_TOPIC_EXCEPTION); ``send()`` checks names
    first, so this comes only from a broker with stricter rules."""


@_for_code(ErrorCode.INVALID_RECORD)
class InvalidRecordError(BrokerResponseError):
    """The broker rejected a record as invalid (INVALID_RECORD)."""


@_for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER)
class NotLeaderOrFollowerError(BrokerResponseError):
    """This broker is not the leader of the partition (leadership moved)."""

    retriable = True


@_for_code(ErrorCode.REQUEST_TIMED_OUT)
class RequestTimedOutError(BrokerResponseError):
    """The broker did not complete the request within its timeout."""

    retriable = True


@_for_code(ErrorCode.MESSAGE_TOO_LARGE)
class MessageSizeTooLargeError(BrokerResponseError):
    """The batch is larger than the broker or topic allows (MESSAGE_TOO_LARGE)."""


@_for_code(ErrorCode.NOT_ENOUGH_REPLICAS)
class NotEnoughReplicasError(BrokerResponseError):
    """Fewer in-sync replicas than ``min.insync.replicas``."""

    retriable = True


@_for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
class TopicAuthorizationFailedError(BrokerResponseError):
    """The principal may not write to this topic."""


@_for_code(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
class ClusterAuthorizationFailedError(BrokerResponseError):
    """The principal lacks a cluster-level permission (e.g. IdempotentWrite)."""


@_for_code(ErrorCode.TOPIC_ALREADY_EXISTS)
class TopicAlreadyExistsError(BrokerResponseError):
    """CreateTopics: the topic already exists."""


@_for_code(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
class OutOfOrderSequenceNumberError(BrokerResponseError):
    """The broker received an unexpected idempotent sequence number."""


@_for_code(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
class DuplicateSequenceNumberError(BrokerResponseError):
    """The broker already has this batch (idempotent duplicate)."""


@_for_code(ErrorCode.INVALID_PRODUCER_EPOCH)
class InvalidProducerEpochError(BrokerResponseError):
    """The producer epoch is stale."""


@_for_code(ErrorCode.UNKNOWN_PRODUCER_ID)
class UnknownProducerIdError(BrokerResponseError):
    """The broker no longer knows this producer id (its state expired)."""


@_for_code(ErrorCode.PRODUCER_FENCED)
class ProducerFencedError(BrokerResponseError):
    """A newer producer with the same id has fenced this one."""


@_for_code(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    """Not authorized for this transactional id: the producer can only be closed."""


# The rest of the table: only name, retriability and a short description differ.
for _code, _retriable, _doc in [
    (ErrorCode.OFFSET_OUT_OF_RANGE, False, "The requested offset is out of range."),
    (ErrorCode.INVALID_FETCH_SIZE, False, "The fetch size is invalid."),
    (
        ErrorCode.LEADER_NOT_AVAILABLE,
        True,
        "The partition has no leader right now (election in progress).",
    ),
    (ErrorCode.BROKER_NOT_AVAILABLE, False, "The broker is not available."),
    (ErrorCode.REPLICA_NOT_AVAILABLE, True, "The replica is not available."),
    (ErrorCode.OFFSET_METADATA_TOO_LARGE, False, "Offset metadata string too large."),
    (ErrorCode.NETWORK_EXCEPTION, True, "The server disconnected before a response was received."),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True, "The coordinator is loading."),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, True, "The coordinator is not available."),
    (ErrorCode.NOT_COORDINATOR, True, "This is not the correct coordinator."),
    (ErrorCode.RECORD_LIST_TOO_LARGE, False, "The batch is larger than the segment size."),
    (
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        True,
        "Written to fewer in-sync replicas than required.",
    ),
    (ErrorCode.INVALID_REQUIRED_ACKS, False, "The acks value is not valid."),
    (ErrorCode.ILLEGAL_GENERATION, False, "Illegal generation."),
    (
        ErrorCode.INVALID_TIMESTAMP,
        False,
        "A record timestamp is out of the broker's accepted range.",
    ),
    (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        False,
        "The broker does not support this SASL mechanism.",
    ),
    (ErrorCode.ILLEGAL_SASL_STATE, False, "The SASL request is not valid in the current state."),
    (ErrorCode.UNSUPPORTED_VERSION, False, "The broker does not support this API version."),
    (ErrorCode.INVALID_PARTITIONS, False, "The number of partitions is not valid."),
    (ErrorCode.INVALID_REPLICATION_FACTOR, False, "The replication factor is not valid."),
    (ErrorCode.INVALID_REPLICA_ASSIGNMENT, False, "The replica assignment is not valid."),
    (ErrorCode.INVALID_CONFIG, False, "The configuration is not valid."),
    (ErrorCode.NOT_CONTROLLER, True, "This is not the active controller."),
    (ErrorCode.INVALID_REQUEST, False, "The request is malformed."),
    (
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        False,
        "Not supported by the topic's message format.",
    ),
    (ErrorCode.POLICY_VIOLATION, False, "The request violates a configured policy."),
    (ErrorCode.INVALID_TXN_STATE, False, "Invalid transaction state."),
    (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        False,
        "The producer id does not match the transactional id.",
    ),
    (ErrorCode.INVALID_TRANSACTION_TIMEOUT, False, "The transaction timeout is not valid."),
    (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        True,
        "Another transaction is in progress for this producer.",
    ),
    (
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        False,
        "Not attempted because another part of the request failed.",
    ),
    (ErrorCode.UNKNOWN_MEMBER_ID, False, "The member id is not known to the group."),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, False, "Not authorized for this consumer group."),
    (ErrorCode.KAFKA_STORAGE_ERROR, True, "Disk error on the broker."),
    (ErrorCode.SASL_AUTHENTICATION_FAILED, False, "SASL authentication failed."),
    (ErrorCode.REASSIGNMENT_IN_PROGRESS, False, "A partition reassignment is in progress."),
    (ErrorCode.LISTENER_NOT_FOUND, True, "No listener matches on the leader broker."),
    (ErrorCode.FENCED_LEADER_EPOCH, True, "The leader epoch is older than the broker's."),
    (ErrorCode.UNKNOWN_LEADER_EPOCH, True, "The leader epoch is newer than the broker's."),
    (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        False,
        "The broker does not support this compression type.",
    ),
    (
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        True,
        "An open transaction holds the offset; it is stable once the transaction ends.",
    ),
    (ErrorCode.THROTTLING_QUOTA_EXCEEDED, True, "A quota was exceeded."),
    (ErrorCode.UNKNOWN_TOPIC_ID, True, "The topic id is not known."),
    (ErrorCode.INCONSISTENT_TOPIC_ID, True, "The topic id is inconsistent."),
    (ErrorCode.TRANSACTION_ABORTABLE, False, "The transaction must be aborted."),
]:
    _define(_code, _retriable, _doc)


def error_for_code(
    code: int, message: str | None = None, *, topic: str | None = None, partition: int | None = None
) -> BrokerResponseError:
    """Return an exception instance for a non-zero Kafka error ``code``."""
    cls = _BY_CODE.get(code)
    if cls is None:
        text = f"error code {code}" + (f": {message}" if message else "")
        return UnknownServerError(text, topic=topic, partition=partition)
    return cls(message, topic=topic, partition=partition)


def error_class_for_code(code: int) -> type[BrokerResponseError]:
    """Return the exception class for a Kafka error ``code`` (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)
