"""API keys, flexible versions and version negotiation."""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer import Producer
from aioproducer.errors import UnsupportedVersionError
from aioproducer.protocol.versions import (
    CLIENT_VERSIONS,
    CODEC_VERSIONS,
    ApiKey,
    is_flexible,
    negotiate_versions,
)
from aioproducer.testing import FakeCluster
from aioproducer.testing.fake import ADVERTISED_VERSIONS

TRANSACTION_APIS = {
    ApiKey.FIND_COORDINATOR,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
}

# What a 4.3.1 broker advertises by default (Produce min 0 is the KAFKA-18659 workaround).
BROKER_431 = {
    0: (0, 13),
    1: (4, 18),
    2: (1, 11),
    3: (0, 13),
    9: (1, 10),
    10: (0, 6),
    17: (0, 1),
    18: (0, 4),
    19: (2, 7),
    22: (0, 5),
    24: (0, 5),
    25: (0, 4),
    26: (0, 5),
    28: (0, 5),
    36: (0, 2),
    60: (0, 2),
}


def test_api_key_values() -> None:
    assert [(k.name, int(k)) for k in ApiKey] == [
        ("PRODUCE", 0),
        ("FETCH", 1),
        ("LIST_OFFSETS", 2),
        ("METADATA", 3),
        ("OFFSET_FETCH", 9),
        ("FIND_COORDINATOR", 10),
        ("SASL_HANDSHAKE", 17),
        ("API_VERSIONS", 18),
        ("CREATE_TOPICS", 19),
        ("INIT_PRODUCER_ID", 22),
        ("ADD_PARTITIONS_TO_TXN", 24),
        ("ADD_OFFSETS_TO_TXN", 25),
        ("END_TXN", 26),
        ("TXN_OFFSET_COMMIT", 28),
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
        ApiKey.FIND_COORDINATOR: (0, 6),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        ApiKey.END_TXN: (0, 5),
        ApiKey.TXN_OFFSET_COMMIT: (0, 5),
        ApiKey.OFFSET_FETCH: (1, 7),
    }


def test_add_partitions_to_txn_decodes_the_broker_versions_too() -> None:
    # v4+ is the batched broker-to-broker form: decodable, never sent by the client.
    assert CODEC_VERSIONS[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5)
    assert all(
        CODEC_VERSIONS[key] == CLIENT_VERSIONS[key]
        for key in TRANSACTION_APIS - {ApiKey.ADD_PARTITIONS_TO_TXN}
    )


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
        (ApiKey.FIND_COORDINATOR, 3),
        (ApiKey.ADD_PARTITIONS_TO_TXN, 3),
        (ApiKey.ADD_OFFSETS_TO_TXN, 3),
        (ApiKey.END_TXN, 3),
        (ApiKey.TXN_OFFSET_COMMIT, 3),
        (ApiKey.OFFSET_FETCH, 6),
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
        ApiKey.FIND_COORDINATOR: 6,
        ApiKey.ADD_PARTITIONS_TO_TXN: 3,
        ApiKey.ADD_OFFSETS_TO_TXN: 4,
        ApiKey.END_TXN: 5,
        ApiKey.TXN_OFFSET_COMMIT: 5,
        ApiKey.OFFSET_FETCH: 7,
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


def test_a_broker_without_transaction_apis_negotiates_the_rest() -> None:
    # What FakeCluster advertises, less the transaction APIs: a broker that has none.
    broker = {
        int(key): versions
        for key, versions in ADVERTISED_VERSIONS.items()
        if key not in TRANSACTION_APIS
    }
    chosen = negotiate_versions(broker)
    assert not TRANSACTION_APIS & set(chosen)
    assert chosen[ApiKey.PRODUCE] == 12
    assert chosen[ApiKey.INIT_PRODUCER_ID] == 5


def test_transaction_apis_without_a_common_version_are_left_out() -> None:
    # A (hypothetical) broker that dropped every version this client sends of them.
    broker = {0: (3, 12), 10: (7, 8), 24: (4, 5), 25: (5, 6), 26: (6, 7), 28: (6, 6)}
    assert negotiate_versions(broker) == {ApiKey.PRODUCE: 12}
    # The APIs producing needs still fail loudly.
    with pytest.raises(UnsupportedVersionError, match="PRODUCE"):
        negotiate_versions({**broker, 0: (13, 14)})


@pytest.mark.anyio
async def test_producing_works_against_a_broker_missing_transaction_apis(
    anyio_backend: Any,
) -> None:
    # FakeCluster serves neither AddOffsetsToTxn nor TxnOffsetCommit.
    assert {ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT}.isdisjoint(ADVERTISED_VERSIONS)
    async with FakeCluster() as fc:
        fc.create_topic("t")
        async with Producer(bootstrap_servers=fc.bootstrap_servers) as producer:
            meta = await producer.send_and_wait("t", b"v", key=b"k")
        assert [(r.key, r.value) for r in fc.records("t", meta.partition)] == [(b"k", b"v")]
        assert {r.api for r in fc.requests()} >= {"api_versions", "metadata", "produce"}
