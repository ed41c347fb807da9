"""Shared fixtures: real Apache Kafka clusters for the tests that need a broker.

``kafka`` (one node) and ``kafka3`` (three nodes) are started once per session, on first
use. They never skip: if Kafka cannot be started (no Java 17+, no Maven for the first
download, no network), every test using them errors with the reason. Tests that use a
broker fixture are marked ``broker`` (and ``cluster3`` for the 3-node cluster)
automatically, so ``-m "not broker"`` runs the rest alone.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Protocol

import pytest

from aioproducer.testing import KafkaCluster

_BROKER_FIXTURES = frozenset({"kafka", "kafka3", "new_topic", "topic"})
_CLUSTER3_FIXTURES = frozenset({"kafka3"})

# Outcomes of broker-marked tests, for the summary line CI logs are searched for.
_BROKER_OUTCOMES: Counter[str] = Counter()


class NewTopic(Protocol):
    """Creates a uniquely named topic and returns its name (type of ``new_topic``)."""

    def __call__(
        self,
        partitions: int = 1,
        *,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        cluster: KafkaCluster | None = None,
    ) -> str: ...


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaCluster]:
    """A single-node Kafka cluster shared by the whole session."""
    with KafkaCluster(nodes=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka3() -> Iterator[KafkaCluster]:
    """A three-node Kafka cluster shared by the whole session.

    Tests that stop, kill or pause brokers must bring them back before they finish.
    """
    with KafkaCluster(nodes=3) as cluster:
        yield cluster


@pytest.fixture
def new_topic(request: pytest.FixtureRequest) -> NewTopic:
    """Factory for fresh topics: ``new_topic(partitions=3, cluster=kafka3) -> name``.

    The topic is created on ``cluster`` (default: the single-node ``kafka``) and every
    partition has a leader when the call returns.
    """

    def create(
        partitions: int = 1,
        *,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        cluster: KafkaCluster | None = None,
    ) -> str:
        target: KafkaCluster = cluster if cluster is not None else request.getfixturevalue("kafka")
        name = _unique_topic_name(request.node.name)
        target.create_topic(name, partitions, replication_factor, config)
        return name

    return create


@pytest.fixture
def topic(new_topic: NewTopic) -> str:
    """A fresh single-partition topic on the single-node ``kafka`` cluster."""
    return new_topic()


def _unique_topic_name(test_name: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", test_name).strip("-.") or "topic"
    return f"{base[:200]}-{uuid.uuid4().hex[:10]}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the broker fixtures they use (before ``-m`` selects on the marks)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        uses_cluster3 = bool(fixtures & _CLUSTER3_FIXTURES) or (
            item.get_closest_marker("cluster3") is not None
        )
        if uses_cluster3 and item.get_closest_marker("cluster3") is None:
            item.add_marker(pytest.mark.cluster3)
        if (fixtures & _BROKER_FIXTURES or uses_cluster3) and (
            item.get_closest_marker("broker") is None
        ):
            item.add_marker(pytest.mark.broker)
        if item.get_closest_marker("broker") is not None:
            # Under pytest-xdist's --dist loadgroup (make test): the broker tests run in
            # lanes, each lane on one worker with its own session clusters (tests in a lane
            # share brokers and fault them one at a time); the rest spread freely.
            lane = "spark" if "spark" in item.path.parts or "spark" in item.name else "broker"
            if item.path.name == "test_spark_standalone.py":
                lane = "standalone"  # its own Spark cluster: not the spark lane's session
            item.add_marker(pytest.mark.xdist_group(lane))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the outcome of every broker-marked test."""
    if "broker" not in report.keywords:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.passed:
            outcome = "passed"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "setup":
            outcome = "errors"
        else:
            outcome = "failed"
        _BROKER_OUTCOMES[outcome] += 1
    elif report.when == "teardown" and report.failed:
        _BROKER_OUTCOMES["errors"] += 1


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """Print ``real-broker tests: N passed, M failed`` so CI logs show the count."""
    counts = _BROKER_OUTCOMES
    if not counts:
        return
    parts = [f"{counts['passed']} passed", f"{counts['failed']} failed"]
    parts += [f"{counts[k]} {k}" for k in ("errors", "skipped", "xfailed", "xpassed") if counts[k]]
    terminalreporter.write_line("real-broker tests: " + ", ".join(parts))
