"""A hostile broker: a small TCP server that speaks just enough Kafka to be connected to,
then answers with garbage, truncated frames, impossible frame sizes, the wrong correlation
id, or closes mid-frame.

Whatever it does, the affected connection closes, every request on it gets a typed
KafkaError (the producer retries it), and nothing crashes or hangs: each test is bounded
with ``anyio.fail_after``.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute

from aioproducer import Producer
from aioproducer.connection import BrokerConnection
from aioproducer.errors import KafkaError, RequestTimedOutError
from aioproducer.protocol import framing
from aioproducer.protocol.messages import (
    ApiVersionsResponse,
    BrokerMetadata,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicResponse,
    TopicMetadata,
)
from aioproducer.protocol.records import decode_batches
from aioproducer.protocol.versions import CLIENT_VERSIONS, ApiKey

pytestmark = pytest.mark.anyio

_GARBAGE = bytes(range(7, 250, 3))


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def _frame(correlation_id: int, body: bytes) -> bytes:
    return struct.pack(">ii", len(body) + 4, correlation_id) + body


# Each misbehaviour gets the honest response frame and returns what to write instead
# (None: write nothing more and close the connection; b"": stay silent).
Misbehaviour = Callable[[int, bytes], "bytes | None"]

MISBEHAVIOURS: dict[str, Misbehaviour] = {
    # A complete frame whose body is not the response that was asked for.
    "garbage_body": lambda cid, honest: _frame(cid, _GARBAGE),
    # Bytes that are not frames at all: the first four are read as a size.
    "garbage_stream": lambda cid, honest: _GARBAGE,
    "negative_size": lambda cid, honest: b"\xff\xff\xff\xf0" + _GARBAGE,
    "huge_size": lambda cid, honest: b"\x7f\xff\xff\xff" + _GARBAGE,
    "wrong_correlation_id": lambda cid, honest: _frame(cid + 1000, honest[8:]),
    "truncated_then_close": lambda cid, honest: honest[: len(honest) // 2],
    "size_only_then_close": lambda cid, honest: honest[:4],
    "answer_twice": lambda cid, honest: honest + honest,
    "close_at_once": lambda cid, honest: None,
    # Never answered, or answered with a frame whose rest never comes: request_timeout ends it.
    "silent": lambda cid, honest: b"",
    "stalled_frame": lambda cid, honest: honest[:10],
}
_CLOSES_AFTER = {"truncated_then_close", "size_only_then_close"}


class FakeBroker:
    """One in-process broker (node 1) with an idempotent log per partition.

    ``misbehave(api_key, n)`` is asked before each response (``n`` counts requests of that
    API) and returns the name of a misbehaviour or None to answer honestly. Produce batches
    are written before the answer goes wrong, as when a broker's answer is lost, so a
    retry that the broker does not recognise would show up as a duplicate.
    """

    def __init__(
        self, partitions: int = 2, misbehave: Callable[[int, int], str | None] | None = None
    ) -> None:
        self.partitions = partitions
        self.misbehave = misbehave or (lambda api_key, n: None)
        self.port = 0
        self.log: dict[tuple[str, int], list[bytes | None]] = {}
        self._sequences: dict[tuple[str, int, int, int], int] = {}
        self._counts: dict[int, int] = {}
        self._next_pid = 1000
        self.misbehaved: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakeBroker]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._serve)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _serve(self, stream: anyio.abc.SocketStream) -> None:
        reader = framing.FrameReader()
        async with stream:
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                for frame in reader.feed(data):
                    header, request = framing.decode_request(frame)
                    honest = self._answer(header, request)
                    n = self._counts[header.api_key] = self._counts.get(header.api_key, 0) + 1
                    name = self.misbehave(header.api_key, n)
                    if name is None:
                        await stream.send(honest)
                        continue
                    self.misbehaved.append(name)
                    reply = MISBEHAVIOURS[name](header.correlation_id, honest)
                    if reply is None:
                        return
                    if reply:
                        await stream.send(reply)
                    if name in _CLOSES_AFTER:
                        return

    def _answer(self, header: framing.RequestHeader, request: Any) -> bytes:
        api, version, cid = header.api_key, header.api_version, header.correlation_id
        response: Any
        if api == ApiKey.API_VERSIONS:
            response = ApiVersionsResponse(api_keys={int(k): r for k, r in CLIENT_VERSIONS.items()})
            version = min(version, 3)
        elif api == ApiKey.METADATA:
            names = request.topics or []
            response = MetadataResponse(
                brokers=[BrokerMetadata(1, "127.0.0.1", self.port)],
                cluster_id="fake",
                controller_id=1,
                topics=[
                    TopicMetadata(
                        0,
                        name,
                        partitions=[
                            PartitionMetadata(0, p, 1, 0, [1], [1]) for p in range(self.partitions)
                        ],
                    )
                    for name in names
                ],
            )
        elif api == ApiKey.INIT_PRODUCER_ID:
            self._next_pid += 1
            response = InitProducerIdResponse(producer_id=self._next_pid, producer_epoch=0)
        elif api == ApiKey.PRODUCE:
            topics = []
            for name, parts in request.topics:
                answers = []
                for index, data in parts:
                    answers.append(
                        ProducePartitionResponse(index, 0, self._append(name, index, data))
                    )
                topics.append(ProduceTopicResponse(name, answers))
            response = ProduceResponse(topics)
        else:
            raise AssertionError(f"unexpected API {api}")
        return framing.encode_response(response, version, cid)

    def _append(self, topic: str, partition: int, data: bytes) -> int:
        (batch,) = decode_batches(data)
        key = (topic, partition, batch.producer_id, batch.base_sequence)
        if key in self._sequences:
            return self._sequences[key]  # a retry of a batch already written
        log = self.log.setdefault((topic, partition), [])
        base = self._sequences[key] = len(log)
        log.extend(r.value for r in batch.records)
        return base


# -- one connection ---------------------------------------------------------------------


def _connection(broker: FakeBroker, timeout: float = 2.0) -> BrokerConnection:
    return BrokerConnection(
        "127.0.0.1", broker.port, node_id=1, client_id="fuzz", request_timeout=timeout
    )


@pytest.mark.parametrize("name", sorted(MISBEHAVIOURS))
async def test_a_misbehaving_response_closes_the_connection_and_fails_every_request(
    name: str,
) -> None:
    broker = FakeBroker(misbehave=lambda api, n: name if api == ApiKey.METADATA else None)
    with anyio.fail_after(15):
        async with broker.running(), anyio.create_task_group() as tg:
            conn = _connection(broker)
            await conn.open(tg, 5)
            outcomes: list[tuple[Any, BaseException | None]] = []
            done = anyio.Event()

            def on_done(response: Any, error: BaseException | None) -> None:
                outcomes.append((response, error))
                if len(outcomes) == 3:
                    done.set()

            # Three pipelined requests: the first answer is bad; none may be left hanging.
            for _ in range(3):
                conn.submit(MetadataRequest(["t"]), conn.versions[ApiKey.METADATA], on_done)
            await done.wait()
            assert conn.closed
            errors = [e for _r, e in outcomes]
            if name == "answer_twice":
                # The first answer is fine; the unasked-for copy then closes the connection.
                assert errors[0] is None
                errors = errors[1:]
            assert all(isinstance(e, KafkaError) for e in errors), errors
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("name", sorted(MISBEHAVIOURS))
async def test_a_misbehaving_handshake_fails_open_with_a_typed_error(name: str) -> None:
    broker = FakeBroker(misbehave=lambda api, n: name if api == ApiKey.API_VERSIONS else None)
    with anyio.fail_after(15):
        async with broker.running(), anyio.create_task_group() as tg:
            conn = _connection(broker)
            if name == "answer_twice":
                # The handshake itself succeeds; the extra frame then kills the connection.
                await conn.open(tg, 5)
                # `closed` is a plain attribute with no event behind it: poll it.
                with anyio.fail_after(5):
                    while not conn.closed:  # noqa: ASYNC110
                        await anyio.sleep(0.01)
            else:
                with pytest.raises(KafkaError):
                    await conn.open(tg, 5)
            assert conn.closed
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("name", ["silent", "stalled_frame"])
async def test_a_silent_broker_times_the_request_out(name: str) -> None:
    broker = FakeBroker(misbehave=lambda api, n: name if api == ApiKey.METADATA else None)
    with anyio.fail_after(15):
        async with broker.running(), anyio.create_task_group() as tg:
            conn = _connection(broker, timeout=1.0)
            await conn.open(tg, 5)
            started = anyio.current_time()
            # The connection's watchdog (not a timeout around each receive) fails it,
            # naming the broker and the API of the request that went unanswered.
            with pytest.raises(RequestTimedOutError, match=r"node \d+ within 1000 ms \(api 3\)"):
                await conn.request(MetadataRequest(["t"]))
            assert 0.9 < anyio.current_time() - started < 5
            assert conn.closed
            tg.cancel_scope.cancel()


# -- the whole producer ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MISBEHAVIOURS))
async def test_the_producer_retries_through_a_misbehaving_broker_exactly_once(name: str) -> None:
    # The first Metadata and InitProducerId answers, and the 1st and 3rd produce answers
    # (after their batches were written) go wrong.
    bad = {
        (ApiKey.METADATA, 1),
        (ApiKey.INIT_PRODUCER_ID, 1),
        (ApiKey.PRODUCE, 1),
        (ApiKey.PRODUCE, 3),
    }
    broker = FakeBroker(partitions=2, misbehave=lambda api, n: name if (api, n) in bad else None)
    total = 3000
    with anyio.fail_after(60):
        async with (
            broker.running(),
            Producer(
                broker.address,
                linger_ms=2,
                batch_size=4096,
                request_timeout_ms=1500,
                delivery_timeout_ms=30_000,
                retry_backoff_ms=10,
                reconnect_backoff_ms=10,
            ) as producer,
        ):
            handles = []
            for i in range(total):
                p = i % 2
                handles.append(await producer.send("t", b"%d:%d" % (p, i), partition=p))
            metas = [await h for h in handles]
            retried = producer.metrics()["records_retried"]
    assert len(broker.misbehaved) == len(bad), broker.misbehaved
    assert retried > 0
    for p in range(2):
        expected = [b"%d:%d" % (p, i) for i in range(p, total, 2)]
        assert broker.log[("t", p)] == expected, f"partition {p} differs from what was sent"
    for i, meta in enumerate(metas):
        assert meta.offset == (i // 2)
