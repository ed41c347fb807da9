"""Unsecured OAuth tokens for the OAUTHBEARER listeners of :class:`KafkaCluster`.

Kafka's default OAUTHBEARER validator (``OAuthBearerUnsecuredValidatorCallbackHandler``)
accepts JWS tokens signed with ``alg: none``: a header, a payload of claims, and an empty
signature, each base64url-encoded without padding. Such tokens prove nothing, which is
exactly what a test needs and a production broker must never accept::

    token = unsecured_token("alice", lifetime=60)
    Producer(..., sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=lambda: token)
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable

from ..oauth import OAuthToken

__all__ = ["unsecured_jws", "unsecured_token", "unsecured_token_provider"]


def _b64(data: dict[str, object]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# Tokens are dated a few seconds back, as a real identity provider's are by the time they
# are used: the broker checks "iat" against a clock read once per network poll, so a
# token minted this very millisecond can look issued in the future and be refused.
_ISSUED_AGO = 5.0


def unsecured_jws(
    subject: str,
    lifetime: float = 3600.0,
    *,
    issued_at: float | None = None,
    scope: str | None = None,
) -> str:
    """An unsecured JWS (``header.payload.``) for principal ``subject``, valid for
    ``lifetime`` seconds from ``issued_at`` (default: now, with "iat" a few seconds earlier;
    a negative lifetime makes an expired token)."""
    start = time.time() if issued_at is None else issued_at
    iat = start - _ISSUED_AGO if issued_at is None else issued_at
    claims: dict[str, object] = {"sub": subject, "iat": iat, "exp": start + lifetime}
    if scope is not None:
        claims["scope"] = scope
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}."


def unsecured_token(subject: str, lifetime: float = 3600.0) -> OAuthToken:
    """An :class:`~aioproducer.oauth.OAuthToken` holding a fresh :func:`unsecured_jws`."""
    now = time.time()
    # unsecured_jws dates "iat" back but counts the lifetime from now, as this does.
    return OAuthToken(unsecured_jws(subject, lifetime), now + lifetime, subject)


def unsecured_token_provider(subject: str, lifetime: float = 3600.0) -> Callable[[], OAuthToken]:
    """A token provider minting a new :func:`unsecured_token` on every call."""

    def provide() -> OAuthToken:
        return unsecured_token(subject, lifetime)

    return provide
