"""Amazon MSK with IAM: the AWS_MSK_IAM payload, its SASL exchange and re-authentication,
and the OAUTHBEARER token provider built on AWS's signer library.

No MSK cluster is reachable from the tests, so:

* the payload is compared byte for byte with kafka-python's ``AWS_MSK_IAM`` (an
  independent implementation) for the same credentials, region, host and frozen clock;
* the exchange runs against :class:`~aioproducer.testing.FakeCluster`, whose broker
  checks each signature with kafka-python's signer and ends each session after
  :data:`LIFETIME_MS`, so the producer must re-authenticate (KIP-368) on its connections
  while records flow;
* the token provider's token is compared with the signer library's own for the same
  frozen clock and credentials, and carried over OAUTHBEARER to the fake.
"""

from __future__ import annotations

import base64
import datetime
import importlib
import itertools
import json
import sys
import time
import types
import urllib.parse
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.aws import AwsCredentials, msk_iam_payload, msk_iam_token_provider
from aioproducer.errors import AuthenticationError, ConfigError
from aioproducer.testing import FakeCluster

pytestmark = pytest.mark.anyio

#: The fake broker's session lifetime: short, so a few seconds of load see re-authentications.
LIFETIME_MS = 700
REGION = "eu-central-1"
#: Two key pairs the fake knows; the provider hands them out in turn.
KEYS = {
    "AKIAEXAMPLEONE000001": "secret/one+with=odd chars",
    "ASIAEXAMPLETWO000002": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}
