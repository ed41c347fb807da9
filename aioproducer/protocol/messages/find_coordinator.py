"""FindCoordinator (key 10), versions 0-6; flexible from v3.

Versions 0-3 look up one ``key`` and answer with top-level fields; v4+ (KIP-699) batch
``coordinator_keys`` and answer with one :class:`Coordinator` per key. Fields a version lacks
are not written, and read back as their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "KEY_TYPE_GROUP",
    "KEY_TYPE_TRANSACTION",
    "Coordinator",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
]

_FLEXIBLE = 3
_BATCHED = 4

#: ``key_type`` of a consumer group's coordinator.
KEY_TYPE_GROUP = 0
#: ``key_type`` of a transactional id's coordinator.
KEY_TYPE_TRANSACTION = 1


@dataclass(slots=True)
class Coordinator:
    """The coordinator of one key in a v4+ response (or the error finding it)."""

    key: str
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_code: int = 0
    error_message: str | None = None

    def encode(self, w: Writer) -> None:
        """Write this entry (v4+ only, so always flexible)."""
        w.compact_string(self.key)
        w.int32(self.node_id)
        w.compact_string(self.host)
        w.int32(self.port)
        w.int16(self.error_code)
        w.compact_nullable_string(self.error_message)
        w.tagged_fields()

    @classmethod
    def decode(cls, r: Reader) -> Coordinator:
        """Read an entry of a v4+ response."""
        key = r.compact_string()
        node_id = r.int32()
        host = r.compact_string()
        port = r.int32()
        error_code = r.int16()
        message = r.compact_nullable_string()
        r.skip_tagged_fields()
        return cls(key, node_id, host, port, error_code, message)


@dataclass(slots=True)
class FindCoordinatorResponse(Response):
    """Where the coordinator of a group or transactional id lives.

    In v0-3 the answer is the top-level ``error_code``, ``node_id``, ``host`` and ``port``
    (``error_message`` from v1); in v4+ it is ``coordinators``, one per requested key, and the
    top-level fields keep their defaults. ``throttle_time_ms`` exists from v1.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR

    throttle_time_ms: int = 0
    error_code: int = 0
    error_message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1
    coordinators: list[Coordinator] = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> FindCoordinatorResponse:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        response = cls(r.int32() if version >= 1 else 0)
        if version >= _BATCHED:
            # key, node id, host, port, error code, message, tags: at least 14 bytes each.
            response.coordinators = r.compact_array(lambda: Coordinator.decode(r), 14)
        else:
            response.error_code = r.int16()
            if version >= 1:
                response.error_message = r.nullable_string(flex)
            response.node_id = r.int32()
            response.host = r.string(flex)
            response.port = r.int32()
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version >= 1:
            w.int32(self.throttle_time_ms)
        if version >= _BATCHED:
            w.array_length(len(self.coordinators), True)
            for coordinator in self.coordinators:
                coordinator.encode(w)
        else:
            w.int16(self.error_code)
            if version >= 1:
                w.nullable_string(self.error_message, flex)
            w.int32(self.node_id)
            w.string(self.host, flex)
            w.int32(self.port)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class FindCoordinatorRequest(Request[FindCoordinatorResponse]):
    """Asks which broker coordinates a group (``key_type`` 0) or transactional id (1).

    v0-3 send the single ``key``; v4+ send ``coordinator_keys`` instead. ``key_type`` exists
    from v1: a v0 request always looks up a group.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.FIND_COORDINATOR
    RESPONSE: ClassVar[type[Response]] = FindCoordinatorResponse

    key: str = ""
    key_type: int = KEY_TYPE_GROUP
    coordinator_keys: list[str] = field(default_factory=list)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        if version < _BATCHED:
            w.string(self.key, flex)
        if version >= 1:
            w.int8(self.key_type)
        if version >= _BATCHED:
            w.array_length(len(self.coordinator_keys), True)
            for key in self.coordinator_keys:
                w.compact_string(key)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> FindCoordinatorRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls()
        if version < _BATCHED:
            request.key = r.string(flex)
        if version >= 1:
            request.key_type = r.int8()
        if version >= _BATCHED:
            request.coordinator_keys = r.compact_array(r.compact_string)
        end_struct(r, flex)
        return request
