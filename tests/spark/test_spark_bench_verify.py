"""bench.spark_compare's read-back: every sampled record must carry its key (the sequence
number modulo ``--keys``) and sit in that key's partition, as Java's partitioner places it."""

from __future__ import annotations

import re
import uuid

from aioproducer import SyncProducer
from aioproducer.partitioner import partition_for_key
from aioproducer.testing import KafkaCluster
from bench.spark_compare import SEQ_DIGITS, key_of, verify


def _value(seq: int) -> bytes:
    return f"{seq:0{SEQ_DIGITS}d}".encode() + b"." * 20


def test_keys_and_their_partitions_are_checked(kafka: KafkaCluster) -> None:
    topic = f"bench-verify-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=12)
    with SyncProducer(kafka.bootstrap_servers, linger_ms=1) as producer:
        for seq in range(120):
            producer.send(topic, _value(seq), key=key_of(seq, 50))
        producer.flush()
        assert verify(kafka.bootstrap_servers, topic, 120, False, 50) is None
        # The same records judged as one distinct key per row: from record 50 on, each
        # key is the sequence number modulo 50, not the number.
        problem = verify(kafka.bootstrap_servers, topic, 120, False, 0) or ""
        found = re.fullmatch(r"record (\d+) has key b'(\d+)'", problem)
        assert found, problem
        assert int(found[1]) >= 50
        assert found[2] == str(int(found[1]) % 50)
        # Record 120 keeps its key ("20") but is written to another partition.
        home = partition_for_key(b"20", 12)
        producer.send(topic, _value(120), key=b"20", partition=(home + 1) % 12).result(30)
    assert verify(kafka.bootstrap_servers, topic, 121, False, 50) == (
        f"record 120 (key b'20') is in partition {(home + 1) % 12}"
    )


def test_a_key_is_the_sequence_number_modulo_the_keys() -> None:
    assert [key_of(seq, 50) for seq in (0, 49, 50, 1234)] == [b"0", b"49", b"0", b"34"]
    assert key_of(1234, 0) == b"1234"
