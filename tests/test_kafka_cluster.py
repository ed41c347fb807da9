"""Tests of aioproducer.testing: the real-Kafka harness itself.

Most use the session clusters from conftest; a few start a dedicated cluster or a fake
``java``/``mvn`` to check clean-up and error reporting.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from aioproducer.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.testing import (
    KafkaCluster,
    KafkaSetupError,
    _admin,
    _cluster,
    ensure_kafka,
    find_java,
)
from aioproducer.testing._cds import class_data_archive
from aioproducer.testing._install import DEFAULT_KAFKA_VERSION

T = TypeVar("T")
NewTopic = Callable[..., str]
REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll ``condition`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.1)


def broker_ids(cluster: KafkaCluster) -> set[int]:
    return {b.node_id for b in cluster.metadata().brokers}


def pid_exists(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (Linux /proc; empty elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


# -- the session clusters ------------------------------------------------------------------


def test_single_node_lists_its_broker(kafka: KafkaCluster) -> None:
    metadata = kafka.metadata()
    assert [(b.node_id, f"{b.host}:{b.port}") for b in metadata.brokers] == [
        (1, kafka.bootstrap_servers)
    ]
    assert metadata.controller_id == 1
    assert metadata.cluster_id
    assert kafka.node_ids == [1]
    assert kafka.broker_address(1) == kafka.bootstrap_servers
    assert kafka.is_running(1)


def test_create_topic_gives_every_partition_a_leader(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    name = new_topic(partitions=3)
    assert kafka.partition_leaders(name) == {0: 1, 1: 1, 2: 1}
    assert kafka.leader_for(name, 2) == 1
    with pytest.raises(TopicAlreadyExistsError):
        kafka.create_topic(name)
    with pytest.raises(UnknownTopicOrPartitionError):
        kafka.partition_leaders("no-such-topic-" + name)


def test_create_topic_returns_once_every_leader_serves_its_partitions(
    kafka: KafkaCluster, new_topic: NewTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A broker lists itself as leader before it has created the partition's log; a
    # producer that writes then gets NOT_LEADER_OR_FOLLOWER. create_topic waits for
    # ListOffsets to succeed on each leader.
    name = new_topic(partitions=24)
    host, port = kafka.bootstrap_servers.rsplit(":", 1)
    errors = _admin.list_offsets_errors(host, int(port), name, list(range(24)), timeout=10)
    assert errors == dict.fromkeys(range(24), int(ErrorCode.NONE))

    real = _admin.list_offsets_errors
    calls: list[list[int]] = []

    def not_yet(host: str, port: int, topic: str, partitions: list[int], **kw: float) -> dict:
        calls.append(list(partitions))
        if len(calls) < 3:
            return dict.fromkeys(partitions, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        return real(host, port, topic, partitions, **kw)

    monkeypatch.setattr(_admin, "list_offsets_errors", not_yet)
    kafka.create_topic(name + "-b", partitions=4)
    assert calls == [[0, 1, 2, 3]] * 3

    monkeypatch.setattr(
        _admin,
        "list_offsets_errors",
        lambda host, port, topic, partitions, **kw: dict.fromkeys(
            partitions, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        ),
    )
    with pytest.raises(KafkaSetupError, match=r"does not serve partitions \[0, 1\] yet"):
        kafka.create_topic(name + "-c", partitions=2, timeout=1.0)


def test_admin_client_works_inside_a_running_event_loop(kafka: KafkaCluster, topic: str) -> None:
    async def main() -> dict[int, int]:
        return kafka.partition_leaders(topic)

    assert asyncio.run(main()) == {0: 1}


def test_three_nodes_replicate_by_default(kafka3: KafkaCluster, new_topic: NewTopic) -> None:
    assert broker_ids(kafka3) == {1, 2, 3}
    assert len(kafka3.bootstrap_servers.split(",")) == 3
    name = new_topic(partitions=3, cluster=kafka3)
    entry = kafka3.metadata([name]).topics[0]
    assert all(sorted(p.replicas) == [1, 2, 3] for p in entry.partitions)
    assert set(kafka3.partition_leaders(name).values()) <= {1, 2, 3}


@pytest.mark.slow
def test_killed_leader_fails_over_and_restarts(kafka3: KafkaCluster, new_topic: NewTopic) -> None:
    name = new_topic(partitions=1, cluster=kafka3)
    leader = kafka3.leader_for(name, 0)
    old_pid = kafka3.pid(leader)
    kafka3.kill_broker(leader)
    try:
        assert not kafka3.is_running(leader)
        assert old_pid is not None and not pid_exists(old_pid)
        new_leader = wait_for(
            lambda: (lid := kafka3.leader_for(name, 0)) not in (-1, leader) and lid,
            what="a new leader",
        )
        assert new_leader in set(kafka3.node_ids) - {leader}
    finally:
        kafka3.restart_broker(leader)
    assert kafka3.is_running(leader)
    assert kafka3.pid(leader) != old_pid
    assert broker_ids(kafka3) == {1, 2, 3}
    # Same port as before the kill.
    assert kafka3.broker_address(leader) in kafka3.bootstrap_servers


@pytest.mark.slow
def test_paused_broker_is_fenced_and_comes_back(kafka3: KafkaCluster) -> None:
    victim = 3
    kafka3.pause_broker(victim)
    try:
        assert kafka3.is_running(victim) and kafka3.is_paused(victim)
        wait_for(lambda: victim not in broker_ids(kafka3), what="the paused broker to be fenced")
    finally:
        kafka3.resume_broker(victim)
    assert not kafka3.is_paused(victim)
    assert broker_ids(kafka3) == {1, 2, 3}


def test_graceful_stop_and_start_broker(kafka3: KafkaCluster) -> None:
    kafka3.stop_broker(2)
    try:
        assert not kafka3.is_running(2)
        assert kafka3.pid(2) is None
        # A controlled shutdown unregisters at once; no session timeout to wait for.
        wait_for(lambda: 2 not in broker_ids(kafka3), timeout=10, what="broker 2 to leave")
    finally:
        kafka3.start_broker(2)
    assert broker_ids(kafka3) == {1, 2, 3}


# -- dedicated clusters --------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.cluster3
@pytest.mark.slow
def test_three_node_context_manager_leaves_nothing_behind() -> None:
    with KafkaCluster(nodes=3) as cluster:
        assert broker_ids(cluster) == {1, 2, 3}
        pids = [cluster.pid(node_id) for node_id in cluster.node_ids]
        work_dir = cluster.work_dir
        assert all(pid is not None and pid_exists(pid) for pid in pids)
    assert not any(pid_exists(pid) for pid in pids if pid is not None)
    assert not work_dir.exists()
    assert processes_mentioning(str(work_dir)) == []


@pytest.mark.broker
def test_context_exit_on_exception_stops_the_brokers(tmp_path: Path) -> None:
    work_dir = tmp_path / "kept"
    pid: int | None = None
    with pytest.raises(RuntimeError, match="boom"), KafkaCluster(work_dir=work_dir) as cluster:
        pid = cluster.pid(1)
        raise RuntimeError("boom")
    assert pid is not None and not pid_exists(pid)
    # A work dir the caller chose is kept, with the broker's log.
    assert "Kafka Server started" in (work_dir / "node-1" / "server.log").read_text()


@pytest.mark.broker
def test_startup_failure_reports_the_broker_log() -> None:
    cluster = KafkaCluster(broker_config={"message.max.bytes": "not-a-number"})
    with pytest.raises(KafkaSetupError) as info:
        cluster.start()
    assert "message.max.bytes" in str(info.value)
    with pytest.raises(KafkaSetupError, match="not running"):
        _ = cluster.bootstrap_servers


@pytest.mark.broker
def test_fixed_port_in_use_is_reported() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(KafkaSetupError, match="Address already in use"):
            KafkaCluster(port_base=port).start()


@pytest.mark.broker
def test_port_race_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    real_free_ports = _cluster.free_ports
    calls: list[list[int]] = []

    def stolen_first(count: int) -> list[int]:
        ports = real_free_ports(count)
        if not calls:
            ports[0] = busy.getsockname()[1]
        calls.append(ports)
        return ports

    # Any class-data-sharing training run must happen first: it picks ports too.
    class_data_archive(
        find_java(), ensure_kafka(), partial(_cluster.record_class_data, KafkaCluster())
    )
    monkeypatch.setattr(_cluster, "free_ports", stolen_first)
    try:
        with KafkaCluster() as cluster:
            assert len(calls) == 2
            assert cluster.broker_address(1) == f"127.0.0.1:{calls[1][0]}"
            assert broker_ids(cluster) == {1}
    finally:
        busy.close()


def test_broker_config_may_not_override_the_layout() -> None:
    with pytest.raises(ValueError, match="listeners"):
        KafkaCluster(broker_config={"listeners": "PLAINTEXT://:9092"})


# -- command line ----------------------------------------------------------------------------


@pytest.fixture
def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def cli(
    cli_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[[], tuple[subprocess.Popen[str], str, int]]]:
    """Starts ``python -m aioproducer.testing.kafka start``; returns (proc, bootstrap, jvm pid)."""
    started: list[subprocess.Popen[str]] = []

    def run() -> tuple[subprocess.Popen[str], str, int]:
        stderr_path = tmp_path / "cli-stderr.txt"
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "aioproducer.testing.kafka", "start"],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=cli_env,
                cwd=tmp_path,
            )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap.servers=127.0.0.1:"), stderr_path.read_text()
        pid_line = next(
            text for text in stderr_path.read_text().splitlines() if text.startswith("node 1:")
        )
        jvm_pid = int(pid_line.split(" pid ")[1].split()[0])
        return proc, line.partition("=")[2], jvm_pid

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.broker
def test_cli_start_runs_until_sigterm(
    cli: Callable[[], tuple[subprocess.Popen[str], str, int]], tmp_path: Path
) -> None:
    proc, bootstrap, jvm_pid = cli()
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=5):
        pass
    assert pid_exists(jvm_pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not pid_exists(jvm_pid)
    # It says it stopped, rather than falling silent.
    assert "stopped 1 node(s)" in (tmp_path / "cli-stderr.txt").read_text()


ATEXIT_SCRIPT = """
from aioproducer.testing import KafkaCluster
cluster = KafkaCluster().start()
print(cluster.pid(1), cluster.work_dir, flush=True)
# no stop(): interpreter exit must do it
"""


@pytest.mark.broker
def test_interpreter_exit_stops_forgotten_clusters(cli_env: dict[str, str], tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", ATEXIT_SCRIPT],
        capture_output=True,
        text=True,
        env=cli_env,
        cwd=tmp_path,
        timeout=300,
        check=True,
    )
    pid, work_dir = out.stdout.split()
    assert not pid_exists(int(pid))
    # Only the atexit handler (not the kernel's parent-death signal) removes the work dir.
    assert not Path(work_dir).exists()


@pytest.mark.broker
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_brokers_die_with_a_killed_parent(
    cli: Callable[[], tuple[subprocess.Popen[str], str, int]],
) -> None:
    proc, _, jvm_pid = cli()
    proc.kill()  # no atexit, no signal handler: only the kernel can clean up
    proc.wait()
    wait_for(lambda: not pid_exists(jvm_pid), timeout=10, what="the orphaned JVM to die")

    def orphaned_dirs() -> list[Path]:
        pid_files = Path(tempfile.gettempdir()).glob("aioproducer-kafka-*/node-1/broker.pid")
        return [p.parent.parent for p in pid_files if p.read_text().strip() == str(jvm_pid)]

    # Its temporary work dir is left behind, until the next cluster starts.
    assert len(orphaned_dirs()) == 1
    with KafkaCluster():
        assert orphaned_dirs() == []


@pytest.mark.broker
def test_cli_fetch(cli_env: dict[str, str], tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aioproducer.testing.kafka", "fetch"],
        capture_output=True,
        text=True,
        env=cli_env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "jars:" in out.stdout


# -- setup errors (no real broker) --------------------------------------------------------


def write_script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An otherwise empty directory that is all of PATH; JAVA_HOME is unset."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    return directory


def link_real_java(fake_bin: Path) -> None:
    real = find_java().executable
    (fake_bin / "java").symlink_to(real)


def test_missing_java_explains_what_to_install(fake_bin: Path) -> None:
    with pytest.raises(KafkaSetupError) as info:
        KafkaCluster().start()
    message = str(info.value)
    assert "Java 17" in message
    assert "no `java` executable" in message
    assert "JAVA_HOME" in message and "apt-get install openjdk-17" in message


def test_old_java_is_rejected(fake_bin: Path) -> None:
    write_script(fake_bin / "java", "echo 'openjdk version \"11.0.22\" 2024-01-16' >&2\n")
    with pytest.raises(KafkaSetupError, match=r"Java 11"):
        ensure_kafka()


def test_missing_maven_explains_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_java = find_java().executable
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "java").symlink_to(real_java)
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    cache = tmp_path / "cache"
    with pytest.raises(KafkaSetupError, match=r"Maven \(`mvn`\)") as info:
        ensure_kafka(cache_dir=cache)
    assert "apt-get install maven" in str(info.value)
    assert not (cache / f"kafka-{DEFAULT_KAFKA_VERSION}").exists()


FAKE_MVN = """
PATH=/usr/bin:/bin
for arg in "$@"; do
  case "$arg" in
    -DoutputDirectory=*) out="${arg#-DoutputDirectory=}" ;;
    -Dkafka.version=*) version="${arg#-Dkafka.version=}" ;;
  esac
