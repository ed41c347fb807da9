"""Helpers of the transaction tests: fresh topics and a read_committed reader."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from aioproducer.testing import KafkaCluster

__all__ = ["new_topic", "read_committed"]


def new_topic(cluster: KafkaCluster, partitions: int) -> str:
    """A fresh topic on ``cluster`` whose partitions all have leaders."""
    name = f"txn-{uuid.uuid4().hex[:12]}"
    cluster.create_topic(name, partitions)
    return name


def read_committed(
    bootstrap_servers: str, topics: Iterable[str], timeout: float = 30.0
) -> dict[tuple[str, int], list[bytes]]:
    """Every committed value of ``topics`` per (topic, partition), in offset order.

    A read_committed consumer stops at the last stable offset and reports the end of each
    partition there; every transaction of the test has ended by the time it reads, so that
    is the end of the log.
    """
    import confluent_kafka as ck

    consumer: Any = ck.Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"verify-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: dict[tuple[str, int], list[bytes]] = {}
    try:
        assignment = []
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=timeout)
            for p in meta.topics[topic].partitions:
                assignment.append(ck.TopicPartition(topic, p, 0))
                out[(topic, p)] = []
        consumer.assign(assignment)
        todo = set(out)
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(todo)} did not reach their end")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    todo.discard((msg.topic(), msg.partition()))
                    continue
                raise RuntimeError(f"consumer error: {err}")
            out[(msg.topic(), msg.partition())].append(msg.value())
    finally:
        consumer.close()
    return out
