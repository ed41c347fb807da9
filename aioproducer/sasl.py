"""SASL authentication of a broker connection: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER and
AWS_MSK_IAM (see :mod:`aioproducer.aws`).

The authenticator returned by :func:`authenticator` runs the whole exchange on a connection
(SaslHandshake, then one or more SaslAuthenticate) and returns the session lifetime the
broker granted in milliseconds (KIP-368; 0 when unlimited). The connection runs it again
on the same socket before that lifetime ends.

Secrets never appear in exceptions, logs or reprs: errors name the mechanism and the user
(or the token's principal), and the broker's own message.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .errors import AuthenticationError, UnsupportedVersionError, error_for_code
from .oauth import TokenCache
from .protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from .protocol.versions import ApiKey

if TYPE_CHECKING:
    from .config import ProducerConfig
    from .connection import BrokerConnection

__all__ = ["authenticator"]

# Kafka accepts 4096..16384; a bigger count from a broker is a slow-down attack on the client.
_MAX_ITERATIONS = 16384


class _Session:
    """What one authentication exchange learnt: the lifetime from its last response."""

    __slots__ = ("lifetime_ms",)

    def __init__(self) -> None:
        self.lifetime_ms = 0


def authenticator(config: ProducerConfig) -> Callable[[BrokerConnection], Awaitable[int]]:
    """Return the coroutine function that authenticates a connection; it returns the
    session lifetime in milliseconds the broker granted (0: unlimited)."""
    mechanism = config.sasl_mechanism
    username = config.sasl_username or ""
    password = config.sasl_password or ""
    assert mechanism is not None
    # One cache per producer: its connections share a token until it is due for refresh.
    tokens = (
        TokenCache(config.sasl_oauth_token_provider)
        if config.sasl_oauth_token_provider is not None
        else None
    )

    async def authenticate(conn: BrokerConnection) -> int:
        # v0 of the handshake would make the broker expect raw, unframed SASL tokens next;
        # this client only speaks the v1 flow, where every token rides in SaslAuthenticate.
        if conn.versions.get(ApiKey.SASL_HANDSHAKE, 0) < 1 or (
            ApiKey.SASL_AUTHENTICATE not in conn.versions
        ):
            raise UnsupportedVersionError(
                f"broker {conn.host}:{conn.port} does not support SaslHandshake v1 and "
                "SaslAuthenticate (Kafka 1.0 or newer is needed for SASL)"
            )
        handshake: SaslHandshakeResponse = await conn.request(SaslHandshakeRequest(mechanism), 1)
        if handshake.error_code:
            raise AuthenticationError(
                f"broker {conn.host}:{conn.port} does not enable SASL mechanism {mechanism} "
                f"(enabled: {', '.join(handshake.mechanisms) or 'none'})"
            )
        session = _Session()
        if mechanism == "PLAIN":
            payload = b"\0" + username.encode() + b"\0" + password.encode()
            await _exchange(conn, session, payload, f"user {username!r}")
        elif mechanism == "OAUTHBEARER":
            assert tokens is not None
            await _oauthbearer(conn, session, tokens)
        elif mechanism == "AWS_MSK_IAM":
            await _aws_msk_iam(conn, session, config)
        else:
            await _scram(conn, session, mechanism, username, password)
        return session.lifetime_ms

    return authenticate


async def _exchange(conn: BrokerConnection, session: _Session, payload: bytes, who: str) -> bytes:
    version = conn.versions[ApiKey.SASL_AUTHENTICATE]
    response: SaslAuthenticateResponse = await conn.request(
        SaslAuthenticateRequest(payload), version
    )
    if response.error_code:
        detail = response.error_message or error_for_code(response.error_code).name
        raise AuthenticationError(
            f"authentication of {who} at {conn.host}:{conn.port} failed: {detail}"
        )
    session.lifetime_ms = max(0, response.session_lifetime_ms)
    return response.auth_bytes or b""


async def _oauthbearer(conn: BrokerConnection, session: _Session, tokens: TokenCache) -> None:
    token = await tokens.get()
    who = f"the OAuth token of {token.principal!r}" if token.principal else "the OAuth token"
    challenge = await _exchange(conn, session, token.initial_response(), who)
    if not challenge:
        return
    # RFC 7628, section 3.2.2: a rejected token earns a JSON error challenge, which the
    # client acknowledges with a lone 0x01 before the server ends the exchange with an error.
    try:
        status = json.loads(challenge).get("status", "")
    except (ValueError, AttributeError):
        status = ""
    # The next exchange may be refused outright; either way the token is no good, and the
    # cache must not hand it to the next connection.
    tokens.invalidate()
    with contextlib.suppress(AuthenticationError):
        await _exchange(conn, session, b"\x01", who)
    detail = f" ({status})" if isinstance(status, str) and status else ""
    raise AuthenticationError(
        f"authentication of {who} at {conn.host}:{conn.port} failed: the broker rejected "
        f"the token{detail}"
    )


async def _aws_msk_iam(conn: BrokerConnection, session: _Session, config: ProducerConfig) -> None:
    # Imported here: the module is only needed by producers that use the mechanism.
    from .aws import current_credentials, msk_iam_payload

    provider = config.sasl_aws_credentials_provider
    region = config.sasl_aws_region
    assert provider is not None and region is not None
    # Fetched at every (re-)authentication: the provider hands out refreshed credentials
    # before the old ones expire, and each signature is valid for minutes only.
    credentials = await current_credentials(provider)
    payload = msk_iam_payload(conn.host, region, credentials)
    who = f"AWS access key {credentials.access_key!r} ({region})"
    # MSK answers a good signature with a JSON object (version, request id); a bad one
    # fails the SaslAuthenticate with an error, which _exchange raises.
    await _exchange(conn, session, payload, who)


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _scram_fields(message: bytes, conn: BrokerConnection, what: str) -> dict[str, str]:
    """The ``key=value`` attributes of a SCRAM server message (RFC 5802, section 5.1)."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"malformed SCRAM {what} from {conn.host}:{conn.port}") from None
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationError(f"malformed SCRAM {what} from {conn.host}:{conn.port}")
        fields.setdefault(key, value)
    if "e" in fields:
        # The server's own error (e.g. "invalid-proof"): safe to show, it carries no secret.
        raise AuthenticationError(
            f"SCRAM authentication at {conn.host}:{conn.port} failed: {fields['e']}"
        )
    return fields


