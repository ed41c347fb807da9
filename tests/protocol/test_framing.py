"""Frames, headers, FrameReader and correlation ids."""

from __future__ import annotations

import random
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioproducer.errors import ProtocolError, UnsupportedVersionError
from aioproducer.protocol.framing import (
    CorrelationIds,
    FrameReader,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
    peek_request_header,
)
from aioproducer.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    SaslHandshakeRequest,
)
from aioproducer.protocol.versions import ApiKey


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- request headers ----------------------------------------------------------------------------


def test_request_header_v1() -> None:
    data = encode_request(SaslHandshakeRequest("PLAIN"), 1, 0x01020304, "cli")
    assert data.hex() == (
        "00000014"  # size 20
        "0011"  # api key 17
        "0001"  # version 1
        "01020304"  # correlation id
        "0003636c69"  # client id "cli"
        "0005504c41494e"  # mechanism "PLAIN"
    )


def test_request_header_v2_keeps_int16_client_id_and_adds_tags() -> None:
    data = encode_request(InitProducerIdRequest(None, 1000), 2, 5, "ab")
    assert data.hex() == (
        "00000013"  # size 19
        "0016"  # api key 22
        "0002"  # version 2 (flexible: header v2)
        "00000005"
        "00026162"  # client id stays int16-length
        "00"  # header tagged fields
        "00"  # compact null transactional id
        "000003e8"  # timeout 1000
        "00"  # body tagged fields
    )


def test_null_client_id() -> None:
    data = encode_request(SaslHandshakeRequest("X"), 0, 1, None)
    assert data[4:].hex() == "0011000000000001ffff000158"


def test_encode_request_rejects_unimplemented_versions() -> None:
    with pytest.raises(UnsupportedVersionError, match="PRODUCE version 13"):
        encode_request(ProduceRequest(1, 1000, []), 13, 1, None)
    with pytest.raises(UnsupportedVersionError, match="PRODUCE version 2"):
        encode_request(ProduceRequest(1, 1000, []), 2, 1, None)


def test_decode_request_and_peek_header() -> None:
    request = MetadataRequest(["a"], True)
    data = encode_request(request, 9, 77, "me")
    header, decoded = decode_request(data[4:])
    assert header == RequestHeader(3, 9, 77, "me")
    assert decoded == request
    assert peek_request_header(data[4:]) == header


def test_decode_request_unknown_api() -> None:
    payload = struct.pack(">hhih", 55, 0, 9, -1)
    assert peek_request_header(payload) == RequestHeader(55, 0, 9, None)
    with pytest.raises(UnsupportedVersionError, match="55"):
        decode_request(payload)


# -- response headers ---------------------------------------------------------------------------


def test_response_header_v0_for_non_flexible() -> None:
    body = "00000000000000000000000000070003"  # throttle, error, pid 7, epoch 3
    corr, response = decode_response(ApiKey.INIT_PRODUCER_ID, 1, bytes.fromhex("0000002a" + body))
    assert corr == 42
    assert response == InitProducerIdResponse(0, 0, 7, 3)


def test_response_header_v1_for_flexible() -> None:
    body = "0000000000000000000000000007000300"
    payload = bytes.fromhex("0000002a00" + body)
    corr, response = decode_response(InitProducerIdRequest, 2, payload)
    assert (corr, response) == (42, InitProducerIdResponse(0, 0, 7, 3))
    # The header's tagged fields may carry unknown tags.
    payload = bytes.fromhex("0000002a010502abcd" + body)
    assert decode_response(InitProducerIdResponse, 2, payload) == (42, response)


def test_api_versions_response_header_is_always_v0() -> None:
    response = ApiVersionsResponse(0, {18: (0, 4)}, 0)
    data = encode_response(response, 3, 7)
    # correlation id directly followed by the error code: no header tagged-field byte.
    assert data.hex() == "0000001300000007000002001200000004000000000000"
    assert decode_response(ApiVersionsRequest, 3, data[4:]) == (7, response)


def test_decode_response_trailing_bytes_rejected() -> None:
    payload = bytes.fromhex("0000000100000000000000000000000000070003ff")
    with pytest.raises(ProtocolError, match="trailing"):
        decode_response(ApiKey.INIT_PRODUCER_ID, 1, payload)


