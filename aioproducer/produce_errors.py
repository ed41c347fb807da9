"""The errors a broker returns for a produce request, with the context the client has.

A broker answers a refused batch with an error code and, at most, a short message; the
client knows which topic and partition it was for, how many records and bytes the batch
held, and the settings that shaped it. :func:`produce_error` puts them together, and names
the setting to change when a setting is the cause.
"""

from __future__ import annotations

from .config import ProducerConfig
from .errors import BrokerResponseError, error_for_code
from .protocol.error_codes import ErrorCode

__all__ = ["produce_error"]

# The broker's default message.max.bytes (1 MiB plus the 12-byte log overhead).
_BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1048588

# Why the broker refuses a batch for these codes, and what to change.
_HINTS: dict[int, str] = {
    ErrorCode.RECORD_LIST_TOO_LARGE: (
        "the batch is larger than the topic's segment.bytes: raise segment.bytes on the "
        "topic, or lower batch_size and max_request_size"
    ),
    ErrorCode.INVALID_TIMESTAMP: (
        "a record's timestamp is further from the broker's clock than the topic's "
        "message.timestamp.before.max.ms / message.timestamp.after.max.ms allow"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        "fewer replicas are in sync than the topic's min.insync.replicas, which acks='all' "
        "waits for (retried until delivery_timeout_ms)"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "written, but to fewer in-sync replicas than min.insync.replicas (retried)"
    ),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (
        "this client's principal may not write to the topic: grant it WRITE on the topic"
    ),
    ErrorCode.INVALID_REQUIRED_ACKS: "the broker refuses the acks setting",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (
        "the broker or topic does not accept the batch's codec: change compression_type"
    ),
    ErrorCode.CORRUPT_MESSAGE: "the batch arrived corrupt (CRC mismatch); it is retried",
    ErrorCode.INVALID_RECORD: "the broker's checks refused a record (see its reason)",
}


def produce_error(
    code: int,
    broker_message: str | None,
    *,
    topic: str,
    partition: int,
    record_count: int,
    size: int,
    config: ProducerConfig,
) -> BrokerResponseError:
    """The exception for a produce ``code`` the broker returned for one batch of
    ``topic``-``partition`` (``record_count`` records, ``size`` bytes as sent)."""
    records = "1 record" if record_count == 1 else f"{record_count} records"
    where = f"{topic}-{partition}: a batch of {records}, {size} bytes"
    if code == ErrorCode.MESSAGE_TOO_LARGE:
        why = (
            f"larger than the topic's max.message.bytes (or the broker's message.max.bytes, "
            f"{_BROKER_DEFAULT_MAX_MESSAGE_BYTES} by default) although within this client's "
            f"max_request_size ({config.max_request_size}): raise max.message.bytes on the "
            "topic, or send smaller records"
        )
        if config.compression_type == "none":
            why += " (or compress them: compression_type)"
    elif code == ErrorCode.INVALID_REQUIRED_ACKS:
        why = f"{_HINTS[code]} (acks={config.acks!r})"
    elif code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE:
        why = f"{_HINTS[code]} (compression_type={config.compression_type!r})"
    else:
        why = _HINTS.get(code, "")
    parts = [where, why] if why else [where]
    if broker_message:
        parts.append(f"the broker said: {broker_message}")
    return error_for_code(code, "; ".join(parts), topic=topic, partition=partition)
