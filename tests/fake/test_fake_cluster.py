"""The fake broker's behaviour at the protocol level, driven by a tiny blocking client."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from aioproducer.protocol.framing import decode_response, encode_request
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatableTopic,
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    InitProducerIdRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
    Request,
)
from aioproducer.protocol.records import RecordBatchBuilder, decode_batches
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import ErrorCode


class Client:
    """Blocking request/response over one socket (enough to poke at the fake)."""

    def __init__(self, fc: FakeCluster, broker: int = 1) -> None:
        self.sock = socket.create_connection(fc.address(broker), timeout=5)
        self.correlation = 0

    def send(self, request: Request[Any], version: int) -> int:
        self.correlation += 1
        self.sock.sendall(encode_request(request, version, self.correlation, "test"))
        return self.correlation

    def receive(self, request: Request[Any], version: int) -> Any:
        size = int.from_bytes(self._exactly(4), "big")
        _, response = decode_response(type(request), version, self._exactly(size))
        return response

    def call(self, request: Request[Any], version: int) -> Any:
        self.send(request, version)
        return self.receive(request, version)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the fake")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1, ts: int = 0) -> bytes:
    builder = RecordBatchBuilder()
    for i, v in enumerate(values):
        builder.append(ts + i, None, v)
    return builder.build(pid, epoch, seq)


def produce(client: Client, data: bytes, topic: str = "t", acks: int = -1) -> Any:
    request = ProduceRequest(acks, 1000, [(topic, [(0, data)])])
    if acks == 0:
        client.send(request, 12)
        return None
    response = client.call(request, 12)
    (part,) = response.topics[0].partitions
    return part


@pytest.fixture
def client(fake: FakeCluster) -> Any:
    c = Client(fake)
    yield c
    c.close()


def test_api_versions_advertises_only_what_is_implemented(client: Client) -> None:
    response: ApiVersionsResponse = client.call(ApiVersionsRequest(), 3)
    assert response.error_code == 0
    assert response.api_keys == {
        0: (3, 12),
        1: (4, 12),
        2: (1, 11),
        3: (0, 12),
        18: (0, 4),
        10: (0, 6),
        19: (2, 7),
        22: (0, 5),
        24: (0, 3),
        26: (0, 4),
    }


def test_api_versions_too_new_gets_v0_error_35(client: Client) -> None:
    # A hand-made v5 ApiVersions request (header v2, empty body): the fake answers in v0.
    frame = (
        b"\x00\x12\x00\x05\x00\x00\x00\x07\x00\x01x\x00"  # key 18, v5, id 7, "x", no tags
        + b"\x01\x01\x00"  # software name and version (empty compact strings), no tags
    )
    client.sock.sendall(len(frame).to_bytes(4, "big") + frame)
    size = int.from_bytes(client._exactly(4), "big")
    correlation, response = decode_response(ApiVersionsRequest, 0, client._exactly(size))
    assert correlation == 7
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert response.api_keys[18] == (0, 4)


def test_idempotent_sequence_rules(fake: FakeCluster, client: Client) -> None:
    pid = client.call(InitProducerIdRequest(), 4).producer_id
    assert produce(client, batch([b"a", b"b"], pid, 0, 0)).base_offset == 0
    # The same batch again: written once, answered with the original offset, no error.
    again = produce(client, batch([b"a", b"b"], pid, 0, 0))
    assert (again.error_code, again.base_offset) == (0, 0)
    gap = produce(client, batch([b"d"], pid, 0, 3))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(client, batch([b"c"], pid, 0, 2)).base_offset == 2
    unknown = produce(client, batch([b"x"], pid + 50, 0, 4))
    assert unknown.error_code == ErrorCode.UNKNOWN_PRODUCER_ID
    # A bumped epoch starts again at 0; the old epoch is then fenced.
    assert produce(client, batch([b"e"], pid, 1, 0)).base_offset == 3
    stale = produce(client, batch([b"f"], pid, 0, 3))
    assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert [(r.offset, r.value) for r in fake.records("t", 0)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (3, b"e"),
    ]
    # Stored batches keep the producer's bytes with the base offset filled in.
    assert [b.base_offset for b in fake.batches("t", 0)] == [0, 2, 3]


def test_corrupt_batch_and_acks(fake: FakeCluster, client: Client) -> None:
    data = bytearray(batch([b"x"]))
    data[-1] ^= 0xFF
    assert produce(client, bytes(data)).error_code == ErrorCode.CORRUPT_MESSAGE
    assert produce(client, batch([b"ok"]), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    # acks=0: written, never answered; the next request's answer comes first.
    produce(client, batch([b"fire-and-forget"]), acks=0)
    assert produce(client, batch([b"acked"])).base_offset == 1
    assert [r.value for r in fake.records("t", 0)] == [b"fire-and-forget", b"acked"]
    (zero, acked) = fake.requests("produce")[2:]
    assert (zero.answered, acked.answered) == (False, True)


def test_fetch_and_list_offsets(fake: FakeCluster, client: Client) -> None:
    produce(client, batch([b"a", b"b"], ts=1000))
    produce(client, batch([b"c"], ts=5000))

    def offsets(timestamp: int) -> tuple[int, int]:
        request = ListOffsetsRequest([("t", [ListOffsetsPartition(0, timestamp)])])
        (part,) = client.call(request, 7).topics[0].partitions
        return part.offset, part.timestamp

    assert offsets(-2) == (0, -1)
    assert offsets(-1) == (3, -1)
    assert offsets(1001) == (1, 1001)
    assert offsets(-3) == (2, 5000)
    assert offsets(9999) == (-1, -1)

    fetch = FetchRequest([FetchTopic("t", [FetchPartition(0, 1, 1 << 20)])], max_wait_ms=0)
    (part,) = client.call(fetch, 12).responses[0].partitions
    assert part.high_watermark == 3
    # Whole batches are returned: the one holding offset 1 starts at 0.
    records = [r for b in decode_batches(part.records) for r in b.records]
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b"), (2, b"c")]
    beyond = FetchRequest([FetchTopic("t", [FetchPartition(0, 9, 1 << 20)])], max_wait_ms=0)
    (part,) = client.call(beyond, 4).responses[0].partitions
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_long_polls_until_data_arrives(fake: FakeCluster, client: Client) -> None:
    fetch = FetchRequest([FetchTopic("t", [FetchPartition(0, 0, 1 << 20)])], max_wait_ms=3000)
    started = time.monotonic()
    client.send(fetch, 12)
    writer = Client(fake)
    timer = threading.Timer(0.3, lambda: produce(writer, batch([b"late"])))
    timer.start()
    (part,) = client.receive(fetch, 12).responses[0].partitions
    timer.join()
    writer.close()
    assert 0.25 <= time.monotonic() - started < 2.5
    assert [r.value for b in decode_batches(part.records) for r in b.records] == [b"late"]
    empty = FetchRequest([FetchTopic("t", [FetchPartition(0, 1, 1 << 20)])], max_wait_ms=200)
    started = time.monotonic()
    (part,) = client.call(empty, 12).responses[0].partitions
    assert time.monotonic() - started >= 0.18
    assert part.records == b""


def test_injected_errors_delays_and_throttles(fake: FakeCluster, client: Client) -> None:
    fake.inject_error("produce", ErrorCode.KAFKA_STORAGE_ERROR, count=2, topic="t", skip=1)
    fake.inject_error("init_producer_id", "COORDINATOR_LOAD_IN_PROGRESS")
    fake.throttle("metadata", 250)
    fake.delay("list_offsets", 0.3)
    codes = [produce(client, batch([b"%d" % i])).error_code for i in range(4)]
    assert codes == [0, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.KAFKA_STORAGE_ERROR, 0]
    assert [r.value for r in fake.records("t", 0)] == [b"0", b"3"]
    assert client.call(InitProducerIdRequest(), 4).error_code == 14
    assert client.call(InitProducerIdRequest(), 4).error_code == 0
    assert client.call(MetadataRequest(["t"]), 12).throttle_time_ms == 250
    assert client.call(MetadataRequest(["t"]), 12).throttle_time_ms == 0
    started = time.monotonic()
    client.call(ListOffsetsRequest([("t", [ListOffsetsPartition(0, -1)])]), 7)
    assert time.monotonic() - started >= 0.28


def test_leader_moves_and_broker_stops() -> None:
    with FakeCluster(brokers=2) as fc:
        fc.create_topic("t", partitions=2)
        assert [fc.leader("t", p) for p in (0, 1)] == [1, 2]
        one, two = Client(fc, 1), Client(fc, 2)
        try:
            fc.move_leader("t", 0, 2)
            part = produce(one, batch([b"x"]))
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert part.current_leader == (2, 1)
            assert produce(two, batch([b"x"])).base_offset == 0
            fc.stop_broker(2)
            meta = one.call(MetadataRequest(["t"]), 12)
            assert [b.node_id for b in meta.brokers] == [1]
            assert [
                (p.partition, p.leader_id, p.error_code) for p in meta.topics[0].partitions
            ] == [
                (0, -1, ErrorCode.LEADER_NOT_AVAILABLE),
                (1, -1, ErrorCode.LEADER_NOT_AVAILABLE),
            ]
            with pytest.raises(OSError):
                produce(two, batch([b"y"]))
            fc.start_broker(2)
            again = Client(fc, 2)
            assert produce(again, batch([b"y"])).base_offset == 1
            again.close()
        finally:
            one.close()
            two.close()


def test_create_topics_and_dropped_connections(fake: FakeCluster, client: Client) -> None:
    request = CreateTopicsRequest([CreatableTopic("new", 3), CreatableTopic("t", 1)])
    results = client.call(request, 7).topics
    assert [(r.name, r.error_code, r.num_partitions) for r in results] == [
        ("new", 0, 3),
        ("t", ErrorCode.TOPIC_ALREADY_EXISTS, -1),
    ]
    assert fake.topics() == ["t", "new"]
    fake.drop_connection_on("metadata", after_handling=False)
    with pytest.raises((ConnectionError, OSError)):
        client.call(MetadataRequest(None), 12)
    other = Client(fake)
    assert other.call(MetadataRequest(None), 12).topics
    fake.drop_connections()
    with pytest.raises((ConnectionError, OSError)):
        other.call(MetadataRequest(None), 12)
    other.close()
