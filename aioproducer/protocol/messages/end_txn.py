"""EndTxn (key 26), versions 0-5; flexible from v3.

From v5 (KIP-890 part 2) the coordinator bumps the epoch at the end of every transaction and
returns the producer id and epoch to use next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["EndTxnRequest", "EndTxnResponse"]

_FLEXIBLE = 3
_RETURNS_PRODUCER = 5


@dataclass(slots=True)
class EndTxnResponse(Response):
    """The outcome of committing or aborting a transaction.

    ``producer_id``/``producer_epoch`` exist from v5 (-1 before): the id and the bumped epoch
    the producer continues with.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN

    throttle_time_ms: int = 0
    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> EndTxnResponse:
        """Read the body in ``version``."""
        response = cls(r.int32(), r.int16())
        if version >= _RETURNS_PRODUCER:
            response.producer_id = r.int64()
            response.producer_epoch = r.int16()
        end_struct(r, version >= _FLEXIBLE)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        w.int32(self.throttle_time_ms)
        w.int16(self.error_code)
        if version >= _RETURNS_PRODUCER:
            w.int64(self.producer_id)
            w.int16(self.producer_epoch)
        if version >= _FLEXIBLE:
            w.tagged_fields()


@dataclass(slots=True)
class EndTxnRequest(Request[EndTxnResponse]):
    """Commits (``committed=True``) or aborts the ongoing transaction."""

    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN
    RESPONSE: ClassVar[type[Response]] = EndTxnResponse

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _FLEXIBLE
        w.string(self.transactional_id, flex)
        w.int64(self.producer_id)
        w.int16(self.producer_epoch)
        w.boolean(self.committed)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> EndTxnRequest:
        """Read the body in ``version``."""
        flex = version >= _FLEXIBLE
        request = cls(r.string(flex), r.int64(), r.int16(), r.boolean())
        end_struct(r, flex)
        return request
