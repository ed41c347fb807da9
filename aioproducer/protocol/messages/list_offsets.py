"""ListOffsets (key 2), versions 1-11; flexible from v6.

A consumer uses it to turn the special timestamps -2 (earliest) and -1 (latest) into
offsets. Versions after 7 only add timestamp values with new meanings (and a timeout from
v10); the layout stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "ListOffsetsTopicResponse",
]

_FLEXIBLE = 6

#: The special timestamp asking for the log start offset.
EARLIEST_TIMESTAMP = -2
#: The special timestamp asking for the log end offset (the high watermark).
LATEST_TIMESTAMP = -1


@dataclass(slots=True)
class ListOffsetsPartitionResponse:
    """The offset found for one partition; ``leader_epoch`` exists from v4 (-1 before)."""

    partition_index: int
    error_code: int = 0
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(slots=True)
class ListOffsetsTopicResponse:
    """The partition results of one topic."""

    name: str
    partitions: list[ListOffsetsPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class ListOffsetsResponse(Response):
    """Offsets per partition; ``throttle_time_ms`` exists from v2."""

    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_OFFSETS

    topics: list[ListOffsetsTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ListOffsetsResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(throttle_time_ms=r.int32() if version >= 2 else 0)
        for _ in range(r.array_length(flex, 3)):
            topic = ListOffsetsTopicResponse(r.string(flex))
            for _ in range(r.array_length(flex, 22)):
                part = ListOffsetsPartitionResponse(r.int32(), r.int16(), r.int64(), r.int64())
                if version >= 4:
                    part.leader_epoch = r.int32()
                end_struct(r, flex)
                topic.partitions.append(part)
            end_struct(r, flex)
            response.topics.append(topic)
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version >= 2:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            w.string(topic.name, flex)
            w.array_length(len(topic.partitions), flex)
            for p in topic.partitions:
                w.int32(p.partition_index)
                w.int16(p.error_code)
                w.int64(p.timestamp)
                w.int64(p.offset)
                if version >= 4:
                    w.int32(p.leader_epoch)
                if flex:
                    w.tagged_fields()
            if flex:
                w.tagged_fields()
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class ListOffsetsPartition:
    """One partition to look up; ``current_leader_epoch`` exists from v4 (-1 before)."""

    partition_index: int
    timestamp: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class ListOffsetsRequest(Request[ListOffsetsResponse]):
    """Finds offsets by timestamp: ``topics`` is [(topic, [partition])].

    ``isolation_level`` exists from v2 and ``timeout_ms`` from v10.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_OFFSETS
    RESPONSE: ClassVar[type[Response]] = ListOffsetsResponse

    topics: list[tuple[str, list[ListOffsetsPartition]]]
    replica_id: int = -1
    isolation_level: int = 0
    timeout_ms: int = 0

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.replica_id)
        if version >= 2:
            w.int8(self.isolation_level)
        w.array_length(len(self.topics), flex)
        for name, partitions in self.topics:
            w.string(name, flex)
            w.array_length(len(partitions), flex)
            for p in partitions:
                w.int32(p.partition_index)
                if version >= 4:
                    w.int32(p.current_leader_epoch)
                w.int64(p.timestamp)
                if flex:
                    w.tagged_fields()
            if flex:
                w.tagged_fields()
        if version >= 10:
            w.int32(self.timeout_ms)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ListOffsetsRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls([], replica_id=r.int32())
        if version >= 2:
            request.isolation_level = r.int8()
        for _ in range(r.array_length(flex, 3)):
            name = r.string(flex)
            partitions: list[ListOffsetsPartition] = []
            for _ in range(r.array_length(flex, 12)):
                index = r.int32()
                epoch = r.int32() if version >= 4 else -1
                partitions.append(ListOffsetsPartition(index, r.int64(), epoch))
                end_struct(r, flex)
            end_struct(r, flex)
            request.topics.append((name, partitions))
        if version >= 10:
            request.timeout_ms = r.int32()
        end_struct(r, flex)
        return request
