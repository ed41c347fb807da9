"""Fetch (key 1), versions 4-12; flexible from v12.

Versions 13 and later address topics by id, which this package does not model, so v12 is
the newest implemented. The record set of each partition is kept as the raw bytes of its
record batches (``None`` for a null record set); :func:`aioproducer.protocol.records.decode_batches`
reads them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "FetchTopicResponse",
]

_FLEXIBLE = 12
_TAG_CLUSTER_ID = 0  # request, v12+
_TAG_DIVERGING_EPOCH = 0  # partition response, v12+
_TAG_CURRENT_LEADER = 1
_TAG_SNAPSHOT_ID = 2

_EPOCH_AND_OFFSET = struct.Struct(">iq")
_OFFSET_AND_EPOCH = struct.Struct(">qi")
_LEADER = struct.Struct(">ii")


@dataclass(slots=True)
class FetchPartition:
    """One partition to read: where to start and how many bytes at most.

    ``current_leader_epoch`` exists from v9, ``log_start_offset`` from v5 and
    ``last_fetched_epoch`` from v12 (-1 before).
    """

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchTopic:
    """The partitions to read of one topic."""

    topic: str
    partitions: list[FetchPartition] = field(default_factory=list)


@dataclass(slots=True)
class FetchPartitionResponse:
    """What one partition returned.

    ``last_stable_offset`` and ``aborted_transactions`` ((producer id, first offset), ``None``
    for a null array) exist from v4, ``log_start_offset`` from v5, ``preferred_read_replica``
    from v11. The v12 tagged fields are ``diverging_epoch`` (epoch, end offset),
    ``current_leader`` (leader id, leader epoch) and ``snapshot_id`` (end offset, epoch),
    each ``None`` when absent.
    """

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: bytes | None = None
    diverging_epoch: tuple[int, int] | None = None
    current_leader: tuple[int, int] | None = None
    snapshot_id: tuple[int, int] | None = None

    def encode(self, w: Writer, version: int) -> None:
        """Write this partition's data in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.partition_index)
        w.int16(self.error_code)
        w.int64(self.high_watermark)
        w.int64(self.last_stable_offset)
        if version >= 5:
            w.int64(self.log_start_offset)
        aborted = self.aborted_transactions
        w.array_length(None if aborted is None else len(aborted), flex)
        for producer_id, first_offset in aborted or ():
            w.int64(producer_id)
            w.int64(first_offset)
            if flex:
                w.tagged_fields()
        if version >= 11:
            w.int32(self.preferred_read_replica)
        w.nullable_bytes(self.records, flex)
        if flex:
            tags: dict[int, bytes] = {}
            if self.diverging_epoch is not None:
                tags[_TAG_DIVERGING_EPOCH] = _EPOCH_AND_OFFSET.pack(*self.diverging_epoch) + b"\0"
            if self.current_leader is not None:
                tags[_TAG_CURRENT_LEADER] = _LEADER.pack(*self.current_leader) + b"\0"
            if self.snapshot_id is not None:
                tags[_TAG_SNAPSHOT_ID] = _OFFSET_AND_EPOCH.pack(*self.snapshot_id) + b"\0"
            w.tagged_fields(tags)

    @classmethod
    def decode(cls, r: Reader, version: int) -> FetchPartitionResponse:
        """Read one partition's data in ``version``."""
        flex = version >= _FLEXIBLE
        result = cls(r.int32(), r.int16(), r.int64(), r.int64())
        if version >= 5:
            result.log_start_offset = r.int64()
        count = r.array_length(flex, 16, nullable=True)
        if count >= 0:
            result.aborted_transactions = []
            for _ in range(count):
                producer_id = r.int64()
                result.aborted_transactions.append((producer_id, r.int64()))
                end_struct(r, flex)
        if version >= 11:
            result.preferred_read_replica = r.int32()
        result.records = r.nullable_bytes(flex)
        if flex:
            for tag, data in r.tagged_fields().items():
                sub = Reader(data)
                if tag == _TAG_DIVERGING_EPOCH:
                    epoch, end_offset = sub.unpack(_EPOCH_AND_OFFSET)
                    result.diverging_epoch = (epoch, end_offset)
                elif tag == _TAG_CURRENT_LEADER:
                    leader_id, leader_epoch = sub.unpack(_LEADER)
                    result.current_leader = (leader_id, leader_epoch)
                elif tag == _TAG_SNAPSHOT_ID:
                    end_offset, epoch = sub.unpack(_OFFSET_AND_EPOCH)
                    result.snapshot_id = (end_offset, epoch)
        return result


@dataclass(slots=True)
class FetchTopicResponse:
    """The partition data of one topic."""

    topic: str
    partitions: list[FetchPartitionResponse] = field(default_factory=list)


