"""The examples submitted with ``spark-submit`` to a real Spark standalone cluster (a master
and two workers, see ``standalone.py``): every row is read back from Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def ran_on_the_cluster(cluster: Any, app_name: str) -> None:
    """The master lists the application as finished, and it had an executor on each
    worker (the worker made a directory for it)."""
    apps = [a for a in cluster.status().get("completedapps", []) if a.get("name") == app_name]
    assert apps, cluster.status()
    app_id = apps[-1]["id"]
    for n in range(cluster.workers):
        assert (cluster.root / f"worker-{n}" / app_id).is_dir(), (n, app_id)


def test_spark_write_example_on_a_standalone_cluster(
    spark_standalone: Any, kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = new_topic(3)
    result = spark_standalone.submit(
        EXAMPLES / "spark_write.py",
        *("--bootstrap-servers", kafka.bootstrap_servers, "--topic", topic, "--rows", "4000"),
    )

    assert result.returncode == 0, result.stderr[-4000:]
    assert "wrote 4,000 of 4,000 rows (" in result.stdout
    ran_on_the_cluster(spark_standalone, "aioproducer-spark-write")
    records = consume_all(kafka.bootstrap_servers, topic, expected=4000)
    assert len(records) == 4000
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == list(range(4000))
    for r in records:
        body = json.loads(r.value or b"")
        assert r.key == f"user-{body['id'] % 1000}".encode()
        assert body["amount"] == body["id"] * 3 % 100
        assert r.headers == (("source", b"spark-example"),)


def test_spark_functions_example_on_a_standalone_cluster(
    spark_standalone: Any, kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(3)
    output = tmp_path / "located.jsonl"
    rows = 1500
    result = spark_standalone.submit(
        EXAMPLES / "spark_functions.py",
        *("--bootstrap-servers", kafka.bootstrap_servers, "--topic", topic),
        *("--rows", str(rows), "--output", str(output), "--stream-dir", str(tmp_path / "s")),
    )

    assert result.returncode == 0, result.stderr[-4000:]
    assert f"mapInPandas  sent {rows:,} rows" in result.stdout
    assert f"pandas_udf   sent {rows:,} rows" in result.stdout
    assert f"foreach      sent {rows:,} rows in 3 micro-batches" in result.stdout
    ran_on_the_cluster(spark_standalone, "aioproducer-spark-functions")

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
    spark_standalone: Any, kafka: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    # Batch and streaming writes through format("aioproducer"), found by PySpark's own
    # lookup (no register call), with tasks on both workers.
    topic = new_topic(3)
    result = spark_standalone.submit(
        EXAMPLES / "spark_datasource.py",
        *("--bootstrap-servers", kafka.bootstrap_servers, "--topic", topic),
        *("--rows", "3000", "--checkpoint", str(tmp_path)),
    )

    assert result.returncode == 0, result.stderr[-4000:]
    assert "batch: wrote 3,000 rows" in result.stdout
    assert "stream: wrote 3,000 rows" in result.stdout
    ran_on_the_cluster(spark_standalone, "aioproducer-spark-datasource")
    records = consume_all(kafka.bootstrap_servers, topic, expected=6000)
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == list(range(6000))
    for r in records:
        body = json.loads(r.value or b"")
        assert r.key == f"user-{body['id'] % 1000}".encode()
        assert r.headers == (("source", b"spark-example"),)
