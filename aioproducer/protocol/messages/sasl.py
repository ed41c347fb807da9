"""SaslHandshake (key 17, versions 0-1, never flexible) and SaslAuthenticate (key 36,
versions 0-2, flexible from v2).

Authentication bytes carry credentials, so they are left out of every ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
]

_AUTHENTICATE_FLEXIBLE = 2


@dataclass(slots=True)
class SaslHandshakeResponse(Response):
    """The broker's answer to a handshake: an error code and its enabled mechanisms."""

    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE

    error_code: int = 0
    mechanisms: list[str] = field(default_factory=list)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> SaslHandshakeResponse:
        """Read the body (identical in v0 and v1)."""
        error_code = r.int16()
        return cls(error_code, r.array(r.string, False, 2))

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body (identical in v0 and v1)."""
        w.int16(self.error_code)
        w.array(self.mechanisms, w.string)


@dataclass(slots=True)
class SaslHandshakeRequest(Request[SaslHandshakeResponse]):
    """Chooses a SASL mechanism. In v1 the exchange continues with SaslAuthenticate; in v0
    the broker expects raw, size-prefixed SASL tokens instead."""

    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_HANDSHAKE
    RESPONSE: ClassVar[type[Response]] = SaslHandshakeResponse

    mechanism: str

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body (identical in v0 and v1)."""
        w.string(self.mechanism)

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> SaslHandshakeRequest:
        """Read the body (identical in v0 and v1)."""
        return cls(r.string())


@dataclass(slots=True)
class SaslAuthenticateResponse(Response):
    """A server SASL token, or an error; ``session_lifetime_ms`` (v1+) is 0 when unlimited."""

    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE

    error_code: int = 0
    error_message: str | None = None
    auth_bytes: bytes = field(default=b"", repr=False)
    session_lifetime_ms: int = 0

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> SaslAuthenticateResponse:
        """Read the body in ``version``."""
        flex = version >= _AUTHENTICATE_FLEXIBLE
        response = cls(r.int16(), r.nullable_string(flex), r.bytes_(flex))
        if version >= 1:
            response.session_lifetime_ms = r.int64()
        end_struct(r, flex)
        return response

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _AUTHENTICATE_FLEXIBLE
        w.int16(self.error_code)
        w.nullable_string(self.error_message, flex)
        w.bytes_(self.auth_bytes, flex)
        if version >= 1:
            w.int64(self.session_lifetime_ms)
        if flex:
            w.tagged_fields()


@dataclass(slots=True)
class SaslAuthenticateRequest(Request[SaslAuthenticateResponse]):
    """Carries one client SASL token."""

    API_KEY: ClassVar[ApiKey] = ApiKey.SASL_AUTHENTICATE
    RESPONSE: ClassVar[type[Response]] = SaslAuthenticateResponse

    auth_bytes: bytes = field(repr=False)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body in ``version``."""
        flex = version >= _AUTHENTICATE_FLEXIBLE
        w.bytes_(self.auth_bytes, flex)
        if flex:
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> SaslAuthenticateRequest:
        """Read the body in ``version``."""
        flex = version >= _AUTHENTICATE_FLEXIBLE
        request = cls(r.bytes_(flex))
        end_struct(r, flex)
        return request
