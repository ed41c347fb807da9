"""Request and response codecs for the APIs a producer uses (and Fetch/ListOffsets for reading back).

The transaction APIs (FindCoordinator, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn) are here too, and OffsetFetch, to read back an offset committed in a transaction.

Each request class has ``API_KEY``, ``RESPONSE`` (its response class), ``encode_body`` and
``decode_body``; each response class has ``API_KEY``, ``decode_body`` and ``encode_body``.
Bodies exclude the request/response headers, which :mod:`aioproducer.protocol.framing` adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from aioproducer.protocol.messages._base import Request, Response
from aioproducer.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aioproducer.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTransaction,
)
from aioproducer.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aioproducer.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfigResult,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aioproducer.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aioproducer.protocol.messages.fetch import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FetchTopicResponse,
)
from aioproducer.protocol.messages.find_coordinator import (
    KEY_TYPE_GROUP,
    KEY_TYPE_TRANSACTION,
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
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
from aioproducer.protocol.messages.offset_fetch import (
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
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
from aioproducer.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aioproducer.protocol.versions import ApiKey

__all__ = [
    "KEY_TYPE_GROUP",
    "KEY_TYPE_TRANSACTION",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResult",
    "AddPartitionsToTxnTransaction",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "BrokerMetadata",
    "Coordinator",
    "CreatableTopic",
    "CreatableTopicConfigResult",
    "CreatableTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "FetchTopicResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "ListOffsetsTopicResponse",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetFetchPartition",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
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
    "TxnOffsetCommitPartition",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
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
    FindCoordinatorRequest,
    AddPartitionsToTxnRequest,
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
    OffsetFetchRequest,
)

#: The request class of each implemented API.
REQUEST_TYPES: Mapping[ApiKey, type[Request[Any]]] = MappingProxyType(
    {cls.API_KEY: cls for cls in _REQUESTS}
)

#: The response class of each implemented API.
RESPONSE_TYPES: Mapping[ApiKey, type[Response]] = MappingProxyType(
    {cls.API_KEY: cls.RESPONSE for cls in _REQUESTS}
)
