"""The examples run against the test broker and produce what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_example(kafka: KafkaCluster) -> None:
    kafka.create_topic("quickstart-example", partitions=3)
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "quickstart.py"),
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--topic",
            "quickstart-example",
            "--count",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 6
    records = consume_all(kafka.bootstrap_servers, "quickstart-example", expected=6)
    assert sorted(r.value for r in records) == sorted(f"hello {i}".encode() for i in range(6))
    assert {r.key for r in records} == {b"user-0", b"user-1", b"user-2"}
