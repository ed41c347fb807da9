"""SASL/OAUTHBEARER: configuration, the client's messages, token refresh, the OIDC
client-credentials provider, and Kafka's own OAUTHBEARER listener (unsecured tokens)."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from aioproducer import ConfigError, Producer, ProducerConfig
from aioproducer import oauth as oauth_module
from aioproducer.errors import AuthenticationError
from aioproducer.oauth import OAuthClientCredentials, OAuthToken, TokenCache
from aioproducer.protocol.messages import SaslAuthenticateResponse
from aioproducer.testing.tokens import unsecured_jws, unsecured_token, unsecured_token_provider
from aioproducer.testing.verify import consume_all

from .conftest import SecureKafka
from .test_scram_client import ScriptedBroker

pytestmark = pytest.mark.anyio

FAST = 5.0


def _oauth_config(provider: Any, **extra: Any) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
        "max_block_ms": 20000,
        **extra,
    }


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (_oauth_config(None), "sasl_oauth_token_provider is required"),
        (_oauth_config("a-token"), "sasl_oauth_token_provider must be callable"),
        (
            {**_oauth_config(lambda: ("t", 0.0)), "sasl_username": "u", "sasl_password": "p"},
            "not used with OAUTHBEARER",
        ),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "u",
                "sasl_password": "p",
                "sasl_oauth_token_provider": lambda: ("t", 0.0),
            },
            "sasl_oauth_token_provider is only used with sasl_mechanism='OAUTHBEARER'",
        ),
        ({"sasl_oauth_token_provider": lambda: ("t", 0.0)}, "sasl_oauth_token_provider is set"),
    ],
    ids=["missing", "not-callable", "with-password", "other-mechanism", "no-sasl"],
)
def test_oauth_config_is_checked_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig(**kwargs)


def test_the_provider_stays_out_of_the_config_repr() -> None:
    config = ProducerConfig(**_oauth_config(unsecured_token_provider("alice")))
    assert "sasl_oauth_token_provider" not in repr(config)


# -- the client's messages -------------------------------------------------------------------


def test_initial_response_is_the_rfc_7628_gs2_form() -> None:
    token = OAuthToken("abc.def.", 0.0, extensions={"traceId": "123", "cluster": "lkc-1"})
    assert token.initial_response() == (
        b"n,,\x01auth=Bearer abc.def.\x01traceId=123\x01cluster=lkc-1\x01\x01"
    )
    assert OAuthToken("t", 0.0).initial_response() == b"n,,\x01auth=Bearer t\x01\x01"
    assert "abc.def." not in repr(token)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"value": ""}, "bearer token"),
        ({"value": "has space"}, "bearer token"),
        ({"value": "t", "expires_at": "soon"}, "expires_at"),
        ({"value": "t", "extensions": {"auth": "x"}}, "not 'auth'"),
        ({"value": "t", "extensions": {"k1": "x"}}, "alphabetic"),
        ({"value": "t", "extensions": {"k": "\x01"}}, "printable"),
    ],
)
def test_invalid_tokens_are_refused(kwargs: dict[str, Any], message: str) -> None:
    kwargs.setdefault("expires_at", 0.0)
    with pytest.raises(ValueError, match=message):
        OAuthToken(**kwargs)


def _oauth_authenticator(provider: Any) -> Any:
    from aioproducer import sasl

    return sasl.authenticator(ProducerConfig(**_oauth_config(provider)))


async def test_oauthbearer_sends_the_token_and_returns_the_session_lifetime() -> None:
    broker = ScriptedBroker(SaslAuthenticateResponse(0, None, b"", 90000))
    broker.handshake.mechanisms.append("OAUTHBEARER")
    lifetime = await _oauth_authenticator(lambda: ("tok.en.", time.time() + 60))(broker)
    assert lifetime == 90000
    assert broker.requests[0][0].mechanism == "OAUTHBEARER"
    assert broker.tokens == [b"n,,\x01auth=Bearer tok.en.\x01\x01"]


async def test_a_rejected_token_is_acknowledged_and_reported() -> None:
    """RFC 7628: the server's JSON error challenge is answered with a lone 0x01."""
    broker = ScriptedBroker(
        b'{"status":"invalid_token"}',
        SaslAuthenticateResponse(58, "Authentication failed", b""),
    )
    calls: list[float] = []

    def provider() -> OAuthToken:
        calls.append(time.time())
        return OAuthToken("bad", time.time() + 3600, principal="svc")

    authenticate = _oauth_authenticator(provider)
    with pytest.raises(AuthenticationError, match=r"'svc'.*rejected the token \(invalid_token\)"):
        await authenticate(broker)
    assert broker.tokens[1] == b"\x01"
    # The rejected token is not reused by the next connection.
    broker.replies = [SaslAuthenticateResponse(0, None, b"")]
    await authenticate(broker)
    assert len(calls) == 2


