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
    "write_produce_body",
]

_FLEXIBLE = 9
_TAG_CURRENT_LEADER = 0  # per partition, v10+
_TAG_NODE_ENDPOINTS = 0  # top level, v10+

_INDEX_AND_SIZE = struct.Struct(">ii")
_INDEX = struct.Struct(">i")
# A flexible partition's index and the compact length of its records (size + 1), as one
# or two varint bytes: every batch up to 16 KiB.
_INDEX_VARINT1 = struct.Struct(">iB")
_INDEX_VARINT2 = struct.Struct(">iBB")
_I16 = struct.Struct(">h")
_NO_TAGS = b"\x00"
_LEADER = struct.Struct(">ii")
# index, error code, base offset, log append time [, log start offset (v5+)]
_PARTITION_V3 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
# What follows the fixed fields of a flexible partition result when the broker has nothing
# more to say (every batch written): no record errors, a null error message, no tagged
# fields. Nearly every answer is this: skipped in one step.
_FLEX_PARTITION_PLAIN = b"\x01\x00\x00"


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
        if flex and r.skip_if(_FLEX_PARTITION_PLAIN):
            return result
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
            decode = ProducePartitionResponse.decode
            partitions = [decode(r, version) for _ in range(r.array_length(flex, 22))]
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
        write_produce_body(
            w, version, self.acks, self.timeout_ms, self.topics, self.transactional_id
        )

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


def write_produce_body(
    w: Writer,
    version: int,
    acks: int,
    timeout_ms: int,
    topics: list[tuple[str, list[tuple[int, bytes]]]],
    transactional_id: str | None = None,
) -> None:
    """Write a produce request body in ``version``: ``topics`` is [(topic, [(partition,
    record batch bytes)])], as :class:`ProduceRequest` holds them.

    On the producer's hot path: the body after its first fields is prepared as one list of
    pieces (each partition's small header joined with whatever precedes it, then its record
    batch by reference) and handed to the writer in one call, so each batch is copied
    once, into the finished frame.
    """
    flex = version >= _FLEXIBLE
    w.nullable_string(transactional_id, flex)
    w.int16(acks)
    w.int32(timeout_ms)
    w.array_length(len(topics), flex)
    parts: list[bytes] = []
    # Bytes written since the last record batch, put in front of the next piece.
    pending = b""
    if flex:
        for name, partitions in topics:
            data = name.encode()
            pending += uvarint_bytes(len(data) + 1) + data + uvarint_bytes(len(partitions) + 1)
            for index, records in partitions:
                size = len(records) + 1
                if size < 0x80:
                    head = _INDEX_VARINT1.pack(index, size)
                elif size < 0x4000:
                    head = _INDEX_VARINT2.pack(index, size & 0x7F | 0x80, size >> 7)
                else:
                    head = _INDEX.pack(index) + uvarint_bytes(size)
                parts.append(pending + head)
                parts.append(records)
                pending = _NO_TAGS  # the partition's tagged fields
            pending += _NO_TAGS  # the topic's
        parts.append(pending + _NO_TAGS)  # the request's
    else:
        for name, partitions in topics:
            data = name.encode()
            if len(data) > 0x7FFF:
                raise ValueError(f"string too long for an int16 length: {len(data)} bytes")
            pending += _I16.pack(len(data)) + data + _INDEX.pack(len(partitions))
            for index, records in partitions:
                parts.append(pending + _INDEX_AND_SIZE.pack(index, len(records)))
                parts.append(records)
                pending = b""
        if pending:
            parts.append(pending)
    w.pieces(parts)
