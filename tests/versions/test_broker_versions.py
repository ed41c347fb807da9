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

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
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


class _Starting:
    """A cluster of one release starting on a thread, so the next release's broker boots
    (a JVM start, most of a version's time) while the current release's tests run."""

    def __init__(self, version: str) -> None:
        self.cluster = KafkaCluster(nodes=1, version=version)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, daemon=True)
        self.thread.start()

    def _start(self) -> None:
        try:
            self.cluster.__enter__()
        except BaseException as exc:  # raised on the test's thread by ready()
            self.error = exc

    def ready(self) -> KafkaCluster:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.cluster

    def close(self) -> None:
        self.thread.join()
        if self.error is None:
            self.cluster.__exit__(None, None, None)


_starting: dict[str, _Starting] = {}


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"kafka-{v}" for v in VERSIONS])
def versioned(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A one-node cluster of one Kafka release, formatted with that release's defaults (at
    most two alive: this one and the next one starting)."""
    version: str = request.param
    current = _starting.pop(version, None) or _Starting(version)
    later = VERSIONS[VERSIONS.index(version) + 1 :]
    if later and later[0] not in _starting:
        _starting[later[0]] = _Starting(later[0])
    try:
        cluster = current.ready()
        assert cluster.version == version
        yield cluster
    finally:
        current.close()


@pytest.fixture(scope="module", autouse=True)
def _no_broker_left_starting() -> Iterator[None]:
    # A next release started for tests that were then deselected or skipped is stopped.
    yield
    while _starting:
        _starting.popitem()[1].close()


def _api_versions(cluster: KafkaCluster) -> Any:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with AdminConnection(host, int(port), timeout=10) as conn:
        return conn.send(ApiVersionsRequest())


def _new_topic(cluster: KafkaCluster, tag: str) -> str:
    name = f"versions-{tag}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, PARTITIONS)
    return name


Row = tuple[str, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _read(
    cluster: KafkaCluster, topics: list[str], isolation: str, timeout: float = 30.0
) -> list[Row]:
    """Every record of ``topics`` as (topic, partition, offset, key, value, headers), read
    by librdkafka with ``isolation.level`` set explicitly, up to each partition's end."""
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
    out: list[Row] = []
    wanted = {(t, p) for t in topics for p in range(PARTITIONS)}
    try:
        consumer.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t, p in wanted])
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout
        while at_end != wanted:
            assert time.monotonic() < deadline, f"only {sorted(at_end)} reached their end"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                where = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        at_end.add(where)
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(where)
                headers = tuple(msg.headers() or ())
                out.append((*where, msg.offset(), msg.key(), msg.value(), headers))
    finally:
        consumer.close()
    out.sort(key=lambda r: (r[0], r[1], r[2]))
    return out


def _java_partition(key: bytes) -> int:
    # Java's default partitioner, as kafka-python implements it.
    return int((murmur2(key) & 0x7FFFFFFF) % PARTITIONS)


async def test_every_codec_with_idempotence_reads_back(versioned: KafkaCluster) -> None:
    """One idempotent producer per codec, all at once, each to a topic of its own."""
    topics = {codec: _new_topic(versioned, codec) for codec in CODECS}
    # value -> (topic, partition, offset, key, headers), as the producers reported them.
    sent: dict[bytes, tuple[str, int, int, bytes | None, tuple[tuple[str, bytes | None], ...]]]
    sent = {}

    async def produce(codec: str) -> None:
        topic = topics[codec]
        async with Producer(
            versioned.bootstrap_servers,
            enable_idempotence=True,
            compression_type=codec,
            linger_ms=20,
        ) as producer:
            handles = []
            for i in range(KEYED + KEYLESS):
                key = f"key-{i % 7}".encode() if i < KEYED else None
                # Compressible values, so the codec actually shrinks a batch.
                value = f"{codec}-{i:04d}-".encode() + b"abcdefgh" * 20
                headers = [("n", str(i).encode()), ("codec", codec.encode()), ("empty", None)]
                handles.append(
                    (key, value, headers, await producer.send(topic, value, key, headers))
                )
            await producer.flush()
            for key, value, headers, handle in handles:
                meta = await handle
                assert meta.topic == topic
                sent[value] = (topic, meta.partition, meta.offset, key, tuple(headers))
                if key is not None:
                    assert meta.partition == _java_partition(key), (codec, key, meta.partition)

    async with anyio.create_task_group() as group:
        for codec in CODECS:
            group.start_soon(produce, codec)

    got = _read(versioned, list(topics.values()), "read_committed")
    for codec, topic in topics.items():
        rows = [r for r in got if r[0] == topic]
        assert len(rows) == KEYED + KEYLESS, f"{codec}: read {len(rows)} records"
        for _topic, partition, offset, key, value, headers in rows:
            assert value in sent, (codec, value)
            assert sent[value] == (topic, partition, offset, key, headers), (codec, value)
        # Records of one partition come back in the order they were sent.
        for p in range(PARTITIONS):
            values = [r[4] for r in rows if r[1] == p]
            order = [v for v, s in sent.items() if s[0] == topic and s[1] == p]
            assert values == order, (codec, p)


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

    visible = _read(versioned, [topic], "read_committed")
    assert [(r[1], r[2], r[4]) for r in visible] == sorted(
        (m.partition, m.offset, f"commit-{i}".encode()) for i, m in enumerate(metas)
    ), f"read_committed on {versioned.version}, finalized features {features}"
    for _topic, partition, _offset, key, value, headers in visible:
        assert value is not None
        if key is not None:
            assert partition == _java_partition(key)
            assert headers == (("t", b"c"),)
    # The aborted records did reach the log: only the isolation level hides them.
    everything = _read(versioned, [topic], "read_uncommitted")
    assert sorted(r[4] for r in everything if r[4] and r[4].startswith(b"abort-")) == sorted(
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
