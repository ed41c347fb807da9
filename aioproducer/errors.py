"""Typed exceptions raised by aioproducer.

Every failure a user can see is a subclass of :class:`KafkaError`. Errors returned by a
broker are instances of :class:`BrokerResponseError` subclasses chosen by their Kafka error
code (see :func:`error_for_code`); ``retriable`` says whether the producer may try again.
"""

from __future__ import annotations

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
    "InvalidArgumentError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
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
    "SerializationError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
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
    """No room in the producer's buffer (``try_send``) or none freed within ``max_block_ms``."""


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


class UnsupportedVersionError(KafkaError):
    """Client and broker share no version of an API the client needs."""


class AuthenticationError(KafkaError):
    """The broker rejected the credentials (SASL) or the TLS handshake failed."""


# -- errors returned by brokers -------------------------------------------------------------


class BrokerResponseError(KafkaError):
    """An error code returned by a broker. ``code`` is the Kafka error code."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str | None = None) -> None:
        text = self.name if not message else f"{self.name}: {message}"
        super().__init__(text)
        self.message = message


class UnknownServerError(BrokerResponseError):
    """The broker hit an unexpected error (code -1) or returned an unknown code."""


_BY_CODE: dict[int, type[BrokerResponseError]] = {-1: UnknownServerError}


def _define(code: int, name: str, retriable: bool, doc: str) -> type[BrokerResponseError]:
    cls_name = "".join(part.capitalize() for part in name.split("_")) + "Error"
    cls = type(
        cls_name,
        (BrokerResponseError,),
        {"code": code, "name": name, "retriable": retriable, "__doc__": doc},
    )
    _BY_CODE[code] = cls
    return cls


class CorruptMessageBrokerError(BrokerResponseError):
    """The broker found a record batch corrupt (CRC mismatch or bad structure)."""

    code = 2
    name = "CORRUPT_MESSAGE"
    retriable = True


_BY_CODE[2] = CorruptMessageBrokerError


class UnknownTopicOrPartitionError(BrokerResponseError):
    """The topic or partition does not exist on this broker."""

    code = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


_BY_CODE[3] = UnknownTopicOrPartitionError


class InvalidRecordError(BrokerResponseError):
    """The broker rejected a record as invalid (INVALID_RECORD)."""

    code = 87
    name = "INVALID_RECORD"


_BY_CODE[87] = InvalidRecordError


class NotLeaderOrFollowerError(BrokerResponseError):
    """This broker is not the leader of the partition (leadership moved)."""

    code = 6
    name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


_BY_CODE[6] = NotLeaderOrFollowerError


class RequestTimedOutError(BrokerResponseError):
    """The broker did not complete the request within its timeout."""

    code = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True


_BY_CODE[7] = RequestTimedOutError


class MessageSizeTooLargeError(BrokerResponseError):
    """The batch is larger than the broker or topic allows (MESSAGE_TOO_LARGE)."""

    code = 10
    name = "MESSAGE_TOO_LARGE"


_BY_CODE[10] = MessageSizeTooLargeError


class NotEnoughReplicasError(BrokerResponseError):
    """Fewer in-sync replicas than ``min.insync.replicas``."""

    code = 19
    name = "NOT_ENOUGH_REPLICAS"
    retriable = True


_BY_CODE[19] = NotEnoughReplicasError


class TopicAuthorizationFailedError(BrokerResponseError):
    """The principal may not write to this topic."""

    code = 29
    name = "TOPIC_AUTHORIZATION_FAILED"


_BY_CODE[29] = TopicAuthorizationFailedError


class ClusterAuthorizationFailedError(BrokerResponseError):
    """The principal lacks a cluster-level permission (e.g. IdempotentWrite)."""

    code = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"


_BY_CODE[31] = ClusterAuthorizationFailedError


class TopicAlreadyExistsError(BrokerResponseError):
    """CreateTopics: the topic already exists."""

    code = 36
    name = "TOPIC_ALREADY_EXISTS"


_BY_CODE[36] = TopicAlreadyExistsError


class OutOfOrderSequenceNumberError(BrokerResponseError):
    """The broker received an unexpected idempotent sequence number."""

    code = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


_BY_CODE[45] = OutOfOrderSequenceNumberError


class DuplicateSequenceNumberError(BrokerResponseError):
    """The broker already has this batch (idempotent duplicate)."""

    code = 46
    name = "DUPLICATE_SEQUENCE_NUMBER"


_BY_CODE[46] = DuplicateSequenceNumberError


class InvalidProducerEpochError(BrokerResponseError):
    """The producer epoch is stale."""

    code = 47
    name = "INVALID_PRODUCER_EPOCH"


_BY_CODE[47] = InvalidProducerEpochError


class UnknownProducerIdError(BrokerResponseError):
    """The broker no longer knows this producer id (its state expired)."""

    code = 59
    name = "UNKNOWN_PRODUCER_ID"


_BY_CODE[59] = UnknownProducerIdError


class ProducerFencedError(BrokerResponseError):
    """A newer producer with the same id has fenced this one."""

    code = 90
    name = "PRODUCER_FENCED"


_BY_CODE[90] = ProducerFencedError


# The rest of the table: only name, retriability and a short description differ.
for _code, _name, _retriable, _doc in [
    (1, "OFFSET_OUT_OF_RANGE", False, "The requested offset is out of range."),
    (4, "INVALID_FETCH_SIZE", False, "The fetch size is invalid."),
    (
        5,
        "LEADER_NOT_AVAILABLE",
        True,
        "The partition has no leader right now (election in progress).",
    ),
    (8, "BROKER_NOT_AVAILABLE", False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, "The replica is not available."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "Offset metadata string too large."),
    (13, "NETWORK_EXCEPTION", True, "The server disconnected before a response was received."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, "The coordinator is loading."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, "The topic name is not valid."),
    (18, "RECORD_LIST_TOO_LARGE", False, "The batch is larger than the segment size."),
    (
        20,
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        True,
        "Written to fewer in-sync replicas than required.",
    ),
    (21, "INVALID_REQUIRED_ACKS", False, "The acks value is not valid."),
    (22, "ILLEGAL_GENERATION", False, "Illegal generation."),
    (32, "INVALID_TIMESTAMP", False, "A record timestamp is out of the broker's accepted range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "The broker does not support this SASL mechanism."),
    (34, "ILLEGAL_SASL_STATE", False, "The SASL request is not valid in the current state."),
    (35, "UNSUPPORTED_VERSION", False, "The broker does not support this API version."),
    (37, "INVALID_PARTITIONS", False, "The number of partitions is not valid."),
    (38, "INVALID_REPLICATION_FACTOR", False, "The replication factor is not valid."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "The replica assignment is not valid."),
    (40, "INVALID_CONFIG", False, "The configuration is not valid."),
    (41, "NOT_CONTROLLER", True, "This is not the active controller."),
    (42, "INVALID_REQUEST", False, "The request is malformed."),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, "Not supported by the topic's message format."),
    (44, "POLICY_VIOLATION", False, "The request violates a configured policy."),
    (48, "INVALID_TRANSACTION_STATE", False, "Invalid transaction state."),
    (
        49,
        "INVALID_PRODUCER_ID_MAPPING",
        False,
        "The producer id does not match the transactional id.",
    ),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, "The transaction timeout is not valid."),
    (51, "CONCURRENT_TRANSACTIONS", True, "Another transaction is in progress for this producer."),
    (
        53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        False,
        "Not authorized for this transactional id.",
    ),
    (56, "KAFKA_STORAGE_ERROR", True, "Disk error on the broker."),
    (58, "SASL_AUTHENTICATION_FAILED", False, "SASL authentication failed."),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "A partition reassignment is in progress."),
    (72, "LISTENER_NOT_FOUND", True, "No listener matches on the leader broker."),
    (74, "FENCED_LEADER_EPOCH", True, "The leader epoch is older than the broker's."),
    (75, "UNKNOWN_LEADER_EPOCH", True, "The leader epoch is newer than the broker's."),
    (
        76,
        "UNSUPPORTED_COMPRESSION_TYPE",
        False,
        "The broker does not support this compression type.",
    ),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "A quota was exceeded."),
    (100, "UNKNOWN_TOPIC_ID", True, "The topic id is not known."),
    (103, "INCONSISTENT_TOPIC_ID", True, "The topic id is inconsistent."),
    (110, "TRANSACTION_ABORTABLE", False, "The transaction must be aborted."),
]:
    _define(_code, _name, _retriable, _doc)


def error_for_code(code: int, message: str | None = None) -> BrokerResponseError:
    """Return an exception instance for a non-zero Kafka error ``code``."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownServerError(f"error code {code}" + (f": {message}" if message else ""))
    return cls(message)


def error_class_for_code(code: int) -> type[BrokerResponseError]:
    """Return the exception class for a Kafka error ``code`` (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)
