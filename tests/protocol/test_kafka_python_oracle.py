"""Cross-check against an independent implementation: kafka-python 3.x's protocol classes.

kafka-python 3 generates its codecs from the same Apache Kafka JSON schemas, with its own
code generator, header handling and primitive encoders. For every API and every version we
implement it must produce byte-identical request frames (header + body), accept ours, and
encode responses that we decode into the expected objects. Its request-header, response-header
and ApiVersions special cases (header v0, error fallback) are separate code from ours.

Every version we implement exists in kafka-python 3.0 (it ships the 4.x schemas), so
nothing is skipped. Its ApiVersions response *decoder* reads any non-zero error code as a v0
body, which misreads e.g. INVALID_REQUEST (sent in the requested version), so only its
ApiVersions *encoder* is used here.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import StrategyFor, all_versions

from aioproducer.protocol.framing import decode_response, encode_request
from aioproducer.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BrokerMetadata,
    CreateTopicsRequest,
    CreateTopicsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

kafka_protocol = pytest.importorskip("kafka.protocol.api_message")
from kafka.protocol import admin as k_admin  # noqa: E402
from kafka.protocol import consumer as k_consumer  # noqa: E402
from kafka.protocol import metadata as k_metadata  # noqa: E402
from kafka.protocol import sasl as k_sasl  # noqa: E402
from kafka.protocol.producer import produce as k_produce  # noqa: E402
from kafka.protocol.producer import transaction as k_txn  # noqa: E402

K_CLASSES: dict[type[Any], tuple[Any, Any]] = {
    ApiVersionsRequest: (k_metadata.ApiVersionsRequest, k_metadata.ApiVersionsResponse),
    MetadataRequest: (k_metadata.MetadataRequest, k_metadata.MetadataResponse),
    ProduceRequest: (k_produce.ProduceRequest, k_produce.ProduceResponse),
    InitProducerIdRequest: (k_txn.InitProducerIdRequest, k_txn.InitProducerIdResponse),
    SaslHandshakeRequest: (k_sasl.SaslHandshakeRequest, k_sasl.SaslHandshakeResponse),
    SaslAuthenticateRequest: (k_sasl.SaslAuthenticateRequest, k_sasl.SaslAuthenticateResponse),
    CreateTopicsRequest: (k_admin.CreateTopicsRequest, k_admin.CreateTopicsResponse),
    FetchRequest: (k_consumer.FetchRequest, k_consumer.FetchResponse),
    ListOffsetsRequest: (k_consumer.ListOffsetsRequest, k_consumer.ListOffsetsResponse),
    FindCoordinatorRequest: (k_metadata.FindCoordinatorRequest, k_metadata.FindCoordinatorResponse),
    AddPartitionsToTxnRequest: (k_txn.AddPartitionsToTxnRequest, k_txn.AddPartitionsToTxnResponse),
    AddOffsetsToTxnRequest: (k_txn.AddOffsetsToTxnRequest, k_txn.AddOffsetsToTxnResponse),
    EndTxnRequest: (k_txn.EndTxnRequest, k_txn.EndTxnResponse),
    TxnOffsetCommitRequest: (k_txn.TxnOffsetCommitRequest, k_txn.TxnOffsetCommitResponse),
    OffsetFetchRequest: (k_consumer.OffsetFetchRequest, k_consumer.OffsetFetchResponse),
}

NO_OPERATIONS = -(2**31)


def bitfield(value: int) -> set[int] | None:
    """kafka-python models authorized-operations int32s as sets of bit numbers."""
    if value == NO_OPERATIONS:
        return None
    return {bit for bit in range(32) if (value & 0xFFFFFFFF) >> bit & 1}


def build(klass: Any, version: int, values: dict[str, Any]) -> Any:
    """Instantiate a kafka-python message/struct from plain dicts, recursively."""
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        field = klass.fields[name]
        if value is not None and field.is_struct_array():
            value = [build(field.data_class, version, item) for item in value]
        elif value is not None and field.is_struct():
            value = build(field.data_class, version, value)
        kwargs[name] = value
    return klass(version=version, **kwargs)


# -- our objects -> kafka-python field dicts -----------------------------------------------------


def broker_dict(b: BrokerMetadata) -> dict[str, Any]:
    return {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}


def topic_partitions(topics: list[tuple[str, list[int]]]) -> list[dict[str, Any]]:
    return [{"name": name, "partitions": parts} for name, parts in topics]


def topic_errors(
    topics: list[tuple[str, list[tuple[int, int]]]], partitions: str, error: str
) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            partitions: [{"partition_index": i, error: code} for i, code in parts],
        }
        for name, parts in topics
    ]


def request_fields(request: Request[Any], v: int) -> dict[str, Any]:
    if isinstance(request, ApiVersionsRequest):
        if v < 3:
            return {}
        return {
            "client_software_name": request.client_software_name,
            "client_software_version": request.client_software_version,
        }
    if isinstance(request, MetadataRequest):
        return {
            "topics": None if request.topics is None else [{"name": t} for t in request.topics],
            "allow_auto_topic_creation": request.allow_auto_topic_creation,
            "include_cluster_authorized_operations": request.include_cluster_authorized_operations,
            "include_topic_authorized_operations": request.include_topic_authorized_operations,
        }
    if isinstance(request, ProduceRequest):
        return {
            "transactional_id": request.transactional_id,
            "acks": request.acks,
            "timeout_ms": request.timeout_ms,
            "topic_data": [
                {"name": name, "partition_data": [{"index": i, "records": r} for i, r in parts]}
                for name, parts in request.topics
            ],
        }
    if isinstance(request, InitProducerIdRequest):
        return {
            "transactional_id": request.transactional_id,
            "transaction_timeout_ms": request.transaction_timeout_ms,
            "producer_id": request.producer_id,
            "producer_epoch": request.producer_epoch,
        }
    if isinstance(request, SaslHandshakeRequest):
        return {"mechanism": request.mechanism}
    if isinstance(request, SaslAuthenticateRequest):
        return {"auth_bytes": request.auth_bytes}
    if isinstance(request, CreateTopicsRequest):
        return {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [
                        {"partition_index": p, "broker_ids": ids}
                        for p, ids in t.assignments.items()
                    ],
                    "configs": [{"name": k, "value": val} for k, val in t.configs.items()],
                }
                for t in request.topics
            ],
            "timeout_ms": request.timeout_ms,
            "validate_only": request.validate_only,
        }
    if isinstance(request, FetchRequest):
        fields = {
            "replica_id": request.replica_id,
            "max_wait_ms": request.max_wait_ms,
            "min_bytes": request.min_bytes,
            "max_bytes": request.max_bytes,
            "isolation_level": request.isolation_level,
            "session_id": request.session_id,
            "session_epoch": request.session_epoch,
            "topics": [
                {
                    "topic": t.topic,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "current_leader_epoch": p.current_leader_epoch,
                            "fetch_offset": p.fetch_offset,
                            "last_fetched_epoch": p.last_fetched_epoch,
                            "log_start_offset": p.log_start_offset,
                            "partition_max_bytes": p.partition_max_bytes,
                        }
                        for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
            "forgotten_topics_data": [
                {"topic": name, "partitions": parts} for name, parts in request.forgotten_topics
            ],
            "rack_id": request.rack_id,
        }
        if request.cluster_id is not None:
            fields["cluster_id"] = request.cluster_id
        return fields
    if isinstance(request, ListOffsetsRequest):
        return {
            "replica_id": request.replica_id,
            "isolation_level": request.isolation_level,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "current_leader_epoch": p.current_leader_epoch,
                            "timestamp": p.timestamp,
                        }
                        for p in parts
                    ],
                }
                for name, parts in request.topics
            ],
            "timeout_ms": request.timeout_ms,
        }
    if isinstance(request, FindCoordinatorRequest):
        return {
            "key": request.key,
            "key_type": request.key_type,
            "coordinator_keys": request.coordinator_keys,
        }
    if isinstance(request, AddPartitionsToTxnRequest):
        # Only the fields of this version: the absent ones default differently (0 vs -1).
        if v >= 4:
            return {
                "transactions": [
                    {
                        "transactional_id": t.transactional_id,
                        "producer_id": t.producer_id,
                        "producer_epoch": t.producer_epoch,
                        "verify_only": t.verify_only,
                        "topics": topic_partitions(t.topics),
                    }
                    for t in request.transactions
                ]
            }
        return {
            "v3_and_below_transactional_id": request.v3_and_below_transactional_id,
            "v3_and_below_producer_id": request.v3_and_below_producer_id,
            "v3_and_below_producer_epoch": request.v3_and_below_producer_epoch,
            "v3_and_below_topics": topic_partitions(request.v3_and_below_topics),
        }
    if isinstance(request, AddOffsetsToTxnRequest):
        return {
            "transactional_id": request.transactional_id,
            "producer_id": request.producer_id,
            "producer_epoch": request.producer_epoch,
            "group_id": request.group_id,
        }
    if isinstance(request, EndTxnRequest):
        return {
            "transactional_id": request.transactional_id,
            "producer_id": request.producer_id,
            "producer_epoch": request.producer_epoch,
            "committed": request.committed,
        }
    if isinstance(request, OffsetFetchRequest):
        fields = {
            "group_id": request.group_id,
            "topics": None
            if request.topics is None
            else [{"name": name, "partition_indexes": parts} for name, parts in request.topics],
        }
        if v >= 7:
            fields["require_stable"] = request.require_stable
        return fields
    if isinstance(request, TxnOffsetCommitRequest):
        return {
            "transactional_id": request.transactional_id,
            "group_id": request.group_id,
            "producer_id": request.producer_id,
            "producer_epoch": request.producer_epoch,
            "generation_id": request.generation_id,
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "committed_offset": p.committed_offset,
                            "committed_leader_epoch": p.committed_leader_epoch,
                            "committed_metadata": p.committed_metadata,
                        }
                        for p in parts
                    ],
                }
                for name, parts in request.topics
            ],
        }
    raise AssertionError(type(request))


def response_fields(response: Response, v: int) -> dict[str, Any]:
    # Tagged fields are only passed when set: kafka-python writes exactly the tags it is given.
    if isinstance(response, ApiVersionsResponse):
        fields: dict[str, Any] = {
            "error_code": response.error_code,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in response.api_keys.items()
            ],
            "throttle_time_ms": response.throttle_time_ms,
        }
        if response.supported_features:
            fields["supported_features"] = [
                {"name": n, "min_version": lo, "max_version": hi}
                for n, (lo, hi) in response.supported_features.items()
            ]
        if response.finalized_features_epoch != -1:
            fields["finalized_features_epoch"] = response.finalized_features_epoch
        if response.finalized_features:
            fields["finalized_features"] = [
                {"name": n, "min_version_level": lo, "max_version_level": hi}
                for n, (lo, hi) in response.finalized_features.items()
            ]
        if response.zk_migration_ready:
            fields["zk_migration_ready"] = True
        return fields
    if isinstance(response, MetadataResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "brokers": [broker_dict(b) for b in response.brokers],
            "cluster_id": response.cluster_id,
            "controller_id": response.controller_id,
            "topics": [
                {
                    "error_code": t.error_code,
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "is_internal": t.is_internal,
                    "partitions": [
                        {
                            "error_code": p.error_code,
                            "partition_index": p.partition,
                            "leader_id": p.leader_id,
                            "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas,
                            "isr_nodes": p.isr,
                            "offline_replicas": p.offline_replicas,
                        }
                        for p in t.partitions
                    ],
                    "authorized_operations": bitfield(t.authorized_operations),
                }
                for t in response.topics
            ],
            "authorized_operations": bitfield(response.cluster_authorized_operations),
        }
    if isinstance(response, ProduceResponse):
        topics = []
        for topic in response.topics:
            partitions = []
            for p in topic.partitions:
                part: dict[str, Any] = {
                    "index": p.index,
                    "error_code": p.error_code,
                    "base_offset": p.base_offset,
                    "log_append_time_ms": p.log_append_time_ms,
                    "log_start_offset": p.log_start_offset,
                    "record_errors": [
                        {"batch_index": i, "batch_index_error_message": m}
                        for i, m in p.record_errors
                    ],
                    "error_message": p.error_message,
                }
                if p.current_leader is not None and v >= 10:
                    leader_id, epoch = p.current_leader
                    part["current_leader"] = {"leader_id": leader_id, "leader_epoch": epoch}
                partitions.append(part)
            topics.append({"name": topic.name, "partition_responses": partitions})
        fields = {"responses": topics, "throttle_time_ms": response.throttle_time_ms}
        if response.node_endpoints and v >= 10:
            fields["node_endpoints"] = [broker_dict(b) for b in response.node_endpoints]
        return fields
    if isinstance(response, InitProducerIdResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "error_code": response.error_code,
            "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch,
        }
    if isinstance(response, SaslHandshakeResponse):
        return {"error_code": response.error_code, "mechanisms": response.mechanisms}
    if isinstance(response, SaslAuthenticateResponse):
        return {
            "error_code": response.error_code,
            "error_message": response.error_message,
            "auth_bytes": response.auth_bytes,
            "session_lifetime_ms": response.session_lifetime_ms,
        }
    if isinstance(response, CreateTopicsResponse):
        results = []
        for t in response.topics:
            result: dict[str, Any] = {
                "name": t.name,
                "topic_id": t.topic_id,
                "error_code": t.error_code,
                "error_message": t.error_message,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "configs": None
                if t.configs is None
                else [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "config_source": c.config_source,
                        "is_sensitive": c.is_sensitive,
                    }
                    for c in t.configs
                ],
            }
            if t.topic_config_error_code and v >= 5:
                result["topic_config_error_code"] = t.topic_config_error_code
            results.append(result)
        return {"throttle_time_ms": response.throttle_time_ms, "topics": results}
    if isinstance(response, FetchResponse):
        topics = []
        for topic in response.responses:
            partitions = []
            for fp in topic.partitions:
                part = {
                    "partition_index": fp.partition_index,
                    "error_code": fp.error_code,
                    "high_watermark": fp.high_watermark,
                    "last_stable_offset": fp.last_stable_offset,
                    "log_start_offset": fp.log_start_offset,
                    "aborted_transactions": None
                    if fp.aborted_transactions is None
                    else [
                        {"producer_id": pid, "first_offset": first}
                        for pid, first in fp.aborted_transactions
                    ],
                    "preferred_read_replica": fp.preferred_read_replica,
                    "records": fp.records,
                }
                if fp.diverging_epoch is not None:
                    epoch, end_offset = fp.diverging_epoch
                    part["diverging_epoch"] = {"epoch": epoch, "end_offset": end_offset}
                if fp.current_leader is not None:
                    leader_id, leader_epoch = fp.current_leader
                    part["current_leader"] = {"leader_id": leader_id, "leader_epoch": leader_epoch}
                if fp.snapshot_id is not None:
                    end_offset, epoch = fp.snapshot_id
                    part["snapshot_id"] = {"end_offset": end_offset, "epoch": epoch}
                partitions.append(part)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "error_code": response.error_code,
            "session_id": response.session_id,
            "responses": topics,
        }
    if isinstance(response, ListOffsetsResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": p.error_code,
                            "timestamp": p.timestamp,
                            "offset": p.offset,
                            "leader_epoch": p.leader_epoch,
                        }
                        for p in t.partitions
                    ],
                }
                for t in response.topics
            ],
        }
    if isinstance(response, FindCoordinatorResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "error_code": response.error_code,
            "error_message": response.error_message,
            "node_id": response.node_id,
            "host": response.host,
            "port": response.port,
            "coordinators": [
                {
                    "key": c.key,
                    "node_id": c.node_id,
                    "host": c.host,
                    "port": c.port,
                    "error_code": c.error_code,
                    "error_message": c.error_message,
                }
                for c in response.coordinators
            ],
        }
    if isinstance(response, AddPartitionsToTxnResponse):
        by_partition = ("results_by_partition", "partition_error_code")
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "error_code": response.error_code,
            "results_by_transaction": [
                {
                    "transactional_id": r.transactional_id,
                    "topic_results": topic_errors(r.topic_results, *by_partition),
                }
                for r in response.results_by_transaction
            ],
            "results_by_topic_v3_and_below": topic_errors(
                response.results_by_topic_v3_and_below, *by_partition
            ),
        }
    if isinstance(response, AddOffsetsToTxnResponse):
        return {"throttle_time_ms": response.throttle_time_ms, "error_code": response.error_code}
    if isinstance(response, EndTxnResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "error_code": response.error_code,
            "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch,
        }
    if isinstance(response, OffsetFetchResponse):
        fields = {
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "committed_offset": p.committed_offset,
                            "committed_leader_epoch": p.committed_leader_epoch,
                            "metadata": p.metadata,
                            "error_code": p.error_code,
                        }
                        for p in parts
                    ],
                }
                for name, parts in response.offsets
            ],
        }
        if v >= 3:
            fields["throttle_time_ms"] = response.throttle_time_ms
        if v >= 2:
            fields["error_code"] = response.error_code
        return fields
    if isinstance(response, TxnOffsetCommitResponse):
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "topics": topic_errors(response.topics, "partitions", "error_code"),
        }
    raise AssertionError(type(response))


CASES = all_versions()
IDS = [f"{cls.__name__[: -len('Request')]}-v{v}" for cls, v, _, _ in CASES]
ORACLE_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@ORACLE_SETTINGS
@given(data=st.data())
def test_requests_match_kafka_python(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
) -> None:
    request = data.draw(requests(version))
    client_id = data.draw(st.none() | st.text(max_size=8))
    ours = encode_request(request, version, 12345, client_id)

    k_request_cls = K_CLASSES[cls][0]
    theirs = build(k_request_cls, version, request_fields(request, version))
    theirs.with_header(correlation_id=12345, client_id=client_id)
    assert theirs.encode(header=True, framed=True) == ours

    decoded = k_request_cls.decode(ours, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 12345
    assert decoded.header.client_id == client_id
    assert decoded.header.request_api_key == cls.API_KEY
    assert decoded == theirs


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@ORACLE_SETTINGS
@given(data=st.data())
def test_kafka_python_responses_decode(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
) -> None:
    response = data.draw(responses(version))
    k_response_cls = K_CLASSES[cls][1]
    theirs = build(k_response_cls, version, response_fields(response, version))
    theirs.with_header(correlation_id=777)
    frame = theirs.encode(header=True, framed=True)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_response(cls, version, frame[4:]) == (777, response)


def test_kafka_python_api_versions_header_is_v0_too() -> None:
    theirs = build(
        k_metadata.ApiVersionsResponse,
        3,
        {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 12}]},
    )
    theirs.with_header(correlation_id=5)
    frame = theirs.encode(header=True, framed=True)
    assert frame[4:10].hex() == "000000050000"  # no header tag byte before the error code
    _, ours = decode_response(ApiVersionsRequest, 3, frame[4:])
    assert ours == ApiVersionsResponse(0, {0: (3, 12)}, 0)