def test_decode_response_truncated() -> None:
    payload = bytes.fromhex("0000000100000000000000000000")
    with pytest.raises(ProtocolError):
        decode_response(ApiKey.INIT_PRODUCER_ID, 1, payload)
    with pytest.raises(ProtocolError):
        decode_response(ApiKey.INIT_PRODUCER_ID, 1, b"\x00\x01")


def test_decode_response_unknown_or_unimplemented() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_response(ApiKey.FETCH, 13, b"\x00\x00\x00\x01")  # topic ids: no codec
    with pytest.raises(UnsupportedVersionError):
        decode_response(99, 0, b"\x00\x00\x00\x01")
    with pytest.raises(UnsupportedVersionError):
        decode_response(MetadataResponse, 13, b"\x00\x00\x00\x01")


def test_peek_correlation_id() -> None:
    assert peek_correlation_id(b"\x7f\xff\xff\xff\x00") == 2**31 - 1
    assert peek_correlation_id(memoryview(b"\xff\xff\xff\xfe")) == -2
    with pytest.raises(ProtocolError):
        peek_correlation_id(b"\x00\x00\x00")


def test_expects_response() -> None:
    assert not ProduceRequest(0, 1000, []).expects_response()
    assert ProduceRequest(-1, 1000, []).expects_response()
    assert MetadataRequest(None).expects_response()


# -- FrameReader ---------------------------------------------------------------------------------


@given(
    st.lists(st.binary(max_size=300), max_size=20),
    st.randoms(use_true_random=False),
)
def test_frame_reader_random_chunking(payloads: list[bytes], rnd: random.Random) -> None:
    stream = b"".join(frame(p) for p in payloads)
    reader = FrameReader()
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rnd.randint(1, 50)
        got.extend(reader.feed(stream[pos : pos + step]))
        pos += step
    assert got == payloads
    assert reader.buffered == 0


def test_frame_reader_keeps_partial_data() -> None:
    reader = FrameReader()
    assert reader.feed(b"\x00\x00") == []
    assert reader.feed(b"\x00\x03ab") == []
    assert reader.buffered == 2
    assert reader.feed(b"c\x00\x00\x00\x00\x00\x00") == [b"abc", b""]
    assert reader.buffered == 2
    assert reader.feed(memoryview(b"\x00\x01z")) == [b"z"]


def test_frame_reader_rejects_negative_size() -> None:
    reader = FrameReader()
    with pytest.raises(ProtocolError, match="-1"):
        reader.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        reader.feed(b"\x00\x00\x00\x00")  # stays broken


def test_frame_reader_rejects_oversize_frame() -> None:
    reader = FrameReader(max_frame_size=10)
    assert reader.feed(frame(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(ProtocolError, match="11"):
        reader.feed(b"\x00\x00\x00\x0b")
    # e.g. an HTTP or TLS server answering: "HTTP" is 1213486160 as an int32
    with pytest.raises(ProtocolError):
        FrameReader().feed(b"HTTP/1.1 400 Bad Request\r\n")


def test_frame_reader_default_max_is_100_mib() -> None:
    reader = FrameReader()
    assert reader.feed(struct.pack(">i", 100 * 1024 * 1024)) == []
    with pytest.raises(ProtocolError):
        FrameReader().feed(struct.pack(">i", 100 * 1024 * 1024 + 1))


def test_frame_reader_many_small_feeds_is_linear() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    data = frame(payload) * 4
    reader = FrameReader()
    got: list[bytes] = []
    start = time.perf_counter()
    for i in range(0, len(data), 64):
        got.extend(reader.feed(data[i : i + 64]))
    elapsed = time.perf_counter() - start
    assert got == [payload] * 4
    assert elapsed < 5.0


# -- correlation ids ------------------------------------------------------------------------------


def test_correlation_ids_count_and_wrap() -> None:
    ids = CorrelationIds()
    assert [ids.next() for _ in range(3)] == [0, 1, 2]
    ids = CorrelationIds(2**31 - 2)
    assert [next(ids) for _ in range(3)] == [2**31 - 2, 2**31 - 1, 0]
    with pytest.raises(ValueError):
        CorrelationIds(-1)
