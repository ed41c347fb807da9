"""Metadata (key 3), versions 0-12; flexible from v9."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from uuid import UUID

from aioproducer.errors import ProtocolError
from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "BrokerMetadata",
    "MetadataRequest",
    "MetadataResponse",
    "PartitionMetadata",
    "TopicMetadata",
    "read_uuid_or_none",
]

_FLEXIBLE = 9
_NO_AUTHORIZED_OPERATIONS = -(1 << 31)
_ZERO_UUID = UUID(int=0)


def read_uuid_or_none(r: Reader) -> UUID | None:
    """Read a UUID, mapping Kafka's all-zero "no id" value to ``None``."""
    value = r.uuid()
    return None if value == _ZERO_UUID else value


@dataclass(slots=True)
class BrokerMetadata:
    """A broker's address: node id, host, port and rack (``None`` when it has no rack)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    def encode(self, w: Writer, version: int, flexible: bool) -> None:
        """Write this broker as a Metadata response entry (rack from v1)."""
        w.int32(self.node_id)
        w.string(self.host, flexible)
        w.int32(self.port)
        if version >= 1:
            w.nullable_string(self.rack, flexible)
        if flexible:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, version: int, flexible: bool) -> BrokerMetadata:
        """Read a broker entry of a Metadata response (or Produce NodeEndpoints)."""
        node_id = r.int32()
        host = r.string(flexible)
        port = r.int32()
        rack = r.nullable_string(flexible) if version >= 1 else None
        end_struct(r, flexible)
        return cls(node_id, host, port, rack)


@dataclass(slots=True)
class PartitionMetadata:
    """One partition's leader and replicas. ``leader_epoch`` is -1 before v7."""

    error_code: int
    partition: int
    leader_id: int
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)

    def encode(self, w: Writer, version: int) -> None:
        """Write this partition in ``version``."""
        flex = version >= _FLEXIBLE
        w.int16(self.error_code)
        w.int32(self.partition)
        w.int32(self.leader_id)
        if version >= 7:
            w.int32(self.leader_epoch)
        w.int32_array(self.replicas, flex)
        w.int32_array(self.isr, flex)
        if version >= 5:
            w.int32_array(self.offline_replicas, flex)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, version: int) -> PartitionMetadata:
        """Read a partition in ``version``."""
        flex = version >= _FLEXIBLE
        error_code = r.int16()
        partition = r.int32()
        leader_id = r.int32()
        leader_epoch = r.int32() if version >= 7 else -1
        replicas = r.int32_array(flex)
        isr = r.int32_array(flex)
        offline = r.int32_array(flex) if version >= 5 else []
        end_struct(r, flex)
        return cls(error_code, partition, leader_id, leader_epoch, replicas, isr, offline)


@dataclass(slots=True)
class TopicMetadata:
    """One topic's metadata.

    ``topic_id`` exists from v10 (``None`` before, and for the all-zero id). ``name`` is
    null on the wire only for topics queried by id, which this client never does; such a
    name is read as ``""``. ``authorized_operations`` (v8+) is -2**31 when not requested.
    """

    error_code: int
    name: str
    topic_id: UUID | None = None
    is_internal: bool = False
    partitions: list[PartitionMetadata] = field(default_factory=list)
    authorized_operations: int = _NO_AUTHORIZED_OPERATIONS

    def encode(self, w: Writer, version: int) -> None:
        """Write this topic in ``version``."""
        flex = version >= _FLEXIBLE
        w.int16(self.error_code)
        w.string(self.name, flex)
        if version >= 10:
            w.uuid(self.topic_id)
        if version >= 1:
            w.boolean(self.is_internal)
        w.array_length(len(self.partitions), flex)
        for partition in self.partitions:
            partition.encode(w, version)
        if version >= 8:
            w.int32(self.authorized_operations)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, version: int) -> TopicMetadata:
        """Read a topic in ``version``."""
        flex = version >= _FLEXIBLE
        error_code = r.int16()
        name = r.nullable_string(flex) if version >= 12 else r.string(flex)
        topic_id = read_uuid_or_none(r) if version >= 10 else None
        is_internal = r.boolean() if version >= 1 else False
        partitions = r.array(lambda: PartitionMetadata.decode(r, version), flex, 10)
        authorized = r.int32() if version >= 8 else _NO_AUTHORIZED_OPERATIONS
        end_struct(r, flex)
        return cls(error_code, name or "", topic_id, is_internal, partitions, authorized)


