"""Kafka API keys, the API versions this client implements, and version negotiation."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

from aioproducer.errors import UnsupportedVersionError

__all__ = ["CLIENT_VERSIONS", "CODEC_VERSIONS", "ApiKey", "is_flexible", "negotiate_versions"]


class ApiKey(enum.IntEnum):
    """Kafka API keys of the requests this client knows about."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36


#: The inclusive version range of each API the client implements. Produce starts at 3 although
#: 4.x brokers advertise 0 (they reject 0-2), and stops at 12 because v13 addresses topics by id.
#: AddPartitionsToTxn stops at 3: v4+ is the batched form brokers send each other.
CLIENT_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {
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
)

# APIs only transactions use. A plain producer never sends them, so a broker that offers no
# version of them in common must not stop it from producing: they are left out instead.
_TRANSACTIONAL: frozenset[ApiKey] = frozenset(
    {
        ApiKey.FIND_COORDINATOR,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
    }
)

#: Every API and version range with a codec: the client's APIs plus Fetch (v13+ addresses
#: topics by id) and ListOffsets, which the producer never sends and does not negotiate (an old
#: broker's Fetch range must not stop it from producing); they let
#: :class:`aioproducer.testing.FakeCluster` serve consumers. AddPartitionsToTxn decodes up to
#: the brokers' v5 although the client sends at most v3.
CODEC_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {
        **CLIENT_VERSIONS,
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 11),
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    }
)

# First flexible (KIP-482) version of each API, from the schemas' "flexibleVersions";
# None means the API never became flexible.
_FIRST_FLEXIBLE: Mapping[ApiKey, int | None] = MappingProxyType(
    {
        ApiKey.PRODUCE: 9,
        ApiKey.FETCH: 12,
        ApiKey.LIST_OFFSETS: 6,
        ApiKey.METADATA: 9,
        ApiKey.FIND_COORDINATOR: 3,
        ApiKey.SASL_HANDSHAKE: None,
        ApiKey.API_VERSIONS: 3,
        ApiKey.CREATE_TOPICS: 5,
        ApiKey.INIT_PRODUCER_ID: 2,
        ApiKey.ADD_PARTITIONS_TO_TXN: 3,
        ApiKey.ADD_OFFSETS_TO_TXN: 3,
        ApiKey.END_TXN: 3,
        ApiKey.TXN_OFFSET_COMMIT: 3,
        ApiKey.OFFSET_FETCH: 6,
        ApiKey.SASL_AUTHENTICATE: 2,
    }
)


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of ``api_key`` uses compact encodings and tagged fields."""
    try:
        first = _FIRST_FLEXIBLE[ApiKey(api_key)]
    except ValueError:
        raise ValueError(f"unknown API key {api_key}") from None
    return first is not None and version >= first


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


def negotiate_versions(
    broker: Mapping[int, tuple[int, int]],
    client: Mapping[ApiKey, tuple[int, int]] = CLIENT_VERSIONS,
) -> dict[ApiKey, int]:
    """Pick, for each API both sides list, the highest version both support.

    ``broker`` maps API keys to the inclusive (min, max) ranges from an ApiVersions response.
    APIs the broker does not list are left out of the result, and so are the transaction
    APIs when there is no common version; any other API both list without a common version
    raises :class:`UnsupportedVersionError` naming the API and both ranges.
    """
    chosen: dict[ApiKey, int] = {}
    for api_key, (client_min, client_max) in client.items():
        broker_range = broker.get(int(api_key))
        if broker_range is None:
            continue
        broker_min, broker_max = broker_range
        low = max(client_min, broker_min)
        high = min(client_max, broker_max)
        if low > high:
            if api_key in _TRANSACTIONAL:
                continue
            raise UnsupportedVersionError(
                f"{_api_name(api_key)}: the broker supports versions {broker_min}-{broker_max}, "
                f"this client supports {client_min}-{client_max}"
            )
        chosen[ApiKey(api_key)] = high
    return chosen
