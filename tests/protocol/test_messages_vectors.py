"""Fixed byte vectors, written out field by field from the protocol schemas."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aioproducer import __version__
from aioproducer.errors import ProtocolError
from aioproducer.protocol.framing import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from aioproducer.protocol.messages import (
    KEY_TYPE_TRANSACTION,
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
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    TopicMetadata,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aioproducer.protocol.messages.api_versions import software_version


def h(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


def check_request(request: Request[Any], version: int, corr: int, frame: bytes) -> None:
    assert encode_request(request, version, corr, "c") == frame
    header, decoded = decode_request(frame[4:])
    assert (header.api_version, header.correlation_id, header.client_id) == (version, corr, "c")
    assert decoded == request


def check_response(
    request_cls: type[Request[Any]], version: int, payload: bytes, expected: Response
) -> int:
    corr, decoded = decode_response(request_cls, version, payload)
    assert decoded == expected
    assert encode_response(expected, version, corr)[4:] == payload
    return corr


# -- ApiVersions ----------------------------------------------------------------------------------


def test_api_versions_v0_request() -> None:
    frame = h("0000000b", "0012", "0000", "00000001", "000163")  # header only, empty body
    check_request(ApiVersionsRequest(), 0, 1, frame)


def test_api_versions_v3_request() -> None:
    frame = h(
        "00000024",  # 36 bytes
        "0012", "0003", "00000002", "000163", "00",  # header v2
        "0c", "61696f70726f6475636572",  # compact "aioproducer"
        "0b", "302e312e302e64657630",  # compact "0.1.0.dev0"
        "00",  # tagged fields
    )  # fmt: skip
    check_request(ApiVersionsRequest("aioproducer", "0.1.0.dev0"), 3, 2, frame)


def test_api_versions_default_software_names_are_valid() -> None:
    request = ApiVersionsRequest()
    assert request.client_software_name == "aioproducer"
    assert request.client_software_version == software_version(__version__)
    assert software_version("0.1.0.dev0") == "0.1.0.dev0"
    assert software_version("1.2+local_build") == "1.2-local-build"
    assert software_version("_1.0_") == "1.0"
    assert software_version("++") == "unknown"


def test_api_versions_v0_response() -> None:
    payload = h(
        "00000001",  # correlation id (header v0)
        "0000",  # error
        "00000002",  # two APIs
        "0000", "0003", "000c",  # Produce 3-12
        "0012", "0000", "0004",  # ApiVersions 0-4
    )  # fmt: skip
    expected = ApiVersionsResponse(0, {0: (3, 12), 18: (0, 4)}, 0)
    assert check_response(ApiVersionsRequest, 0, payload, expected) == 1


FEATURE = "10" + b"metadata.version".hex()  # compact string, 16 bytes


def test_api_versions_v3_response_with_features() -> None:
    payload = h(
        "00000002",  # header v0 even though v3 is flexible
        "0000",
        "03",  # compact array of 2
        "0000", "0003", "000c", "00",
        "0012", "0000", "0004", "00",
        "00000000",  # throttle
        "03",  # three tagged fields
        "00", "17", "02", "11" + FEATURE[2:], "0001", "001b", "00",  # SupportedFeatures
        "01", "08", "0000000000000005",  # FinalizedFeaturesEpoch
        "02", "17", "02", "11" + FEATURE[2:], "001b", "0001", "00",  # FinalizedFeatures: max, min
    )  # fmt: skip
    expected = ApiVersionsResponse(
        0,
        {0: (3, 12), 18: (0, 4)},
        0,
        supported_features={"metadata.version": (1, 27)},
        finalized_features_epoch=5,
        finalized_features={"metadata.version": (1, 27)},
    )
    check_response(ApiVersionsRequest, 3, payload, expected)


def test_api_versions_v3_response_skips_unknown_tags() -> None:
    payload = h(
        "00000002", "0000", "01", "00000000",
        "02",  # two tagged fields
        "03", "01", "01",  # ZkMigrationReady = true
        "09", "03", "ffffff",  # a tag from the future
    )  # fmt: skip
    _, decoded = decode_response(ApiVersionsRequest, 3, payload)
    assert decoded == ApiVersionsResponse(0, {}, 0, zk_migration_ready=True)


def test_api_versions_unsupported_version_answer_is_read_as_v0() -> None:
    # A broker that does not know v4 answers a v0 body with UNSUPPORTED_VERSION (35) and
    # its own ApiVersions range.
    payload = h("00000003", "0023", "00000001", "0012", "0000", "0002")
    for version in (1, 3, 4):
        corr, decoded = decode_response(ApiVersionsRequest, version, payload)
        assert corr == 3
        assert decoded == ApiVersionsResponse(35, {18: (0, 2)}, 0)
        assert encode_response(decoded, version, 3)[4:] == payload


def test_api_versions_other_errors_keep_the_requested_version() -> None:
    # INVALID_REQUEST (42), e.g. for a bad software name, is sent in the requested version.
    payload = h("00000004", "002a", "01", "00000000", "00")
    _, decoded = decode_response(ApiVersionsRequest, 3, payload)
    assert decoded == ApiVersionsResponse(42, {}, 0)


# -- Metadata -------------------------------------------------------------------------------------


def test_metadata_v1_request() -> None:
    frame = h("00000013", "0003", "0001", "00000003", "000163", "00000001", "00027431")
    check_request(MetadataRequest(["t1"], True), 1, 3, frame)  # v1 has no auto-create flag
    # v1+ uses a null array for "all topics"
    frame = h("0000000f", "0003", "0001", "00000003", "000163", "ffffffff")
    check_request(MetadataRequest(None, True), 1, 3, frame)


def test_metadata_v0_all_topics_is_an_empty_array() -> None:
    frame = h("0000000f", "0003", "0000", "00000003", "000163", "00000000")
    assert encode_request(MetadataRequest(None), 0, 3, "c") == frame
    assert encode_request(MetadataRequest([]), 0, 3, "c") == frame
    assert decode_request(frame[4:])[1] == MetadataRequest(None, True)


def test_metadata_v1_response() -> None:
    payload = h(
        "00000003",
        "00000001",  # one broker
        "00000001", "000168", "00002384", "ffff",  # node 1, "h", 9092, rack null
        "00000001",  # controller id
        "00000001",  # one topic
        "0000", "00027431", "00",  # error, "t1", not internal
        "00000001",  # one partition
        "0000", "00000000", "00000001",  # error, partition 0, leader 1
        "00000001", "00000001",  # replicas [1]
        "00000001", "00000001",  # isr [1]
    )  # fmt: skip
    expected = MetadataResponse(
        brokers=[BrokerMetadata(1, "h", 9092, None)],
        cluster_id=None,
        controller_id=1,
        topics=[
            TopicMetadata(0, "t1", None, False, [PartitionMetadata(0, 0, 1, -1, [1], [1], [])])
        ],
        throttle_time_ms=0,
    )
    check_response(MetadataRequest, 1, payload, expected)


def test_metadata_v12_request() -> None:
    frame = h(
        "00000024",  # 36 bytes
        "0003", "000c", "00000004", "000163", "00",  # header v2
        "02",  # compact array of 1
        "00000000000000000000000000000000", "037431", "00",  # zero topic id, "t1", tags
        "01",  # allow auto topic creation
        "00",  # include topic authorized operations
        "00",  # tagged fields
    )  # fmt: skip
    check_request(MetadataRequest(["t1"], allow_auto_topic_creation=True), 12, 4, frame)


def test_metadata_v12_response() -> None:
    topic_id = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
    payload = h(
        "00000005", "00",  # header v1
        "00000000",  # throttle
        "02",  # one broker
        "00000001", "0268", "00002384", "037231", "00",  # 1, "h", 9092, "r1", tags
        "03636c",  # cluster id "cl"
        "00000002",  # controller id
        "02",  # one topic
        "0000", "037431", topic_id.hex, "00",  # error, "t1", id, not internal
        "02",  # one partition
        "0000", "00000000", "00000001", "00000007",  # error, 0, leader 1, epoch 7
        "0200000001", "0200000001", "01", "00",  # replicas [1], isr [1], offline [], tags
        "80000000",  # topic authorized operations: not requested
        "00",  # topic tags
        "00",  # tagged fields
    )  # fmt: skip
    expected = MetadataResponse(
        brokers=[BrokerMetadata(1, "h", 9092, "r1")],
        cluster_id="cl",
        controller_id=2,
        topics=[
            TopicMetadata(0, "t1", topic_id, False, [PartitionMetadata(0, 0, 1, 7, [1], [1], [])])
        ],
    )
    check_response(MetadataRequest, 12, payload, expected)


# -- Produce --------------------------------------------------------------------------------------


def test_produce_v3_request() -> None:
    frame = h(
        "00000028",  # 40 bytes
        "0000", "0003", "00000006", "000163",  # header v1
        "ffff",  # transactional id null
        "ffff",  # acks -1
        "00007530",  # timeout 30000
        "00000001", "000174",  # one topic "t"
        "00000001", "00000000", "00000002", "5242",  # partition 0, records b"RB"
    )  # fmt: skip
    check_request(ProduceRequest(-1, 30000, [("t", [(0, b"RB")])]), 3, 6, frame)


def test_produce_v3_response() -> None:
    payload = h(
        "00000006",
        "00000001", "000174",  # one topic "t"
        "00000001", "00000000", "0000",  # one partition: 0, no error
        "000000000000002a",  # base offset 42
        "ffffffffffffffff",  # log append time -1
        "00000000",  # throttle
    )  # fmt: skip
    expected = ProduceResponse([ProduceTopicResponse("t", [ProducePartitionResponse(0, 0, 42)])])
    check_response(ProduceRequest, 3, payload, expected)


def test_produce_v9_request() -> None:
    frame = h(
        "00000023",  # 35 bytes
        "0000", "0009", "00000007", "000163", "00",  # header v2
        "037478",  # transactional id "tx"
        "0001",  # acks 1
        "00007530",  # timeout
        "02", "0274",  # one topic "t"
        "02", "00000000", "035242", "00",  # partition 0, compact records b"RB", tags
        "00",  # topic tags
        "00",  # tagged fields
    )  # fmt: skip
    check_request(ProduceRequest(1, 30000, [("t", [(0, b"RB")])], "tx"), 9, 7, frame)


def _produce_topics() -> list[tuple[str, list[tuple[int, bytes]]]]:
    # Batches whose compact lengths take one, two and three varint bytes, and a topic
    # without partitions after them.
    return [("a", [(0, b"x" * 5), (1, b"y" * 200), (2, b"z" * 20000)]), ("b", [])]


def test_produce_v9_request_many_partitions() -> None:
    frame = h(
        "0000", "0009", "00000007", "000163", "00",  # header v2
        "00",  # transactional id null
        "0001", "00007530",  # acks 1, timeout
        "03", "0261", "04",  # two topics; "a", three partitions
        "00000000", "06", "78" * 5, "00",  # partition 0: 5 bytes, tags
        "00000001", "c901", "79" * 200, "00",  # partition 1: 200 bytes
        "00000002", "a19c01", "7a" * 20000, "00",  # partition 2: 20000 bytes
        "00",  # topic tags
        "0262", "01", "00",  # "b", no partitions, topic tags
        "00",  # tagged fields
    )  # fmt: skip
    frame = len(frame).to_bytes(4, "big") + frame
    check_request(ProduceRequest(1, 30000, _produce_topics()), 9, 7, frame)


def test_produce_v3_request_many_partitions() -> None:
    frame = h(
        "0000", "0003", "00000007", "000163",  # header v1
        "ffff", "0001", "00007530",  # transactional id null, acks 1, timeout
        "00000002", "000161", "00000003",  # two topics; "a", three partitions
        "00000000", "00000005", "78" * 5,
        "00000001", "000000c8", "79" * 200,
        "00000002", "00004e20", "7a" * 20000,
        "000162", "00000000",  # "b", no partitions
    )  # fmt: skip
    frame = len(frame).to_bytes(4, "big") + frame
    check_request(ProduceRequest(1, 30000, _produce_topics()), 3, 7, frame)


def test_produce_v11_response_plain_and_detailed_partitions() -> None:
    # A partition with nothing more to say is read in one step; one with a message after
    # it, and one with record errors, still field by field.
    plain = "ffffffffffffffff" + "0000000000000000" + "01" + "00" + "00"
    payload = h(
        "00000009", "00",
        "02", "0274",
        "04",
        "00000000", "0000", "0000000000000005", plain,
        "00000001", "0057", "ffffffffffffffff", "ffffffffffffffff", "ffffffffffffffff",
        "01", "04626164", "00",  # no record errors, message "bad", tags
        "00000002", "0000", "0000000000000007", plain,
        "00",  # topic tags
        "00000000", "00",
    )  # fmt: skip
    partitions = [
        ProducePartitionResponse(0, 0, 5, -1, 0),
        ProducePartitionResponse(1, 87, -1, -1, -1, [], "bad"),
        ProducePartitionResponse(2, 0, 7, -1, 0),
    ]
    check_response(
        ProduceRequest, 11, payload, ProduceResponse([ProduceTopicResponse("t", partitions)])
    )


def test_produce_v9_response() -> None:
    payload = h(
        "00000007", "00",  # header v1
        "02", "0274",  # one topic "t"
        "02", "00000000", "0006",  # partition 0, NOT_LEADER_OR_FOLLOWER
        "ffffffffffffffff", "ffffffffffffffff", "0000000000000000",  # base, append, start
        "02", "00000003", "04626164", "00",  # record errors: [(3, "bad")]
        "00",  # error message null
        "00",  # partition tags
        "00",  # topic tags
        "00000064",  # throttle 100
        "00",  # tagged fields
    )  # fmt: skip
    partition = ProducePartitionResponse(0, 6, -1, -1, 0, [(3, "bad")], None, None)
    expected = ProduceResponse([ProduceTopicResponse("t", [partition])], 100)
    check_response(ProduceRequest, 9, payload, expected)


def test_produce_v10_response_with_new_leader() -> None:
    payload = h(
        "00000008", "00",
        "02", "0274",
        "02", "00000001", "0006",
        "ffffffffffffffff", "ffffffffffffffff", "ffffffffffffffff",
        "01",  # no record errors
        "00",  # error message null
        "01", "00", "09", "00000002", "00000005", "00",  # CurrentLeader: leader 2, epoch 5
        "00",  # topic tags
        "00000000",
        "01", "00", "0d",  # NodeEndpoints (tag 0), 13 bytes
        "02", "00000002", "0268", "00002384", "00", "00",  # node 2 "h":9092, no rack
    )  # fmt: skip
    partition = ProducePartitionResponse(1, 6, -1, -1, -1, [], None, (2, 5))
    expected = ProduceResponse(
        [ProduceTopicResponse("t", [partition])], 0, [BrokerMetadata(2, "h", 9092, None)]
    )
    check_response(ProduceRequest, 10, payload, expected)
    # The same bytes read as v9 keep neither tag (they are not defined there).
    _, v9 = decode_response(ProduceRequest, 9, payload)
    assert isinstance(v9, ProduceResponse)
    assert v9.node_endpoints == []
    assert v9.topics[0].partitions[0].current_leader is None


def test_produce_large_records_written_once_and_exactly() -> None:
    big = bytes(range(256)) * 64
    request = ProduceRequest(-1, 1000, [("t", [(0, big), (1, b"small")]), ("u", [(2, big)])])
    for version in (3, 9, 12):
        frame = encode_request(request, version, 1, None)
        assert frame.count(big) == 2
        assert decode_request(frame[4:])[1] == request


# -- InitProducerId ------------------------------------------------------------------------------


def test_init_producer_id_v0() -> None:
    frame = h("00000011", "0016", "0000", "00000008", "000163", "ffff", "ffffffff")
    check_request(InitProducerIdRequest(), 0, 8, frame)
    payload = h("00000008", "00000000", "0000", "00000000000003e8", "0000")
    check_response(InitProducerIdRequest, 0, payload, InitProducerIdResponse(0, 0, 1000, 0))


def test_init_producer_id_v4() -> None:
    frame = h(
        "0000001e",  # 30 bytes
        "0016", "0004", "00000009", "000163", "00",  # header v2
        "037478",  # transactional id "tx"
        "0000ea60",  # transaction timeout 60000
        "00000000000003e8", "0002",  # producer id 1000, epoch 2
        "00",
    )  # fmt: skip
    check_request(InitProducerIdRequest("tx", 60000, 1000, 2), 4, 9, frame)
    payload = h("00000009", "00", "00000000", "0000", "00000000000003e8", "0003", "00")
    check_response(InitProducerIdRequest, 4, payload, InitProducerIdResponse(0, 0, 1000, 3))


def test_init_producer_id_v2_has_no_producer_id_fields() -> None:
    frame = encode_request(InitProducerIdRequest("tx", 60000, 1000, 2), 2, 9, "c")
    assert frame[4 + 12 :].hex() == "0374780000ea6000"
    assert decode_request(frame[4:])[1] == InitProducerIdRequest("tx", 60000)


# -- SASL / CreateTopics -----------------------------------------------------------------------------


def test_sasl_vectors() -> None:
    check_request(
        SaslAuthenticateRequest(b"\x00u\x00p"),
        2,
        1,
        h("00000012", "0024", "0002", "00000001", "000163", "00", "05", "00750070", "00"),
    )
    check_response(
        SaslAuthenticateRequest,
        1,
        h("00000001", "0000", "ffff", "00000002", "6f6b", "0000000000000064"),
        SaslAuthenticateResponse(0, None, b"ok", 100),
    )
    check_response(
        SaslHandshakeRequest,
        1,
        h("00000001", "0021", "00000002", "0005504c41494e", "0005" + b"OTHER".hex()),
        SaslHandshakeResponse(33, ["PLAIN", "OTHER"]),
    )


def test_sasl_reprs_hide_auth_bytes() -> None:
    assert "secret" not in repr(SaslAuthenticateRequest(b"\x00user\x00secret"))
    assert "secret" not in repr(SaslAuthenticateResponse(0, None, b"secret", 0))


def test_create_topics_v7_response_and_v2_request() -> None:
    topic_id = uuid.UUID(int=7)
    payload = h(
        "00000001", "00",
        "00000000",
        "02",
        "0274", topic_id.hex, "0000", "00",  # "t", id, no error, message null
        "00000003", "0001",  # 3 partitions, rf 1
        "00",  # configs null
        "01", "00", "02", "0028",  # TopicConfigErrorCode (tag 0) = 40
        "00",
    )  # fmt: skip
    expected = CreateTopicsResponse(
        0, [CreatableTopicResult("t", topic_id, 0, None, 3, 1, None, 40)]
    )
    check_response(CreateTopicsRequest, 7, payload, expected)
    frame = h(
        "00000036",
        "0013", "0002", "00000001", "000163",
        "00000001",
        "000174", "00000003", "0001",  # "t", 3 partitions, rf 1
        "00000001", "00000000", "00000001", "00000001",  # assignment {0: [1]}
        "00000001", "0001" + b"k".hex(), "ffff",  # configs {"k": None}
        "00007530", "00",  # timeout 30000, validate only false
    )  # fmt: skip
    check_request(
        CreateTopicsRequest([CreatableTopic("t", 3, 1, {0: [1]}, {"k": None})]), 2, 1, frame
    )


def test_metadata_request_by_topic_id_rejected() -> None:
    payload = h(
        "0003", "000c", "00000001", "ffff", "00",
        "02", "0102030405060708090a0b0c0d0e0f10", "00", "00",  # topic id only, null name
        "00", "00", "00",
    )  # fmt: skip
    with pytest.raises(ProtocolError, match="topic id"):
        decode_request(payload)


# -- Transactions --------------------------------------------------------------------------------

TX = "7478"  # "tx"
PID_1000 = "00000000000003e8"


def test_find_coordinator_v1_request() -> None:
    frame = h(
        "00000011",
        "000a", "0001", "00000001", "000163",  # header v1
        "0003", "74786e",  # key "txn"
        "01",  # key type: transaction
    )  # fmt: skip
    check_request(FindCoordinatorRequest("txn", KEY_TYPE_TRANSACTION), 1, 1, frame)


def test_find_coordinator_v4_request_batches_keys() -> None:
    frame = h(
        "00000013",
        "000a", "0004", "00000002", "000163", "00",  # header v2
        "01",  # key type: transaction (the single key is gone from v4)
        "02", "04", "74786e",  # coordinator keys ["txn"]
        "00",
    )  # fmt: skip
    request = FindCoordinatorRequest(key_type=KEY_TYPE_TRANSACTION, coordinator_keys=["txn"])
    check_request(request, 4, 2, frame)
    # A v4 request has no single key: one set there is not sent.
    assert encode_request(FindCoordinatorRequest("ignored", 1, ["txn"]), 4, 2, "c") == frame


def test_find_coordinator_responses() -> None:
    v0 = h("00000001", "0000", "00000001", "0001", "62", "00002384")  # node 1 at b:9092
    check_response(FindCoordinatorRequest, 0, v0, FindCoordinatorResponse(0, 0, None, 1, "b", 9092))
    v2 = h(
        "00000001",
        "00000064",  # throttle 100
        "000f", "0001", "78",  # COORDINATOR_NOT_AVAILABLE, message "x"
        "ffffffff", "0000", "ffffffff",  # no node, host "", port -1
    )  # fmt: skip
    check_response(FindCoordinatorRequest, 2, v2, FindCoordinatorResponse(100, 15, "x"))
    v4 = h(
        "00000002", "00",  # header v1
        "00000000",
        "02",  # one coordinator
        "04", "74786e", "00000001", "02", "62", "00002384", "0000", "00", "00",
        "00",
    )  # fmt: skip
    expected = FindCoordinatorResponse(coordinators=[Coordinator("txn", 1, "b", 9092)])
    check_response(FindCoordinatorRequest, 4, v4, expected)


def test_add_partitions_to_txn_v0() -> None:
    frame = h(
        "0000002c",
        "0018", "0000", "00000003", "000163",
        "0002", TX, PID_1000, "0002",  # "tx", producer id 1000, epoch 2
        "00000001", "0001", "74", "00000002", "00000000", "00000001",  # t: [0, 1]
    )  # fmt: skip
    check_request(AddPartitionsToTxnRequest("tx", 1000, 2, [("t", [0, 1])]), 0, 3, frame)
    payload = h(
        "00000003",
        "00000000",
        "00000001", "0001", "74",
        "00000002", "00000000", "0000", "00000001", "0033",  # partition 1: CONCURRENT_TRANSACTIONS
    )  # fmt: skip
    expected = AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[("t", [(0, 0), (1, 51)])])
    check_response(AddPartitionsToTxnRequest, 0, payload, expected)


def test_add_partitions_to_txn_v3() -> None:
    frame = h(
        "00000027",
        "0018", "0003", "00000004", "000163", "00",
        "03", TX, PID_1000, "0002",
        "02", "02", "74", "03", "00000000", "00000001", "00",  # t: [0, 1]
        "00",
    )  # fmt: skip
    check_request(AddPartitionsToTxnRequest("tx", 1000, 2, [("t", [0, 1])]), 3, 4, frame)


def test_add_partitions_to_txn_v4_is_the_batched_form() -> None:
    frame = h(
        "00000026",
        "0018", "0004", "00000005", "000163", "00",
        "02",  # one transaction
        "03", TX, PID_1000, "0002", "01",  # verify only
        "02", "02", "74", "02", "00000000", "00",  # t: [0]
        "00",  # transaction tags
        "00",
    )  # fmt: skip
    txn = AddPartitionsToTxnTransaction("tx", 1000, 2, True, [("t", [0])])
    check_request(AddPartitionsToTxnRequest(transactions=[txn]), 4, 5, frame)
    payload = h(
        "00000005", "00",
        "00000000", "0000",
        "02", "03", TX,  # results for "tx"
        "02", "02", "74", "02", "00000000", "0000", "00", "00",  # t: partition 0 ok
        "00",
        "00",
    )  # fmt: skip
    expected = AddPartitionsToTxnResponse(
        results_by_transaction=[AddPartitionsToTxnResult("tx", [("t", [(0, 0)])])]
    )
    check_response(AddPartitionsToTxnRequest, 4, payload, expected)


def test_add_offsets_to_txn() -> None:
    v0 = h("0000001c", "0019", "0000", "00000006", "000163", "0002", TX, PID_1000, "0002", "000167")
    check_request(AddOffsetsToTxnRequest("tx", 1000, 2, "g"), 0, 6, v0)
    v3 = h(
        "0000001c",
        "0019", "0003", "00000007", "000163", "00",
        "03", TX, PID_1000, "0002", "0267", "00",
    )  # fmt: skip
    check_request(AddOffsetsToTxnRequest("tx", 1000, 2, "g"), 3, 7, v3)
    check_response(
        AddOffsetsToTxnRequest, 0, h("00000006", "00000000", "0000"), AddOffsetsToTxnResponse()
    )
    check_response(
        AddOffsetsToTxnRequest,
        3,
        h("00000007", "00", "00000000", "0030", "00"),
        AddOffsetsToTxnResponse(0, 48),
    )


def test_end_txn_v0() -> None:
    frame = h("0000001a", "001a", "0000", "00000008", "000163", "0002", TX, PID_1000, "0002", "01")
    check_request(EndTxnRequest("tx", 1000, 2, True), 0, 8, frame)
    check_response(EndTxnRequest, 0, h("00000008", "00000000", "0000"), EndTxnResponse())


def test_end_txn_v5_returns_the_bumped_epoch() -> None:
    frame = h(
        "0000001b",
        "001a", "0005", "00000009", "000163", "00",
        "03", TX, PID_1000, "0002", "00",  # abort
        "00",
    )  # fmt: skip
    check_request(EndTxnRequest("tx", 1000, 2, False), 5, 9, frame)
    payload = h("00000009", "00", "00000000", "0000", PID_1000, "0003", "00")
    check_response(EndTxnRequest, 5, payload, EndTxnResponse(0, 0, 1000, 3))
    # v4 has no producer fields: they read as -1.
    payload = h("00000009", "00", "00000000", "0030", "00")
    check_response(EndTxnRequest, 4, payload, EndTxnResponse(0, 48))


def test_txn_offset_commit_v2() -> None:
    frame = h(
        "00000039",
        "001c", "0002", "0000000a", "000163",
        "0002", TX, "000167", PID_1000, "0002",  # "tx", group "g", producer id, epoch
        "00000001", "000174",
        "00000001", "00000000", "000000000000002a", "00000005", "ffff",  # 0 @ 42, epoch 5
    )  # fmt: skip
    request = TxnOffsetCommitRequest(
        "tx", "g", 1000, 2, [("t", [TxnOffsetCommitPartition(0, 42, 5)])]
    )
    check_request(request, 2, 10, frame)
    payload = h("0000000a", "00000000", "00000001", "000174", "00000001", "00000000", "0000")
    check_response(
        TxnOffsetCommitRequest, 2, payload, TxnOffsetCommitResponse(0, [("t", [(0, 0)])])
    )


def test_txn_offset_commit_v3() -> None:
    frame = h(
        "0000003c",
        "001c", "0003", "0000000b", "000163", "00",
        "03", TX, "0267", PID_1000, "0002",
        "00000007", "026d", "00",  # generation 7, member "m", no instance id
        "02", "0274",
        "02", "00000000", "000000000000002a", "00000005", "036d64", "00",  # metadata "md"
        "00",
        "00",
    )  # fmt: skip
    partition = TxnOffsetCommitPartition(0, 42, 5, "md")
    request = TxnOffsetCommitRequest("tx", "g", 1000, 2, [("t", [partition])], 7, "m")
    check_request(request, 3, 11, frame)
    payload = h(
        "0000000b", "00", "00000000", "02", "0274", "02", "00000000", "0000", "00", "00", "00"
    )
    check_response(
        TxnOffsetCommitRequest, 3, payload, TxnOffsetCommitResponse(0, [("t", [(0, 0)])])
    )
