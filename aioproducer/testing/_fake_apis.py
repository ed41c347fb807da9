"""The fake cluster's answers: one handler per API it serves, from request to response.

Package-internal: :class:`Apis`, :class:`Settings`, :class:`Drop` and
:data:`ADVERTISED_VERSIONS` are its interface, for :mod:`aioproducer.testing.fake` and its other internal modules.

Handlers read and write the :class:`~aioproducer.testing._fake_log.Log` under the cluster
lock and apply the error rule the server matched for the request; the server decides
when they run and what happens to their answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..protocol.error_codes import ErrorCode
from ..protocol.messages import (
    KEY_TYPE_TRANSACTION,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerMetadata,
    Coordinator,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
    Request,
    Response,
    TopicMetadata,
)
from ..protocol.versions import CODEC_VERSIONS, ApiKey
from ._fake_faults import Rule
from ._fake_log import Log, Partition, producer_fields
from ._fake_txn import TransactionCoordinator

__all__ = ["ADVERTISED_VERSIONS", "SASL_VERSIONS", "Apis", "Drop", "Settings"]

#: Versions the fake implements and advertises (SASL only if it serves SASL).
ADVERTISED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    key: CODEC_VERSIONS[key]
    for key in (
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.METADATA,
        ApiKey.API_VERSIONS,
        ApiKey.CREATE_TOPICS,
        ApiKey.INIT_PRODUCER_ID,
    )
} | {
    # Transactions as a version 1 coordinator serves them (no finalized
    # transaction.version is advertised, so producers use version 1).
    ApiKey.FIND_COORDINATOR: CODEC_VERSIONS[ApiKey.FIND_COORDINATOR],
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 4),
}

#: Advertised as well by a fake that serves SASL.
SASL_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.SASL_HANDSHAKE: CODEC_VERSIONS[ApiKey.SASL_HANDSHAKE],
    ApiKey.SASL_AUTHENTICATE: CODEC_VERSIONS[ApiKey.SASL_AUTHENTICATE],
}

# The transactional flag of a v2 batch's attributes.
_TRANSACTIONAL_FLAG = 0x10
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21

_INT32_MAX = (1 << 31) - 1


class Drop(Exception):
    """Close the connection without answering."""


class Settings(Protocol):
    """The settings the cluster was made with, read each time they are used.

    A :class:`~aioproducer.testing.FakeCluster` is one: its attributes of these names.
    """

    host: str
    cluster_id: str
    auto_create_topics: bool
    num_partitions: int


class Apis:
    """The handlers, over ``log`` guarded by the cluster's ``lock``.

    ``endpoints`` returns the running brokers by node id, in node order, as Metadata lists
    them.
    """

    def __init__(
        self,
        log: Log,
        lock: threading.Condition,
        endpoints: Callable[[], dict[int, BrokerMetadata]],
        settings: Settings,
    ) -> None:
        self._settings = settings
        self._log = log
        self._lock = lock
        self._endpoints = endpoints
        self._appended: asyncio.Event | None = None
        #: Whether ApiVersions advertises SaslHandshake and SaslAuthenticate.
        self.sasl = False
        #: Transactional ids and the transactions they ended (under ``lock``).
        self.coordinator = TransactionCoordinator()

    def start(self) -> None:
        """Called on the cluster's loop when it starts: long-polling fetches wait on it."""
        self._appended = asyncio.Event()

    async def answer(self, node: int, request: Request[Any], rule: Rule | None) -> Response | None:
        """The response of broker ``node`` to ``request``; ``None`` for acks=0 produce.

        ``rule`` is the error rule that matched the request. Raises :class:`Drop` for an
        API the fake does not serve.
        """
        if isinstance(request, ApiVersionsRequest):
            return self.api_versions(rule.error if rule else 0)
        if isinstance(request, MetadataRequest):
            return self._metadata(request, rule)
        if isinstance(request, ProduceRequest):
            return self._produce(node, request, rule)
        if isinstance(request, FetchRequest):
            return await self._fetch(node, request, rule)
        if isinstance(request, ListOffsetsRequest):
            return self._list_offsets(node, request, rule)
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request, rule)
        if isinstance(request, CreateTopicsRequest):
            return self._create_topics(request, rule)
        if isinstance(request, FindCoordinatorRequest):
            return self._find_coordinator(request, rule)
        if isinstance(request, AddPartitionsToTxnRequest):
            return self._add_partitions_to_txn(request, rule)
        if isinstance(request, EndTxnRequest):
            return self._end_txn(request, rule)
        raise Drop()

    def api_versions(self, error: int) -> ApiVersionsResponse:
        """The ApiVersions answer (in every version) with ``error``."""
        versions = {int(k): v for k, v in ADVERTISED_VERSIONS.items()}
        if self.sasl:
            versions |= {int(k): v for k, v in SASL_VERSIONS.items()}
        return ApiVersionsResponse(error, versions, 0)

    def _metadata(self, request: MetadataRequest, rule: Rule | None) -> Response:
        live = self._endpoints()
        with self._lock:
            names = list(self._log.topics) if request.topics is None else request.topics
            topics: list[TopicMetadata] = []
            for name in names:
                if rule is not None and (rule.topic is None or rule.topic == name):
                    topics.append(TopicMetadata(rule.error, name))
                    continue
                topic = self._log.topics.get(name)
                if (
                    topic is None
                    and self._settings.auto_create_topics
                    and request.allow_auto_topic_creation
                ):
                    topic = self._log.create(name, self._settings.num_partitions)
                if topic is None:
                    topics.append(TopicMetadata(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
                    continue
                topics.append(
                    TopicMetadata(
                        0,
                        name,
                        topic.topic_id,
                        False,
                        [_partition_metadata(p, live) for p in topic.partitions],
                    )
                )
            brokers = list(live.values())
        controller = brokers[0].node_id if brokers else -1
        return MetadataResponse(brokers, self._settings.cluster_id, controller, topics)

    def _init_producer_id(
        self, request: InitProducerIdRequest, rule: Rule | None
    ) -> InitProducerIdResponse:
        if rule is not None:
            return InitProducerIdResponse(0, rule.error)
        if request.transactional_id is not None:
            with self._lock:
                code, producer_id, epoch = self.coordinator.init_producer_id(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    self._log.new_producer_id(),
                )
            return InitProducerIdResponse(0, code, producer_id, epoch)
        # Like Kafka for a producer without a transactional id: always a fresh id at
        # epoch 0, whatever id and epoch the request carries (an idempotent producer
        # bumps its epoch itself).
        with self._lock:
            producer_id = self._log.new_producer_id()
        return InitProducerIdResponse(0, 0, producer_id, 0)

    def _find_coordinator(
        self, request: FindCoordinatorRequest, rule: Rule | None
    ) -> FindCoordinatorResponse:
        # Every transactional id is coordinated by the lowest running node; the fake has
        # no consumer groups to coordinate.
        live = self._endpoints()
        code = rule.error if rule is not None else ErrorCode.NONE
        if not code and (request.key_type != KEY_TYPE_TRANSACTION or not live):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        node = live[min(live)] if live and not code else None
        if request.coordinator_keys:
            if node is None:
                found = [Coordinator(key, error_code=code) for key in request.coordinator_keys]
            else:
                found = [
                    Coordinator(key, node.node_id, node.host, node.port)
                    for key in request.coordinator_keys
                ]
            return FindCoordinatorResponse(coordinators=found)
        if node is None:
            return FindCoordinatorResponse(error_code=code)
        return FindCoordinatorResponse(node_id=node.node_id, host=node.host, port=node.port)

    def _add_partitions_to_txn(
        self, request: AddPartitionsToTxnRequest, rule: Rule | None
    ) -> AddPartitionsToTxnResponse:
        topics = request.v3_and_below_topics
        if rule is not None:
            code = rule.error
        else:
            with self._lock:
                code = self.coordinator.add_partitions(
                    request.v3_and_below_transactional_id,
                    request.v3_and_below_producer_id,
                    request.v3_and_below_producer_epoch,
                    [(t, p) for t, parts in topics for p in parts],
                )
        return AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[(t, [(p, code) for p in parts]) for t, parts in topics]
        )

    def _end_txn(self, request: EndTxnRequest, rule: Rule | None) -> EndTxnResponse:
        if rule is not None:
            return EndTxnResponse(0, rule.error)
        with self._lock:
            code = self.coordinator.end(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            )
        return EndTxnResponse(0, code)

    def _create_topics(
        self, request: CreateTopicsRequest, rule: Rule | None
    ) -> CreateTopicsResponse:
        results: list[CreatableTopicResult] = []
        with self._lock:
            for t in request.topics:
                result = CreatableTopicResult(t.name, configs=[])
                if rule is not None and (rule.topic is None or rule.topic == t.name):
                    result.error_code = rule.error
                elif t.name in self._log.topics:
                    result.error_code = ErrorCode.TOPIC_ALREADY_EXISTS
                    result.error_message = f"Topic '{t.name}' already exists."
                else:
                    count = (
                        t.num_partitions if t.num_partitions > 0 else self._settings.num_partitions
                    )
                    leaders = None
                    if t.assignments:
                        leaders = [t.assignments[i][0] for i in sorted(t.assignments)]
                        count = len(leaders)
                    try:
                        if request.validate_only:
                            topic_id = None
                        else:
                            configs = {k: v for k, v in t.configs.items() if v is not None}
                            topic_id = self._log.create(t.name, count, leaders, configs).topic_id
                    except ValueError as exc:
                        result.error_code = ErrorCode.INVALID_PARTITIONS
                        result.error_message = str(exc)
                    else:
                        result.topic_id = topic_id
                        result.num_partitions = count
                        result.replication_factor = 1
                results.append(result)
        return CreateTopicsResponse(0, results)

    def _produce(
        self, node: int, request: ProduceRequest, rule: Rule | None
    ) -> ProduceResponse | None:
        topics: list[ProduceTopicResponse] = []
        endpoints: dict[int, BrokerMetadata] = {}
        failed = False
        with self._lock:
            for name, partitions in request.topics:
                answers: list[ProducePartitionResponse] = []
                for index, data in partitions:
                    if rule is not None and rule.matches_partition(name, index):
                        answer = ProducePartitionResponse(index, rule.error)
                    elif request.acks not in (0, 1, -1):
                        answer = ProducePartitionResponse(index, ErrorCode.INVALID_REQUIRED_ACKS)
                    elif code := self._transaction_error(name, index, data):
                        answer = ProducePartitionResponse(index, code)
                    else:
                        answer = self._log.append(node, name, index, data)
                    if answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        leader = self._current_leader(name, index)
                        if leader is not None:
                            leader_id, leader_epoch, endpoint = leader
                            answer.current_leader = (leader_id, leader_epoch)
                            endpoints[leader_id] = endpoint
                    failed = failed or answer.error_code != ErrorCode.NONE
                    answers.append(answer)
                topics.append(ProduceTopicResponse(name, answers))
            if topics and any(p for _, p in request.topics):
                self._notify_appended()
                self._lock.notify_all()
        if request.acks == 0:
            if failed:
                # A broker cannot report errors to an acks=0 producer: it closes the
                # connection so the client notices and refreshes its metadata.
                raise Drop()
            return None
        return ProduceResponse(topics, 0, list(endpoints.values()))

    def _transaction_error(self, topic: str, index: int, data: bytes) -> int:
        """The error for a transactional batch whose partition is not in its transaction."""
        fields = producer_fields(data)
        if fields is None:
            return ErrorCode.NONE
        (attributes,) = _ATTRIBUTES.unpack_from(data, _ATTRIBUTES_AT)
        if not attributes & _TRANSACTIONAL_FLAG:
            return ErrorCode.NONE
        producer_id, epoch, _sequence, _count = fields
        return self.coordinator.check_produce(producer_id, epoch, topic, index)

    def _current_leader(self, topic: str, index: int) -> tuple[int, int, BrokerMetadata] | None:
        """(leader, leader epoch, endpoint) of a partition whose leader is running."""
        try:
            p = self._log.partition(topic, index)
        except KeyError:
            return None
        endpoint = self._endpoints().get(p.leader)
        if endpoint is None:
            return None
        return p.leader, p.leader_epoch, endpoint

    def _notify_appended(self) -> None:
        # Wakes long-polling fetches; called on the loop thread only.
        event = self._appended
        if event is not None:
            self._appended = asyncio.Event()
            event.set()

    async def _fetch(self, node: int, request: FetchRequest, rule: Rule | None) -> FetchResponse:
        deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
        while True:
            waiter = self._appended
            response, size = self._fetch_once(node, request, rule)
            remaining = deadline - time.monotonic()
            if size >= max(1, request.min_bytes) or remaining <= 0 or waiter is None:
                return response
            if any(p.error_code for t in response.responses for p in t.partitions):
                return response
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(waiter.wait(), remaining)

    def _fetch_once(
        self, node: int, request: FetchRequest, rule: Rule | None
    ) -> tuple[FetchResponse, int]:
        budget = request.max_bytes if request.max_bytes > 0 else _INT32_MAX
        total = 0
        topics: list[FetchTopicResponse] = []
        with self._lock:
            for t in request.topics:
                answers: list[FetchPartitionResponse] = []
                for fp in t.partitions:
                    if rule is not None and rule.matches_partition(t.topic, fp.partition):
                        answer = FetchPartitionResponse(fp.partition, rule.error, -1, -1, -1)
                    else:
                        answer = self._log.fetch(node, t.topic, fp, total, budget)
                        total += len(answer.records or b"")
                        if answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                            leader = self._current_leader(t.topic, fp.partition)
                            if leader is not None:
                                answer.current_leader = leader[:2]
                    answers.append(answer)
                topics.append(FetchTopicResponse(t.topic, answers))
        return FetchResponse(topics), total

    def _list_offsets(
        self, node: int, request: ListOffsetsRequest, rule: Rule | None
    ) -> ListOffsetsResponse:
        topics: list[ListOffsetsTopicResponse] = []
        with self._lock:
            for name, partitions in request.topics:
                answers: list[ListOffsetsPartitionResponse] = []
                for lp in partitions:
                    if rule is not None and rule.matches_partition(name, lp.partition_index):
                        answer = ListOffsetsPartitionResponse(lp.partition_index, rule.error)
                    else:
                        answer = self._log.list_offsets(node, name, lp)
                    answers.append(answer)
                topics.append(ListOffsetsTopicResponse(name, answers))
        return ListOffsetsResponse(topics)


def _partition_metadata(p: Partition, live: dict[int, BrokerMetadata]) -> PartitionMetadata:
    if p.leader in live:
        return PartitionMetadata(0, p.index, p.leader, p.leader_epoch, [p.leader], [p.leader])
    return PartitionMetadata(
        ErrorCode.LEADER_NOT_AVAILABLE, p.index, -1, p.leader_epoch, [p.leader], [], [p.leader]
    )
