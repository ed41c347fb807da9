"""The benchmark harness's own logic: verification, summaries, parsing the Java tool.

These run without a broker, except the last one, a small end-to-end smoke run that uses
the shared ``kafka`` fixture.
"""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import ConsumedRecord
from bench.clients._common import LatencyLog, key_for, make_value, percentile
from bench.clients.java_perf import parse_summary
from bench.suite import (
    RunResult,
    Workload,
    _Broker,
    check_end_offsets,
    fmt_median_range,
    render_latency,
    render_throughput,
    run_one,
    steady_latency,
    summarize,
    verify_random,
    verify_sequenced,
)

SIZE = 100

# Real output of ProducerPerformance 4.3.1 (kafka-tools), a throughput run and a paced run
# with --warmup-records 5000.
JAVA_THROUGHPUT = """\
100000 records sent, 96246.390760 records/sec (9.18 MB/sec), 129.47 ms avg latency, \
425.00 ms max latency, 122 ms 50th, 198 ms 95th, 204 ms 99th, 205 ms 99.9th.
"""
JAVA_WARMUP = """\
Warmup first 5000 records. Steady state results will print after the complete test summary.
15000 records sent, 4792.332268 records/sec (0.46 MB/sec), 10.59 ms avg latency, \
553.00 ms max latency, 6 ms 50th, 36 ms 95th, 87 ms 99th, 123 ms 99.9th.
10000 steady state records sent, 4672.897196 records/sec (0.45 MB/sec), 11.27 ms avg \
latency, 125.00 ms max latency, 6 ms 50th, 43 ms 95th, 97 ms 99th, 125 ms 99.9th.
"""


def _records(n: int, *, keyed: bool = False, partitions: int = 3) -> list[ConsumedRecord]:
    out = []
    for seq in range(n):
        key = key_for(seq) if keyed else None
        # Keyed records go by key; keyless ones anywhere.
        part = (seq % 1000 if keyed else seq) % partitions
        out.append(ConsumedRecord(part, seq, key, make_value(seq, SIZE), (), 0))
    return out


def test_a_complete_topic_verifies() -> None:
    for keyed in (False, True):
        result = verify_sequenced(_records(2000, keyed=keyed), 2000, SIZE, keyed)
        assert result["ok"], result
        assert result["missing"] == result["duplicates"] == result["malformed"] == 0


def test_a_missing_record_fails() -> None:
    records = _records(500)
    del records[123]
    result = verify_sequenced(records, 500, SIZE, False)
    assert not result["ok"]
    assert result["missing"] == 1


def test_a_duplicated_record_fails_even_when_the_count_matches() -> None:
    records = _records(500)
    records[10] = records[11]  # one lost, one duplicated: 500 records read
    result = verify_sequenced(records, 500, SIZE, False)
    assert not result["ok"]
    assert (result["missing"], result["duplicates"], result["read"]) == (1, 1, 500)


def test_corrupt_values_and_wrong_keys_fail() -> None:
    records = _records(100, keyed=True)
    r = records[5]
    assert r.value is not None
    records[5] = ConsumedRecord(r.partition, r.offset, r.key, r.value[:-1] + b"#", (), 0)
    r = records[6]
    records[6] = ConsumedRecord(r.partition, r.offset, b"other", r.value, (), 0)
    result = verify_sequenced(records, 100, SIZE, True)
    assert not result["ok"]
    assert result["malformed"] == 2


def test_a_key_in_two_partitions_fails() -> None:
    records = _records(3000, keyed=True)
    r = records[1500]  # same key as records[500], in another partition now
    records[1500] = ConsumedRecord(r.partition + 1, r.offset, r.key, r.value, (), 0)
    result = verify_sequenced(records, 3000, SIZE, True)
    assert not result["ok"]
    assert result["keys_in_several_partitions"] == 1


def test_the_java_tools_random_payloads() -> None:
    import random

    rng = random.Random(1)
    values = [
        bytes(rng.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(SIZE)) for _ in range(300)
    ]
    records = [ConsumedRecord(i % 4, i, None, v, (), 0) for i, v in enumerate(values)]
    assert verify_random(records, 300, SIZE)["ok"]
    duplicated = [*records[:-1], records[0]]
    result = verify_random(duplicated, 300, SIZE)
    assert not result["ok"]
    assert result["duplicates"] == 1
    assert not verify_random(records[:-1], 300, SIZE)["ok"]


def test_end_offsets_must_add_up_to_the_records_sent() -> None:
    assert check_end_offsets({0: 5, 1: 5}, 10) is None
    assert "more" in (check_end_offsets({0: 6, 1: 5}, 10) or "")
    assert "fewer" in (check_end_offsets({0: 4, 1: 5}, 10) or "")