done
echo "run" >> "$FAKE_MVN_COUNTER"
if [ -n "$FAKE_MVN_FAIL" ]; then echo "[ERROR] Could not resolve dependencies"; exit 1; fi
sleep 1
mkdir -p "$out"
touch "$out/kafka_2.13-$version.jar" "$out/kafka-clients-$version.jar"
"""


@pytest.fixture
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds the real java and a fake mvn that records each run in the returned file."""
    real_java = find_java().executable
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "java").symlink_to(real_java)
    write_script(directory / "mvn", FAKE_MVN)
    counter = tmp_path / "mvn-runs"
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("FAKE_MVN_COUNTER", str(counter))
    return counter


def test_concurrent_fetches_run_maven_once(fake_mvn: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    barrier = threading.Barrier(3)

    def fetch() -> Path:
        barrier.wait()
        return ensure_kafka("9.9.9-test", cache_dir=cache)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: fetch(), range(3)))
    libs = cache / "kafka-9.9.9-test" / "libs"
    assert results == [libs] * 3
    assert (libs / "kafka_2.13-9.9.9-test.jar").is_file()
    assert fake_mvn.read_text().splitlines() == ["run"]
    assert (libs.parent / ".complete").is_file()
    assert sorted(p.name for p in cache.iterdir()) == [".kafka-9.9.9-test.lock", "kafka-9.9.9-test"]
    # Cached now: no further Maven run.
    assert ensure_kafka("9.9.9-test", cache_dir=cache) == libs
    assert fake_mvn.read_text().splitlines() == ["run"]


def test_failed_fetch_names_the_maven_log(
    fake_mvn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    cache = tmp_path / "cache"
    with pytest.raises(KafkaSetupError) as info:
        ensure_kafka("9.9.9-test", cache_dir=cache)
    log = cache / "kafka-9.9.9-test-fetch.log"
    assert str(log) in str(info.value)
    assert "Could not resolve dependencies" in log.read_text()
    assert not (cache / "kafka-9.9.9-test").exists()
    assert not any(p.name.startswith(".kafka-9.9.9-test-") for p in cache.iterdir())


def test_incomplete_fetch_is_never_used(fake_mvn: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    half = cache / "kafka-9.9.9-test" / "libs"
    half.mkdir(parents=True)
    (half / "truncated.jar").write_bytes(b"")
    libs = ensure_kafka("9.9.9-test", cache_dir=cache)
    assert not (libs / "truncated.jar").exists()
    assert fake_mvn.read_text().splitlines() == ["run"]
