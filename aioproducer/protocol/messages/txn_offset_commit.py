"""TxnOffsetCommit (key 28), versions 0-5; flexible from v3."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.messages.add_partitions_to_txn import (
    TopicPartitionErrors,
    read_partition_errors,
    write_partition_errors,
)
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["TxnOffsetCommitPartition", "TxnOffsetCommitRequest", "TxnOffsetCommitResponse"]

_FLEXIBLE = 3


@dataclass(slots=True)
class TxnOffsetCommitResponse(Response):
    """Per-partition results: ``topics`` is [(topic, [(partition, error code)])]."""

    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT

    throttle_time_ms: int = 0
    topics: TopicPartitionErrors = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> TxnOffsetCommitResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(r.int32(), read_partition_errors(r, flex))
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.throttle_time_ms)
        write_partition_errors(w, self.topics, flex)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class TxnOffsetCommitPartition:
    """An offset to commit for one partition; ``committed_leader_epoch`` exists from v2."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None

    def encode(self, w: Writer, version: int) -> None:
        """Write this partition in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.partition_index)
        w.int64(self.committed_offset)
        if version >= 2:
            w.int32(self.committed_leader_epoch)
        w.nullable_string(self.committed_metadata, flex)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, version: int) -> TxnOffsetCommitPartition:
        """Read a partition in ``version``."""
        flex = version >= _FLEXIBLE
        partition = cls(r.int32(), r.int64())
        if version >= 2:
            partition.committed_leader_epoch = r.int32()
        partition.committed_metadata = r.nullable_string(flex)
        end_struct(r, flex)
        return partition


@dataclass(slots=True)
class TxnOffsetCommitRequest(Request[TxnOffsetCommitResponse]):
    """Commits consumer offsets as part of a transaction (sent to the group coordinator).

    ``topics`` is [(topic, [partition])]. ``generation_id``, ``member_id`` and
    ``group_instance_id`` exist from v3 and let the coordinator fence zombie group members.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT
    RESPONSE: ClassVar[type[Response]] = TxnOffsetCommitResponse

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[TxnOffsetCommitPartition]]] = field(default_factory=list)
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.string(self.transactional_id, flex)
        w.string(self.group_id, flex)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        if version >= 3:
            w.int32(self.generation_id)
            w.compact_string(self.member_id)
            w.compact_nullable_string(self.group_instance_id)
        w.array_length(len(self.topics), flex)
        for name, partitions in self.topics:
            w.string(name, flex)
            w.array_length(len(partitions), flex)
            for partition in partitions:
                partition.encode(w, version)
            if flex:
                w.tagged_fields()
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> TxnOffsetCommitRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        transactional_id = r.string(flex)
        group_id = r.string(flex)
        request = cls(transactional_id, group_id, r.int64(), r.int16())
        if version >= 3:
            request.generation_id = r.int32()
            request.member_id = r.compact_string()
            request.group_instance_id = r.compact_nullable_string()
        # index, offset, metadata (and leader epoch, tags when flexible): at least 14 bytes.
        partition_size = 18 if flex else 14
        for _ in range(r.array_length(flex, 3 if flex else 6)):
            name = r.string(flex)
            partitions = r.array(
                lambda: TxnOffsetCommitPartition.decode(r, version), flex, partition_size
            )
            end_struct(r, flex)
            request.topics.append((name, partitions))
        end_struct(r, flex)
        return request
