"""Writing a DataFrame to Kafka from PySpark: aioproducer.spark against its peers.

::

    python -m bench.spark_compare [--rows 2000000] [--value-size 100] [--rounds 3]
        [--partitions 12] [--df-partitions 8] [--master local[2]] [--keyless]
        [--methods aioproducer,confluent,spark-kafka] [--full-verify] [--profile]
        [--out bench/results/spark_compare.md]

One SparkSession, one cached DataFrame of ``--rows`` rows (a string key and a string value
of ``--value-size`` bytes that starts with the row's sequence number), one single-node Kafka
started here. Each method writes the whole DataFrame to a fresh topic, in interleaved
rounds:

- ``aioproducer``: ``aioproducer.spark.write(df, topic, ...)``;
- ``confluent``: confluent-kafka inside ``df.foreachPartition`` with a producer cached per
  worker and a flush per partition (``bench/spark_peers.py``);
- ``spark-kafka``: Spark's own Kafka sink, ``df.write.format("kafka")``, with the
  ``spark-sql-kafka-0-10`` jars fetched by Maven into ``~/.cache/aioproducer/bench``.

Every client gets acks=all, idempotence and linger 5 ms. The clock is the driver's wall time
of the write. Each run is checked: the topic's end offsets must add up to ``--rows`` and a
sample of records (or, with ``--full-verify``, all of them) must carry distinct, valid
sequence numbers; otherwise the run is reported as failed.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
METHODS = ("aioproducer", "confluent", "spark-kafka")
SEQ_DIGITS = 12
_BROKER_JVM_ARGS = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# The jars the built-in sink needs on top of pyspark's own (which already has Spark,
# Scala, Hadoop, lz4 and snappy).
_SINK_JARS = (
    "spark-sql-kafka-0-10",
    "spark-token-provider-kafka-0-10",
    "kafka-clients",
    "commons-pool2",
)
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>bench</groupId><artifactId>spark-kafka-sink</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId><artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{sink}</version>
      <exclusions><exclusion><groupId>org.apache.spark</groupId>
        <artifactId>spark-token-provider-kafka-0-10_2.13</artifactId></exclusion></exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.spark</groupId><artifactId>spark-token-provider-kafka-0-10_2.13</artifactId>
      <version>{token}</version>
    </dependency>
  </dependencies>
</project>
"""
# Only Maven Central: Spark's parent POM names mirrors that may not be reachable.
_SETTINGS = """<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""


def fetch_sink_jars(spark_version: str, cache: Path) -> tuple[list[str], str]:
    """The built-in sink's jars, fetched once with Maven; and which versions they are.

    The connector of the installed Spark version is preferred. When Maven Central does not
    have it, the newest 4.x release that resolves is used instead, and the table says so.
    """
    candidates: list[tuple[str, str]] = [(spark_version, spark_version)]
    for sink in ("4.2.0", "4.1.3", "4.0.1"):
        for token in (sink, "4.0.0"):
            if (sink, token) not in candidates:
                candidates.append((sink, token))
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to fetch Spark's Kafka connector")
    problems = []
    for sink, token in candidates:
        target = cache / f"spark-sql-kafka-{sink}-token-{token}"
        done = target / ".complete"
        if not done.exists():
            target.mkdir(parents=True, exist_ok=True)
            (target / "pom.xml").write_text(_POM.format(sink=sink, token=token))
            (target / "settings.xml").write_text(_SETTINGS)
            proc = subprocess.run(
                [
                    mvn,
                    "-B",
                    "-q",
                    "-s",
                    str(target / "settings.xml"),
                    "-f",
                    str(target / "pom.xml"),
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={target / 'jars'}",
                ],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if proc.returncode != 0:
                problems.append(f"{sink}/{token}: {proc.stdout.strip().splitlines()[-1:]}")
                continue
            done.touch()
        jars = [
            j
            for j in sorted(glob.glob(str(target / "jars" / "*.jar")))
            if any(Path(j).name.startswith(name) for name in _SINK_JARS)
        ]
        note = f"spark-sql-kafka-0-10_2.13 {sink}, spark-token-provider-kafka-0-10_2.13 {token}"
        return jars, note
    raise RuntimeError("could not fetch Spark's Kafka connector:\n" + "\n".join(problems))


# -- the methods ------------------------------------------------------------------------------


def write_aioproducer(df: Any, topic: str, bootstrap: str, keyed: bool) -> dict[str, Any]:
    """aioproducer.spark.write: mapInArrow, a cached producer per worker, one action."""
    from aioproducer import spark as kafka_spark

    report = kafka_spark.write(
        df,
        topic,
        bootstrap_servers=bootstrap,
        key="key" if keyed else None,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
    )
    return {
        "records": report.records,
        "producers": report.producers,
        "reused_tasks": report.reused_producer_tasks,
    }


def write_confluent(df: Any, topic: str, bootstrap: str, keyed: bool) -> dict[str, Any]:
    """confluent-kafka in foreachPartition, written well (see bench/spark_peers.py)."""
    from bench.spark_peers import ConfluentPartitionWriter

    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    df.foreachPartition(ConfluentPartitionWriter(conf, topic, keyed=keyed))
    return {}


def write_spark_kafka(df: Any, topic: str, bootstrap: str, keyed: bool) -> dict[str, Any]:
    """Spark's built-in Kafka sink (JVM kafka-clients, no Python workers)."""
    columns = ["key", "value"] if keyed else ["value"]
    (
        df.select(*columns)
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("kafka.linger.ms", "5")
        .option("topic", topic)
        .save()
    )
    return {}


