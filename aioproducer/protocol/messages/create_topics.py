"""CreateTopics (key 19), versions 2-7; flexible from v5."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from uuid import UUID

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.messages.metadata import read_uuid_or_none
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "CreatableTopic",
    "CreatableTopicConfigResult",
    "CreatableTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
]

_FLEXIBLE = 5
_TAG_TOPIC_CONFIG_ERROR_CODE = 0


@dataclass(slots=True)
class CreatableTopic:
    """A topic to create.

    ``num_partitions``/``replication_factor`` of -1 use the broker defaults (or the manual
    ``assignments``, partition index to broker ids). ``configs`` maps config names to values.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)

    def encode(self, w: Writer, flex: bool) -> None:
        """Write this topic (identical in every supported version apart from flexibility)."""
        w.string(self.name, flex)
        w.int32(self.num_partitions)
        w.int16(self.replication_factor)
        w.array_length(len(self.assignments), flex)
        for partition, brokers in self.assignments.items():
            w.int32(partition)
            w.int32_array(brokers, flex)
            if flex:
                w.tagged_fields()
        w.array_length(len(self.configs), flex)
        for name, value in self.configs.items():
            w.string(name, flex)
            w.nullable_string(value, flex)
            if flex:
                w.tagged_fields()
        if flex:
            w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader, flex: bool) -> CreatableTopic:
        """Read a topic entry."""
        name = r.string(flex)
        num_partitions = r.int32()
        replication_factor = r.int16()
        assignments: dict[int, list[int]] = {}
        for _ in range(r.array_length(flex, 5)):
            partition = r.int32()
            assignments[partition] = r.int32_array(flex)
            end_struct(r, flex)
        configs: dict[str, str | None] = {}
        for _ in range(r.array_length(flex, 2)):
            key = r.string(flex)
            configs[key] = r.nullable_string(flex)
            end_struct(r, flex)
        end_struct(r, flex)
        return cls(name, num_partitions, replication_factor, assignments, configs)


@dataclass(slots=True)
class CreatableTopicConfigResult:
    """A configuration of a created topic, as returned from v5."""

    name: str
    value: str | None
    read_only: bool = False
    config_source: int = -1
    is_sensitive: bool = False


@dataclass(slots=True)
class CreatableTopicResult:
    """The outcome for one topic.

    ``topic_id`` exists from v7; ``num_partitions``, ``replication_factor``, ``configs`` and
    ``topic_config_error_code`` from v5 (their defaults before).
    """

    name: str
    topic_id: UUID | None = None
    error_code: int = 0
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[CreatableTopicConfigResult] | None = None
    topic_config_error_code: int = 0

    def encode(self, w: Writer, version: int) -> None:
        """Write this result in ``version``."""
        flex = version >= _FLEXIBLE
        w.string(self.name, flex)
        if version >= 7:
            w.uuid(self.topic_id)
        w.int16(self.error_code)
        w.nullable_string(self.error_message, flex)
        if version >= 5:
            w.int32(self.num_partitions)
            w.int16(self.replication_factor)
            w.nullable_array(self.configs, lambda c: _write_config(w, c), True)
            tags: dict[int, bytes] = {}
            if self.topic_config_error_code:
                sub = Writer()
                sub.int16(self.topic_config_error_code)
                tags[_TAG_TOPIC_CONFIG_ERROR_CODE] = sub.getvalue()
            w.tagged_fields(tags)

    @classmethod
    def decode(cls, r: Reader, version: int) -> CreatableTopicResult:
        """Read a result in ``version``."""
        flex = version >= _FLEXIBLE
        result = cls(r.string(flex))
        if version >= 7:
            result.topic_id = read_uuid_or_none(r)
        result.error_code = r.int16()
        result.error_message = r.nullable_string(flex)
        if version >= 5:
            result.num_partitions = r.int32()
            result.replication_factor = r.int16()
            result.configs = r.nullable_array(lambda: _read_config(r), True, 5)
            for tag, data in r.tagged_fields().items():
                if tag == _TAG_TOPIC_CONFIG_ERROR_CODE:
                    result.topic_config_error_code = Reader(data).int16()
        return result


def _write_config(w: Writer, config: CreatableTopicConfigResult) -> None:
    w.compact_string(config.name)
    w.compact_nullable_string(config.value)
    w.boolean(config.read_only)
    w.int8(config.config_source)
    w.boolean(config.is_sensitive)
    w.tagged_fields()


def _read_config(r: Reader) -> CreatableTopicConfigResult:
    config = CreatableTopicConfigResult(
        r.compact_string(), r.compact_nullable_string(), r.boolean(), r.int8(), r.boolean()
    )
    r.skip_tagged_fields()
    return config


@dataclass(slots=True)
class CreateTopicsResponse(Response):
    """Per-topic results of a CreateTopics request."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS

    throttle_time_ms: int = 0
    topics: list[CreatableTopicResult] = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> CreateTopicsResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        throttle = r.int32()
        topics = r.array(lambda: CreatableTopicResult.decode(r, version), flex, 5)
        end_struct(r, flex)
        return cls(throttle, topics)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.int32(self.throttle_time_ms)
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            topic.encode(w, version)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class CreateTopicsRequest(Request[CreateTopicsResponse]):
    """Creates topics; ``validate_only`` checks without creating."""

    API_KEY: ClassVar[ApiKey] = ApiKey.CREATE_TOPICS
    RESPONSE: ClassVar[type[Response]] = CreateTopicsResponse

    topics: list[CreatableTopic]
    timeout_ms: int = 30000
    validate_only: bool = False

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.array_length(len(self.topics), flex)
        for topic in self.topics:
            topic.encode(w, flex)
        w.int32(self.timeout_ms)
        w.boolean(self.validate_only)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> CreateTopicsRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        topics = r.array(lambda: CreatableTopic.decode(r, flex), flex, 9)
        timeout_ms = r.int32()
        validate_only = r.boolean()
        end_struct(r, flex)
        return cls(topics, timeout_ms, validate_only)
