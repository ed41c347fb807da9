"""Amazon MSK with IAM access control, both ways AWS documents it.

* ``sasl_mechanism="AWS_MSK_IAM"``: at every authentication (and KIP-368
  re-authentication) the producer signs a ``kafka-cluster:Connect`` request for the broker's
  host with AWS Signature Version 4 and sends it as the JSON payload MSK expects
  (:func:`msk_iam_payload`). Credentials come from ``sasl_aws_credentials_provider``, by
  default :func:`botocore_credentials`: the standard AWS provider chain (environment,
  shared config and credentials files, SSO, web identity, container and instance roles),
  which refreshes temporary credentials before they expire. Needs the ``aws`` extra
  (``botocore`` and ``aws-msk-iam-sasl-signer-python``).
* ``sasl_mechanism="OAUTHBEARER"`` with :func:`msk_iam_token_provider`: a token made by
  AWS's own signer library (``aws-msk-iam-sasl-signer-python``, also in the ``aws``
  extra).

MSK grants each session a lifetime bounded by the credentials' expiry; the producer
re-authenticates on the same connection before it ends, with credentials fetched anew.
Secrets (secret key, session token, signature) never appear in reprs, logs or errors.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import inspect
import json
import os
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from .__about__ import __version__
from .errors import AuthenticationError, ConfigError, KafkaError
from .oauth import OAuthToken

__all__ = [
    "AwsCredentials",
    "AwsCredentialsProvider",
    "botocore_credentials",
    "current_credentials",
    "default_region",
    "msk_iam_payload",
    "msk_iam_token_provider",
]

_SERVICE = "kafka-cluster"
_ACTION = "kafka-cluster:Connect"
_ALGORITHM = "AWS4-HMAC-SHA256"
# How long the signature stays valid, in seconds: what MSK's own clients sign with.
_EXPIRES = "900"
_PAYLOAD_VERSION = "2020_10_22"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_EXTRA_HINT = (
    "install the aws extra (botocore and aws-msk-iam-sasl-signer-python): "
    "pip install '.[aws]' in a checkout, or the wheel with [aws]"
)


@dataclass(frozen=True)
class AwsCredentials:
    """One set of AWS credentials: an access key, its secret and, for temporary
    credentials, the session token."""

    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.access_key, str) or not self.access_key:
            raise ValueError("AwsCredentials.access_key must be a non-empty string")
        if not isinstance(self.secret_key, str) or not self.secret_key:
            raise ValueError("AwsCredentials.secret_key must be a non-empty string")
        if self.session_token is not None and not isinstance(self.session_token, str):
            raise ValueError("AwsCredentials.session_token must be a string or None")


#: ``provider() -> AwsCredentials``, plain or ``async``; called at every authentication.
AwsCredentialsProvider = Callable[[], "AwsCredentials | Awaitable[AwsCredentials]"]


def _quote(text: str) -> str:
    # SigV4's URI encoding: everything but the RFC 3986 unreserved characters.
    return urllib.parse.quote(text, safe="-._~")


def _hmac_sha256(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def msk_iam_payload(
    host: str,
    region: str,
    credentials: AwsCredentials,
    *,
    now: datetime.datetime | None = None,
    user_agent: str | None = None,
) -> bytes:
    """The AWS_MSK_IAM SASL payload for a connection to broker ``host``.

    A SigV4 signature of ``GET /?Action=kafka-cluster:Connect&...`` with the single signed
    header ``host``, valid for 900 s from ``now`` (default: the current UTC time), as the
    compact JSON object MSK brokers read.
    """
    moment = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    day = moment.strftime("%Y%m%d")
    stamp = moment.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{day}/{region}/{_SERVICE}/aws4_request"
    credential = f"{credentials.access_key}/{scope}"
    # Already in the byte order of their names, as a canonical query string must be.
    query = [
        ("Action", _ACTION),
        ("X-Amz-Algorithm", _ALGORITHM),
        ("X-Amz-Credential", credential),
        ("X-Amz-Date", stamp),
        ("X-Amz-Expires", _EXPIRES),
    ]
    if credentials.session_token:
        query.append(("X-Amz-Security-Token", credentials.session_token))
    query.append(("X-Amz-SignedHeaders", "host"))
    canonical_request = "\n".join(
        (
            "GET",
            "/",
            "&".join(f"{_quote(k)}={_quote(v)}" for k, v in query),
            f"host:{host}\n",
            "host",
            _EMPTY_SHA256,
        )
    )
    to_sign = "\n".join(
        (_ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
    )
    key = ("AWS4" + credentials.secret_key).encode()
    for part in (day, region, _SERVICE, "aws4_request"):
        key = _hmac_sha256(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    message: dict[str, str] = {
        "version": _PAYLOAD_VERSION,
        "host": host,
        "user-agent": user_agent if user_agent is not None else f"aioproducer/{__version__}",
        "action": _ACTION,
        "x-amz-algorithm": _ALGORITHM,
        "x-amz-credential": credential,
        "x-amz-date": stamp,
        "x-amz-signedheaders": "host",
        "x-amz-expires": _EXPIRES,
        "x-amz-signature": signature,
    }
    if credentials.session_token:
        message["x-amz-security-token"] = credentials.session_token
    return json.dumps(message, separators=(",", ":")).encode()


def _botocore_session(profile: str | None) -> Any:
    try:
        import botocore.session
    except ImportError:
        raise ConfigError(f"AWS_MSK_IAM needs botocore: {_EXTRA_HINT}") from None
    return botocore.session.Session(profile=profile)


def default_region(profile: str | None = None) -> str | None:
    """The region the standard AWS configuration names (``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, the profile's ``region``), or ``None``."""
    # Most AWS SDKs read AWS_REGION first; botocore reads only the other two.
    explicit = os.environ.get("AWS_REGION")
    if explicit:
        return explicit
    region = _botocore_session(profile).get_config_variable("region")
    return str(region) if region else None


def botocore_credentials(profile: str | None = None) -> AwsCredentialsProvider:
    """A credentials provider over botocore's standard provider chain.

    Each call returns the current credentials; botocore refreshes temporary ones (assumed
    roles, SSO, container and instance credentials) before they expire, so every
    (re-)authentication signs with valid ones. Its lookups may do network I/O, so they run
    in a worker thread.
    """
    session = _botocore_session(profile)

    def fetch() -> AwsCredentials:
        found = session.get_credentials()
        if found is None:
            raise AuthenticationError(
                "AWS_MSK_IAM: no AWS credentials found by the standard provider chain "
                "(environment, config files, SSO, container or instance role)"
            )
        frozen = found.get_frozen_credentials()
        return AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token)

    async def provide() -> AwsCredentials:
        return await anyio.to_thread.run_sync(fetch)

    return provide