WRITERS = {
    "aioproducer": write_aioproducer,
    "confluent": write_confluent,
    "spark-kafka": write_spark_kafka,
}


# -- checking a run -----------------------------------------------------------------------------


def verify(bootstrap: str, topic: str, rows: int, full: bool) -> str | None:
    """None if the topic holds ``rows`` records with valid, distinct sequence numbers."""
    from aioproducer.testing.verify import consume_all, topic_end_offsets

    ends = topic_end_offsets(bootstrap, topic)
    total = sum(ends.values())
    if total != rows:
        return f"end offsets add up to {total:,}, expected {rows:,}"
    if full:
        records = consume_all(bootstrap, topic, expected=rows, timeout=600)
    else:
        # A sample: the first 2,000 records of every partition.
        records = []
        for p, end in ends.items():
            if end:
                part = consume_all(bootstrap, topic, partitions=[p], timeout=120)
                records += part[:2000]
    seen: set[int] = set()
    for rec in records:
        if rec.value is None or not rec.value[:SEQ_DIGITS].isdigit():
            return f"record {rec.partition}/{rec.offset} has an unexpected value"
        seq = int(rec.value[:SEQ_DIGITS])
        if seq >= rows or seq in seen:
            return f"sequence number {seq} is out of range or duplicated"
        if rec.key is not None and rec.key != str(seq).encode():
            return f"record {seq} has key {rec.key!r}"
        seen.add(seq)
    return None


# -- profile of the Python side -------------------------------------------------------------------


