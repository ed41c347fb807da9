"""SASL authentication of a broker connection: PLAIN and SCRAM-SHA-256/512.

Secrets never appear in exceptions, logs or reprs: errors name the mechanism and the user,
and the broker's own message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .errors import AuthenticationError, error_for_code
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


def authenticator(config: ProducerConfig) -> Callable[[BrokerConnection], Awaitable[None]]:
    """Return the coroutine function that authenticates a freshly opened connection."""
    mechanism = config.sasl_mechanism
    username = config.sasl_username or ""
    password = config.sasl_password or ""
    assert mechanism is not None

    async def authenticate(conn: BrokerConnection) -> None:
        handshake: SaslHandshakeResponse = await conn.request(SaslHandshakeRequest(mechanism))
        if handshake.error_code:
            raise AuthenticationError(
                f"broker {conn.host}:{conn.port} does not enable SASL mechanism {mechanism} "
                f"(enabled: {', '.join(handshake.mechanisms) or 'none'})"
            )
        if mechanism == "PLAIN":
            await _exchange(conn, b"\0" + username.encode() + b"\0" + password.encode(), username)
        else:
            await _scram(conn, mechanism, username, password)

    return authenticate


async def _exchange(conn: BrokerConnection, payload: bytes, username: str) -> bytes:
    version = conn.versions.get(ApiKey.SASL_AUTHENTICATE, 0)
    response: SaslAuthenticateResponse = await conn.request(
        SaslAuthenticateRequest(payload), version
    )
    if response.error_code:
        detail = response.error_message or error_for_code(response.error_code).name
        raise AuthenticationError(
            f"authentication of user {username!r} at {conn.host}:{conn.port} failed: {detail}"
        )
    return response.auth_bytes or b""


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


async def _scram(conn: BrokerConnection, mechanism: str, username: str, password: str) -> None:
    digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
    nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    first_bare = f"n={_escape(username)},r={nonce}"
    server_first = (await _exchange(conn, f"n,,{first_bare}".encode(), username)).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    try:
        server_nonce = fields["r"]
        salt = base64.b64decode(fields["s"])
        iterations = int(fields["i"])
    except (KeyError, ValueError) as exc:
        raise AuthenticationError(
            f"malformed SCRAM challenge from {conn.host}:{conn.port}"
        ) from exc
    if not server_nonce.startswith(nonce) or iterations < 1:
        raise AuthenticationError(f"invalid SCRAM challenge from {conn.host}:{conn.port}")
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    server_final = (await _exchange(conn, final, username)).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    if not hmac.compare_digest(server_final.partition("v=")[2].split(",")[0], expected):
        raise AuthenticationError(
            f"the broker at {conn.host}:{conn.port} failed to prove it knows the SCRAM credentials"
        )
