"""The fake cluster's storage: topics, partitions and the record batches written to them.

Package-internal: :class:`Log`, :class:`Topic`, :class:`Partition` and
:func:`producer_fields` are its interface, for :mod:`aioproducer.testing.fake` and its
other internal modules.

A partition keeps each batch as sent, with the base offset and partition leader epoch
filled in, and the idempotent-producer state a real broker keeps. Appending checks the
batch and the producer id, epoch and sequence as Kafka does and answers with the
``ProducePartitionResponse``; reading answers Fetch and ListOffsets for one partition.
No asyncio, no sockets and no lock: the cluster holds its lock around every call.
"""

from __future__ import annotations

import bisect
import collections
import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from crc32c import crc32c

from ..protocol.error_codes import ErrorCode
from ..protocol.messages import (
    FetchPartition,
    FetchPartitionResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ProducePartitionResponse,
)
from ..protocol.records import decode_batches

__all__ = ["Log", "Partition", "Topic", "producer_fields"]

# Record batch header layout (message format v2).
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_HEADER_SIZE = 61
_CRC_START = 21
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_TIMESTAMP_TYPE_FLAG = 0x08
_INT32_MAX = (1 << 31) - 1
_DEFAULT_MAX_MESSAGE_BYTES = 1048588
# A real broker remembers the last five batches of each producer for duplicate detection.
_PRODUCER_BATCH_CACHE = 5


@dataclass(slots=True)
class _StoredBatch:
    base_offset: int
    last_offset: int
    data: bytes
    max_timestamp: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    last_sequence: int
    # (first sequence, last sequence, base offset, log append time)
    recent: collections.deque[tuple[int, int, int, int]]


@dataclass(slots=True)
class Partition:
    """One partition: its leader, its batches in offset order and its producers' state."""

    index: int
    leader: int
    leader_epoch: int = 0
    batches: list[_StoredBatch] = field(default_factory=list)
    last_offsets: list[int] = field(default_factory=list)
    next_offset: int = 0
    producers: dict[int, _ProducerEntry] = field(default_factory=dict)

    def data(self) -> bytes:
        """Every stored batch, concatenated as a Fetch would return them."""
        return b"".join(b.data for b in self.batches)


@dataclass(slots=True)
class Topic:
    """One topic: its id, partitions and the configs the fake honours."""

    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]
    configs: dict[str, str]

    @property
    def log_append_time(self) -> bool:
        """Whether the broker stamps each batch with its own clock."""
        return self.configs.get("message.timestamp.type", "CreateTime") == "LogAppendTime"

    @property
    def max_message_bytes(self) -> int:
        """The largest batch the topic accepts."""
        return int(self.configs.get("max.message.bytes", _DEFAULT_MAX_MESSAGE_BYTES))


def producer_fields(data: bytes) -> tuple[int, int, int, int] | None:
    """(producer id, producer epoch, base sequence, record count) of a batch, if it has a header."""
    if len(data) < _BATCH_HEADER_SIZE:
        return None
    fields = _BATCH_HEADER.unpack_from(data)
    return fields[9], fields[10], fields[11], fields[12]


