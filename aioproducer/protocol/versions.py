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
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    SASL_AUTHENTICATE = 36


#: The inclusive version range of each API the client implements. Produce starts at 3 although
#: 4.x brokers advertise 0 (they reject 0-2), and stops at 12 because v13 addresses topics by id.
CLIENT_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {
        ApiKey.PRODUCE: (3, 12),
        ApiKey.METADATA: (0, 12),
        ApiKey.API_VERSIONS: (0, 4),
        ApiKey.INIT_PRODUCER_ID: (0, 5),
        ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.CREATE_TOPICS: (2, 7),
    }
)

#: Every API and version range with a codec: the client's APIs plus Fetch (v13+ addresses
#: topics by id) and ListOffsets, which the producer never sends and does not negotiate (an old
#: broker's Fetch range must not stop it from producing); they let
#: :class:`aioproducer.testing.FakeCluster` serve consumers.
CODEC_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {**CLIENT_VERSIONS, ApiKey.FETCH: (4, 12), ApiKey.LIST_OFFSETS: (1, 11)}
)

# First flexible (KIP-482) version of each API, from the schemas' "flexibleVersions";
# None means the API never became flexible.
_FIRST_FLEXIBLE: Mapping[ApiKey, int | None] = MappingProxyType(
    {
        ApiKey.PRODUCE: 9,
        ApiKey.FETCH: 12,
        ApiKey.LIST_OFFSETS: 6,
        ApiKey.METADATA: 9,
        ApiKey.SASL_HANDSHAKE: None,
        ApiKey.API_VERSIONS: 3,
        ApiKey.CREATE_TOPICS: 5,
        ApiKey.INIT_PRODUCER_ID: 2,
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
    APIs the broker does not list are left out of the result; an API both list without any
    common version raises :class:`UnsupportedVersionError` naming the API and both ranges.
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
            raise UnsupportedVersionError(
                f"{_api_name(api_key)}: the broker supports versions {broker_min}-{broker_max}, "
                f"this client supports {client_min}-{client_max}"
            )
        chosen[ApiKey(api_key)] = high
    return chosen