def test_median_and_range_formatting() -> None:
    assert fmt_median_range([3000.0, 1000.0, 2000.4]) == "2,000 (1,000-3,000)"
    assert fmt_median_range([12.345]) == "12"
    assert fmt_median_range([1.25, 2.5], ".1f") == "1.9 (1.2-2.5)"


def _run(client: str, round_no: int, ok: bool, rate: float = 1000.0) -> RunResult:
    report: dict[str, Any] = {
        "records": 1000,
        "elapsed_s": 1000 / rate,
        "cpu_user_s": 0.5,
        "cpu_sys_s": 0.1,
        "peak_rss_mib": 50.0,
        "value_size": SIZE,
        "notes": {},
    }
    return RunResult(
        "w", client, round_no, "t", "ok" if ok else "failed", None if ok else "lost 1", report
    )


def test_one_failed_round_marks_the_client_failed() -> None:
    results = [_run("a", 1, True), _run("a", 2, False), _run("aiokafka", 1, True, 500.0)]
    assert summarize(results, "w", "a")["status"] == "FAILED"
    ok = summarize(results, "w", "aiokafka")
    assert ok["status"] == "ok"
    assert ok["cpu_s_per_million_median"] == pytest.approx(600.0)
    table = render_throughput(
        {"a": summarize(results, "w", "a"), "aiokafka": ok, "java": {"status": "not run"}}
    )
    assert "**FAILED** (1/2 runs)" in table
    assert "| aiokafka | 500 | 0.05 | 600.0 | 50 | 1.00x | - | - |" in table


def test_parse_the_java_summary_lines() -> None:
    summary = parse_summary(JAVA_THROUGHPUT)
    assert summary["records"] == 100000
    assert summary["records_per_s"] == pytest.approx(96246.39076)
    assert (summary["p50_ms"], summary["p99_ms"], summary["p999_ms"]) == (122, 204, 205)
    overall = parse_summary(JAVA_WARMUP)
    steady = parse_summary(JAVA_WARMUP, steady_state=True)
    assert overall["records"] == 15000
    assert (steady["records"], steady["p99_ms"], steady["max_ms"]) == (10000, 97, 125.0)
    with pytest.raises(ValueError):
        parse_summary(JAVA_THROUGHPUT, steady_state=True)
    with pytest.raises(ValueError):
        parse_summary(
            "1000 records sent, 5.0 records/sec (0.00 MB/sec), 1.0 ms avg latency, "
            "2.0 ms max latency.\n"
        )


def test_latency_percentiles_leave_out_the_warm_up() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 1001)], 99.9) == 999.0
    log = LatencyLog(400, 100.0)
    for i in range(400):
        log.sent[i] = i / 100
        log.acked[i] = log.sent[i] + (1.0 if i < 100 else 0.002)  # slow first second
    summary = log.summary()
    assert summary["warmup_records"] == 100
    assert summary["p999_ms"] == pytest.approx(2.0)
    assert summary["kept_rate"] and summary["unacked"] == 0
    log.acked[-1] = 0.0
    assert log.summary()["unacked"] == 1
    nothing = LatencyLog(8, 1.0).summary()  # no acknowledgement at all
    assert nothing["unacked"] == 8
    assert math.isnan(nothing["p50_ms"])


