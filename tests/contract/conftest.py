"""Contract tests run against ``Producer`` on asyncio, asyncio+uvloop and trio, and against
``SyncProducer`` (driven from worker threads of an asyncio test)."""

from __future__ import annotations

from typing import Any

import pytest
from support import Kind, OpenProducer, ProducerDriver, open_driver

from aioproducer.testing import KafkaCluster


@pytest.fixture(
    params=[
        pytest.param(("async", ("asyncio", {})), id="asyncio"),
        pytest.param(("async", ("asyncio", {"use_uvloop": True})), id="uvloop"),
        pytest.param(("async", ("trio", {})), id="trio"),
        pytest.param(("sync", ("asyncio", {})), id="sync"),
    ]
)
def flavour(request: pytest.FixtureRequest) -> tuple[Kind, Any]:
    """Which producer a test drives, and the event loop the test itself runs on."""
    kind: Kind
    kind, backend = request.param
    return kind, backend


@pytest.fixture
def anyio_backend(flavour: tuple[Kind, Any]) -> Any:
    return flavour[1]


@pytest.fixture
def open_producer(flavour: tuple[Kind, Any], kafka: KafkaCluster) -> OpenProducer:
    """``open_producer(**config)``: a driver for a new producer of this flavour on ``kafka``."""

    def make(**config: Any) -> ProducerDriver:
        return open_driver(flavour[0], kafka.bootstrap_servers, **config)

    return make
