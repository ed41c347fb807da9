"""Hypothesis strategies for every message, per version.

Each strategy only varies the fields that exist in the given version; the others keep the
value the decoder produces when the field is absent, so encode -> decode must give back an
equal object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTransaction,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerMetadata,
    Coordinator,
    CreatableTopic,
    CreatableTopicConfigResult,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FetchTopicResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
    Request,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    TopicMetadata,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aioproducer.protocol.versions import CODEC_VERSIONS

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)
NTEXT = st.none() | TEXT
# Kafka's all-zero UUID means "no id" and decodes as None.
TOPIC_ID = st.none() | st.uuids().filter(lambda u: u.int != 0)
INT32S = st.lists(INT32, max_size=5)
SMALL = {"max_size": 4}


def when(cond: bool, strategy: st.SearchStrategy[Any], default: Any) -> st.SearchStrategy[Any]:
    """``strategy`` if the field exists in this version, else its absent-field value."""
    return strategy if cond else st.just(default)


# -- ApiVersions --------------------------------------------------------------------------------


def api_versions_request(v: int) -> st.SearchStrategy[ApiVersionsRequest]:
    if v < 3:
        return st.just(ApiVersionsRequest())
    return st.builds(ApiVersionsRequest, TEXT, TEXT)


def api_versions_response(v: int) -> st.SearchStrategy[ApiVersionsResponse]:
    features = st.dictionaries(TEXT, st.tuples(INT16, INT16), **SMALL)
    return st.builds(
        ApiVersionsResponse,
        INT16.filter(lambda code: code != 35),
        st.dictionaries(INT16, st.tuples(INT16, INT16), max_size=8),
        when(v >= 1, INT32, 0),
        when(v >= 3, features, {}),
        when(v >= 3, INT64, -1),
        when(v >= 3, features, {}),
        when(v >= 3, st.booleans(), False),
    )


# -- Metadata -------------------------------------------------------------------------------------


def metadata_request(v: int) -> st.SearchStrategy[MetadataRequest]:
    topics = st.lists(TEXT, max_size=5)
    if v == 0:
        topics = st.lists(TEXT, min_size=1, max_size=5)  # v0 reads [] as "all topics" (None)
    return st.builds(
        MetadataRequest,
        st.none() | topics,
        when(v >= 4, st.booleans(), True),
        when(8 <= v <= 10, st.booleans(), False),
        when(v >= 8, st.booleans(), False),
    )


def broker(v: int) -> st.SearchStrategy[BrokerMetadata]:
    return st.builds(BrokerMetadata, INT32, TEXT, INT32, when(v >= 1, NTEXT, None))


def partition_metadata(v: int) -> st.SearchStrategy[PartitionMetadata]:
    return st.builds(
        PartitionMetadata,
        INT16,
        INT32,
        INT32,
        when(v >= 7, INT32, -1),
        INT32S,
        INT32S,
        when(v >= 5, INT32S, []),
    )


def topic_metadata(v: int) -> st.SearchStrategy[TopicMetadata]:
    return st.builds(
        TopicMetadata,
        INT16,
        TEXT,
        when(v >= 10, TOPIC_ID, None),
        when(v >= 1, st.booleans(), False),
        st.lists(partition_metadata(v), **SMALL),
        when(v >= 8, INT32, -(2**31)),
    )


def metadata_response(v: int) -> st.SearchStrategy[MetadataResponse]:
    return st.builds(
        MetadataResponse,
        st.lists(broker(v), **SMALL),
        when(v >= 2, NTEXT, None),
        when(v >= 1, INT32, -1),
        st.lists(topic_metadata(v), **SMALL),
        when(v >= 3, INT32, 0),
        when(8 <= v <= 10, INT32, -(2**31)),
    )


# -- Produce --------------------------------------------------------------------------------------


def produce_request(v: int) -> st.SearchStrategy[ProduceRequest]:
    partitions = st.lists(st.tuples(INT32, st.binary(max_size=40)), **SMALL)
    return st.builds(
        ProduceRequest,
        INT16,
        INT32,
        st.lists(st.tuples(TEXT, partitions), **SMALL),
        NTEXT,
    )


def produce_partition(v: int) -> st.SearchStrategy[ProducePartitionResponse]:
    return st.builds(
        ProducePartitionResponse,
        INT32,
        INT16,
        INT64,
        INT64,
        when(v >= 5, INT64, -1),
        when(v >= 8, st.lists(st.tuples(INT32, NTEXT), **SMALL), []),
        when(v >= 8, NTEXT, None),
        when(v >= 10, st.none() | st.tuples(INT32, INT32), None),
    )


def produce_response(v: int) -> st.SearchStrategy[ProduceResponse]:
    topic = st.builds(ProduceTopicResponse, TEXT, st.lists(produce_partition(v), **SMALL))
    return st.builds(
        ProduceResponse,
        st.lists(topic, **SMALL),
        INT32,
        when(v >= 10, st.lists(broker(v), **SMALL), []),
    )


# -- InitProducerId ------------------------------------------------------------------------------


def init_producer_id_request(v: int) -> st.SearchStrategy[InitProducerIdRequest]:
    return st.builds(
        InitProducerIdRequest,
        NTEXT,
        INT32,
        when(v >= 3, INT64, -1),
        when(v >= 3, INT16, -1),
    )


def init_producer_id_response(v: int) -> st.SearchStrategy[InitProducerIdResponse]:
    return st.builds(InitProducerIdResponse, INT32, INT16, INT64, INT16)


# -- SASL ----------------------------------------------------------------------------------------


def sasl_handshake_request(v: int) -> st.SearchStrategy[SaslHandshakeRequest]:
    return st.builds(SaslHandshakeRequest, TEXT)


def sasl_handshake_response(v: int) -> st.SearchStrategy[SaslHandshakeResponse]:
    return st.builds(SaslHandshakeResponse, INT16, st.lists(TEXT, **SMALL))


def sasl_authenticate_request(v: int) -> st.SearchStrategy[SaslAuthenticateRequest]:
    return st.builds(SaslAuthenticateRequest, st.binary(max_size=64))


def sasl_authenticate_response(v: int) -> st.SearchStrategy[SaslAuthenticateResponse]:
    return st.builds(
        SaslAuthenticateResponse, INT16, NTEXT, st.binary(max_size=64), when(v >= 1, INT64, 0)
    )


# -- CreateTopics --------------------------------------------------------------------------------


def create_topics_request(v: int) -> st.SearchStrategy[CreateTopicsRequest]:
    topic = st.builds(
        CreatableTopic,
        TEXT,
        INT32,
        INT16,
        st.dictionaries(INT32, INT32S, **SMALL),
        st.dictionaries(TEXT, NTEXT, **SMALL),
    )
    return st.builds(CreateTopicsRequest, st.lists(topic, **SMALL), INT32, st.booleans())


def create_topics_response(v: int) -> st.SearchStrategy[CreateTopicsResponse]:
    config = st.builds(CreatableTopicConfigResult, TEXT, NTEXT, st.booleans(), INT8, st.booleans())
    result = st.builds(
        CreatableTopicResult,
        TEXT,
        when(v >= 7, TOPIC_ID, None),
        INT16,
        NTEXT,
        when(v >= 5, INT32, -1),
        when(v >= 5, INT16, -1),
        when(v >= 5, st.none() | st.lists(config, **SMALL), None),
        when(v >= 5, INT16, 0),
    )
    return st.builds(CreateTopicsResponse, INT32, st.lists(result, **SMALL))


# -- Fetch ----------------------------------------------------------------------------------------


def fetch_request(v: int) -> st.SearchStrategy[FetchRequest]:
    partition = st.builds(
        FetchPartition,
        INT32,
        INT64,
        INT32,
        when(v >= 9, INT32, -1),
        when(v >= 5, INT64, -1),
        when(v >= 12, INT32, -1),
    )
    topic = st.builds(FetchTopic, TEXT, st.lists(partition, **SMALL))
    return st.builds(
        FetchRequest,
        st.lists(topic, **SMALL),
        INT32,
        INT32,
        INT32,
        INT8,
        INT32,
        when(v >= 7, INT32, 0),
        when(v >= 7, INT32, -1),
        when(v >= 7, st.lists(st.tuples(TEXT, INT32S), **SMALL), []),
        when(v >= 11, TEXT, ""),
        when(v >= 12, NTEXT, None),
    )


def fetch_partition(v: int) -> st.SearchStrategy[FetchPartitionResponse]:
    flexible = v >= 12
    return st.builds(
        FetchPartitionResponse,
        INT32,
        INT16,
        INT64,
        INT64,
        when(v >= 5, INT64, -1),
        st.none() | st.lists(st.tuples(INT64, INT64), **SMALL),
        when(v >= 11, INT32, -1),
        st.none() | st.binary(max_size=40),
        when(flexible, st.none() | st.tuples(INT32, INT64), None),
        when(flexible, st.none() | st.tuples(INT32, INT32), None),
        when(flexible, st.none() | st.tuples(INT64, INT32), None),
    )


def fetch_response(v: int) -> st.SearchStrategy[FetchResponse]:
    topic = st.builds(FetchTopicResponse, TEXT, st.lists(fetch_partition(v), **SMALL))
    return st.builds(
        FetchResponse,
        st.lists(topic, **SMALL),
        INT32,
        when(v >= 7, INT16, 0),
        when(v >= 7, INT32, 0),
    )


# -- ListOffsets ---------------------------------------------------------------------------------


def list_offsets_request(v: int) -> st.SearchStrategy[ListOffsetsRequest]:
    partition = st.builds(ListOffsetsPartition, INT32, INT64, when(v >= 4, INT32, -1))
    return st.builds(
        ListOffsetsRequest,
        st.lists(st.tuples(TEXT, st.lists(partition, **SMALL)), **SMALL),
        INT32,
        when(v >= 2, INT8, 0),
        when(v >= 10, INT32, 0),
    )


def list_offsets_response(v: int) -> st.SearchStrategy[ListOffsetsResponse]:
    partition = st.builds(
        ListOffsetsPartitionResponse, INT32, INT16, INT64, INT64, when(v >= 4, INT32, -1)
    )
    topic = st.builds(ListOffsetsTopicResponse, TEXT, st.lists(partition, **SMALL))
    return st.builds(ListOffsetsResponse, st.lists(topic, **SMALL), when(v >= 2, INT32, 0))


# -- Transactions --------------------------------------------------------------------------------


def find_coordinator_request(v: int) -> st.SearchStrategy[FindCoordinatorRequest]:
    return st.builds(
        FindCoordinatorRequest,
        when(v <= 3, TEXT, ""),
        when(v >= 1, INT8, 0),
        when(v >= 4, st.lists(TEXT, **SMALL), []),
    )


def find_coordinator_response(v: int) -> st.SearchStrategy[FindCoordinatorResponse]:
    coordinator = st.builds(Coordinator, TEXT, INT32, TEXT, INT32, INT16, NTEXT)
    old = v <= 3
    return st.builds(
        FindCoordinatorResponse,
        when(v >= 1, INT32, 0),
        when(old, INT16, 0),
        when(1 <= v <= 3, NTEXT, None),
        when(old, INT32, -1),
        when(old, TEXT, ""),
        when(old, INT32, -1),
        when(v >= 4, st.lists(coordinator, **SMALL), []),
    )


TOPIC_PARTITIONS = st.lists(st.tuples(TEXT, INT32S), **SMALL)
TOPIC_ERRORS = st.lists(st.tuples(TEXT, st.lists(st.tuples(INT32, INT16), **SMALL)), **SMALL)


def add_partitions_to_txn_request(v: int) -> st.SearchStrategy[AddPartitionsToTxnRequest]:
    old = v <= 3
    transaction = st.builds(
        AddPartitionsToTxnTransaction, TEXT, INT64, INT16, st.booleans(), TOPIC_PARTITIONS
    )
    return st.builds(
        AddPartitionsToTxnRequest,
        when(old, TEXT, ""),
        when(old, INT64, -1),
        when(old, INT16, -1),
        when(old, TOPIC_PARTITIONS, []),
        when(v >= 4, st.lists(transaction, **SMALL), []),
    )


def add_partitions_to_txn_response(v: int) -> st.SearchStrategy[AddPartitionsToTxnResponse]:
    result = st.builds(AddPartitionsToTxnResult, TEXT, TOPIC_ERRORS)
    return st.builds(
        AddPartitionsToTxnResponse,
        INT32,
        when(v >= 4, INT16, 0),
        when(v >= 4, st.lists(result, **SMALL), []),
        when(v <= 3, TOPIC_ERRORS, []),
    )


def add_offsets_to_txn_request(v: int) -> st.SearchStrategy[AddOffsetsToTxnRequest]:
    return st.builds(AddOffsetsToTxnRequest, TEXT, INT64, INT16, TEXT)


def add_offsets_to_txn_response(v: int) -> st.SearchStrategy[AddOffsetsToTxnResponse]:
    return st.builds(AddOffsetsToTxnResponse, INT32, INT16)


def end_txn_request(v: int) -> st.SearchStrategy[EndTxnRequest]:
    return st.builds(EndTxnRequest, TEXT, INT64, INT16, st.booleans())


def end_txn_response(v: int) -> st.SearchStrategy[EndTxnResponse]:
    return st.builds(EndTxnResponse, INT32, INT16, when(v >= 5, INT64, -1), when(v >= 5, INT16, -1))


def txn_offset_commit_request(v: int) -> st.SearchStrategy[TxnOffsetCommitRequest]:
    partition = st.builds(TxnOffsetCommitPartition, INT32, INT64, when(v >= 2, INT32, -1), NTEXT)
    return st.builds(
        TxnOffsetCommitRequest,
        TEXT,
        TEXT,
        INT64,
        INT16,
        st.lists(st.tuples(TEXT, st.lists(partition, **SMALL)), **SMALL),
        when(v >= 3, INT32, -1),
        when(v >= 3, TEXT, ""),
        when(v >= 3, NTEXT, None),
    )


def txn_offset_commit_response(v: int) -> st.SearchStrategy[TxnOffsetCommitResponse]:
    return st.builds(TxnOffsetCommitResponse, INT32, TOPIC_ERRORS)


def offset_fetch_request(v: int) -> st.SearchStrategy[OffsetFetchRequest]:
    topics = st.lists(st.tuples(TEXT, st.lists(INT32, **SMALL)), **SMALL)
    return st.builds(
        OffsetFetchRequest,
        TEXT,
        (st.none() | topics) if v >= 2 else topics,
        when(v >= 7, st.booleans(), False),
    )


def offset_fetch_response(v: int) -> st.SearchStrategy[OffsetFetchResponse]:
    partition = st.builds(OffsetFetchPartition, INT32, INT64, when(v >= 5, INT32, -1), NTEXT, INT16)
    return st.builds(
        OffsetFetchResponse,
        when(v >= 3, INT32, 0),
        st.lists(st.tuples(TEXT, st.lists(partition, **SMALL)), **SMALL),
        when(v >= 2, INT16, 0),
    )


StrategyFor = Callable[[int], st.SearchStrategy[Any]]

#: (request class, request strategy, response strategy) for every implemented API.
APIS: list[tuple[type[Request[Any]], StrategyFor, StrategyFor]] = [
    (ApiVersionsRequest, api_versions_request, api_versions_response),
    (MetadataRequest, metadata_request, metadata_response),
    (ProduceRequest, produce_request, produce_response),
    (InitProducerIdRequest, init_producer_id_request, init_producer_id_response),
    (SaslHandshakeRequest, sasl_handshake_request, sasl_handshake_response),
    (SaslAuthenticateRequest, sasl_authenticate_request, sasl_authenticate_response),
    (CreateTopicsRequest, create_topics_request, create_topics_response),
    (FetchRequest, fetch_request, fetch_response),
    (ListOffsetsRequest, list_offsets_request, list_offsets_response),
    (FindCoordinatorRequest, find_coordinator_request, find_coordinator_response),
    (AddPartitionsToTxnRequest, add_partitions_to_txn_request, add_partitions_to_txn_response),
    (AddOffsetsToTxnRequest, add_offsets_to_txn_request, add_offsets_to_txn_response),
    (EndTxnRequest, end_txn_request, end_txn_response),
    (TxnOffsetCommitRequest, txn_offset_commit_request, txn_offset_commit_response),
    (OffsetFetchRequest, offset_fetch_request, offset_fetch_response),
]


def all_versions() -> list[tuple[type[Request[Any]], int, StrategyFor, StrategyFor]]:
    """Every (request class, version) with a codec, with its strategies."""
    return [
        (cls, v, req, resp)
        for cls, req, resp in APIS
        for v in range(CODEC_VERSIONS[cls.API_KEY][0], CODEC_VERSIONS[cls.API_KEY][1] + 1)
    ]