async def test_a_failing_provider_is_an_authentication_error() -> None:
    def provider() -> OAuthToken:
        raise RuntimeError("vault is sealed")

    with pytest.raises(AuthenticationError, match=r"token provider failed.*vault is sealed"):
        await _oauth_authenticator(provider)(ScriptedBroker())


# -- refresh ---------------------------------------------------------------------------------


class FakeClock:
    """Stands in for the ``time`` module inside :mod:`aioproducer.oauth`."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


async def test_tokens_are_refreshed_at_80_percent_of_their_lifetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(oauth_module, "time", clock)
    issued: list[float] = []

    async def provider() -> tuple[str, float]:
        issued.append(clock.now)
        return f"t{len(issued)}", clock.now + 100

    cache = TokenCache(provider)
    assert (await cache.get()).value == "t1"
    clock.now += 79.9
    assert (await cache.get()).value == "t1"
    clock.now += 0.2  # past 80 s of the 100 s lifetime
    assert (await cache.get()).value == "t2"
    assert issued == [1_000_000.0, 1_000_080.1]


# -- Kafka's OAUTHBEARER listener ------------------------------------------------------------


@pytest.mark.broker
async def test_oauthbearer_round_trip(secure_kafka: SecureKafka) -> None:
    topic = secure_kafka.new_topic("oauthbearer")
    values = [f"oauth #{i}".encode() for i in range(20)]
    calls: list[OAuthToken] = []

    async def provider() -> OAuthToken:
        calls.append(unsecured_token("alice", lifetime=600))
        return calls[-1]

    async with Producer(secure_kafka.servers("OAUTH"), **_oauth_config(provider)) as producer:
        for value in values:
            await producer.send(topic, value)
        await producer.flush()
    # Bootstrap and leader connections shared one token.
    assert len(calls) == 1
    records = consume_all(secure_kafka.cluster.bootstrap_servers, topic, expected=20, timeout=30)
    assert [r.value for r in records] == values


@pytest.mark.broker
@pytest.mark.parametrize(
    "token",
    [
        pytest.param(lambda: unsecured_jws("alice", lifetime=-60), id="expired"),
        pytest.param(lambda: "garbage", id="garbage"),
        pytest.param(
            lambda: unsecured_jws("alice").rsplit(".", 2)[0] + ".e30.sig", id="signed-garbage"
        ),
    ],
)
async def test_bad_tokens_are_rejected_fast(secure_kafka: SecureKafka, token: Any) -> None:
    topic = secure_kafka.new_topic("oauth-bad")
    # The provider claims a distant expiry: only the broker can tell the token is bad.
    config = _oauth_config(lambda: (token(), time.time() + 3600))
    async with Producer(secure_kafka.servers("OAUTH"), **config) as producer:
        started = time.monotonic()
        with pytest.raises(AuthenticationError, match="rejected the token"):
            await producer.send_and_wait(topic, b"never")
        assert time.monotonic() - started < FAST


# -- the OIDC client-credentials provider ----------------------------------------------------


@dataclass
class TokenEndpoint:
    """A tiny OAuth token endpoint on 127.0.0.1 issuing unsecured JWS tokens."""

    url: str
    expires_in: float = 600
    status: int = 200
    body: bytes | None = None
    #: (Authorization header, parsed form body, Content-Type) of each request.
    requests: list[tuple[str | None, dict[str, list[str]], str | None]] = field(
        default_factory=list
    )
    issued: list[str] = field(default_factory=list)


@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    """Serves POST /token in a thread until the test ends."""
    endpoint = TokenEndpoint("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            endpoint.requests.append(
                (self.headers.get("Authorization"), form, self.headers.get("Content-Type"))
            )
            if endpoint.body is not None:
                body = endpoint.body
            elif endpoint.status != 200:
                body = json.dumps(
                    {"error": "invalid_client", "error_description": "bad client"}
                ).encode()
            else:
                token = unsecured_jws("svc-client", lifetime=endpoint.expires_in)
                endpoint.issued.append(token)
                body = json.dumps(
                    {
                        "access_token": token,
                        "token_type": "Bearer",
                        "expires_in": endpoint.expires_in,
                    }
                ).encode()
            self.send_response(endpoint.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    endpoint.url = f"http://127.0.0.1:{server.server_address[1]}/token"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_client_credentials_request(token_endpoint: TokenEndpoint) -> None:
    creds = OAuthClientCredentials(token_endpoint.url, "svc-client", "s3cr:et", scope="kafka")
    token = await creds()
    assert token.value == token_endpoint.issued[0]
    assert token.principal == "svc-client"
    assert abs(token.expires_at - (time.time() + 600)) < 5
    [(authorization, form, content_type)] = token_endpoint.requests
    assert authorization == "Basic " + base64.b64encode(b"svc-client:s3cr:et").decode()
    assert form == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    assert content_type == "application/x-www-form-urlencoded"
    assert "s3cr:et" not in repr(creds)


async def test_client_credentials_refresh_before_expiry(token_endpoint: TokenEndpoint) -> None:
    token_endpoint.expires_in = 1.5  # refreshed after 1.2 s
    creds = OAuthClientCredentials(token_endpoint.url, "svc-client", "secret")
    first = await creds()
    assert await creds() is first  # cached
    deadline = time.monotonic() + 5
    while (await creds()) is first:
        assert time.monotonic() < deadline, "the token was never refreshed"
        await _sleep(0.05)
    # Refreshed once 80% of the lifetime was used, before the token expired.
    assert time.time() < first.expires_at
    assert len(token_endpoint.requests) == 2


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, None, "HTTP 401.*invalid_client: bad client"),
        (200, b"<html>", "did not answer JSON"),
        (200, b'{"token_type": "Bearer"}', "without an access_token"),
        (200, b'{"access_token": "opaque"}', "neither expires_in nor a JWT exp"),
    ],
)
async def test_client_credentials_errors(
    token_endpoint: TokenEndpoint, status: int, body: bytes | None, message: str
) -> None:
    token_endpoint.status = status
    token_endpoint.body = body
    creds = OAuthClientCredentials(token_endpoint.url, "svc-client", "the-secret")
    with pytest.raises(AuthenticationError, match=message) as excinfo:
        await creds()
    assert token_endpoint.url in str(excinfo.value)
    assert "the-secret" not in str(excinfo.value)


async def test_client_credentials_unreachable_endpoint() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    creds = OAuthClientCredentials(f"http://127.0.0.1:{port}/token", "c", "s", timeout=5)
    with pytest.raises(AuthenticationError, match="cannot reach token endpoint"):
        await creds()


def test_client_credentials_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        OAuthClientCredentials("file:///etc/passwd", "c", "s")
    with pytest.raises(ValueError, match="client_id"):
        OAuthClientCredentials("https://idp.example/token", "", "s")


@pytest.mark.broker
async def test_client_credentials_against_kafka(
    secure_kafka: SecureKafka, token_endpoint: TokenEndpoint
) -> None:
    topic = secure_kafka.new_topic("oidc")
    creds = OAuthClientCredentials(token_endpoint.url, "svc-client", "secret", scope="kafka")
    async with Producer(secure_kafka.servers("OAUTH"), **_oauth_config(creds)) as producer:
        meta = await producer.send_and_wait(topic, b"via oidc")
    assert meta.offset == 0
    assert len(token_endpoint.requests) == 1
    records = consume_all(secure_kafka.cluster.bootstrap_servers, topic, expected=1, timeout=30)
    assert [r.value for r in records] == [b"via oidc"]
