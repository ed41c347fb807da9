"""InitProducerId (key 22), versions 0-5; flexible from v2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["InitProducerIdRequest", "InitProducerIdResponse"]

_FLEXIBLE = 2


@dataclass(slots=True)
class InitProducerIdResponse(Response):
    """The producer id and epoch assigned (or bumped) by the broker."""

    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID

    throttle_time_ms: int = 0
    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> InitProducerIdResponse:
        """Read the body in ``version``."""
        response = cls(r.int32(), r.int16(), r.int64(), r.int16())
        end_struct(r, version >= _FLEXIBLE)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        if version >= _FLEXIBLE:
            w.tagged_fields()


@dataclass(slots=True)
class InitProducerIdRequest(Request[InitProducerIdResponse]):
    """Asks for a producer id (idempotence) or initialises a transactional producer.

    ``producer_id``/``producer_epoch`` exist from v3: sending the current ones lets the broker
    bump the epoch instead of fencing; -1 asks for a fresh id.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID
    RESPONSE: ClassVar[type[Response]] = InitProducerIdResponse

    transactional_id: str | None = None
    transaction_timeout_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.nullable_string(self.transactional_id, flex)
        w.int32(self.transaction_timeout_ms)
        if version >= 3:
            w.int64(self.producer_id)
            w.int16(self.producer_epoch)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> InitProducerIdRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls(r.nullable_string(flex), r.int32())
        if version >= 3:
            request.producer_id = r.int64()
            request.producer_epoch = r.int16()
        end_struct(r, flex)
        return request
