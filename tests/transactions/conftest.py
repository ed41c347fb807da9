"""Real clusters that speak transaction version 1 and 2.

Each cluster is module-scoped and parametrized, so a module's tests run against one
version, then the other, with a single extra broker alive at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aioproducer.protocol.messages import ApiVersionsRequest
from aioproducer.testing import KafkaCluster
from aioproducer.testing._admin import AdminConnection


@pytest.fixture(
    scope="module",
    params=[pytest.param(1, id="tv1"), pytest.param(2, id="tv2")],
)
def txn_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A one-node cluster formatted with ``transaction.version`` 1 or 2."""
    level: int = request.param
    with KafkaCluster(nodes=1, features={"transaction.version": level}) as cluster:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with AdminConnection(host, int(port), timeout=10) as conn:
            features = conn.send(ApiVersionsRequest()).finalized_features
        assert features["transaction.version"][1] == level, features
        yield cluster
