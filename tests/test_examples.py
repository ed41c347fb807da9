"""The examples run against the test broker and produce what they say."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

import httpx
import pytest
from support import closed_port

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import ConsumedRecord, consume_all, topic_end_offsets

if TYPE_CHECKING:
    from conftest import NewTopic

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_example_uses_the_broker_in_kafka_bootstrap(kafka: KafkaCluster) -> None:
    kafka.create_topic("quickstart-example", partitions=3)
    result = run_example("quickstart.py", kafka, "--topic", "quickstart-example", "--count", "6")
    assert result.returncode == 0, result.stderr
    assert "throwaway" not in result.stderr  # the user's broker, not one of its own
    assert len(result.stdout.splitlines()) == 6
    records = consume_all(kafka.bootstrap_servers, "quickstart-example", expected=6)
    assert sorted(r.value for r in records) == sorted(f"hello {i}".encode() for i in range(6))
    assert {r.key for r in records} == {b"user-0", b"user-1", b"user-2"}


def test_bootstrap_servers_flag_wins_over_kafka_bootstrap(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    command = [sys.executable, str(EXAMPLES / "quickstart.py"), "--topic", topic, "--count", "2"]
    command += ["--bootstrap-servers", kafka.bootstrap_servers]
    env = {**os.environ, "KAFKA_BOOTSTRAP": f"127.0.0.1:{closed_port()}"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    records = consume_all(kafka.bootstrap_servers, topic, expected=2)
    assert [r.value for r in records] == [b"hello 0", b"hello 1"]


# -- helpers for the example CLIs ----------------------------------------------------------


def run_example(
    name: str, kafka: KafkaCluster, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<name>`` against the test broker, given as a user would after the
    getting-started guide: in ``KAFKA_BOOTSTRAP``. stdout and stderr are captured."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap_servers},
    )


def partition_values(records: list[ConsumedRecord]) -> dict[int, list[bytes | None]]:
    """The values of each partition in offset order."""
    out: dict[int, list[bytes | None]] = {}
    for r in records:  # consume_all returns them by (partition, offset)
        out.setdefault(r.partition, []).append(r.value)
    return out


def is_subsequence(part: list[bytes | None], whole: list[bytes]) -> bool:
    remaining = iter(whole)
    return all(item in remaining for item in part)


# -- produce_lines.py ------------------------------------------------------------------------


def test_produce_lines_reports_a_too_large_line_and_delivers_the_rest(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    lines = [f"line-{i}".encode() for i in range(20)]
    huge = b"x" * 1_100_000  # larger than the default max_request_size (1 MiB)
    stdin = b"\n".join([*lines[:10], huge, *lines[10:19]]) + b"\n" + lines[19] + b"\r\n"

    result = run_example("produce_lines.py", kafka, "--topic", topic, stdin=stdin)

    assert result.returncode == 1, result.stderr
    assert "delivered    20 of 21 lines" in result.stdout
    assert "failed       1" in result.stdout
    assert "first error  line 11: RecordTooLargeError: the record is 1100" in result.stdout
    assert "\r" not in result.stderr  # no progress bar when stderr is not a terminal
    records = consume_all(kafka.bootstrap_servers, topic, expected=20)
    assert sorted(r.value or b"" for r in records) == sorted(lines)  # the line ending is gone
    assert all(r.key is None for r in records)
    per_partition = partition_values(records)
    # Keyless records are spread in batches; each partition keeps the input order.
    for values in per_partition.values():
        assert is_subsequence(values, lines)
    counts = ", ".join(f"{p}: {len(v)}" for p, v in sorted(per_partition.items()))
    assert f"partitions   {counts}\n" in result.stdout


def test_produce_lines_keys_json_lines_by_field(
    kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(3)
    users = ["ann", "bob", "cy", "dee", 42]
    docs = [json.dumps({"user": users[i % 5], "n": i}).encode() for i in range(50)]
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"\n".join(docs) + b"\n\n")  # trailing blank lines are skipped

    result = run_example(
        "produce_lines.py", kafka, str(source), "--json", "--key-field", "user", "--topic", topic
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "delivered    50 of 50 lines" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=50)
    assert sorted(r.value or b"" for r in records) == sorted(docs)  # sent unchanged
    by_key: dict[bytes | None, list[tuple[int, int, int]]] = {}
    for r in records:
        doc = json.loads(r.value or b"")
        by_key.setdefault(r.key, []).append((r.partition, r.offset, doc["n"]))
    assert set(by_key) == {b"ann", b"bob", b"cy", b"dee", b"42"}  # non-strings as JSON
    for key, placed in by_key.items():
        assert len({p for p, _, _ in placed}) == 1, key  # one key, one partition
        in_offset_order = [n for _, _, n in sorted(placed)]
        assert in_offset_order == sorted(in_offset_order), key  # in input order


def test_produce_lines_json_input_errors_fail_alone(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(1)
    stdin = b'{"id": "a"}\nnot json\n{"other": 1}\n{"id": "b"}\n'

    result = run_example(
        "produce_lines.py", kafka, "--json", "--key-field", "id", "--topic", topic, stdin=stdin
    )

    assert result.returncode == 1
    assert "delivered    2 of 4 lines" in result.stdout
    assert "failed       2" in result.stdout
    assert "first error  line 2: InputError: not valid JSON" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=2)
    assert [(r.key, r.value) for r in records] == [
        (b"a", b'{"id": "a"}'),
        (b"b", b'{"id": "b"}'),
    ]


def test_produce_lines_sums_up_on_ctrl_c(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic(1)
    command = [sys.executable, str(EXAMPLES / "produce_lines.py"), "--topic", topic]
    command += ["--bootstrap-servers", kafka.bootstrap_servers]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdin is not None
        process.stdin.write("".join(f"line-{i}\n" for i in range(5)))
        process.stdin.flush()  # and the pipe stays open: the example waits for more
        deadline = time.monotonic() + 30
        while sum(topic_end_offsets(kafka.bootstrap_servers, topic).values()) < 5:
            assert time.monotonic() < deadline, "the lines were not delivered within 30 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        # Not communicate(): it would close stdin, and end the input without any Ctrl-C.
        process.wait(timeout=30)
        assert process.stdout is not None and process.stderr is not None
        output, errors = process.stdout.read(), process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    records = consume_all(kafka.bootstrap_servers, topic, expected=5)
    assert [r.value for r in records] == [f"line-{i}".encode() for i in range(5)]
    assert process.returncode == 130, output + errors
    assert "Traceback" not in errors, errors
    assert "delivered    5 of 5 lines" in output
    assert "stopped      by Ctrl-C" in output


# -- loadgen.py ------------------------------------------------------------------------------


def test_loadgen_paces_keys_and_numbers_its_records(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    rate, duration, senders, keys, size = 1500, 2, 3, 6, 40
    result = run_example(
        "loadgen.py",
        kafka,
        *("--topic", topic, "--rate", str(rate), "--duration", str(duration)),
        *("--senders", str(senders), "--keys", str(keys), "--size", str(size)),
    )

    assert result.returncode == 0, result.stdout + result.stderr
    total = rate * duration
    assert f"delivered   {total:,}" in result.stdout
    live = [line for line in result.stderr.splitlines() if " p99 " in line]
    assert live and all("failed 0" in line for line in live)
    records = consume_all(kafka.bootstrap_servers, topic, expected=total)
    seen: dict[tuple[int, int], ConsumedRecord] = {}
    for r in records:
        assert r.value is not None and len(r.value) == size
        sender, seq = map(int, r.value.split(b" ", 1)[0].split(b":"))
        assert r.key == f"key-{seq % keys}".encode()
        assert (sender, seq) not in seen  # no duplicates
        seen[sender, seq] = r
    per_sender = total // senders
    assert set(seen) == {(s, q) for s in range(senders) for q in range(per_sender)}
    for s in range(senders):  # each sender's records keep their order on every partition
        offsets: dict[int, list[int]] = {}
        for q in range(per_sender):
            offsets.setdefault(seen[s, q].partition, []).append(seen[s, q].offset)
        assert all(o == sorted(o) for o in offsets.values())
    # Paced over the whole duration: never more than a tenth of a second's worth of records
    # plus the bucket's burst (another tenth) within any 100 ms. A stall may only lower that.
    stamps = sorted(r.timestamp_ms for r in records)
    assert stamps[-1] - stamps[0] >= 0.9 * duration * 1000
    start, busiest = 0, 0
    for end, stamp in enumerate(stamps):
        while stamp - stamps[start] >= 100:
            start += 1
        busiest = max(busiest, end - start + 1)
    assert busiest <= 0.3 * rate


# -- http_service.py -------------------------------------------------------------------------


@pytest.fixture
def http_service(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("http_service")


@pytest.mark.anyio
async def test_http_service_answers_with_offsets_and_maps_errors(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    http_service: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic(3)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap_servers)  # as under uvicorn
    app = http_service.create_app(max_block_ms=1000)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://service") as client,
    ):
        sent = []
        for i in range(6):
            value, key = f"event-{i}".encode(), f"user-{i % 2}"
            if i % 2:
                response = await client.post(
                    f"/events/{topic}", content=value, headers={"X-Key": key}
                )
            else:
                response = await client.post(
                    f"/events/{topic}?key={key}",
                    content=value,
                    headers={"Content-Type": "text/plain"},
                )
            assert response.status_code == 200, response.text
            sent.append((response.json(), key, value, None if i % 2 else b"text/plain"))

        empty = await client.post(f"/events/{topic}", content=b"")
        too_large = await client.post(f"/events/{topic}", content=b"x" * 1_100_000)
        bad_topic = await client.post("/events/" + "t" * 250, content=b"x")
        bad_chars = await client.post("/events/bad%20topic!", content=b"x")
        unknown = await client.post("/events/no-such-topic-for-the-service", content=b"x")
        scraped = await client.get("/metrics")

    assert (empty.status_code, too_large.status_code, bad_topic.status_code) == (400, 413, 400)
    assert bad_chars.status_code == 400, bad_chars.text  # refused by send(), not the broker
    assert "RecordTooLargeError" in too_large.json()["error"]
    assert unknown.status_code == 404  # the service does not create topics
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    sent_total = [
        line
        for line in scraped.text.splitlines()
        if line.startswith("aioproducer_records_sent_total{") and f'="{topic}"' in line
    ]
    assert len(sent_total) == 1, scraped.text
    assert float(sent_total[0].rsplit(" ", 1)[1]) == 6
    assert 'messaging_client_id="http-service"' in sent_total[0]
    records = consume_all(kafka.bootstrap_servers, topic, expected=6)
    by_position = {(r.partition, r.offset): r for r in records}
    assert len(by_position) == 6
    for answer, key, value, content_type in sent:
        assert answer["topic"] == topic
        record = by_position[answer["partition"], answer["offset"]]
        assert (record.key, record.value) == (key.encode(), value)
        assert record.timestamp_ms == answer["timestamp_ms"]
        assert dict(record.headers).get("content-type") == content_type
        assert "traceparent" in dict(record.headers)  # tracing is on


@pytest.mark.anyio
async def test_http_service_answers_503_when_kafka_is_unreachable(
    http_service: ModuleType,
) -> None:
    with socket.socket() as probe:  # a port on which nothing listens
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    app = http_service.create_app(address, max_block_ms=500)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as client,
    ):
        response = await client.post("/events/anything", content=b"x")
    assert response.status_code == 503
    assert "KafkaTimeoutError" in response.json()["error"]


def test_http_service_runs_under_uvicorn(kafka: KafkaCluster, new_topic: NewTopic) -> None:
    topic = new_topic(1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, str(EXAMPLES / "http_service.py"), "--port", str(port)]
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap_servers}
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        for _ in range(100):
            try:
                response = httpx.post(f"http://127.0.0.1:{port}/events/{topic}?key=k", content=b"v")
                break
            except httpx.TransportError:
                time.sleep(0.1)  # not listening yet
        else:
            pytest.fail("the service did not start listening within 10 s")
    finally:
        server.send_signal(signal.SIGINT)  # as Ctrl-C: uvicorn shuts down, the producer closes
        output, _ = server.communicate(timeout=30)
    answer = response.json()
    assert (answer["topic"], answer["partition"], answer["offset"]) == (topic, 0, 0)
    assert server.returncode == 0, output
    [record] = consume_all(kafka.bootstrap_servers, topic, expected=1)
    assert (record.key, record.value) == (b"k", b"v")


# -- trio_example.py -------------------------------------------------------------------------


def test_trio_example_streams_ordered_readings_per_device(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    result = run_example(
        "trio_example.py", kafka, "--topic", topic, "--devices", "3", "--seconds", "1"
    )

    assert result.returncode == 0, result.stderr
    printed = {}
    for line in result.stdout.splitlines():  # "device-0: 91 readings -> partition 2, ..."
        name, rest = line.split(": ", 1)
        printed[name.encode()] = (int(rest.split()[0]), int(rest.split("partition ")[1][0]))
    records = consume_all(
        kafka.bootstrap_servers, topic, expected=sum(n for n, _ in printed.values())
    )
    by_device: dict[bytes | None, list[ConsumedRecord]] = {}
    for r in records:
        by_device.setdefault(r.key, []).append(r)
    assert set(by_device) == set(printed) == {b"device-0", b"device-1", b"device-2"}
    for key, readings in by_device.items():
        count, partition = printed[key]
        assert {r.partition for r in readings} == {partition}
        docs = [json.loads(r.value or b"") for r in readings]  # in offset order
        assert [d["seq"] for d in docs] == list(range(count))  # none lost, none reordered
        assert all(d["device"] == key.decode() for d in docs)
        assert count > 20  # sent for the whole second, every 10 ms


# -- _local.py: which cluster an example uses ------------------------------------------------


class _StubCluster:
    """Stands in for KafkaCluster: records the topic created, starts nothing."""

    bootstrap_servers = "127.0.0.1:1"
    created: ClassVar[list[tuple[str, int]]] = []

    def __enter__(self) -> _StubCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def create_topic(self, name: str, partitions: int) -> None:
        self.created.append((name, partitions))


def test_examples_start_a_throwaway_broker_only_without_flag_or_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import aioproducer.testing

    monkeypatch.syspath_prepend(str(EXAMPLES))
    local = importlib.import_module("_local")
    monkeypatch.setattr(aioproducer.testing, "KafkaCluster", _StubCluster)
    _StubCluster.created = []

    monkeypatch.setenv("KAFKA_BOOTSTRAP", "kafka.example:9092")
    with local.kafka(None, "t") as servers:
        assert servers == "kafka.example:9092"
    with local.kafka("flag.example:9092", "t") as servers:
        assert servers == "flag.example:9092"
    assert capsys.readouterr().err == "" and _StubCluster.created == []

    monkeypatch.delenv("KAFKA_BOOTSTRAP")
    with local.kafka(None, "t", partitions=2) as servers:
        assert servers == "127.0.0.1:1"
    err = capsys.readouterr().err
    assert "no --bootstrap-servers and no $KAFKA_BOOTSTRAP: starting a throwaway" in err
    assert _StubCluster.created == [("t", 2)]
