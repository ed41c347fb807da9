"""OAuth 2 bearer tokens for SASL/OAUTHBEARER (KIP-255) and an OIDC client-credentials
token provider (KIP-768).

A *token provider* is any callable, plain or ``async``, taking no arguments and returning
an :class:`OAuthToken` or a ``(token, expires_at)`` pair, ``expires_at`` in seconds since
the epoch. The producer asks it for a token whenever a connection authenticates and the
token it holds has used up :data:`REFRESH_WINDOW_FACTOR` of its lifetime, so connections
opened (or re-authenticated) after that point present a fresh token.

Token values never appear in reprs, logs or error messages.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from .errors import AuthenticationError, KafkaError

__all__ = [
    "REFRESH_WINDOW_FACTOR",
    "OAuthClientCredentials",
    "OAuthToken",
    "TokenProvider",
]

#: The share of a token's lifetime after which a new one is fetched, as the Java client's
#: ``sasl.login.refresh.window.factor`` default.
REFRESH_WINDOW_FACTOR = 0.8

# RFC 7628, section 3.1, as Kafka checks SASL extensions: alphabetic keys, printable values.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
# RFC 6750's b64token: what a bearer token may consist of.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


@dataclass(frozen=True)
class OAuthToken:
    """A bearer token and when it expires.

    ``value`` is the token itself (for Kafka usually a JWT), ``expires_at`` its expiry in
    seconds since the epoch (``time.time()`` scale). ``principal`` is only descriptive: it
    names the token in error messages (the broker takes the principal from the token).
    ``extensions`` are SASL extensions (RFC 7628, section 3.1) sent along with the token,
    e.g. ``{"logicalCluster": "lkc-123"}``: alphabetic keys, printable ASCII values.
    """

    value: str = field(repr=False)
    expires_at: float
    principal: str | None = None
    extensions: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, str) or not _BEARER_TOKEN.fullmatch(self.value):
            # The value itself stays out of the message.
            raise ValueError("OAuthToken.value must be a non-empty RFC 6750 bearer token")
        if isinstance(self.expires_at, bool) or not isinstance(self.expires_at, (int, float)):
            raise ValueError(f"OAuthToken.expires_at must be a number, got {self.expires_at!r}")
        if not math.isfinite(self.expires_at):
            raise ValueError("OAuthToken.expires_at must be finite")
        for key, value in (self.extensions or {}).items():
            if not isinstance(key, str) or not _EXTENSION_KEY.fullmatch(key) or key == "auth":
                raise ValueError(f"SASL extension name {key!r} must be alphabetic and not 'auth'")
            if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
                raise ValueError(f"SASL extension {key!r} must have a printable ASCII value")

    def initial_response(self) -> bytes:
        """The client's first SASL/OAUTHBEARER message (RFC 7628 GS2 form)."""
        extensions = "".join(f"{k}={v}\x01" for k, v in (self.extensions or {}).items())
        return f"n,,\x01auth=Bearer {self.value}\x01{extensions}\x01".encode()


_ProviderResult = OAuthToken | tuple[str, float]
#: ``provider() -> OAuthToken | (token, expires_at)``, or a coroutine function returning that.
TokenProvider = Callable[[], _ProviderResult | Awaitable[_ProviderResult]]


def _as_token(result: object) -> OAuthToken:
    if isinstance(result, OAuthToken):
        return result
    if isinstance(result, tuple) and len(result) == 2:
        return OAuthToken(result[0], result[1])
    raise TypeError(
        f"a token provider must return an OAuthToken or a (token, expires_at) pair, "
        f"not {type(result).__name__}"
    )


class TokenCache:
    """Calls a token provider when the cached token is due for refresh, else reuses it.

    Safe to share between event loops and threads: concurrent callers on one loop wait for
    a single refresh; callers elsewhere may refresh at the same time, harmlessly.
    """

    def __init__(
        self, provider: TokenProvider, refresh_window_factor: float = REFRESH_WINDOW_FACTOR
    ) -> None:
        self._provider = provider
        self._factor = refresh_window_factor
        self._token: OAuthToken | None = None
        self._refresh_at = 0.0
        self._guard = threading.Lock()
        # One lock per event loop: an anyio lock belongs to the loop that first used it.
        self._locks: dict[object, anyio.Lock] = {}

    def __repr__(self) -> str:
        return f"<TokenCache provider={self._provider!r}>"

    def _lock(self) -> anyio.Lock:
        token = anyio.lowlevel.current_token()
        with self._guard:
            lock = self._locks.get(token)
            if lock is None:
                lock = self._locks[token] = anyio.Lock()
            return lock

    def invalidate(self) -> None:
        """Forget the cached token: the next :meth:`get` calls the provider."""
        self._refresh_at = 0.0

    async def get(self) -> OAuthToken:
        """A token that has not yet reached its refresh time (unless the provider's own
        tokens are that short-lived)."""
        token = self._token
        if token is not None and time.time() < self._refresh_at:
            return token
        async with self._lock():
            token = self._token
            if token is not None and time.time() < self._refresh_at:
                return token
            fetched_at = time.time()
            try:
                result = self._provider()
                if inspect.isawaitable(result):
                    result = await result
                token = _as_token(result)
            except KafkaError:
                raise
            except Exception as exc:
                raise AuthenticationError(
                    f"the OAuth token provider failed: {type(exc).__name__}: {exc}"
                ) from None
            lifetime = max(0.0, token.expires_at - fetched_at)
            self._token = token
            # An already expired token is handed out once and asked for again next time.
            self._refresh_at = fetched_at + lifetime * self._factor
            return token


