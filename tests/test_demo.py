"""The demo (the README's first command) runs and reports a clean delivery."""

from __future__ import annotations

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
