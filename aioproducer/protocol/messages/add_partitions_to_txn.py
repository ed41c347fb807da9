"""AddPartitionsToTxn (key 24), versions 0-5; flexible from v3.

Clients send v0-3: one transaction in the top-level ``v3_and_below_*`` fields. v4+ is the
batched form brokers send each other (KIP-890): several ``transactions``, each of which may
be ``verify_only``. Both shapes are modelled as the schema has them, so any version decodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResult",
    "AddPartitionsToTxnTransaction",
    "read_partition_errors",
    "write_partition_errors",
]

_FLEXIBLE = 3
_BATCHED = 4

#: (topic, [(partition index, error code)]), the result shape of several transaction APIs.
TopicPartitionErrors = list[tuple[str, list[tuple[int, int]]]]


def write_partition_errors(w: Writer, topics: TopicPartitionErrors, flex: bool) -> None:
    """Write [(topic, [(partition, error code)])] as an array of topic structs."""
    w.array_length(len(topics), flex)
    for name, partitions in topics:
        w.string(name, flex)
        w.array_length(len(partitions), flex)
        for index, error_code in partitions:
            w.int32(index)
            w.int16(error_code)
            if flex:
                w.tagged_fields()
        if flex:
            w.tagged_fields()


def read_partition_errors(r: Reader, flex: bool) -> TopicPartitionErrors:
    """Read what :func:`write_partition_errors` writes."""
    topics: TopicPartitionErrors = []
    for _ in range(r.array_length(flex, 3 if flex else 6)):
        name = r.string(flex)
        partitions: list[tuple[int, int]] = []
        for _ in range(r.array_length(flex, 7 if flex else 6)):
            index = r.int32()
            partitions.append((index, r.int16()))
            end_struct(r, flex)
        end_struct(r, flex)
        topics.append((name, partitions))
    return topics


def _write_topics(w: Writer, topics: list[tuple[str, list[int]]], flex: bool) -> None:
    w.array_length(len(topics), flex)
    for name, partitions in topics:
        w.string(name, flex)
        w.int32_array(partitions, flex)
        if flex:
            w.tagged_fields()


def _read_topics(r: Reader, flex: bool) -> list[tuple[str, list[int]]]:
    topics: list[tuple[str, list[int]]] = []
    for _ in range(r.array_length(flex, 3 if flex else 6)):
        name = r.string(flex)
        partitions = r.int32_array(flex)
        end_struct(r, flex)
        topics.append((name, partitions))
    return topics


@dataclass(slots=True)
class AddPartitionsToTxnResult:
    """The per-partition results for one transaction of a v4+ response."""

    transactional_id: str
    topic_results: TopicPartitionErrors = field(default_factory=list)


@dataclass(slots=True)
class AddPartitionsToTxnResponse(Response):
    """Per-partition results of adding partitions to a transaction.

    v0-3 answer in ``results_by_topic_v3_and_below``: [(topic, [(partition, error code)])].
    v4+ answer in ``results_by_transaction`` with a top-level ``error_code``.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN

    throttle_time_ms: int = 0
    error_code: int = 0
    results_by_transaction: list[AddPartitionsToTxnResult] = field(default_factory=list)
    results_by_topic_v3_and_below: TopicPartitionErrors = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> AddPartitionsToTxnResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(r.int32())
        if version >= _BATCHED:
            response.error_code = r.int16()
            for _ in range(r.array_length(True, 3)):
                transactional_id = r.compact_string()
                topics = read_partition_errors(r, True)
                r.skip_tagged_fields()
                response.results_by_transaction.append(
                    AddPartitionsToTxnResult(transactional_id, topics)
                )
        else:
            response.results_by_topic_v3_and_below = read_partition_errors(r, flex)
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.throttle_time_ms)
        if version >= _BATCHED:
            w.int16(self.error_code)
            w.array_length(len(self.results_by_transaction), True)
            for result in self.results_by_transaction:
                w.compact_string(result.transactional_id)
                write_partition_errors(w, result.topic_results, True)
                w.tagged_fields()
        else:
            write_partition_errors(w, self.results_by_topic_v3_and_below, flex)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class AddPartitionsToTxnTransaction:
    """One transaction of a v4+ (broker-to-broker) request.

    ``topics`` is [(topic, [partition])]; ``verify_only`` asks whether the partitions are
    already in the transaction instead of adding them.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    verify_only: bool = False
    topics: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass(slots=True)
class AddPartitionsToTxnRequest(Request[AddPartitionsToTxnResponse]):
    """Adds partitions to a transaction before records are produced to them.

    A client fills the ``v3_and_below_*`` fields (``v3_and_below_topics`` is
    [(topic, [partition])]) and sends v0-3; ``transactions`` is the v4+ form only. Whichever
    set the version lacks is not written and decodes as its defaults.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN
    RESPONSE: ClassVar[type[Response]] = AddPartitionsToTxnResponse

    v3_and_below_transactional_id: str = ""
    v3_and_below_producer_id: int = -1
    v3_and_below_producer_epoch: int = -1
    v3_and_below_topics: list[tuple[str, list[int]]] = field(default_factory=list)
    transactions: list[AddPartitionsToTxnTransaction] = field(default_factory=list)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version >= _BATCHED:
            w.array_length(len(self.transactions), True)
            for txn in self.transactions:
                w.compact_string(txn.transactional_id)
                w.int64(txn.producer_id)
                w.int16(txn.producer_epoch)
                w.boolean(txn.verify_only)
                _write_topics(w, txn.topics, True)
                w.tagged_fields()
        else:
            w.string(self.v3_and_below_transactional_id, flex)
            w.int64(self.v3_and_below_producer_id)
            w.int16(self.v3_and_below_producer_epoch)
            _write_topics(w, self.v3_and_below_topics, flex)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> AddPartitionsToTxnRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls()
        if version >= _BATCHED:
            # id, producer id, epoch, verify flag, topics, tags: at least 14 bytes each.
            for _ in range(r.array_length(True, 14)):
                transactional_id = r.compact_string()
                producer_id = r.int64()
                producer_epoch = r.int16()
                verify_only = r.boolean()
                topics = _read_topics(r, True)
                r.skip_tagged_fields()
                request.transactions.append(
                    AddPartitionsToTxnTransaction(
                        transactional_id, producer_id, producer_epoch, verify_only, topics
                    )
                )
        else:
            request.v3_and_below_transactional_id = r.string(flex)
            request.v3_and_below_producer_id = r.int64()
            request.v3_and_below_producer_epoch = r.int16()
            request.v3_and_below_topics = _read_topics(r, flex)
        end_struct(r, flex)
        return request
