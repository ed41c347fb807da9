"""Reading a topic back with an independent client, to prove what a producer wrote.

Uses confluent-kafka (librdkafka) when it is installed, so the check does not share any code
with aioproducer. Install it with ``pip install confluent-kafka`` (it is in the ``dev``
extra).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable

__all__ = ["ConsumedRecord", "consume_all", "topic_end_offsets"]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record as an independent consumer saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


def _confluent() -> object:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - dev extra
        raise RuntimeError(
            "reading topics back needs confluent-kafka: pip install confluent-kafka"
        ) from exc
    return confluent_kafka


def topic_end_offsets(bootstrap_servers: str, topic: str, timeout: float = 30.0) -> dict[int, int]:
    """The high watermark of every partition of ``topic``."""
    ck = _confluent()
    consumer = ck.Consumer(  # type: ignore[attr-defined]
        {"bootstrap.servers": bootstrap_servers, "group.id": f"verify-{uuid.uuid4()}"}
    )
    deadline = time.monotonic() + timeout
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(meta.topics[topic].partitions)
        out = {}
        for p in partitions:
            while True:
                try:
                    _low, high = consumer.get_watermark_offsets(
                        ck.TopicPartition(topic, p),  # type: ignore[attr-defined]
                        timeout=max(0.1, deadline - time.monotonic()),
                    )
                    break
                except ck.KafkaException as exc:  # type: ignore[attr-defined]
                    # Right after a topic is created (or a leader moves) librdkafka may
                    # still ask a broker that does not lead the partition, or a new leader
                    # may not know its high watermark yet: ask again.
                    error = exc.args[0] if exc.args else None
                    retriable = error is not None and (
                        error.retriable()
                        or error.code()
                        in (
                            ck.KafkaError.NOT_LEADER_FOR_PARTITION,  # type: ignore[attr-defined]
                            ck.KafkaError.LEADER_NOT_AVAILABLE,  # type: ignore[attr-defined]
                            ck.KafkaError.UNKNOWN_TOPIC_OR_PART,  # type: ignore[attr-defined]
                            # A leader just elected (e.g. after every broker restarted)
                            # until its high watermark catches up.
                            ck.KafkaError.OFFSET_NOT_AVAILABLE,  # type: ignore[attr-defined]
                        )
                    )
                    if not retriable or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.1)
            out[p] = high
        return out
    finally:
        consumer.close()


def consume_all(
    bootstrap_servers: str,
    topic: str,
    *,
    expected: int | None = None,
    timeout: float = 120.0,
    partitions: Iterable[int] | None = None,
) -> list[ConsumedRecord]:
    """Read every record of ``topic`` from the beginning up to the current end offsets.

    Returns records ordered by (partition, offset). ``expected`` only makes the wait end
    early; the read always stops at the end offsets seen when it started, so records
    written later are not included. Raises ``TimeoutError`` if the end is not reached.
    """
    ck = _confluent()
    ends = topic_end_offsets(bootstrap_servers, topic)
    if partitions is not None:
        wanted = set(partitions)
        ends = {p: e for p, e in ends.items() if p in wanted}
    consumer = ck.Consumer(  # type: ignore[attr-defined]
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"verify-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "check.crcs": True,
        }
    )
    out: list[ConsumedRecord] = []
    try:
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign(
            [ck.TopicPartition(topic, p, 0) for p in todo]  # type: ignore[attr-defined]
        )
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"read {len(out)} records of {topic!r} but partitions {sorted(todo)} "
                    f"did not reach their end offsets within {timeout} s"
                )
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    raise RuntimeError(f"consumer error: {err}")
                p, offset = msg.partition(), msg.offset()
                if offset >= ends[p]:
                    continue
                headers = tuple(msg.headers() or ())
                out.append(
                    ConsumedRecord(p, offset, msg.key(), msg.value(), headers, msg.timestamp()[1])
                )
                if offset == ends[p] - 1:
                    todo.discard(p)
            if expected is not None and len(out) >= expected and not todo:
                break
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out
