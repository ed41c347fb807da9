"""Request and response codecs for the APIs a producer uses (and Fetch/ListOffsets for reading back).

Each request class has ``API_KEY``, ``RESPONSE`` (its response class), ``encode_body`` and
``decode_body``; each response class has ``API_KEY``, ``decode_body`` and ``encode_body``.
Bodies exclude the request/response headers, which :mod:`aioproducer.protocol.framing` adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from aioproducer.protocol.messages._base import Request, Response
from aioproducer.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aioproducer.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfigResult,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aioproducer.protocol.messages.fetch import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FetchTopicResponse,
)
from aioproducer.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aioproducer.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from aioproducer.protocol.messages.metadata import (
    BrokerMetadata,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from aioproducer.protocol.messages.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from aioproducer.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "BrokerMetadata",
    "CreatableTopic",
    "CreatableTopicConfigResult",
    "CreatableTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "FetchTopicResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "ListOffsetsTopicResponse",
    "MetadataRequest",
    "MetadataResponse",
    "PartitionMetadata",
    "ProducePartitionResponse",
    "ProduceRequest",
    "ProduceResponse",
    "ProduceTopicResponse",
    "Request",
    "Response",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "TopicMetadata",
]

_REQUESTS: tuple[type[Request[Any]], ...] = (
    ProduceRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    SaslHandshakeRequest,
    ApiVersionsRequest,
    CreateTopicsRequest,
    InitProducerIdRequest,
    SaslAuthenticateRequest,
)

#: The request class of each implemented API.
REQUEST_TYPES: Mapping[ApiKey, type[Request[Any]]] = MappingProxyType(
    {cls.API_KEY: cls for cls in _REQUESTS}
)

#: The response class of each implemented API.
RESPONSE_TYPES: Mapping[ApiKey, type[Response]] = MappingProxyType(
    {cls.API_KEY: cls.RESPONSE for cls in _REQUESTS}
)
