"""The Spark guide's snippets run as written, in the shared local Spark session.

Every code block of ``docs/spark.md`` is marked: a ``<!-- tested -->`` block is run here as
it is, as a ``__main__`` program in this process, so its
``SparkSession.builder.getOrCreate()`` joins the session of the ``spark`` fixture (one JVM
for all of them), with ``KAFKA_BOOTSTRAP`` set to the test broker, as the guide tells the
reader to set it. A ``<!-- not tested: why -->`` block is reported as skipped, with why.

What a snippet wrote is read back with confluent-kafka: the records of the topic past the
end offsets it had before the snippet ran must be exactly the rows the snippet writes (key,
value and headers, as a multiset), every location it printed
(``<value> delivered to <topic>[<partition>] at offset <n>``) must hold that value, and a
following ``<!-- output -->`` block must appear in what it printed.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_docs_examples import expect_lines

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import topic_end_offsets

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "spark.md"
TOPIC = "events"  # the topic every snippet of the page writes to

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!-- (tested|not tested: (.*?)) -->\n$")
_OUTPUT = re.compile(r"\n*<!-- output -->\n```text\n(.*?)\n```", re.DOTALL)
_HEADING = re.compile(r"^#+ (.*)$", re.MULTILINE)
_LOCATED = re.compile(r"^(\S+) delivered to (\S+)\[(\d+)\] at offset (\d+)$", re.MULTILINE)

Record = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")


def _blocks() -> list[tuple[str, str, str, str, str | None]]:
    """(id, language, code, expected output, why not run) of every code block but text."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = []
    seen: dict[str, int] = {}
    for fence in _FENCE.finditer(text):
        language, code = fence.group(1), fence.group(2)
        if language == "text":
            continue
        headings = _HEADING.findall(text, 0, fence.start())
        slug = _slug(headings[-1])
        seen[slug] = seen.get(slug, 0) + 1
        block_id = slug if seen[slug] == 1 else f"{slug}-{seen[slug]}"
        # The marker is the line right above the block (``$`` is the block's start).
        mark = _MARK.search(text, 0, fence.start())
        why = "unmarked" if mark is None else mark.group(2)
        output = _OUTPUT.match(text, fence.end())
        blocks.append((block_id, language, code, output.group(1) if output else "", why))
    return blocks


def _twice(rows: list[Record]) -> list[Record]:
    return rows + rows


# The rows each tested snippet writes to TOPIC, as (key, value, headers).
WRITTEN: dict[str, list[Record]] = {
    "writing-a-dataframe-to-kafka": [
        (b"ann", b'{"page": "home"}', (("source", b"web"),)),
        (b"bob", b'{"page": "cart"}', (("source", b"app"),)),
    ],
    "writing-a-dataframe-to-kafka-2": [(b"ann", b"paid", ()), (b"bob", b"refunded", ())],
    # write() and then foreachPartition(partition_writer()): the rows twice, committed.
    "one-transaction-per-task": _twice([(b"order-1", b"paid", ()), (b"order-2", b"shipped", ())]),
    "inside-your-own-spark-functions": [(b"ann", b"clicked", ()), (b"bob", b"scrolled", ())],
    "pandas-udf-a-column-s-offsets": [(b"ann", b"liked", ()), (b"bob", b"shared", ())],
    "mapinarrow": [(b"ann", b"saved", ()), (b"bob", b"deleted", ())],
    # rdd.mapPartitions and then a plain UDF: the rows twice, keyless.
    "rdd-mappartitions-and-plain-udfs": _twice([(None, b"opened", ()), (None, b"closed", ())]),
    "structured-streaming-row-by-row-kafkaforeachwriter": [
        (b"ann", b"joined", ()),
        (b"bob", b"left", ()),
    ],
}

# The snippets that write in transactions: their commit markers take offsets of their own.
TRANSACTIONAL = {"one-transaction-per-task"}

_BLOCKS = _blocks()


def test_every_code_block_of_the_spark_guide_is_run_or_says_why_not() -> None:
    unmarked = [block_id for block_id, *_, why in _BLOCKS if why == "unmarked"]
    assert not unmarked, f"docs/spark.md: mark these blocks tested or not: {unmarked}"
    tested = {block_id for block_id, *_, why in _BLOCKS if why is None}
    assert tested == set(WRITTEN), "the tested blocks and the rows expected of them differ"


def _ends(kafka: KafkaCluster) -> dict[int, int]:
    try:
        return topic_end_offsets(kafka.bootstrap_servers, TOPIC, timeout=10)
    except (KeyError, TimeoutError):  # not created yet: everything in it will be new
        return {}


def _read_since(
    kafka: KafkaCluster, since: dict[int, int], expected: int, timeout: float = 30.0
) -> list[tuple[int, int, Record]]:
    """(partition, offset, record) of TOPIC from ``since`` on, as a ``read_committed``
    consumer sees them: until ``expected`` were read and every partition is at its end."""
    import confluent_kafka as ck

    consumer: Any = ck.Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"verify-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, int, Record]] = []
    try:
        partitions = consumer.list_topics(TOPIC, timeout=timeout).topics[TOPIC].partitions
        consumer.assign([ck.TopicPartition(TOPIC, p, since.get(p, 0)) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        # A commit's markers are written after the commit returns: until they are, the
        # committed records stay invisible here, so wait for the count, not the first end.
        while len(out) < expected or at_end != set(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {out} of {TOPIC}, expected {expected} records")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise RuntimeError(f"consumer error: {err}")
            at_end.discard(msg.partition())
            headers = tuple(msg.headers() or ())
            out.append((msg.partition(), msg.offset(), (msg.key(), msg.value(), headers)))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize(
    ("block_id", "language", "code", "output", "why"), _BLOCKS, ids=[b[0] for b in _BLOCKS]
)
def test_spark_guide_snippet_runs_as_written(
    block_id: str,
    language: str,
    code: str,
    output: str,
    why: str | None,
    spark: Any,
    kafka: KafkaCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if why is not None:
        pytest.skip(f"docs/spark.md {language} block under {block_id!r}: {why}")
    assert language == "python"
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap_servers)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the snippets' scratch folders
    before = _ends(kafka)
    try:
        exec(compile(code, f"docs/spark.md#{block_id}", "exec"), {"__name__": "__main__"})
    finally:
        for query in spark.streams.active:  # none is left running, even on failure
            query.stop()
    printed = capsys.readouterr().out

    if output:
        expect_lines(block_id, printed, output)
    records = _read_since(kafka, before, len(WRITTEN[block_id]))
    written = sorted((record for _, _, record in records), key=repr)
    assert written == sorted(WRITTEN[block_id], key=repr), printed
    after = _ends(kafka)
    markers = sum(end - before.get(p, 0) for p, end in after.items()) - len(records)
    assert (markers > 0) == (block_id in TRANSACTIONAL), (markers, printed)
    # Every location a snippet printed holds the value it printed it for.
    located = _LOCATED.findall(printed)
    at = {(TOPIC, p, offset): record[1] for p, offset, record in records}
    for value, topic, partition, offset in located:
        assert at.get((topic, int(partition), int(offset))) == value.encode(), printed
    if "delivered to" in code:  # one location printed for each record written
        assert len(located) == len(records), printed
