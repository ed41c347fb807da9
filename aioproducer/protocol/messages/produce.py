"""Produce (key 0), versions 3-12; flexible from v9.

Encoding a request is on the producer's hot path, so :meth:`ProduceRequest.encode_body` packs
the fixed-width fields of each partition with one ``struct`` call and hands record batches
to the writer by reference: each batch is copied once, into the finished frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.messages.metadata import BrokerMetadata
from aioproducer.protocol.primitives import Reader, Writer, uvarint_bytes
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "ProducePartitionResponse",
    "ProduceRequest",
    "ProduceResponse",
    "ProduceTopicResponse",
]

_FLEXIBLE = 9
_TAG_CURRENT_LEADER = 0  # per partition, v10+
_TAG_NODE_ENDPOINTS = 0  # top level, v10+

_INDEX_AND_SIZE = struct.Struct(">ii")
_INDEX = struct.Struct(">i")
_LEADER = struct.Struct(">ii")
# index, error code, base offset, log append time [, log start offset (v5+)]
_PARTITION_V3 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")


@dataclass(slots=True)
class ProducePartitionResponse:
    """The outcome for one partition.

    ``log_start_offset`` exists from v5; ``record_errors`` (batch index, message) and
    ``error_message`` from v8; ``current_leader`` (leader id, leader epoch) is a v10+ tagged
    field sent with NOT_LEADER_OR_FOLLOWER, ``None`` when absent.
    """

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None

    def encode(self, w: Writer, version: int) -> None:
        """Write this partition result in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.index)
        w.int16(self.error_code)
        w.int64(self.base_offset)
        w.int64(self.log_append_time_ms)
        if version >= 5:
            w.int64(self.log_start_offset)
        if version >= 8:
            w.array_length(len(self.record_errors), flex)
            for batch_index, message in self.record_errors:
                w.int32(batch_index)
                w.nullable_string(message, flex)
                if flex:
                    w.tagged_fields()
            w.nullable_string(self.error_message, flex)
        if flex:
            tags: dict[int, bytes] = {}
            if version >= 10 and self.current_leader is not None:
                tags[_TAG_CURRENT_LEADER] = _LEADER.pack(*self.current_leader) + b"\x00"
            w.tagged_fields(tags)

    @classmethod
    def decode(cls, r: Reader, version: int) -> ProducePartitionResponse:
        """Read a partition result in ``version``."""
        flex = version >= _FLEXIBLE
        result = cls(*r.unpack(_PARTITION_V5 if version >= 5 else _PARTITION_V3))
        if version >= 8:
            for _ in range(r.array_length(flex, 5)):
                batch_index = r.int32()
                result.record_errors.append((batch_index, r.nullable_string(flex)))
                end_struct(r, flex)
            result.error_message = r.nullable_string(flex)
        if flex:
            for tag, data in r.tagged_fields().items():
                if tag == _TAG_CURRENT_LEADER and version >= 10:
                    sub = Reader(data)
                    result.current_leader = (sub.int32(), sub.int32())
        return result


@dataclass(slots=True)
class ProduceTopicResponse:
    """The partition results of one topic."""

    name: str
    partitions: list[ProducePartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ProduceResponse(Response):
    """Per-partition results of a produce request.

    ``node_endpoints`` (v10+, tagged) gives the address of every new leader named in a
    ``current_leader``, so the client can redirect without a metadata round trip.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.PRODUCE

    topics: list[ProduceTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0
    node_endpoints: list[BrokerMetadata] = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ProduceResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        topics: list[ProduceTopicResponse] = []
        for _ in range(r.array_length(flex, 3)):
            name = r.string(flex)
            partitions = r.array(lambda: ProducePartitionResponse.decode(r, version), flex, 22)
            end_struct(r, flex)
            topics.append(ProduceTopicResponse(name, partitions))
        throttle = r.int32()
        response = cls(topics, throttle)
        if flex:
            for tag, data in r.tagged_fields().items():
                if tag == _TAG_NODE_ENDPOINTS and version >= 10:
                    response.node_endpoints = _read_node_endpoints(Reader(data), version)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            w.string(topic.name, flex)
            w.array_length(len(topic.partitions), flex)
            for partition in topic.partitions:
                partition.encode(w, version)
            if flex:
                w.tagged_fields()
        w.int32(self.throttle_time_ms)
        if flex:
            tags: dict[int, bytes] = {}
            if version >= 10 and self.node_endpoints:
                sub = Writer()
                sub.array_length(len(self.node_endpoints), True)
                for node in self.node_endpoints:
                    node.encode(sub, version, True)
                tags[_TAG_NODE_ENDPOINTS] = sub.getvalue()
            w.tagged_fields(tags)


def _read_node_endpoints(r: Reader, version: int) -> list[BrokerMetadata]:
    return r.compact_array(lambda: BrokerMetadata.decode(r, version, True), 11)


@dataclass(slots=True)
class ProduceRequest(Request[ProduceResponse]):
    """Writes record batches: ``topics`` is [(topic, [(partition, record batch bytes)])].

    Each partition carries exactly one magic-2 record batch, as brokers require from v3.
    With ``acks=0`` the broker sends no response (see :meth:`expects_response`). A null
    record set on the wire is decoded as ``b""``.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.PRODUCE
    RESPONSE: ClassVar[type[Response]] = ProduceResponse

    acks: int
    timeout_ms: int
    topics: list[tuple[str, list[tuple[int, bytes]]]]
    transactional_id: str | None = None

    def expects_response(self) -> bool:
        """Whether the broker answers (not for ``acks=0``)."""
        return self.acks != 0

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.nullable_string(self.transactional_id, flex)
        w.int16(self.acks)
        w.int32(self.timeout_ms)
        w.array_length(len(self.topics), flex)
        if flex:
            for name, partitions in self.topics:
                w.compact_string(name)
                w.uvarint(len(partitions) + 1)
                for index, records in partitions:
                    w.raw(_INDEX.pack(index) + uvarint_bytes(len(records) + 1))
                    w.raw(records)
                    w.raw(b"\x00")  # partition tagged fields
                w.raw(b"\x00")  # topic tagged fields
            w.raw(b"\x00")  # request tagged fields
        else:
            for name, partitions in self.topics:
                w.string(name)
                w.raw(_INDEX.pack(len(partitions)))
                for index, records in partitions:
                    w.raw(_INDEX_AND_SIZE.pack(index, len(records)))
                    w.raw(records)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ProduceRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        transactional_id = r.nullable_string(flex)
        acks = r.int16()
        timeout_ms = r.int32()
        topics: list[tuple[str, list[tuple[int, bytes]]]] = []
        for _ in range(r.array_length(flex, 3)):
            name = r.string(flex)
            partitions: list[tuple[int, bytes]] = []
            for _ in range(r.array_length(flex, 5)):
                index = r.int32()
                records = r.nullable_bytes(flex) or b""
                end_struct(r, flex)
                partitions.append((index, records))
            end_struct(r, flex)
            topics.append((name, partitions))
        end_struct(r, flex)
        return cls(acks, timeout_ms, topics, transactional_id)