def _partition(seq: int) -> int:
    """Partitions 0-2 in turns of 50 records; partition 3 first visited by records
    3000-3049, then all four in turns."""
    if seq < 3000:
        return (seq // 50) % 3
    if seq < 3050:
        return 3
    return (seq // 50) % 4


def test_the_steady_window_opens_once_every_partitions_first_visit_was_acknowledged() -> None:
    n, rate = 4000, 1000.0
    sent = [i / rate for i in range(n)]
    # The first visit to partition 3 answers its first request at once and its later ones
    # 50.5 ms late, as a broker's first appends to a partition can.
    acked: list[float | None] = [
        s + 0.005 + (0.0505 if 3010 <= i < 3050 else 0.0) for i, s in enumerate(sent)
    ]
    times = {"sent": sent, "acked": acked, "warmup_records": int(rate)}
    steady = steady_latency(times, [_partition(seq) for seq in range(n)])
    # Record 3049, sent at 3.049 s, was acknowledged at 3.1045 s: the window starts with
    # the first record sent after that.
    assert steady["all_partitions_acked_s"] == pytest.approx(3.1045)
    assert steady["window_start_s"] == pytest.approx(3.105)
    assert steady["window_records"] == n - 3105
    assert steady["max_ms"] == pytest.approx(5.0)
    assert steady["startup_max_ms"] == pytest.approx(55.5)
    # A fixed first second would have kept the slow first visit.
    log = LatencyLog(n, rate)
    log.sent = sent
    log.acked = [0.0 if a is None else a for a in acked]
    assert log.summary()["max_ms"] == pytest.approx(55.5)


def test_the_steady_window_is_never_before_the_first_second() -> None:
    n, rate = 4000, 1000.0
    sent = [i / rate for i in range(n)]
    times = {"sent": sent, "acked": [s + 0.005 for s in sent], "warmup_records": int(rate)}
    steady = steady_latency(times, [0] * n)  # one partition, acknowledged at once
    assert steady["window_start_s"] == pytest.approx(1.0)
    assert steady["window_records"] == n - 1000


def test_the_latency_table_shows_the_window_and_the_figures_from_one_second() -> None:
    run = RunResult("lat", "aioproducer", 1, "t", status="ok")
    run.report = {
        "records": 100, "elapsed_s": 1.0, "cpu_user_s": 0.1, "cpu_sys_s": 0.0,
        "peak_rss_mib": 40.0, "value_size": SIZE,
        "latency": {"p50_ms": 3.0, "p99_ms": 30.0, "p999_ms": 50.0, "max_ms": 60.0,
                    "achieved_rate": 100.0, "kept_rate": True},
        "latency_steady": {"p50_ms": 3.0, "p99_ms": 6.0, "p999_ms": 8.0, "max_ms": 9.0,
                           "window_start_s": 2.5, "startup_max_ms": 45.0},
    }  # fmt: skip
    table = render_latency({"aioproducer": summarize([run], "lat", "aioproducer")})
    assert "| 6.0 | 8.0 | 9.0 | 2.5 | 45 | 30.0 |" in table


def test_a_paced_client_writes_its_per_record_times(tmp_path: Path) -> None:
    out = tmp_path / "times.json"
    log = LatencyLog(3, 100.0, out_path=str(out))
    log.started = 10.0
    log.sent = [10.0, 10.01, 10.02]
    log.acked = [10.005, 0.0, 10.03]
    log.summary()
    times = json.loads(out.read_text())
    assert times["sent"] == [0.0, 0.01, 0.02]
    assert times["acked"] == [0.005, None, 0.03]
    assert times["warmup_records"] == 0
    # Collections after the run are not recorded: the log's callback is gone.
    assert all(getattr(callback, "__self__", None) is not log for callback in gc.callbacks)


def test_a_tiny_end_to_end_run(kafka: KafkaCluster) -> None:
    broker = _Broker(
        kafka.bootstrap_servers, lambda name, n: kafka.create_topic(name, partitions=n), "test"
    )
    workload = Workload(100, "lz4", True, 3, 1, 3000)
    result = run_one("aioproducer", workload, 1, broker, timeout=60)
    assert result.status == "ok", result.reason
    assert result.verification is not None and result.verification["read"] == 3000
    assert result.end_offsets is not None and sum(result.end_offsets.values()) == 3000


def test_a_paced_run_gets_its_steady_window_from_the_topic(kafka: KafkaCluster) -> None:
    broker = _Broker(
        kafka.bootstrap_servers, lambda name, n: kafka.create_topic(name, partitions=n), "test"
    )
    workload = Workload(100, "none", False, 3, 1, 1000, rate=500)
    result = run_one("aioproducer", workload, 1, broker, timeout=60)
    assert result.status == "ok", result.reason
    assert result.report is not None
    steady = result.report["latency_steady"]
    # The warm-up is a second of records, at most a quarter of the run: 250 records, 0.5 s.
    assert result.report["latency"]["warmup_records"] == 250
    assert 0.5 <= steady["window_start_s"] < 2.0
    assert steady["all_partitions_acked_s"] <= steady["window_start_s"]
    assert 0 < steady["window_records"] <= 750
    assert 0 < steady["p50_ms"] <= steady["p99_ms"] <= steady["max_ms"]


def test_a_client_that_hangs_is_killed_and_failed() -> None:
    # Nothing listens on port 1: the client keeps retrying until the harness's timeout.
    broker = _Broker("127.0.0.1:1", lambda name, n: None, "nowhere")
    result = run_one("aioproducer", Workload(100, "none", False, 1, 1, 10), 1, broker, timeout=3)
    assert result.status == "failed"
    assert result.reason is not None and "did not finish within 3 s" in result.reason


def test_a_workload_a_client_cannot_run_is_not_a_failure() -> None:
    broker = _Broker("127.0.0.1:1", lambda name, n: None, "nowhere")
    result = run_one("java", Workload(100, "none", True, 1, 1, 10), 1, broker, timeout=3)
    assert result.status == "n/a"
    assert summarize([result], result.workload, "java")["status"] == "n/a"


def test_the_sync_client_reports_itself_unavailable_without_syncproducer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from bench.clients import aioproducer_sync
    from bench.clients._common import EXIT_UNAVAILABLE

    def missing() -> Any:
        raise ImportError("no SyncProducer here")

    monkeypatch.setattr(aioproducer_sync, "_load", missing)
    argv = ["--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--records", "10"]
    assert aioproducer_sync.main(argv) == EXIT_UNAVAILABLE
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "no SyncProducer here" in report["unavailable"]
