"""API keys, flexible versions and version negotiation."""

from __future__ import annotations

import pytest

from aioproducer.errors import UnsupportedVersionError
from aioproducer.protocol.versions import CLIENT_VERSIONS, ApiKey, is_flexible, negotiate_versions

# What a 4.3.1 broker advertises by default (Produce min 0 is the KAFKA-18659 workaround).
BROKER_431 = {
    0: (0, 13),
    1: (4, 18),
    2: (1, 11),
    3: (0, 13),
    17: (0, 1),
    18: (0, 4),
    19: (2, 7),
    22: (0, 5),
    36: (0, 2),
    60: (0, 2),
}


def test_api_key_values() -> None:
    assert [(k.name, int(k)) for k in ApiKey] == [
        ("PRODUCE", 0),
        ("FETCH", 1),
        ("LIST_OFFSETS", 2),
        ("METADATA", 3),
        ("SASL_HANDSHAKE", 17),
        ("API_VERSIONS", 18),
        ("CREATE_TOPICS", 19),
        ("INIT_PRODUCER_ID", 22),
        ("SASL_AUTHENTICATE", 36),
    ]


def test_client_versions() -> None:
    assert dict(CLIENT_VERSIONS) == {
        ApiKey.PRODUCE: (3, 12),
        ApiKey.METADATA: (0, 12),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.CREATE_TOPICS: (2, 7),
    }


@pytest.mark.parametrize(
    ("api_key", "first_flexible"),
    [
        (ApiKey.PRODUCE, 9),
        (ApiKey.FETCH, 12),
        (ApiKey.LIST_OFFSETS, 6),
        (ApiKey.METADATA, 9),
        (ApiKey.API_VERSIONS, 3),
        (ApiKey.CREATE_TOPICS, 5),
        (ApiKey.INIT_PRODUCER_ID, 2),
        (ApiKey.SASL_AUTHENTICATE, 2),
    ],
)
def test_is_flexible(api_key: ApiKey, first_flexible: int) -> None:
    assert not is_flexible(api_key, first_flexible - 1)
    assert is_flexible(api_key, first_flexible)
    assert is_flexible(int(api_key), first_flexible + 5)


def test_sasl_handshake_never_flexible() -> None:
    assert not any(is_flexible(ApiKey.SASL_HANDSHAKE, v) for v in range(10))


def test_is_flexible_unknown_key() -> None:
    with pytest.raises(ValueError, match="unknown API key 99"):
        is_flexible(99, 0)


def test_negotiate_with_431_broker() -> None:
    assert negotiate_versions(BROKER_431) == {
        ApiKey.PRODUCE: 12,
        ApiKey.METADATA: 12,
        ApiKey.API_VERSIONS: 4,
        ApiKey.INIT_PRODUCER_ID: 5,
        ApiKey.SASL_HANDSHAKE: 1,
        ApiKey.SASL_AUTHENTICATE: 2,
        ApiKey.CREATE_TOPICS: 7,
    }


def test_negotiate_picks_highest_common_version() -> None:
    broker = {0: (0, 7), 3: (5, 8), 18: (0, 2)}
    assert negotiate_versions(broker) == {
        ApiKey.PRODUCE: 7,
        ApiKey.METADATA: 8,
        ApiKey.API_VERSIONS: 2,
    }


def test_negotiate_leaves_out_apis_the_broker_lacks() -> None:
    chosen = negotiate_versions({18: (0, 4)})
    assert chosen == {ApiKey.API_VERSIONS: 4}
    assert negotiate_versions({}) == {}


def test_negotiate_custom_client_ranges() -> None:
    assert negotiate_versions(BROKER_431, {ApiKey.FETCH: (4, 12)}) == {ApiKey.FETCH: 12}


def test_negotiate_no_overlap_raises() -> None:
    # An old broker that only speaks Produce v0-2.
    with pytest.raises(UnsupportedVersionError) as info:
        negotiate_versions({0: (0, 2), 18: (0, 4)})
    message = str(info.value)
    assert "PRODUCE" in message
    assert "0-2" in message
    assert "3-12" in message


def test_negotiate_no_overlap_above() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"CREATE_TOPICS.*8-9.*2-7"):
        negotiate_versions({19: (8, 9)})