@dataclass(slots=True)
class MetadataResponse(Response):
    """Brokers, controller and topic/partition layout of a cluster.

    ``cluster_id`` exists from v2, ``controller_id`` from v1 (-1 before), ``throttle_time_ms``
    from v3 and ``cluster_authorized_operations`` in v8-v10 only.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.METADATA

    brokers: list[BrokerMetadata] = field(default_factory=list)
    cluster_id: str | None = None
    controller_id: int = -1
    topics: list[TopicMetadata] = field(default_factory=list)
    throttle_time_ms: int = 0
    cluster_authorized_operations: int = _NO_AUTHORIZED_OPERATIONS

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> MetadataResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        throttle = r.int32() if version >= 3 else 0
        brokers = r.array(lambda: BrokerMetadata.decode(r, version, flex), flex, 10)
        cluster_id = r.nullable_string(flex) if version >= 2 else None
        controller_id = r.int32() if version >= 1 else -1
        topics = r.array(lambda: TopicMetadata.decode(r, version), flex, 6)
        cluster_ops = r.int32() if 8 <= version <= 10 else _NO_AUTHORIZED_OPERATIONS
        end_struct(r, flex)
        return cls(brokers, cluster_id, controller_id, topics, throttle, cluster_ops)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version >= 3:
            w.int32(self.throttle_time_ms)
        w.array_length(len(self.brokers), flex)
        for broker in self.brokers:
            broker.encode(w, version, flex)
        if version >= 2:
            w.nullable_string(self.cluster_id, flex)
        if version >= 1:
            w.int32(self.controller_id)
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            topic.encode(w, version)
        if 8 <= version <= 10:
            w.int32(self.cluster_authorized_operations)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class MetadataRequest(Request[MetadataResponse]):
    """Asks for brokers and topic layout.

    ``topics=None`` asks for every topic. Version 0 has no null array and reads an *empty*
    array as "all topics", so in v0 both ``None`` and ``[]`` fetch every topic (and a decoded
    v0 empty array comes back as ``None``). ``allow_auto_topic_creation`` exists from v4 (v0-v3
    brokers always auto-create if configured to). The authorized-operations flags exist from v8
    (the cluster one only in v8-v10).
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.METADATA
    RESPONSE: ClassVar[type[Response]] = MetadataResponse

    topics: list[str] | None
    allow_auto_topic_creation: bool = False
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        topics = self.topics
        if topics is None and version == 0:
            topics = []
        w.array_length(None if topics is None else len(topics), flex)
        for name in topics or ():
            if version >= 10:
                # v10 and v11 define a topic id but brokers only honour names there.
                w.uuid(None)
            w.string(name, flex)
            if flex:
                w.tagged_fields()
        if version >= 4:
            w.boolean(self.allow_auto_topic_creation)
        if 8 <= version <= 10:
            w.boolean(self.include_cluster_authorized_operations)
        if version >= 8:
            w.boolean(self.include_topic_authorized_operations)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> MetadataRequest:
        """Read the body in ``version``; topics addressed only by id are rejected.

        Before v4 ``allow_auto_topic_creation`` reads as true, the schema's default there.
        """
        flex = version >= _FLEXIBLE
        count = r.array_length(flex, 2, nullable=version >= 1)
        names = [_read_topic_name(r, version, flex) for _ in range(count)]
        topics = None if count < 0 or (version == 0 and not names) else names
        allow = r.boolean() if version >= 4 else True
        cluster_ops = r.boolean() if 8 <= version <= 10 else False
        topic_ops = r.boolean() if version >= 8 else False
        end_struct(r, flex)
        return cls(topics, allow, cluster_ops, topic_ops)


def _read_topic_name(r: Reader, version: int, flex: bool) -> str:
    if version >= 10:
        r.uuid()
    name = r.nullable_string(flex) if version >= 10 else r.string(flex)
    if name is None:
        raise ProtocolError("Metadata requests by topic id are not supported")
    end_struct(r, flex)
    return name
