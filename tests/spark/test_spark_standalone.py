"""The examples submitted with ``spark-submit`` to a real Spark standalone cluster (a master
and two workers, see ``standalone.py``): every row is read back from Kafka.

The three applications are submitted at once (each with an executor on each worker), so
their JVM starts overlap; each test then checks its own application's output and records.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

# Three applications started together on a busy machine can take minutes to finish.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
FUNCTIONS_ROWS = 1500


@dataclass
class Submitted:
    """One example's application: its topic, scratch directory and (future) result."""

    topic: str
    scratch: Path
    result: Future[CompletedProcess[str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two workers with room for three applications at a time (an executor of each on
    each worker)."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from standalone import StandaloneCluster

    running = StandaloneCluster(
        tmp_path_factory.mktemp("spark-standalone"), worker_cores=3, worker_memory="2g"
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def submitted(
    cluster: Any, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Submitted]]:
    """The three examples, submitted together; each test waits for its own."""
    apps: dict[str, tuple[str, ...]] = {}
    topics, scratch = {}, {}
    for name in ("spark_write", "spark_functions", "spark_datasource"):
        topics[name] = f"standalone-{name}-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topics[name], 3)
        scratch[name] = tmp_path_factory.mktemp(name)
    servers = ("--bootstrap-servers", kafka.bootstrap_servers)
    apps["spark_write"] = (*servers, "--topic", topics["spark_write"], "--rows", "4000")
    apps["spark_functions"] = (
        *(*servers, "--topic", topics["spark_functions"], "--rows", str(FUNCTIONS_ROWS)),
        *("--output", str(scratch["spark_functions"] / "located.jsonl")),
        *("--stream-dir", str(scratch["spark_functions"] / "s")),
    )
    apps["spark_datasource"] = (
        *(*servers, "--topic", topics["spark_datasource"], "--rows", "3000"),
        *("--checkpoint", str(scratch["spark_datasource"])),
    )
    # Two cores per application, one executor each: the master spreads them over both
    # workers, and the three fit side by side.
    conf = {"spark.cores.max": "2", "spark.executor.cores": "1"}
    with ThreadPoolExecutor(len(apps)) as pool:
        yield {
            name: Submitted(
                topics[name],
                scratch[name],
                pool.submit(cluster.submit, EXAMPLES / f"{name}.py", *args, conf=conf),
            )
            for name, args in apps.items()
        }


def finished(app: Submitted) -> CompletedProcess[str]:
    result = app.result.result()
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def ran_on_the_cluster(cluster: Any, app_name: str) -> None:
    """The master lists the application as finished, and it had an executor on each
    worker (the worker made a directory for it)."""
    apps = [a for a in cluster.status().get("completedapps", []) if a.get("name") == app_name]
    assert apps, cluster.status()
    app_id = apps[-1]["id"]
    for n in range(cluster.workers):
        assert (cluster.root / f"worker-{n}" / app_id).is_dir(), (n, app_id)


def test_spark_write_example_on_a_standalone_cluster(
    cluster: Any, submitted: dict[str, Submitted], kafka: KafkaCluster
) -> None:
    app = submitted["spark_write"]
    topic = app.topic
    result = finished(app)
    assert "wrote 4,000 of 4,000 rows (" in result.stdout
    ran_on_the_cluster(cluster, "aioproducer-spark-write")
    records = consume_all(kafka.bootstrap_servers, topic, expected=4000)
    assert len(records) == 4000
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == list(range(4000))
    for r in records:
        body = json.loads(r.value or b"")
        assert r.key == f"user-{body['id'] % 1000}".encode()
        assert body["amount"] == body["id"] * 3 % 100
        assert r.headers == (("source", b"spark-example"),)


def test_spark_functions_example_on_a_standalone_cluster(
    cluster: Any, submitted: dict[str, Submitted], kafka: KafkaCluster
) -> None:
    app = submitted["spark_functions"]
    topic, output, rows = app.topic, app.scratch / "located.jsonl", FUNCTIONS_ROWS
    result = finished(app)
    assert f"mapInPandas  sent {rows:,} rows" in result.stdout
    assert f"pandas_udf   sent {rows:,} rows" in result.stdout
    assert f"foreach      sent {rows:,} rows in 3 micro-batches" in result.stdout
    ran_on_the_cluster(cluster, "aioproducer-spark-functions")

    records = consume_all(kafka.bootstrap_servers, topic, expected=3 * rows)
    assert len(records) == 3 * rows
    by_via: dict[str, list[int]] = {}
    for r in records:
        body = json.loads(r.value or b"")
        assert r.key == f"customer-{body['id'] % 50}".encode()
        assert body["customer"] == f"customer-{body['id'] % 50}"
        assert body["amount"] == pytest.approx(body["id"] * 7 % 1000 / 10)
        if body["via"] == "mapInPandas":
            assert body["large"] == (body["amount"] >= 50)
        by_via.setdefault(body["via"], []).append(body["id"])
    assert {via: sorted(ids) for via, ids in by_via.items()} == {
        via: list(range(rows)) for via in ("mapInPandas", "pandas_udf", "foreach")
    }
    # Every location the functions returned holds exactly the row it was returned for.
    landed = {(r.partition, r.offset): json.loads(r.value or b"") for r in records}
    located = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(located) == 2 * rows
    for where in located:
        body = landed[where["partition"], where["offset"]]
        assert (body["via"], body["id"]) == (where["via"], where["id"])


def test_spark_datasource_example_on_a_standalone_cluster(
    cluster: Any, submitted: dict[str, Submitted], kafka: KafkaCluster
) -> None:
    # Batch and streaming writes through format("aioproducer"), found by PySpark's own
    # lookup (no register call), with tasks on both workers.
    app = submitted["spark_datasource"]
    topic = app.topic
    result = finished(app)
    assert "batch: wrote 3,000 rows" in result.stdout
    assert "stream: wrote 3,000 rows" in result.stdout
    ran_on_the_cluster(cluster, "aioproducer-spark-datasource")
    records = consume_all(kafka.bootstrap_servers, topic, expected=6000)
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == list(range(6000))
    for r in records:
        body = json.loads(r.value or b"")
        assert r.key == f"user-{body['id'] % 1000}".encode()
        assert r.headers == (("source", b"spark-example"),)
