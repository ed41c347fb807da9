"""ApiVersions (key 18), versions 0-4; flexible from v3."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from aioproducer.__about__ import __version__
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.messages._base import Request, Response, end_struct
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.versions import ApiKey

__all__ = ["ApiVersionsRequest", "ApiVersionsResponse", "software_version"]

_FLEXIBLE = 3

_TAG_SUPPORTED_FEATURES = 0
_TAG_FINALIZED_FEATURES_EPOCH = 1
_TAG_FINALIZED_FEATURES = 2
_TAG_ZK_MIGRATION_READY = 3

# Brokers reject ClientSoftwareName/Version values that do not match this (INVALID_REQUEST).
_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def software_version(version: str) -> str:
    """Turn a version string into one brokers accept as ClientSoftwareVersion.

    Characters outside ``[a-zA-Z0-9.-]`` become ``-`` and the ends are trimmed to
    alphanumerics, e.g. ``"1.0+local"`` becomes ``"1.0-local"``.
    """
    if _SOFTWARE_RE.fullmatch(version):
        return version
    cleaned = re.sub(r"[^a-zA-Z0-9.\-]", "-", version).strip(".-")
    return cleaned or "unknown"


@dataclass(slots=True)
class ApiVersionsResponse(Response):
    """The APIs and version ranges a broker supports.

    ``api_keys`` maps API key to the inclusive (min, max) version range. The v3+ tagged fields
    are kept: ``supported_features`` maps a feature name to its (min, max) supported version
    and ``finalized_features`` to its (min, max) finalized level.

    A broker that does not support the request's version answers with a v0 body carrying
    error 35 (UNSUPPORTED_VERSION) and its own ApiVersions range, whatever version was asked
    for; :meth:`decode_body` therefore reads a v0 body whenever the error code is 35.
    """

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS

    error_code: int = 0
    api_keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    throttle_time_ms: int = 0
    supported_features: dict[str, tuple[int, int]] = field(default_factory=dict)
    finalized_features_epoch: int = -1
    finalized_features: dict[str, tuple[int, int]] = field(default_factory=dict)
    zk_migration_ready: bool = False

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ApiVersionsResponse:
        """Read the body; a body with error 35 is read as v0 whatever ``version`` is."""
        error_code = r.int16()
        if error_code == ErrorCode.UNSUPPORTED_VERSION:
            version = 0
        flex = version >= _FLEXIBLE
        api_keys: dict[int, tuple[int, int]] = {}
        for _ in range(r.array_length(flex, 7 if flex else 6)):
            api_key = r.int16()
            api_keys[api_key] = (r.int16(), r.int16())
            end_struct(r, flex)
        throttle_time_ms = r.int32() if version >= 1 else 0
        response = cls(error_code, api_keys, throttle_time_ms)
        if flex:
            response._read_tags(r)
        return response

    def _read_tags(self, r: Reader) -> None:
        for tag, data in r.tagged_fields().items():
            sub = Reader(data)
            if tag == _TAG_SUPPORTED_FEATURES:
                self.supported_features = _read_features(sub, min_first=True)
            elif tag == _TAG_FINALIZED_FEATURES_EPOCH:
                self.finalized_features_epoch = sub.int64()
            elif tag == _TAG_FINALIZED_FEATURES:
                self.finalized_features = _read_features(sub, min_first=False)
            elif tag == _TAG_ZK_MIGRATION_READY:
                self.zk_migration_ready = sub.boolean()

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body; like a broker, a body with error 35 is written as v0."""
        if self.error_code == ErrorCode.UNSUPPORTED_VERSION:
            version = 0
        flex = version >= _FLEXIBLE
        w.int16(self.error_code)
        w.array_length(len(self.api_keys), flex)
        for api_key, (low, high) in self.api_keys.items():
            w.int16(api_key)
            w.int16(low)
            w.int16(high)
            if flex:
                w.tagged_fields()
        if version >= 1:
            w.int32(self.throttle_time_ms)
        if flex:
            w.tagged_fields(self._tags())

    def _tags(self) -> dict[int, bytes]:
        tags: dict[int, bytes] = {}
        if self.supported_features:
            tags[_TAG_SUPPORTED_FEATURES] = _write_features(self.supported_features, True)
        if self.finalized_features_epoch != -1:
            sub = Writer()
            sub.int64(self.finalized_features_epoch)
            tags[_TAG_FINALIZED_FEATURES_EPOCH] = sub.getvalue()
        if self.finalized_features:
            tags[_TAG_FINALIZED_FEATURES] = _write_features(self.finalized_features, False)
        if self.zk_migration_ready:
            tags[_TAG_ZK_MIGRATION_READY] = b"\x01"
        return tags


# SupportedFeatureKey is (name, min, max) but FinalizedFeatureKey is (name, max, min).
def _read_features(r: Reader, *, min_first: bool) -> dict[str, tuple[int, int]]:
    features: dict[str, tuple[int, int]] = {}
    for _ in range(r.array_length(True, 6)):
        name = r.compact_string()
        first, second = r.int16(), r.int16()
        features[name] = (first, second) if min_first else (second, first)
        r.skip_tagged_fields()
    return features


def _write_features(features: dict[str, tuple[int, int]], min_first: bool) -> bytes:
    w = Writer()
    w.array_length(len(features), True)
    for name, (low, high) in features.items():
        w.compact_string(name)
        w.int16(low if min_first else high)
        w.int16(high if min_first else low)
        w.tagged_fields()
    return w.getvalue()


@dataclass(slots=True)
class ApiVersionsRequest(Request[ApiVersionsResponse]):
    """Asks a broker which API versions it supports; v3+ also names the client software."""

    API_KEY: ClassVar[ApiKey] = ApiKey.API_VERSIONS
    RESPONSE: ClassVar[type[Response]] = ApiVersionsResponse

    client_software_name: str = "aioproducer"
    client_software_version: str = software_version(__version__)

    def encode_body(self, w: Writer, version: int) -> None:
        """Write the body (empty before v3)."""
        if version >= _FLEXIBLE:
            w.compact_string(self.client_software_name)
            w.compact_string(self.client_software_version)
            w.tagged_fields()

    @classmethod
    def decode_body(cls, r: Reader, version: int) -> ApiVersionsRequest:
        """Read the body; before v3 the defaults are returned."""
        if version < _FLEXIBLE:
            return cls()
        name = r.compact_string()
        software = r.compact_string()
        r.skip_tagged_fields()
        return cls(name, software)