def profile_worker_path(df: Any, bootstrap: str, topic: str, keyed: bool) -> str:
    """cProfile of aioproducer's task function fed the DataFrame's own Arrow batches here.

    PySpark workers cannot be profiled from the driver, so this runs the same function
    (``aioproducer._spark_tasks.write_arrow``) in this process on one partition's worth of rows.
    """
    import pyarrow as pa

    from aioproducer import _spark_tasks

    columns = ["key", "value"] if keyed else ["value"]
    table = df.select(*columns).limit(250_000).toArrow()
    batches = table.to_batches(max_chunksize=10_000)
    fields = {f.name: f.dataType for f in df.select(*columns).schema.fields}
    spec = _spark_tasks.make_spec(
        fields,
        topic,
        bootstrap_servers=bootstrap,
        key="key" if keyed else None,
        value="value",
        headers=None,
        partition=None,
        topic_column=None,
        flush_timeout=None,
        producer_config={"linger_ms": 5},
    )
    from aioproducer.runner import default_runner

    profiler, loop_profiler = cProfile.Profile(), cProfile.Profile()

    async def switch(on: bool) -> None:
        # cProfile follows one thread: this one runs on the producer's loop thread.
        loop_profiler.enable() if on else loop_profiler.disable()

    list(_spark_tasks.write_arrow(spec, iter(batches[:2])))  # start the producer first
    default_runner().call(switch, True)
    started = time.perf_counter()
    profiler.enable()
    list(_spark_tasks.write_arrow(spec, iter(batches)))
    profiler.disable()
    elapsed = time.perf_counter() - started
    default_runner().call(switch, False)
    out = io.StringIO()
    out.write("Task thread (Arrow to Python, checks, handing chunks over):\n")
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(10)
    out.write("Producer loop thread (partitioning, batching, sending):\n")
    pstats.Stats(loop_profiler, stream=out).sort_stats("tottime").print_stats(12)
    rate = table.num_rows / elapsed
    head = f"{table.num_rows:,} rows in {elapsed:.2f} s under cProfile ({rate:,.0f} rows/s)\n"
    del pa
    return head + out.getvalue()


def _trim(text: str) -> list[str]:
    """The profile's header and table lines, with repository paths shortened."""
    keep = ("ncalls", "Task thread", "Producer loop", "function calls")
    out = []
    for line in text.strip().splitlines():
        stripped = line.lstrip()
        if stripped[:1].isdigit() or stripped.startswith(keep):
            out.append(line.replace(str(_ROOT) + "/", ""))
    return out