FROZEN = datetime.datetime(2026, 3, 14, 15, 9, 26, tzinfo=datetime.timezone.utc)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _kafka_python_msk() -> Any:
    # kafka-python 3 moved its SASL mechanisms from kafka.sasl to kafka.net.sasl.
    for name in ("kafka.net.sasl.msk", "kafka.sasl.msk"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.fail("kafka-python has no AWS_MSK_IAM module")


def _reference_payload(
    host: str, region: str, creds: AwsCredentials, at: datetime.datetime
) -> bytes:
    """kafka-python's AWS_MSK_IAM payload, with its clock frozen at ``at``."""
    module = _kafka_python_msk()
    frozen_datetime = type(
        "FrozenDatetime", (), {"now": staticmethod(lambda tz=None: at.astimezone(tz))}
    )
    shim = types.SimpleNamespace(datetime=frozen_datetime, timezone=datetime.timezone)
    real = module.datetime
    module.datetime = shim
    try:
        client = module.AwsMskIamClient(
            host=host,
            access_key=creds.access_key,
            secret_key=creds.secret_key,
            region=region,
            token=creds.session_token,
        )
    finally:
        module.datetime = real
    payload: bytes = client.first_message()
    return payload


@pytest.mark.parametrize(
    ("host", "region", "token"),
    [
        ("b-1.mycluster.abc123.c2.kafka.us-east-1.amazonaws.com", "us-east-1", None),
        (
            "b-3.serverless.xyz.c4.kafka-serverless.eu-central-1.amazonaws.com",
            "eu-central-1",
            "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJH+/=token",
        ),
        ("127.0.0.1", "ap-southeast-2", "short"),
    ],
)
@pytest.mark.parametrize("access_key", sorted(KEYS))
def test_payload_equals_kafka_pythons(
    host: str, region: str, token: str | None, access_key: str
) -> None:
    creds = AwsCredentials(access_key, KEYS[access_key], token)
    ours = msk_iam_payload(host, region, creds, now=FROZEN, user_agent="kafka-python")
    assert ours == _reference_payload(host, region, creds, FROZEN)
    fields = json.loads(ours)
    assert fields["x-amz-date"] == "20260314T150926Z"
    assert (
        fields["x-amz-credential"] == f"{access_key}/20260314/{region}/kafka-cluster/aws4_request"
    )
    assert ("x-amz-security-token" in fields) == (token is not None)


def test_payload_differs_with_the_secret_and_the_clock() -> None:
    """The check above is not vacuous: the signature depends on what it must."""
    creds = AwsCredentials("AKIAEXAMPLEONE000001", "one")
    base = json.loads(msk_iam_payload("h", REGION, creds, now=FROZEN))
    other_secret = json.loads(
        msk_iam_payload("h", REGION, AwsCredentials(creds.access_key, "two"), now=FROZEN)
    )
    later = json.loads(
        msk_iam_payload("h", REGION, creds, now=FROZEN + datetime.timedelta(seconds=1))
    )
    other_host = json.loads(msk_iam_payload("g", REGION, creds, now=FROZEN))
    signatures = {d["x-amz-signature"] for d in (base, other_secret, later, other_host)}
    assert len(signatures) == 4
    assert base["user-agent"].startswith("aioproducer/")


def test_secrets_stay_out_of_reprs() -> None:
    creds = AwsCredentials("AKIAEXAMPLEONE000001", "top-secret", "session-secret")
    assert "top-secret" not in repr(creds) and "session-secret" not in repr(creds)


# -- the exchange against the fake broker -----------------------------------------------


def _check_msk_iam(host: str) -> Any:
    """The fake broker's AWS_MSK_IAM check: the signature recomputed by kafka-python's
    signer from the secret of the named key, at the payload's own date."""

    def check(auth_bytes: bytes) -> str:
        fields = json.loads(auth_bytes)
        access_key = fields["x-amz-credential"].split("/", 1)[0]
        if access_key not in KEYS:
            raise ValueError(f"unknown access key {access_key}")
        at = datetime.datetime.strptime(fields["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc
        )
        age = abs(datetime.datetime.now(datetime.timezone.utc) - at).total_seconds()
        if age > int(fields["x-amz-expires"]):
            raise ValueError("signature expired")
        if fields["host"] != host or fields["action"] != "kafka-cluster:Connect":
            raise ValueError("wrong host or action")
        region = fields["x-amz-credential"].split("/")[2]
        creds = AwsCredentials(access_key, KEYS[access_key], fields.get("x-amz-security-token"))
        expected = json.loads(_reference_payload(host, region, creds, at))
        if expected["x-amz-signature"] != fields["x-amz-signature"]:
            raise ValueError("signature mismatch")
        return access_key

    return check


@pytest.fixture
def msk_fake() -> Iterator[FakeCluster]:
    with FakeCluster(
        sasl={"AWS_MSK_IAM": _check_msk_iam("127.0.0.1")}, sasl_session_lifetime_ms=LIFETIME_MS
    ) as fake:
        fake.create_topic("iam", partitions=1)
        yield fake


async def _steady_load(producer: Producer, seconds: float) -> list[bytes]:
    sent: list[bytes] = []
    handles = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(50):
            value = f"record {len(sent):06d}".encode()
            handles.append(await producer.send("iam", value, key=b"k"))
            sent.append(value)
        await anyio.sleep(0.02)
    await producer.flush()
    offsets = [(await h).offset for h in handles]
    assert offsets == list(range(len(sent)))
    return sent


def _iam_producer(fake: FakeCluster, provider: Any, **config: Any) -> Producer:
    return Producer(
        fake.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="AWS_MSK_IAM",
        sasl_aws_region=REGION,
        sasl_aws_credentials_provider=provider,
        **config,
    )


async def test_aws_msk_iam_reauthenticates_under_load_keeping_every_record(
    msk_fake: FakeCluster,
) -> None:
    keys = itertools.cycle(sorted(KEYS))
    calls: list[str] = []

    def provider() -> AwsCredentials:
        # Rotating credentials: each (re-)authentication must sign with the current ones.
        key = next(keys)
        calls.append(key)
        return AwsCredentials(key, KEYS[key], "session-token/abc+=")

    async with _iam_producer(msk_fake, provider, linger_ms=2) as producer:
        sent = await _steady_load(producer, 3.0)
    assert [r.value for r in msk_fake.records("iam", 0)] == sent
    accepted = msk_fake.authentications()
    per_connection = {
        c: [a for a in accepted if a.connection == c] for c in {a.connection for a in accepted}
    }
    # The leader's connection lived through several sessions: re-authenticated, not reopened.
    assert max(len(v) for v in per_connection.values()) >= 3, per_connection
    assert {a.principal for a in accepted} == set(KEYS)
    assert len(calls) == len(accepted)


async def test_a_bad_signature_is_an_authentication_error(msk_fake: FakeCluster) -> None:
    async def provider() -> AwsCredentials:
        return AwsCredentials("AKIAEXAMPLEONE000001", "not the secret")

    with pytest.raises(AuthenticationError, match=r"AKIAEXAMPLEONE000001.*signature mismatch"):
        async with _iam_producer(msk_fake, provider, max_block_ms=3000) as producer:
            await (await producer.send("iam", b"x"))
    assert msk_fake.authentications() == []


async def test_a_failing_credentials_provider_is_an_authentication_error(
    msk_fake: FakeCluster,
) -> None:
    def provider() -> AwsCredentials:
        raise RuntimeError("instance metadata unreachable")

    with pytest.raises(AuthenticationError, match=r"credentials provider failed.*unreachable"):
        async with _iam_producer(msk_fake, provider, max_block_ms=3000) as producer:
            await (await producer.send("iam", b"x"))


def test_aws_settings_are_checked_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    base: dict[str, Any] = {"security_protocol": "SASL_SSL", "sasl_mechanism": "AWS_MSK_IAM"}
    with pytest.raises(ConfigError, match="sasl_aws_region is required"):
        Producer("h:9098", **base)
    with pytest.raises(ConfigError, match="only used with sasl_mechanism='AWS_MSK_IAM'"):
        Producer("h:9098", sasl_aws_region=REGION)
    with pytest.raises(ConfigError, match="sasl_username and sasl_password are not used"):
        Producer("h:9098", **base, sasl_aws_region=REGION, sasl_username="u", sasl_password="p")
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    assert Producer("h:9098", **base).config.sasl_aws_region == "sa-east-1"


# -- the OAUTHBEARER token provider built on AWS's signer library -------------------------


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials from the environment, no config files: the standard chain's first link."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEONE000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS["AKIAEXAMPLEONE000001"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token/abc+=")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _decode_token(token: str) -> dict[str, str]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parsed = urllib.parse.urlparse(url)
    return {"host": parsed.netloc, **dict(urllib.parse.parse_qsl(parsed.query))}


async def test_token_provider_hands_over_the_signer_librarys_token(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("aws_msk_iam_sasl_signer")
    import botocore.auth
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return FROZEN if tz is not None else FROZEN.replace(tzinfo=None)

        @classmethod
        def utcnow(cls) -> Any:
            return FROZEN.replace(tzinfo=None)

    monkeypatch.setattr(botocore.auth.datetime, "datetime", Frozen)
    monkeypatch.setattr(time, "time", lambda: FROZEN.timestamp())
    expected, expiry_ms = MSKAuthTokenProvider.generate_auth_token(REGION)
    token = await msk_iam_token_provider(REGION)()
    assert token.value == expected
    assert token.expires_at == expiry_ms / 1000
    fields = _decode_token(token.value)
    assert fields["host"] == f"kafka.{REGION}.amazonaws.com"
    assert fields["Action"] == "kafka-cluster:Connect"
    assert fields["X-Amz-Credential"].startswith("AKIAEXAMPLEONE000001/20260314/")
    assert fields["X-Amz-Security-Token"] == "session-token/abc+="


async def test_token_provider_over_oauthbearer_reauthenticates_under_load(aws_env: None) -> None:
    pytest.importorskip("aws_msk_iam_sasl_signer")
    seen: list[dict[str, str]] = []

    def check(auth_bytes: bytes) -> str:
        # RFC 7628: "n,,\x01auth=Bearer <token>\x01\x01"
        parts = dict(p.split("=", 1) for p in auth_bytes.decode().split("\x01") if "=" in p[:5])
        fields = _decode_token(parts["auth"].removeprefix("Bearer "))
        if fields.get("Action") != "kafka-cluster:Connect":
            raise ValueError("not an MSK token")
        seen.append(fields)
        return fields["X-Amz-Credential"].split("/", 1)[0]

    with FakeCluster(sasl={"OAUTHBEARER": check}, sasl_session_lifetime_ms=LIFETIME_MS) as fake:
        fake.create_topic("iam", partitions=1)
        async with Producer(
            fake.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=msk_iam_token_provider(REGION),
            linger_ms=2,
        ) as producer:
            sent = await _steady_load(producer, 2.5)
        assert [r.value for r in fake.records("iam", 0)] == sent
        accepted = fake.authentications()
    connections = [a.connection for a in accepted]
    assert max(connections.count(c) for c in set(connections)) >= 3, accepted
    assert {a.principal for a in accepted} == {"AKIAEXAMPLEONE000001"}


def test_without_the_aws_extra_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("botocore", "botocore.session", "aws_msk_iam_sasl_signer"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"AWS_MSK_IAM needs botocore.*aws extra"):
        Producer(
            "h:9098",
            security_protocol="SASL_SSL",
            sasl_mechanism="AWS_MSK_IAM",
            sasl_aws_region=REGION,
        )
    # Credentials of one's own need no botocore.
    Producer(
        "h:9098",
        security_protocol="SASL_SSL",
        sasl_mechanism="AWS_MSK_IAM",
        sasl_aws_region=REGION,
        sasl_aws_credentials_provider=lambda: AwsCredentials("AKIAEXAMPLEONE000001", "s"),
    )
    with pytest.raises(ConfigError, match="aws-msk-iam-sasl-signer-python"):
        msk_iam_token_provider(REGION)
