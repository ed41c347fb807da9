"""The producer against every Apache Kafka release it claims, read back by librdkafka.

One single-node cluster per version, started once for the module's tests of that version
(module-scoped and parametrized: one extra broker alive at a time). Each version gets every
codec with idempotence, keyed and keyless records with headers, and a committed plus an
aborted transaction, all read back with confluent-kafka: content, partition (keys checked
against kafka-python's murmur2, an implementation independent of ours) and
``read_committed``. A failure names the version in the test id (``[kafka-3.3.2]``).

The versions: 3.3.2 (the first release with production KRaft), 3.6.2, 3.9.1 (the last 3.x),
4.0.1 (the first without ZooKeeper, transaction version 2), 4.3.1 and 4.4.0. Whatever an
older one lacks (Produce versions, transaction version 2) the client negotiates. A version's
jars are fetched with Maven on first use (``KafkaCluster`` calls ``ensure_kafka``) and cached.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.partitioner.default import murmur2

from aioproducer import Producer
from aioproducer.protocol.messages import ApiVersionsRequest
from aioproducer.protocol.versions import ApiKey, negotiate_versions
from aioproducer.testing import KafkaCluster
from aioproducer.testing._admin import AdminConnection

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

#: Every Apache Kafka release the producer is tested against (docs/testing.md lists them).
VERSIONS = ("3.3.2", "3.6.2", "3.9.1", "4.0.1", "4.3.1", "4.4.0")
#: Per version: the Produce version the client picks and the finalized transaction.version.
NEGOTIATED = {
    "3.3.2": (9, 0),
    "3.6.2": (9, 0),
    "3.9.1": (11, 0),
    "4.0.1": (12, 2),
    "4.3.1": (12, 2),
    "4.4.0": (12, 2),
}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3
KEYED = 24
KEYLESS = 24


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"kafka-{v}" for v in VERSIONS])
def versioned(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A one-node cluster of one Kafka release, formatted with that release's defaults."""
    with KafkaCluster(nodes=1, version=request.param) as cluster:
        assert cluster.version == request.param
        yield cluster


def _api_versions(cluster: KafkaCluster) -> Any:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with AdminConnection(host, int(port), timeout=10) as conn:
        return conn.send(ApiVersionsRequest())


def _new_topic(cluster: KafkaCluster, tag: str) -> str:
    name = f"versions-{tag}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, PARTITIONS)
    return name


def _read(
    cluster: KafkaCluster, topic: str, isolation: str, timeout: float = 30.0
) -> list[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
    """Every record of ``topic`` as (partition, offset, key, value, headers), read by
    librdkafka with ``isolation.level`` set explicitly, up to each partition's end."""
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"versions-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "check.crcs": True,
        }
    )
    out = []
    try:
        consumer.assign(
            [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: partitions {at_end} reached the end"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(msg.partition())
                out.append(
                    (
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                    )
                )
    finally:
        consumer.close()
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def _java_partition(key: bytes) -> int:
    # Java's default partitioner, as kafka-python implements it.
    return int((murmur2(key) & 0x7FFFFFFF) % PARTITIONS)


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_with_idempotence_reads_back(versioned: KafkaCluster, codec: str) -> None:
    topic = _new_topic(versioned, codec)
    sent: dict[bytes, tuple[int, int, bytes | None, tuple[tuple[str, bytes | None], ...]]] = {}
    async with Producer(
        versioned.bootstrap_servers,
        enable_idempotence=True,
        compression_type=codec,
        linger_ms=20,
    ) as producer:
        handles = []
        for i in range(KEYED + KEYLESS):
            keyed = i < KEYED
            key = f"key-{i % 7}".encode() if keyed else None
            # Compressible values, so the codec actually shrinks a batch.
            value = f"{codec}-{i:04d}-".encode() + b"abcdefgh" * 20
            headers = [("n", str(i).encode()), ("codec", codec.encode()), ("empty", None)]
            handles.append((key, value, headers, await producer.send(topic, value, key, headers)))
        await producer.flush()
        for key, value, headers, handle in handles:
            meta = await handle
            assert meta.topic == topic
            sent[value] = (meta.partition, meta.offset, key, tuple(headers))
            if key is not None:
                assert meta.partition == _java_partition(key), (key, meta.partition)

    got = _read(versioned, topic, "read_committed")
    assert len(got) == len(sent), f"{versioned.version}/{codec}: {len(got)} of {len(sent)}"
    for partition, offset, key, value, headers in got:
        assert value in sent, value
        assert sent[value] == (partition, offset, key, headers), (versioned.version, codec, value)
    # Records of one partition come back in the order they were sent.
    for p in range(PARTITIONS):
        values = [r[3] for r in got if r[0] == p]
        order = [v for v in sent if sent[v][0] == p]
        assert values == order


async def test_committed_and_aborted_transactions(versioned: KafkaCluster) -> None:
    topic = _new_topic(versioned, "txn")
    features = _api_versions(versioned).finalized_features
    async with Producer(
        versioned.bootstrap_servers,
        transactional_id=f"versions-{uuid.uuid4().hex[:8]}",
        compression_type="lz4",
    ) as producer:
        async with producer.transaction():
            committed = [
                await producer.send(topic, f"commit-{i}".encode(), f"k{i}".encode(), [("t", b"c")])
                for i in range(12)
            ]
        await producer.begin_transaction()
        aborted = [
            await producer.send(topic, f"abort-{i}".encode(), f"k{i}".encode(), [("t", b"a")])
            for i in range(12)
        ]
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            committed += [
                await producer.send(topic, f"commit-{i}".encode(), None, partition=i % PARTITIONS)
                for i in range(12, 18)
            ]
    metas = [await h for h in committed]
    for h in aborted:
        await h  # written to the log before the abort marker

    visible = _read(versioned, topic, "read_committed")
    assert [(r[0], r[1], r[3]) for r in visible] == sorted(
        (m.partition, m.offset, f"commit-{i}".encode()) for i, m in enumerate(metas)
    ), f"read_committed on {versioned.version}, finalized features {features}"
    for partition, _offset, key, value, headers in visible:
        assert value is not None
        if key is not None:
            assert partition == _java_partition(key)
            assert headers == (("t", b"c"),)
    # The aborted records did reach the log: only the isolation level hides them.
    everything = _read(versioned, topic, "read_uncommitted")
    assert sorted(r[3] for r in everything if r[3] and r[3].startswith(b"abort-")) == sorted(
        f"abort-{i}".encode() for i in range(12)
    )


def test_negotiates_what_the_release_offers(versioned: KafkaCluster) -> None:
    """What each release offers and the client picks (docs/testing.md has the table): the
    highest Produce version in common, and transaction version 2 from 4.0 on."""
    response = _api_versions(versioned)
    chosen = negotiate_versions(response.api_keys)
    level = response.finalized_features.get("transaction.version", (0, 0))[1]
    assert (chosen[ApiKey.PRODUCE], level) == NEGOTIATED[versioned.version], (
        response.api_keys[ApiKey.PRODUCE],
        response.finalized_features,
    )


def test_make_kafka_fetch_fetches_every_tested_version() -> None:
    """``make kafka-fetch`` (run before the tests) fetches exactly the versions above."""
    makefile = Path(__file__).resolve().parents[2] / "Makefile"
    line = next(
        line for line in makefile.read_text().splitlines() if line.startswith("KAFKA_VERSIONS")
    )
    assert tuple(line.split(":=", 1)[1].split()) == VERSIONS
