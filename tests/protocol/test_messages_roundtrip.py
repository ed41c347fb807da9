"""Every message in every implemented version: encode -> decode gives back the original."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_strategies import StrategyFor, all_versions

from aioproducer.errors import ProtocolError, UnsupportedVersionError
from aioproducer.protocol.framing import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from aioproducer.protocol.messages import Request

CASES = all_versions()
IDS = [f"{cls.__name__[: -len('Request')]}-v{v}" for cls, v, _, _ in CASES]


def test_every_version_is_covered() -> None:
    # ApiVersions, Metadata, Produce, InitProducerId, SaslHandshake, SaslAuthenticate,
    # CreateTopics, Fetch (4-12), ListOffsets (1-11), FindCoordinator (0-6),
    # AddPartitionsToTxn (0-5), AddOffsetsToTxn (0-4), EndTxn (0-5), TxnOffsetCommit (0-5),
    # OffsetFetch (1-7).
    assert len(CASES) == 5 + 13 + 10 + 6 + 2 + 3 + 6 + 9 + 11 + 7 + 6 + 5 + 6 + 6 + 7


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_request_roundtrip(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
    correlation_id: int,
) -> None:
    request = data.draw(requests(version))
    client_id = data.draw(st.none() | st.text(max_size=10))
    frame = encode_request(request, version, correlation_id, client_id)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, decoded = decode_request(frame[4:])
    assert header == RequestHeader(cls.API_KEY, version, correlation_id, client_id)
    assert type(decoded) is cls
    assert decoded == request
    assert encode_request(decoded, version, correlation_id, client_id) == frame


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_roundtrip(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
    correlation_id: int,
) -> None:
    response = data.draw(responses(version))
    frame = encode_response(response, version, correlation_id)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    got_id, decoded = decode_response(cls, version, frame[4:])
    assert got_id == correlation_id
    assert type(decoded) is cls.RESPONSE
    assert decoded == response
    assert encode_response(decoded, version, correlation_id) == frame
    # Every way of naming the API gives the same result.
    assert decode_response(cls.API_KEY, version, frame[4:]) == (correlation_id, response)
    assert decode_response(cls.RESPONSE, version, memoryview(frame)[4:]) == (
        correlation_id,
        response,
    )


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_truncated_frames_raise_protocol_error(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
) -> None:
    response = data.draw(responses(version))
    payload = encode_response(response, version, 1)[4:]
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(ProtocolError):
        decode_response(cls, version, payload[:cut])
    request = data.draw(requests(version))
    payload = encode_request(request, version, 1, "c")[4:]
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(ProtocolError):
        decode_request(payload[:cut])


@pytest.mark.parametrize(("cls", "version", "requests", "responses"), CASES, ids=IDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_corrupted_frames_only_raise_defined_errors(
    cls: type[Request[Any]],
    version: int,
    requests: StrategyFor,
    responses: StrategyFor,
    data: st.DataObject,
) -> None:
    def corrupt(payload: bytes) -> bytes:
        mutated = bytearray(payload)
        for _ in range(data.draw(st.integers(1, 4))):
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
        return bytes(mutated)

    payload = corrupt(encode_response(data.draw(responses(version)), version, 1)[4:])
    with contextlib.suppress(ProtocolError):
        decode_response(cls, version, payload)
    payload = corrupt(encode_request(data.draw(requests(version)), version, 1, "c")[4:])
    with contextlib.suppress(ProtocolError, UnsupportedVersionError):
        decode_request(payload)
