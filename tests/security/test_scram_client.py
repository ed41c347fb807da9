"""The SASL client against a scripted broker: exact SCRAM messages (RFC 7677's example) and
every check that protects the client from a broker that does not know the credentials."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from aioproducer import sasl
from aioproducer.config import ProducerConfig
from aioproducer.errors import AuthenticationError, UnsupportedVersionError
from aioproducer.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aioproducer.protocol.versions import ApiKey

pytestmark = pytest.mark.anyio

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = CLIENT_NONCE + "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = f"r={SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = f"c=biws,r={SERVER_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class ScriptedBroker:
    """Answers each request with the next scripted response and records what it got."""

    host = "broker.test"
    port = 9092

    def __init__(self, *auth_replies: bytes | SaslAuthenticateResponse, versions: Any = None):
        self.versions = versions or {ApiKey.SASL_HANDSHAKE: 1, ApiKey.SASL_AUTHENTICATE: 2}
        self.handshake = SaslHandshakeResponse(0, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        self.replies = [
            r if isinstance(r, SaslAuthenticateResponse) else SaslAuthenticateResponse(0, None, r)
            for r in auth_replies
        ]
        self.requests: list[tuple[Any, int | None]] = []

    @property
    def tokens(self) -> list[bytes]:
        """Every SaslAuthenticate payload the client sent."""
        return [r.auth_bytes for r, _ in self.requests if isinstance(r, SaslAuthenticateRequest)]

    async def request(self, request: Any, version: int | None = None) -> Any:
        self.requests.append((request, version))
        if isinstance(request, SaslHandshakeRequest):
            return self.handshake
        return self.replies.pop(0)


def _authenticate(mechanism: str, password: str = "pencil") -> Any:
    config = ProducerConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="user",
        sasl_password=password,
    )
    return sasl.authenticator(config)


@pytest.fixture
def rfc_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the client pick the RFC example's nonce."""
    monkeypatch.setattr(sasl.secrets, "token_bytes", lambda n: base64.b64decode(CLIENT_NONCE))


async def test_scram_sha_256_matches_the_rfc_example(rfc_nonce: None) -> None:
    broker = ScriptedBroker(SERVER_FIRST.encode(), SERVER_FINAL.encode())
    await _authenticate("SCRAM-SHA-256")(broker)
    handshake, version = broker.requests[0]
    assert (handshake.mechanism, version) == ("SCRAM-SHA-256", 1)
    assert broker.tokens == [f"n,,n=user,r={CLIENT_NONCE}".encode(), CLIENT_FINAL.encode()]
    assert [v for _, v in broker.requests[1:]] == [2, 2]


async def test_a_wrong_password_gives_a_different_proof(rfc_nonce: None) -> None:
    # The same exchange with another password must not produce the RFC's proof: the known
    # answer above depends on the password, not only on the nonces.
    broker = ScriptedBroker(SERVER_FIRST.encode(), SaslAuthenticateResponse(58, "bad", b""))
    with pytest.raises(AuthenticationError):
        await _authenticate("SCRAM-SHA-256", password="pencil2")(broker)
    assert broker.tokens[1] != CLIENT_FINAL.encode()


async def test_a_forged_server_signature_is_rejected(rfc_nonce: None) -> None:
    forged = "v=" + base64.b64encode(b"\0" * 32).decode()
    broker = ScriptedBroker(SERVER_FIRST.encode(), forged.encode())
    with pytest.raises(AuthenticationError, match="failed to prove"):
        await _authenticate("SCRAM-SHA-256")(broker)


async def test_a_missing_server_signature_is_rejected(rfc_nonce: None) -> None:
    broker = ScriptedBroker(SERVER_FIRST.encode(), b"x=1")
    with pytest.raises(AuthenticationError, match="failed to prove"):
        await _authenticate("SCRAM-SHA-256")(broker)


@pytest.mark.parametrize(
    "nonce",
    [CLIENT_NONCE, "someone-elses-nonce-1234567890", "r" + SERVER_NONCE],
    ids=["echoed", "foreign", "not-a-prefix"],
)
async def test_a_bad_server_nonce_is_rejected_before_any_proof(rfc_nonce: None, nonce: str) -> None:
    challenge = f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    broker = ScriptedBroker(challenge.encode())
    with pytest.raises(AuthenticationError, match="nonce"):
        await _authenticate("SCRAM-SHA-256")(broker)
    assert len(broker.tokens) == 1  # the proof was never sent


@pytest.mark.parametrize(
    "challenge",
    [
        f"r={SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==",  # no iteration count
        f"r={SERVER_NONCE},s=***,i=4096",  # salt is not base64
        f"r={SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000",  # a CPU-burning count
        "garbage",
    ],
    ids=["no-iterations", "bad-salt", "huge-iterations", "garbage"],
)
async def test_a_malformed_challenge_is_rejected(rfc_nonce: None, challenge: str) -> None:
    broker = ScriptedBroker(challenge.encode())
    with pytest.raises(AuthenticationError, match="SCRAM"):
        await _authenticate("SCRAM-SHA-512")(broker)
    assert len(broker.tokens) == 1


async def test_a_server_error_attribute_is_reported(rfc_nonce: None) -> None:
    broker = ScriptedBroker(SERVER_FIRST.encode(), b"e=invalid-proof")
    with pytest.raises(AuthenticationError, match="invalid-proof"):
        await _authenticate("SCRAM-SHA-256")(broker)


async def test_plain_sends_one_token() -> None:
    broker = ScriptedBroker(b"")
    await _authenticate("PLAIN")(broker)
    assert broker.tokens == [b"\0user\0pencil"]


async def test_a_broker_without_the_mechanism_names_what_it_offers() -> None:
    broker = ScriptedBroker()
    broker.handshake = SaslHandshakeResponse(33, ["GSSAPI", "OAUTHBEARER"])
    with pytest.raises(AuthenticationError, match="GSSAPI, OAUTHBEARER"):
        await _authenticate("SCRAM-SHA-512")(broker)
    assert broker.tokens == []


async def test_handshake_v0_only_broker_is_refused_before_sending_credentials() -> None:
    broker = ScriptedBroker(versions={ApiKey.SASL_HANDSHAKE: 0})
    with pytest.raises(UnsupportedVersionError):
        await _authenticate("PLAIN")(broker)
    assert broker.requests == []
