"""AddOffsetsToTxn (key 25), versions 0-4; flexible from v3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["AddOffsetsToTxnRequest", "AddOffsetsToTxnResponse"]

_FLEXIBLE = 3


@dataclass(slots=True)
class AddOffsetsToTxnResponse(Response):
    """Whether the group's offsets topic partition joined the transaction."""

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN

    throttle_time_ms: int = 0
    error_code: int = 0

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> AddOffsetsToTxnResponse:
        """Read the body in ``version``."""
        response = cls(r.int32(), r.int16())
        end_struct(r, version >= _FLEXIBLE)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        if version >= _FLEXIBLE:
            w.tagged_fields()


@dataclass(slots=True)
class AddOffsetsToTxnRequest(Request[AddOffsetsToTxnResponse]):
    """Adds a consumer group's offset commits to a transaction (sent to the txn coordinator).

    The offsets themselves follow in a TxnOffsetCommit to the group coordinator.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN
    RESPONSE: ClassVar[type[Response]] = AddOffsetsToTxnResponse

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.string(self.transactional_id, flex)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        w.string(self.group_id, flex)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> AddOffsetsToTxnRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        transactional_id = r.string(flex)
        producer_id = r.int64()
        producer_epoch = r.int16()
        request = cls(transactional_id, producer_id, producer_epoch, r.string(flex))
        end_struct(r, flex)
        return request
