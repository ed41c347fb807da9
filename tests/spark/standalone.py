"""A real Spark standalone cluster (one master, N workers) from the pyspark package's own
launcher, for tests that submit applications to it.

Every process runs in a session of its own, so stopping the cluster kills the JVMs with
whatever they started (executors, their Python workers). All state (work dirs, logs,
scratch) lives in one directory given by the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent.parent
# Short-lived JVMs on a small machine: the client compiler only and a serial collector
# start faster and burn far less CPU than the defaults, for these few-second jobs.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> Path:
    """The pip-installed pyspark package: it ships ``bin/`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def spark_env(root: Path) -> dict[str, str]:
    """The environment for the cluster's daemons and for spark-submit: this interpreter on
    both sides, everything on 127.0.0.1, and this checkout of aioproducer importable."""
    env = dict(os.environ)
    conf_dir = root / "conf"  # empty: no site configuration leaks in
    conf_dir.mkdir(parents=True, exist_ok=True)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(root / "scratch"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
        # No REST submission server: it would take the fixed port 6066.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        # Executors' Python workers import the aioproducer under test (PySpark merges
        # this into their PYTHONPATH), not whatever copy the interpreter has installed.
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    return env


@dataclass
class StandaloneCluster:
    """A running master and its workers; :meth:`stop` ends them all."""

    root: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    master_url: str = ""
    web_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    _handles: list[IO[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return spark_env(self.root)

    def _launch(self, name: str, *args: str) -> None:
        log = self.root / f"{name}.log"
        handle = log.open("wb")
        self._handles.append(handle)
        self.logs.append(log)
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        self.processes.append(
            subprocess.Popen(
                command,
                env=self.env,
                cwd=self.root,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as one
            )
        )

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        """Start the master and the workers; return once every worker has registered."""
        self.root.mkdir(parents=True, exist_ok=True)
        port, web_port = free_port(), free_port()
        while web_port == port:
            web_port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        self.web_url = f"http://127.0.0.1:{web_port}"
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)),
        )
        deadline = time.monotonic() + timeout
        # A worker that registers before the master is elected leader is ignored and only
        # retries some seconds later: start the workers once the master answers ALIVE.
        while self._status_or_none().get("status") != "ALIVE":
            self._check(deadline, "the master did not come up")
            time.sleep(0.3)
        for n in range(self.workers):
            work = self.root / f"worker-{n}"
            work.mkdir(exist_ok=True)
            self._launch(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                *("--host", "127.0.0.1", "--webui-port", "0"),
                *("--cores", str(self.worker_cores), "--memory", self.worker_memory),
                *("--work-dir", str(work)),
            )
        while self.alive_workers() < self.workers:
            self._check(deadline, f"{self.workers} workers did not register")
            time.sleep(0.3)
        return self

    def _check(self, deadline: float, what: str) -> None:
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"{log.stem} exited: {self.tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} in time: " + " | ".join(map(self.tail, self.logs)))

    def status(self) -> dict[str, Any]:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as answer:
            status: dict[str, Any] = json.load(answer)
            return status

    def _status_or_none(self) -> dict[str, Any]:
        try:
            return self.status()
        except (OSError, ValueError):
            return {}  # the master's web UI is not up yet

    def alive_workers(self) -> int:
        workers = self._status_or_none().get("workers", [])
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    @staticmethod
    def tail(log: Path, chars: int = 2000) -> str:
        try:
            return log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def submit(
        self,
        script: Path,
        *args: str,
        conf: dict[str, str] | None = None,
        timeout: float = 420.0,
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master <this cluster> script args`` (client mode): its output."""
        settings = {
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            **(conf or {}),
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            *("--master", self.master_url),
            *("--executor-memory", "512m", "--driver-memory", "512m"),
            *("--driver-java-options", JVM_OPTIONS),
            *(arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")),
            str(script),
            *args,
        ]
        process = subprocess.Popen(
            command,
            env=self.env,
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # on a timeout, its Python driver is killed with it
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def stop(self) -> None:
        """Kill every process of the cluster (and their children), then wait for them."""
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Also whatever the JVM left in its group (an executor, its Python daemon).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for handle in self._handles:
            handle.close()
        self.processes.clear()
