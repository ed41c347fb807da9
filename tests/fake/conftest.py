"""Fixtures for tests against the in-process :class:`FakeCluster`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer.testing import FakeCluster


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Async tests here run on asyncio, asyncio+uvloop and trio."""
    return request.param


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    """A one-broker fake cluster with a one-partition topic ``t``."""
    with FakeCluster(brokers=1) as fc:
        fc.create_topic("t", partitions=1)
        yield fc


@pytest.fixture
def fake2() -> Iterator[FakeCluster]:
    """A two-broker fake cluster with a one-partition topic ``t`` led by broker 1."""
    with FakeCluster(brokers=2) as fc:
        fc.create_topic("t", partitions=1, leaders=[1])
        yield fc