async def _scram(
    conn: BrokerConnection, session: _Session, mechanism: str, username: str, password: str
) -> None:
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    first_bare = f"n={_escape(username)},r={nonce}"
    who = f"user {username!r}"
    server_first_bytes = await _exchange(conn, session, f"n,,{first_bare}".encode(), who)
    fields = _scram_fields(server_first_bytes, conn, "challenge")
    try:
        server_nonce = fields["r"]
        salt = base64.b64decode(fields["s"], validate=True)
        iterations = int(fields["i"])
    except (KeyError, ValueError) as exc:
        raise AuthenticationError(
            f"malformed SCRAM challenge from {conn.host}:{conn.port}"
        ) from exc
    # The server must extend our nonce (not just echo it): a replayed or forged challenge
    # fails here, before any proof derived from the password is sent.
    if len(server_nonce) <= len(nonce) or not server_nonce.startswith(nonce):
        raise AuthenticationError(f"invalid SCRAM nonce from {conn.host}:{conn.port}")
    if not salt or not 1 <= iterations <= _MAX_ITERATIONS:
        raise AuthenticationError(f"invalid SCRAM challenge from {conn.host}:{conn.port}")
    server_first = server_first_bytes.decode("utf-8")
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    final_fields = _scram_fields(await _exchange(conn, session, final, who), conn, "final message")
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    # Proves the broker holds the credentials too, not just an impostor accepting anything.
    if not hmac.compare_digest(final_fields.get("v", "").encode(), expected.encode()):
        raise AuthenticationError(
            f"the broker at {conn.host}:{conn.port} failed to prove it knows the SCRAM credentials"
        )