async def current_credentials(provider: AwsCredentialsProvider) -> AwsCredentials:
    """Call ``provider``, awaiting it if it is async; any failure of it, or a result that
    is not :class:`AwsCredentials`, is an
    :class:`~aioproducer.errors.AuthenticationError`."""
    try:
        result = provider()
        if inspect.isawaitable(result):
            result = await result
    except KafkaError:
        raise
    except Exception as exc:
        raise AuthenticationError(
            f"the AWS credentials provider failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(result, AwsCredentials):
        raise AuthenticationError(
            f"an AWS credentials provider must return AwsCredentials, not {type(result).__name__}"
        )
    return result


def msk_iam_token_provider(
    region: str,
    *,
    profile: str | None = None,
    role_arn: str | None = None,
    session_name: str | None = None,
) -> Callable[[], Awaitable[OAuthToken]]:
    """An OAUTHBEARER token provider for MSK, built on ``aws-msk-iam-sasl-signer-python``.

    Use it as ``sasl_oauth_token_provider`` with ``sasl_mechanism="OAUTHBEARER"``. Each
    token is the signer library's, from the default credentials chain, a named ``profile``
    or an assumed ``role_arn`` (STS session ``session_name``); the producer asks for a new one once 80% of a token's
    lifetime has passed, and re-authenticates its connections with it.
    """
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
    except ImportError:
        raise ConfigError(
            f"msk_iam_token_provider needs aws-msk-iam-sasl-signer-python: {_EXTRA_HINT}"
        ) from None

    def generate() -> OAuthToken:
        if role_arn is not None:
            extra = () if session_name is None else (session_name,)
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(
                region, role_arn, *extra
            )
        elif profile is not None:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_profile(
                region, profile
            )
        else:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return OAuthToken(token, expiry_ms / 1000, principal=f"AWS IAM ({region})")

    async def provide() -> OAuthToken:
        return await anyio.to_thread.run_sync(generate)

    return provide