@dataclass(slots=True)
class FetchResponse(Response):
    """Record batches per partition; ``error_code`` and ``session_id`` exist from v7."""

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH

    responses: list[FetchTopicResponse] = field(default_factory=list)
    throttle_time_ms: int = 0
    error_code: int = 0
    session_id: int = 0

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> FetchResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(throttle_time_ms=r.int32())
        if version >= 7:
            response.error_code = r.int16()
            response.session_id = r.int32()
        for _ in range(r.array_length(flex, 3)):
            topic = FetchTopicResponse(r.string(flex))
            topic.partitions = r.array(lambda: FetchPartitionResponse.decode(r, version), flex, 30)
            end_struct(r, flex)
            response.responses.append(topic)
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.throttle_time_ms)
        if version >= 7:
            w.int16(self.error_code)
            w.int32(self.session_id)
        w.array_length(len(self.responses), flex)
        for topic in self.responses:
            w.string(topic.topic, flex)
            w.array_length(len(topic.partitions), flex)
            for partition in topic.partitions:
                partition.encode(w, version)
            if flex:
                w.tagged_fields()
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class FetchRequest(Request[FetchResponse]):
    """Reads record batches from partition leaders.

    ``session_id``/``session_epoch`` and ``forgotten_topics`` (topic, partitions) exist from
    v7 (a session epoch of -1 asks for a full, sessionless fetch), ``rack_id`` from v11 and
    the tagged ``cluster_id`` from v12.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.FETCH
    RESPONSE: ClassVar[type[Response]] = FetchResponse

    topics: list[FetchTopic]
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    replica_id: int = -1
    session_id: int = 0
    session_epoch: int = -1
    forgotten_topics: list[tuple[str, list[int]]] = field(default_factory=list)
    rack_id: str = ""
    cluster_id: str | None = None

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.replica_id)
        w.int32(self.max_wait_ms)
        w.int32(self.min_bytes)
        w.int32(self.max_bytes)
        w.int8(self.isolation_level)
        if version >= 7:
            w.int32(self.session_id)
            w.int32(self.session_epoch)
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            w.string(topic.topic, flex)
            w.array_length(len(topic.partitions), flex)
            for p in topic.partitions:
                w.int32(p.partition)
                if version >= 9:
                    w.int32(p.current_leader_epoch)
                w.int64(p.fetch_offset)
                if version >= 12:
                    w.int32(p.last_fetched_epoch)
                if version >= 5:
                    w.int64(p.log_start_offset)
                w.int32(p.partition_max_bytes)
                if flex:
                    w.tagged_fields()
            if flex:
                w.tagged_fields()
        if version >= 7:
            w.array_length(len(self.forgotten_topics), flex)
            for name, partitions in self.forgotten_topics:
                w.string(name, flex)
                w.int32_array(partitions, flex)
                if flex:
                    w.tagged_fields()
        if version >= 11:
            w.string(self.rack_id, flex)
        if flex:
            tags: dict[int, bytes] = {}
            if self.cluster_id is not None:
                sub = Writer()
                sub.compact_nullable_string(self.cluster_id)
                tags[_TAG_CLUSTER_ID] = sub.getvalue()
            w.tagged_fields(tags)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> FetchRequest:
        """Read the body in ``version``; tagged fields other than the cluster id are skipped."""
        flex = version >= _FLEXIBLE
        request = cls([], replica_id=r.int32(), max_wait_ms=r.int32(), min_bytes=r.int32())
        request.max_bytes = r.int32()
        request.isolation_level = r.int8()
        if version >= 7:
            request.session_id = r.int32()
            request.session_epoch = r.int32()
        for _ in range(r.array_length(flex, 3)):
            topic = FetchTopic(r.string(flex))
            for _ in range(r.array_length(flex, 16)):
                partition = FetchPartition(r.int32(), 0, 0)
                if version >= 9:
                    partition.current_leader_epoch = r.int32()
                partition.fetch_offset = r.int64()
                if version >= 12:
                    partition.last_fetched_epoch = r.int32()
                if version >= 5:
                    partition.log_start_offset = r.int64()
                partition.partition_max_bytes = r.int32()
                end_struct(r, flex)
                topic.partitions.append(partition)
            end_struct(r, flex)
            request.topics.append(topic)
        if version >= 7:
            for _ in range(r.array_length(flex, 3)):
                name = r.string(flex)
                request.forgotten_topics.append((name, r.int32_array(flex)))
                end_struct(r, flex)
        if version >= 11:
            request.rack_id = r.string(flex)
        if flex:
            for tag, data in r.tagged_fields().items():
                if tag == _TAG_CLUSTER_ID:
                    request.cluster_id = Reader(data).compact_nullable_string()
        return request
