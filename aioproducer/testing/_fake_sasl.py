"""SASL on the fake cluster: the handshake, each authentication, and session lifetimes.

Package-internal: :class:`SaslGate` and :class:`Authentication` are its interface, for
:mod:`aioproducer.testing.fake` and :mod:`aioproducer.testing._fake_server`.

A fake made with ``sasl={mechanism: check}`` serves SaslHandshake (v0-1) and
SaslAuthenticate (v0-2). ``check(auth_bytes)`` returns the principal of a good client
message and raises ``ValueError`` (its text goes back as the broker's error message) to
reject it. As a broker with ``connections.max.reauth.ms`` does (KIP-368), each success
grants ``session_lifetime_ms`` (0: unlimited), and a connection that sends anything but
ApiVersions or SASL after its session ended is closed; one that has not authenticated
yet is closed at its first other request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.error_codes import ErrorCode
from ..protocol.messages import (
    ApiVersionsRequest,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

__all__ = ["Authentication", "SaslCheck", "SaslGate", "SessionState"]

#: ``check(auth_bytes) -> principal``; raises ``ValueError`` to reject the client.
SaslCheck = Callable[[bytes], str]


@dataclass(frozen=True, slots=True)
class Authentication:
    """One successful SASL authentication a fake broker accepted."""

    broker: int
    #: The connection's id, as in :class:`~aioproducer.testing.fake.RequestRecord`: two
    #: authentications with the same id are a re-authentication (KIP-368).
    connection: int
    mechanism: str
    principal: str
    #: ``time.monotonic()`` when it was accepted.
    at: float


class SessionState:
    """What one connection negotiated: its mechanism and when its session ends."""

    __slots__ = ("expires_at", "mechanism")

    def __init__(self) -> None:
        self.mechanism: str | None = None
        #: ``None`` before the first authentication; ``inf`` for an unlimited session.
        self.expires_at: float | None = None


class SaslGate:
    """Answers the SASL requests and decides whether a connection may send others."""

    def __init__(self, checks: Mapping[str, SaslCheck], session_lifetime_ms: int) -> None:
        self.checks = dict(checks)
        self.session_lifetime_ms = session_lifetime_ms
        #: Every accepted authentication, oldest first (appended under the cluster lock).
        self.accepted: list[Authentication] = []

    @property
    def enabled(self) -> bool:
        """Whether the fake serves SASL at all."""
        return bool(self.checks)

    def admits(self, session: SessionState, request: Request[Any]) -> bool:
        """Whether ``request`` may be served on a connection in ``session``'s state."""
        if not self.enabled or isinstance(
            request, ApiVersionsRequest | SaslHandshakeRequest | SaslAuthenticateRequest
        ):
            return True
        return session.expires_at is not None and time.monotonic() < session.expires_at

    def answer(
        self, broker: int, connection: int, session: SessionState, request: Request[Any]
    ) -> tuple[Response, Authentication | None]:
        """The answer to a SASL request, and the authentication it completed, if any."""
        if isinstance(request, SaslHandshakeRequest):
            if request.mechanism not in self.checks:
                return SaslHandshakeResponse(
                    ErrorCode.UNSUPPORTED_SASL_MECHANISM, sorted(self.checks)
                ), None
            session.mechanism = request.mechanism
            return SaslHandshakeResponse(0, sorted(self.checks)), None
        assert isinstance(request, SaslAuthenticateRequest)
        mechanism = session.mechanism
        if mechanism is None:
            return SaslAuthenticateResponse(
                ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake"
            ), None
        try:
            principal = self.checks[mechanism](request.auth_bytes)
        except ValueError as exc:
            return SaslAuthenticateResponse(
                ErrorCode.SASL_AUTHENTICATION_FAILED, f"Authentication failed: {exc}"
            ), None
        now = time.monotonic()
        lifetime = self.session_lifetime_ms
        session.expires_at = now + lifetime / 1000 if lifetime > 0 else float("inf")
        # The next exchange starts with a handshake again.
        session.mechanism = None
        done = Authentication(broker, connection, mechanism, principal, now)
        return SaslAuthenticateResponse(0, None, b"", lifetime), done
