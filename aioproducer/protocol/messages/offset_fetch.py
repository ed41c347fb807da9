"""OffsetFetch (key 9), versions 1-7; flexible from v6.

A group's committed offsets, read from its group coordinator. The client sends it only to
read back a marker it committed with a transaction (TxnOffsetCommit): v7 adds
``require_stable``, with which the coordinator answers UNSTABLE_OFFSET_COMMIT for a
partition whose offset an open transaction holds, instead of the last stable one. v8+
asks for several groups at once and is not implemented. ``topics`` may be null from v2
(every partition the group has offsets for); v2 adds the top-level error code, v3 the
throttle time, v5 the leader epoch of each offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["OffsetFetchPartition", "OffsetFetchRequest", "OffsetFetchResponse"]

_FLEXIBLE = 6


@dataclass(slots=True)
class OffsetFetchPartition:
    """One partition's committed offset (-1 if none), its metadata, and its error code."""

    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = None
    error_code: int = 0

    def encode(self, w: Writer, version: int) -> None:
        """Write this partition in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.partition_index)
        w.int64(self.committed_offset)
        if version >= 5:
            w.int32(self.committed_leader_epoch)
        w.nullable_string(self.metadata, flex)
        w.int16(self.error_code)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, version: int) -> OffsetFetchPartition:
        """Read a partition in ``version``."""
        flex = version >= _FLEXIBLE
        partition = cls(r.int32(), r.int64())
        if version >= 5:
            partition.committed_leader_epoch = r.int32()
        partition.metadata = r.nullable_string(flex)
        partition.error_code = r.int16()
        end_struct(r, flex)
        return partition


@dataclass(slots=True)
class OffsetFetchResponse(Response):
    """``offsets`` is [(topic, [OffsetFetchPartition])]; ``error_code`` (v2+) is the
    group's (its coordinator moved or is loading, ...)."""

    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH

    throttle_time_ms: int = 0
    # Not named ``topics``: the partition results carry more than (index, error code).
    offsets: list[tuple[str, list[OffsetFetchPartition]]] = field(default_factory=list)
    error_code: int = 0

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> OffsetFetchResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(r.int32() if version >= 3 else 0)
        # A partition (index, offset, metadata, error code) takes at least 16 bytes.
        for _ in range(r.array_length(flex, 3 if flex else 6)):
            name = r.string(flex)
            partitions = r.array(lambda: OffsetFetchPartition.decode(r, version), flex, 16)
            end_struct(r, flex)
            response.offsets.append((name, partitions))
        if version >= 2:
            response.error_code = r.int16()
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version >= 3:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.offsets), flex)
        for name, partitions in self.offsets:
            w.string(name, flex)
            w.array_length(len(partitions), flex)
            for partition in partitions:
                partition.encode(w, version)
            if flex:
                w.tagged_fields()
        if version >= 2:
            w.int16(self.error_code)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class OffsetFetchRequest(Request[OffsetFetchResponse]):
    """Asks the coordinator of ``group_id`` for the offsets of ``topics``
    ([(topic, [partition])], or None from v2 for all of them). ``require_stable`` (v7+)
    makes it refuse offsets an open transaction holds."""

    API_KEY: ClassVar[ApiKey] = ApiKey.OFFSET_FETCH
    RESPONSE: ClassVar[type[Response]] = OffsetFetchResponse

    group_id: str
    topics: list[tuple[str, list[int]]] | None = field(default_factory=list)
    require_stable: bool = False

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.string(self.group_id, flex)
        topics = self.topics
        if topics is None and version < 2:
            raise ValueError("OffsetFetch below v2 cannot ask for all topics (topics=None)")
        w.array_length(None if topics is None else len(topics), flex)
        for name, partitions in topics or ():
            w.string(name, flex)
            w.int32_array(partitions, flex)
            if flex:
                w.tagged_fields()
        if version >= 7:
            w.boolean(self.require_stable)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> OffsetFetchRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls(r.string(flex))
        count = r.array_length(flex, 3 if flex else 6, nullable=version >= 2)
        if count < 0:
            request.topics = None
        else:
            for _ in range(count):
                name = r.string(flex)
                partitions = r.int32_array(flex)
                end_struct(r, flex)
                assert request.topics is not None
                request.topics.append((name, partitions))
        if version >= 7:
            request.require_stable = r.boolean()
        end_struct(r, flex)
        return request