# -- main --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print and write the Markdown table."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.spark_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12, help="Kafka partitions")
    parser.add_argument("--df-partitions", type=int, default=8, help="DataFrame partitions")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keyless", action="store_true", help="no key column")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--full-verify", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache/aioproducer/bench"))
    parser.add_argument("--out", default=str(_ROOT / "bench/results/spark_compare.md"))
    ns = parser.parse_args(argv)
    methods = [m.strip() for m in ns.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods: {sorted(unknown)}; choose from {METHODS}")
    keyed = not ns.keyless

    import pyspark
    from pyspark.sql import SparkSession

    from aioproducer.testing import KafkaCluster

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Workers import bench.spark_peers from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p
    )
    jars: list[str] = []
    sink_note = "not run"
    if "spark-kafka" in methods:
        jars, sink_note = fetch_sink_jars(pyspark.__version__, Path(ns.cache_dir))
    builder = (
        SparkSession.builder.master(ns.master)
        .appName("aioproducer-spark-compare")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    filler = "." * (ns.value_size - SEQ_DIGITS)
    exprs = [f"concat(lpad(cast(id AS string), {SEQ_DIGITS}, '0'), '{filler}') AS value"]
    if keyed:
        exprs.insert(0, "cast(id AS string) AS key")
    df = spark.range(0, ns.rows, 1, ns.df_partitions).selectExpr(*exprs).cache()
    df.count()  # materialize the cache: no method pays for generating the rows

    rates: dict[str, list[float]] = {m: [] for m in methods}
    extras: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    failures: list[str] = []
    profile_text = ""
    try:
        with KafkaCluster(nodes=1, heap="1g", jvm_args=_BROKER_JVM_ARGS) as kc:
            bootstrap = kc.bootstrap_servers

            def run(method: str, tag: str) -> None:
                topic = f"spark-compare-{method}-{tag}-{uuid.uuid4().hex[:6]}"
                kc.create_topic(topic, partitions=ns.partitions)
                started = time.perf_counter()
                try:
                    extra = WRITERS[method](df, topic, bootstrap, keyed)
                except Exception as exc:
                    failures.append(f"{method} {tag}: {type(exc).__name__}: {str(exc)[:300]}")
                    return
                elapsed = time.perf_counter() - started
                problem = verify(bootstrap, topic, ns.rows, ns.full_verify)
                if problem:
                    failures.append(f"{method} {tag}: {problem}")
                    return
                if tag != "warm-up":
                    rates[method].append(ns.rows / elapsed)
                    extras[method].append(extra)
                print(
                    f"{tag} {method}: {ns.rows / elapsed:,.0f} rows/s ({elapsed:.2f} s)",
                    file=sys.stderr,
                    flush=True,
                )

            # A smaller warm-up of every method: JVM JIT, worker processes, page cache.
            for method in methods:
                run(method, "warm-up")
            for r in range(ns.rounds):
                for method in methods:
                    run(method, f"round-{r}")
            if ns.profile and "aioproducer" in methods:
                topic = f"spark-compare-profile-{uuid.uuid4().hex[:6]}"
                kc.create_topic(topic, partitions=ns.partitions)
                profile_text = profile_worker_path(df, bootstrap, topic, keyed)
    finally:
        spark.stop()

    med = {m: statistics.median(r) for m, r in rates.items() if r}
    mb = ns.value_size + (len(str(ns.rows)) if keyed else 0)
    lines = [
        "# Writing a DataFrame to Kafka from PySpark",
        "",
        f"`python -m bench.spark_compare` — {ns.rows:,} rows "
        f"({'string key, ' if keyed else ''}{ns.value_size}-byte string value), "
        f"{ns.df_partitions} DataFrame partitions (cached), `{ns.master}`, to a fresh "
        f"{ns.partitions}-partition topic per run on one local Kafka {kc.version} broker; "
        f"acks=all, idempotence, linger 5 ms for every client. Median of {ns.rounds} "
        f"interleaved rounds after a warm-up; every run verified (end offsets sum "
        f"{'and every record' if ns.full_verify else 'and a sample of each partition'}). "
        f"PySpark {pyspark.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores shared by Spark's JVM, its Python workers and the broker "
        f"(and other work on the machine while measured: the numbers are noisy).",
        "",
        f"Spark's Kafka sink: {sink_note}.",
        "",
        "| method | rows/s, median (min-max) | MB/s (values) | vs confluent foreachPartition "
        "| vs Spark Kafka sink |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "aioproducer": "aioproducer.spark.write (mapInArrow)",
        "confluent": "confluent-kafka in foreachPartition",
        "spark-kafka": "Spark Kafka sink (JVM)",
    }
    for m in methods:
        if m not in med:
            lines.append(f"| {names[m]} | FAILED | | | |")
            continue
        vs_c = f"{med[m] / med['confluent']:.2f}x" if "confluent" in med else "-"
        vs_s = f"{med[m] / med['spark-kafka']:.2f}x" if "spark-kafka" in med else "-"
        lines.append(
            f"| {names[m]} | {med[m]:,.0f} ({min(rates[m]):,.0f}-{max(rates[m]):,.0f}) | "
            f"{med[m] * mb / 1e6:.1f} | {vs_c} | {vs_s} |"
        )
    if extras.get("aioproducer"):
        e = extras["aioproducer"][-1]
        lines += [
            "",
            f"aioproducer used {e['producers']} producers for {ns.df_partitions} tasks "
            f"({e['reused_tasks']} tasks ran on a producer reused from an earlier task).",
        ]
    if failures:
        lines += ["", "Failed runs:", *[f"- {f}" for f in failures]]
    if profile_text:
        lines += [
            "",
            "Where aioproducer's Python time goes (one partition's worth of rows, cProfile):",
            "",
            "```",
            *profile_text.strip().splitlines()[:40],
            "```",
        ]
    text = "\n".join(lines) + "\n"
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(text, encoding="utf-8")
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
