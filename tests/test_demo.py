"""The demo (the README's first command) runs and reports a clean delivery."""

from __future__ import annotations

import re
import subprocess
import sys

from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import topic_end_offsets


def test_demo_against_an_existing_broker_delivers_everything(kafka: KafkaCluster) -> None:
    topic = "demo-test-topic"
    kafka.create_topic(topic, partitions=3)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aioproducer",
            "demo",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--topic",
            topic,
            "--records",
            "20000",
            "--partitions",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "delivered            20,000" in result.stdout
    assert "failed               0" in result.stdout
    assert sum(topic_end_offsets(kafka.bootstrap_servers, topic).values()) == 20000


def test_help_is_plain_text_with_every_option_explained() -> None:
    for args in (["--help"], ["demo", "--help"]):
        result = subprocess.run(
            [sys.executable, "-m", "aioproducer", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "``" not in result.stdout and ":mod:" not in result.stdout
    options = result.stdout.split("options:", 1)[1]
    entries = re.split(r"\n  (?=-)", options.strip())
    assert len(entries) == 10  # -h, and the nine of the demo
    for entry in entries:
        flags, _, text = entry.partition("  ")
        assert text.strip() or "\n" in entry, f"no help text for {flags}"