class Log:
    """Every topic of the cluster by name, spread over the brokers ``nodes``."""

    def __init__(self, nodes: Iterable[int]) -> None:
        self.nodes = list(nodes)
        self.topics: dict[str, Topic] = {}
        self._next_producer_id = 1000
        self._leader_cursor = 0

    def create(
        self,
        name: str,
        partitions: int,
        leaders: list[int] | None = None,
        config: dict[str, str] | None = None,
    ) -> Topic:
        """Add a topic; ``leaders`` gives each partition's leader (default: round-robin).

        Raises ``ValueError`` for no partitions or leaders that are not brokers; replaces a
        topic of the same name (callers check).
        """
        if partitions < 1:
            raise ValueError("a topic needs at least one partition")
        if leaders is None:
            nodes = self.nodes
            leaders = []
            for _ in range(partitions):
                leaders.append(nodes[self._leader_cursor % len(nodes)])
                self._leader_cursor += 1
        if len(leaders) != partitions or any(n not in self.nodes for n in leaders):
            raise ValueError(f"leaders must name {partitions} brokers out of {self.nodes}")
        topic = Topic(
            name,
            uuid.uuid4(),
            [Partition(i, leader) for i, leader in enumerate(leaders)],
            dict(config or {}),
        )
        self.topics[name] = topic
        return topic

    def partition(self, topic: str, partition: int) -> Partition:
        """A partition; raises ``KeyError`` if the topic or the partition does not exist."""
        try:
            return self.topics[topic].partitions[partition]
        except (KeyError, IndexError):
            raise KeyError(f"no partition {topic}-{partition}") from None

    def _led_by(self, node: int, topic_name: str, index: int) -> Partition | int:
        """The partition if ``node`` leads it, else the error code to answer."""
        topic = self.topics.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        p = topic.partitions[index]
        if p.leader != node:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return p

    def new_producer_id(self) -> int:
        """A producer id never handed out before."""
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    def append(
        self, node: int, topic_name: str, index: int, data: bytes
    ) -> ProducePartitionResponse:
        """Write one partition's data of a produce request sent to ``node``; the answer.

        The data must be exactly one intact v2 batch; an idempotent producer's batch must
        carry its current epoch and the next sequence, and a retry of one of its last five
        batches is answered as the first time without being written again.
        """
        p = self._led_by(node, topic_name, index)
        if isinstance(p, int):
            return ProducePartitionResponse(index, p)
        topic = self.topics[topic_name]
        if len(data) > topic.max_message_bytes:
            return ProducePartitionResponse(index, ErrorCode.MESSAGE_TOO_LARGE)
        if len(data) < _BATCH_HEADER_SIZE:
            return ProducePartitionResponse(index, ErrorCode.CORRUPT_MESSAGE)
        (
            _base,
            batch_length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            _base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _BATCH_HEADER.unpack_from(data)
        # Exactly one v2 batch per partition, intact.
        if (
            magic != 2
            or batch_length + 12 != len(data)
            or crc32c(memoryview(data)[_CRC_START:]) != crc
            or count != last_delta + 1
            or count < 1
        ):
            return ProducePartitionResponse(index, ErrorCode.CORRUPT_MESSAGE)
        append_time = int(time.time() * 1000) if topic.log_append_time else -1
        entry: _ProducerEntry | None = None
        last_sequence = -1
        if producer_id >= 0:
            entry = p.producers.get(producer_id)
            last_sequence = (base_sequence + last_delta) % (_INT32_MAX + 1)
            if entry is not None and producer_epoch < entry.epoch:
                return ProducePartitionResponse(index, ErrorCode.INVALID_PRODUCER_EPOCH)
            if entry is not None and producer_epoch == entry.epoch:
                for first, last, offset, appended_at in entry.recent:
                    if first == base_sequence and last == last_sequence:
                        # A retry of a batch already written: answer as the first time.
                        return ProducePartitionResponse(index, 0, offset, appended_at, 0)
                expected = (entry.last_sequence + 1) % (_INT32_MAX + 1)
                if base_sequence != expected:
                    return ProducePartitionResponse(
                        index,
                        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        error_message=f"expected sequence {expected}, got {base_sequence}",
                    )
            elif base_sequence != 0:
                code = (
                    ErrorCode.UNKNOWN_PRODUCER_ID
                    if entry is None
                    else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                )
                return ProducePartitionResponse(
                    index,
                    code,
                    error_message=f"a new producer epoch must start at 0, got {base_sequence}",
                )
        base_offset = p.next_offset
        stored = bytearray(data)
        _INT64.pack_into(stored, 0, base_offset)
        _INT32.pack_into(stored, 12, p.leader_epoch)
        if append_time >= 0:
            _INT16.pack_into(stored, 21, attributes | _TIMESTAMP_TYPE_FLAG)
            _INT64.pack_into(stored, 35, append_time)
            _UINT32.pack_into(stored, 17, crc32c(memoryview(stored)[_CRC_START:]))
            max_ts = append_time
        p.batches.append(_StoredBatch(base_offset, base_offset + last_delta, bytes(stored), max_ts))
        p.last_offsets.append(base_offset + last_delta)
        p.next_offset = base_offset + count
        if producer_id >= 0:
            if entry is None or producer_epoch != entry.epoch:
                entry = _ProducerEntry(
                    producer_epoch, -1, collections.deque(maxlen=_PRODUCER_BATCH_CACHE)
                )
                p.producers[producer_id] = entry
            entry.last_sequence = last_sequence
            entry.recent.append((base_sequence, last_sequence, base_offset, append_time))
        return ProducePartitionResponse(index, 0, base_offset, append_time, 0)

    def fetch(
        self, node: int, topic: str, fp: FetchPartition, used: int, budget: int
    ) -> FetchPartitionResponse:
        """One partition's answer to a Fetch sent to ``node``.

        It holds the batches from ``fp.fetch_offset`` on, at most ``fp.partition_max_bytes``
        of them and at most ``budget`` for the whole response of which ``used`` is taken,
        except that the first batch always goes, so a big batch cannot stall a reader.
        """
        answer = FetchPartitionResponse(fp.partition, 0, -1, -1, -1)
        p = self._led_by(node, topic, fp.partition)
        if isinstance(p, int):
            answer.error_code = p
            return answer
        answer.high_watermark = answer.last_stable_offset = p.next_offset
        answer.log_start_offset = 0
        if not 0 <= fp.fetch_offset <= p.next_offset:
            answer.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
            return answer
        chunks: list[bytes] = []
        size = 0
        start = bisect.bisect_left(p.last_offsets, fp.fetch_offset)
        for batch in p.batches[start:]:
            n = len(batch.data)
            total = used + size
            if (size and size + n > fp.partition_max_bytes) or (total and total + n > budget):
                break
            chunks.append(batch.data)
            size += n
        answer.records = b"".join(chunks)
        return answer

    def list_offsets(
        self, node: int, topic: str, lp: ListOffsetsPartition
    ) -> ListOffsetsPartitionResponse:
        """One partition's answer to a ListOffsets sent to ``node``."""
        answer = ListOffsetsPartitionResponse(lp.partition_index)
        p = self._led_by(node, topic, lp.partition_index)
        if isinstance(p, int):
            answer.error_code = p
            return answer
        answer.leader_epoch = p.leader_epoch
        answer.offset, answer.timestamp = _offset_for(p, lp.timestamp)
        return answer


def _offset_for(p: Partition, timestamp: int) -> tuple[int, int]:
    if timestamp == -2:  # earliest
        return 0, -1
    if timestamp == -1:  # latest
        return p.next_offset, -1
    records = [r for b in decode_batches(p.data()) for r in b.records]
    if timestamp == -3:  # the record with the largest timestamp
        if not records:
            return -1, -1
        best = max(records, key=lambda r: (r.timestamp_ms, -r.offset))
        return best.offset, best.timestamp_ms
    for r in records:
        if r.timestamp_ms >= timestamp:
            return r.offset, r.timestamp_ms
    return -1, -1
