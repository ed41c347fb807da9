"""Base classes shared by every request and response codec."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["Request", "Response", "end_struct"]

_ResponseT = TypeVar("_ResponseT", bound="Response")
_RequestSelf = TypeVar("_RequestSelf", bound="Request[Any]")
_ResponseSelf = TypeVar("_ResponseSelf", bound="Response")


class Response:
    """A response body. Subclasses are slotted dataclasses.

    ``decode_body`` reads the body (everything after the response header) of one version;
    ``encode_body`` writes it, which is what an in-process broker needs.
    """

    __slots__ = ()

    API_KEY: ClassVar[ApiKey]

    @classmethod
    def decode_body(cls: type[_ResponseSelf], r: Reader, version: int) -> _ResponseSelf:
        """Read this response's body in ``version`` from ``r``."""
        raise NotImplementedError

    def encode_body(self, w: Writer, version: int) -> None:
        """Write this response's body in ``version`` to ``w``."""
        raise NotImplementedError


class Request(Generic[_ResponseT]):
    """A request body, generic in the type of its response. Subclasses are slotted dataclasses.

    ``RESPONSE`` is the matching response class; ``encode_body`` writes the body (everything
    after the request header) of one version and ``decode_body`` reads it back.
    """

    __slots__ = ()

    API_KEY: ClassVar[ApiKey]
    RESPONSE: ClassVar[type[Response]]

    def encode_body(self, w: Writer, version: int) -> None:
        """Write this request's body in ``version`` to ``w``."""
        raise NotImplementedError

    @classmethod
    def decode_body(cls: type[_RequestSelf], r: Reader, version: int) -> _RequestSelf:
        """Read this request's body in ``version`` from ``r``."""
        raise NotImplementedError

    def expects_response(self) -> bool:
        """Whether the broker answers this request (false only for Produce with acks=0)."""
        return True


def end_struct(r: Reader, flexible: bool) -> None:
    """Skip the tagged-field section that ends every struct in a flexible version."""
    if flexible:
        r.skip_tagged_fields()
