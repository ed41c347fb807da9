"""Hostile bytes against every decoder: responses (what a broker sends us), requests (what
the in-process broker reads) and record batches.

A decoder given any bytes either returns a value or raises ProtocolError (CorruptRecordError
for record batches, a subclass); never IndexError, struct.error, UnicodeDecodeError,
MemoryError or a long loop. Lengths an attacker controls must be checked against the bytes
that are really there before anything is allocated.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import all_versions

from aioproducer.errors import CorruptRecordError, ProtocolError, UnsupportedVersionError
from aioproducer.protocol import framing
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.messages import ApiVersionsRequest
from aioproducer.protocol.primitives import Reader, Writer
from aioproducer.protocol.records import RecordBatchBuilder, decode_batches

VERSIONS = all_versions()
FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_BIG_INT32 = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0x40000000, 0x00FFFFFF]
# A uvarint of 2**32 - 1 (a compact length of about 4 GiB) and one that is too long.
_BIG_UVARINTS = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x08"]


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` truncated, overwritten, extended or with a forged length inside."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "int32", "uvarint", "tail"]))
        at = draw(st.integers(0, max(0, len(data))))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and data:
            i = min(at, len(data) - 1)
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "int32":
            data[at : at + 4] = struct.pack(">I", draw(st.sampled_from(_BIG_INT32)))
        elif kind == "uvarint":
            data[at : at + 1] = draw(st.sampled_from(_BIG_UVARINTS))
        else:
            data += draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


def _decodes_or_protocol_error(
    decode: Callable[[], Any], allowed: tuple[type[Exception], ...] = (ProtocolError,)
) -> None:
    with contextlib.suppress(*allowed):
        decode()


def _response_payload(cls: Any, version: int, response: Any, correlation_id: int = 7) -> bytes:
    # Frames are decoded without their 4-byte size prefix.
    return framing.encode_response(response, version, correlation_id)[4:]


def _request_payload(cls: Any, version: int, request: Any) -> bytes:
    return framing.encode_request(request, version, 7, "fuzz")[4:]


@FUZZ
@given(data=st.data())
def test_every_response_decoder_survives_mutated_frames(data: st.DataObject) -> None:
    cls, version, _req, resp = data.draw(st.sampled_from(VERSIONS), label="api")
    valid = _response_payload(cls, version, data.draw(resp(version)))
    # The unmutated frame decodes: the mutations below start from real structure.
    framing.decode_response(cls, version, valid)
    frame = data.draw(mutated(valid), label="frame")
    _decodes_or_protocol_error(lambda: framing.decode_response(cls, version, frame))


@FUZZ
@given(data=st.data())
def test_every_response_decoder_survives_garbage(data: st.DataObject) -> None:
    cls, version, _req, _resp = data.draw(st.sampled_from(VERSIONS), label="api")
    frame = data.draw(st.binary(max_size=256), label="frame")
    _decodes_or_protocol_error(lambda: framing.decode_response(cls, version, frame))


@FUZZ
@given(data=st.data())
def test_every_request_decoder_survives_mutated_and_garbage_frames(data: st.DataObject) -> None:
    cls, version, req, _resp = data.draw(st.sampled_from(VERSIONS), label="api")
    if data.draw(st.booleans(), label="garbage"):
        frame = data.draw(st.binary(max_size=256), label="frame")
    else:
        valid = _request_payload(cls, version, data.draw(req(version)))
        framing.decode_request(valid)
        frame = data.draw(mutated(valid), label="frame")
    # UnsupportedVersionError is the typed answer to an API key or version without a codec.
    typed = (ProtocolError, UnsupportedVersionError)
    _decodes_or_protocol_error(lambda: framing.decode_request(frame), typed)
    _decodes_or_protocol_error(lambda: framing.peek_request_header(frame))


def _batch(codec: Codec, records: list[tuple[bytes | None, bytes | None, int]]) -> bytes:
    builder = RecordBatchBuilder(codec)
    for key, value, headers in records:
        builder.append(1_700_000_000_000, key, value, [(f"h{i}", b"v") for i in range(headers)])
    return builder.build(1234, 0, 5)


_RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=8,
)


@FUZZ
@given(
    codec=st.sampled_from(list(Codec)),
    records=_RECORDS,
    verify_crc=st.booleans(),
    data=st.data(),
)
def test_record_batch_reader_survives_mutated_batches(
    codec: Codec, records: list[Any], verify_crc: bool, data: st.DataObject
) -> None:
    valid = _batch(codec, records) + _batch(Codec.NONE, records[:1])
    assert len(decode_batches(valid)) == 2
    frame = data.draw(mutated(valid), label="batches")
    partial = data.draw(st.booleans(), label="allow_partial")

    def decode() -> None:
        decode_batches(
            frame, verify_crc=verify_crc, allow_partial=partial, max_decompressed_size=1 << 20
        )

    with contextlib.suppress(CorruptRecordError):
        decode()


@FUZZ
@given(
    chunks=st.lists(st.binary(max_size=40), max_size=12),
    max_frame=st.sampled_from([0, 16, 1024, framing.DEFAULT_MAX_FRAME_SIZE]),
)
def test_frame_reader_survives_garbage_and_stays_broken(
    chunks: list[bytes], max_frame: int
) -> None:
    reader = framing.FrameReader(max_frame_size=max_frame)
    broken = False
    for chunk in chunks:
        try:
            frames = reader.feed(chunk)
        except ProtocolError:
            broken = True
            continue
        assert not broken, "a reader that failed once accepted more bytes"
        assert all(len(f) <= max_frame for f in frames)
        # Never more buffered than one frame still being assembled plus its prefix.
        assert reader.buffered <= max_frame + 4 + len(chunk)


@FUZZ
@given(
    payloads=st.lists(st.binary(max_size=64), max_size=8),
    cuts=st.lists(st.integers(0, 600), max_size=10),
)
def test_frame_reader_yields_the_same_frames_however_bytes_are_split(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    reader = framing.FrameReader()
    got: list[bytes] = []
    for a, b in itertools.pairwise(points):
        got += reader.feed(stream[a:b])
    assert got == payloads
    assert reader.buffered == 0


# -- lengths that claim gigabytes -----------------------------------------------------------


def _int32(v: int) -> bytes:
    return struct.pack(">i", v)


_GIB2 = 0x7FFFFFFF


def _claims() -> list[tuple[str, Callable[[], object]]]:
    """Decoders fed a length or count near 2 GiB with a handful of bytes behind it."""
    tail = b"\x00" * 32
    metadata_v1 = _int32(7) + _int32(_GIB2) + tail  # correlation id, brokers array count
    metadata_v12 = _int32(7) + b"\x00" + _int32(0) + b"\xff\xff\xff\xff\x0f" + tail
    produce_v3 = _int32(7) + _int32(_GIB2) + tail
    api_versions_v0 = _int32(7) + b"\x00\x00" + _int32(_GIB2) + tail
    batch = bytearray(_batch(Codec.NONE, [(b"k", b"v", 1)]))
    huge_count = bytes(batch[:57]) + _int32(_GIB2) + bytes(batch[61:])
    huge_length = bytes(batch[:8]) + _int32(_GIB2) + bytes(batch[12:])
    request = _int32(0)[:2] + b"\x00\x03" + _int32(1) + b"\x7f\xff" + tail
    huge_uvarint = b"\xff\xff\xff\xff\x0f"
    find_coordinator_v4 = _int32(7) + b"\x00" + _int32(0) + huge_uvarint + tail
    add_partitions_v0 = _int32(7) + _int32(0) + _int32(_GIB2) + tail
    txn_id_and_producer = b"\x00\x02tx" + bytes(10)  # producer id and epoch
    add_partitions_request = (
        b"\x00\x18\x00\x00" + _int32(1) + b"\x00\x01c"  # header v1
        + txn_id_and_producer + _int32(1) + b"\x00\x01t" + _int32(_GIB2) + tail
    )  # fmt: skip
    txn_offset_commit_request = (
        b"\x00\x1c\x00\x00" + _int32(1) + b"\x00\x01c"
        + b"\x00\x02tx\x00\x01g" + bytes(10) + _int32(_GIB2) + tail
    )  # fmt: skip
    from aioproducer.protocol.messages import (
        AddPartitionsToTxnRequest,
        FindCoordinatorRequest,
        MetadataRequest,
        ProduceRequest,
    )

    return [
        ("metadata v1 brokers", lambda: framing.decode_response(MetadataRequest, 1, metadata_v1)),
        (
            "metadata v12 compact",
            lambda: framing.decode_response(MetadataRequest, 12, metadata_v12),
        ),
        ("produce v3 topics", lambda: framing.decode_response(ProduceRequest, 3, produce_v3)),
        (
            "api versions v0",
            lambda: framing.decode_response(ApiVersionsRequest, 0, api_versions_v0),
        ),
        ("batch record count", lambda: decode_batches(huge_count, verify_crc=False)),
        ("batch length", lambda: decode_batches(huge_length, verify_crc=False)),
        ("request client id", lambda: framing.decode_request(request)),
        (
            "find coordinator v4 coordinators",
            lambda: framing.decode_response(FindCoordinatorRequest, 4, find_coordinator_v4),
        ),
        (
            "add partitions to txn v0 results",
            lambda: framing.decode_response(AddPartitionsToTxnRequest, 0, add_partitions_v0),
        ),
        (
            "add partitions to txn v0 request partitions",
            lambda: framing.decode_request(add_partitions_request),
        ),
        (
            "txn offset commit v0 request topics",
            lambda: framing.decode_request(txn_offset_commit_request),
        ),
        ("reader bytes", lambda: Reader(_int32(_GIB2) + tail).bytes_()),
        ("reader string", lambda: Reader(b"\x7f\xff" + tail).string()),
        ("reader compact bytes", lambda: Reader(b"\xff\xff\xff\xff\x0f" + tail).compact_bytes()),
        ("reader array", lambda: Reader(_int32(_GIB2) + tail).array(lambda: 0)),
        ("reader int32 array", lambda: Reader(_int32(_GIB2) + tail).int32_array()),
        ("reader tagged fields", lambda: Reader(b"\xff\xff\xff\xff\x0f" + tail).tagged_fields()),
        ("frame size", lambda: framing.FrameReader().feed(_int32(_GIB2) + tail)),
    ]


@pytest.mark.parametrize("name,decode", _claims(), ids=[name for name, _ in _claims()])
def test_a_2_gib_claim_is_rejected_fast_without_allocating(
    name: str, decode: Callable[[], object]
) -> None:
    tracemalloc.start()
    try:
        started = time.perf_counter()
        with pytest.raises(ProtocolError):
            decode()
        took = time.perf_counter() - started
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{name}: {peak} bytes allocated for a forged length"
    assert took < 0.5, f"{name}: {took:.3f} s to reject a forged length"


def test_writer_round_trip_sanity_for_the_forged_frames() -> None:
    # The forged frames above are only meaningful if the honest ones decode: an empty
    # Metadata v1 response is correlation id, brokers [], controller id, topics [].
    w = Writer()
    w.int32(7)
    w.array_length(0)
    w.int32(-1)
    w.array_length(0)
    from aioproducer.protocol.messages import MetadataRequest

    cid, response = framing.decode_response(MetadataRequest, 1, w.getvalue())
    assert cid == 7 and response.brokers == [] and response.topics == []


@pytest.mark.parametrize("codec", [c for c in Codec if c is not Codec.NONE], ids=lambda c: c.name)
def test_a_decompression_bomb_is_rejected_within_the_bound(codec: Codec) -> None:
    # 16 MiB of zeros compress to a few KiB; the reader may inflate at most 1 MiB of it.
    builder = RecordBatchBuilder(codec)
    builder.append(0, None, bytes(16 << 20))
    bomb = builder.build()
    del builder
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            decode_batches(bomb, max_decompressed_size=1 << 20)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Growing buffers may briefly hold two copies of the bound, never the 16 MiB.
    assert peak < 4 << 20, f"{codec.name}: {peak} bytes allocated to reject a bomb"