class OAuthClientCredentials:
    """A token provider for the OAuth 2 client-credentials grant (KIP-768's default).

    Each refresh POSTs ``grant_type=client_credentials`` (and ``scope`` when given) to
    ``token_endpoint_url`` with the client id and secret in an HTTP Basic ``Authorization``
    header, and reads ``access_token`` and ``expires_in`` from the JSON answer (or, without
    ``expires_in``, the token's own JWT ``exp`` claim). Tokens are cached until
    ``refresh_window_factor`` of their lifetime has passed. The request runs in a worker
    thread with the standard library's ``urllib``; ``ssl_context`` verifies an ``https``
    endpoint (the system's trust store by default).

    HTTP errors, unreachable endpoints and malformed answers raise
    :class:`~aioproducer.errors.AuthenticationError` naming the endpoint. Use it as
    ``Producer(..., sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=creds)``.
    """

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        *,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        extensions: Mapping[str, str] | None = None,
        refresh_window_factor: float = REFRESH_WINDOW_FACTOR,
    ) -> None:
        scheme = urllib.parse.urlsplit(token_endpoint_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"token_endpoint_url must be an http(s) URL, got {scheme!r}")
        if not client_id or not isinstance(client_id, str):
            raise ValueError("client_id must be a non-empty str")
        if not isinstance(client_secret, str):
            raise ValueError("client_secret must be a str")
        if not 0 < refresh_window_factor <= 1:
            raise ValueError("refresh_window_factor must be in (0, 1]")
        self.token_endpoint_url = token_endpoint_url
        self.client_id = client_id
        self._client_secret = client_secret
        self.scope = scope
        self.timeout = timeout
        self._ssl_context = ssl_context
        self._extensions = dict(extensions) if extensions else None
        self._cache = TokenCache(self._fetch, refresh_window_factor)

    def __repr__(self) -> str:
        return (
            f"<OAuthClientCredentials {self.token_endpoint_url} client_id={self.client_id!r}"
            f" scope={self.scope!r}>"
        )

    async def __call__(self) -> OAuthToken:
        """The current token, fetched anew once it is due for refresh."""
        return await self._cache.get()

    async def _fetch(self) -> OAuthToken:
        return await anyio.to_thread.run_sync(self._fetch_blocking)

    def _fetch_blocking(self) -> OAuthToken:
        url = self.token_endpoint_url
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        credentials = f"{self.client_id}:{self._client_secret}".encode()
        request = urllib.request.Request(
            url,
            data=urllib.parse.urlencode(form).encode(),
            method="POST",
            headers={
                "Authorization": "Basic " + base64.b64encode(credentials).decode(),
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "Cache-Control": "no-cache",
            },
        )
        requested_at = time.time()
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout, context=self._ssl_context
            ) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise AuthenticationError(
                f"token endpoint {url} answered HTTP {exc.code} {exc.reason}{detail}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AuthenticationError(f"cannot reach token endpoint {url}: {reason}") from None
        try:
            answer: Any = json.loads(body)
        except ValueError:
            raise AuthenticationError(f"token endpoint {url} did not answer JSON") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
            raise AuthenticationError(f"token endpoint {url} answered without an access_token")
        value = answer["access_token"]
        expires_in = answer.get("expires_in")
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)
        if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
            expires_at = requested_at + float(expires_in)
        else:
            exp = _jwt_claims(value).get("exp")
            if not isinstance(exp, (int, float)) or isinstance(exp, bool):
                raise AuthenticationError(
                    f"token endpoint {url} gave neither expires_in nor a JWT exp claim"
                )
            expires_at = float(exp)
        principal = _jwt_claims(value).get("sub")
        try:
            return OAuthToken(
                value,
                expires_at,
                principal if isinstance(principal, str) else self.client_id,
                self._extensions,
            )
        except ValueError as exc:
            raise AuthenticationError(f"token endpoint {url}: {exc}") from None


def _error_detail(exc: urllib.error.HTTPError) -> str:
    # OAuth error answers are JSON with "error" and "error_description"; only those two
    # fields are shown, never the whole body.
    try:
        answer = json.loads(exc.read(4096))
    except Exception:
        return ""
    if not isinstance(answer, dict):
        return ""
    parts = [str(answer[k])[:200] for k in ("error", "error_description") if k in answer]
    return f": {': '.join(parts)}" if parts else ""


def _jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWS compact token, or ``{}`` if it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}
