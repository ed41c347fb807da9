"""Which broker a metadata refresh asks first, when some of them have failed.

Regression: a refresh asked an idle bootstrap connection (or a broker whose connection had
just timed out) before the healthy brokers. When that address belonged to a frozen broker
the refresh waited a whole request timeout, so partitions whose leader had already moved
stayed stuck for as long as the broker was frozen.
"""

from __future__ import annotations

from typing import Any

from aioproducer.cluster import Cluster, ClusterSnapshot
from aioproducer.config import ProducerConfig
from aioproducer.errors import ConnectionError as KafkaConnectionError

BOOT = -1000  # the node id of the first bootstrap address


class _Conn:
    def __init__(self, node_id: int, *, closed: bool = False, in_flight: int = 0) -> None:
        self.node_id = node_id
        self.closed = closed
        self.in_flight = in_flight


def _cluster(brokers: int, connections: list[_Conn]) -> Cluster:
    cluster = Cluster(ProducerConfig.from_kwargs({"bootstrap_servers": "127.0.0.1:1"}))
    cluster.snapshot = ClusterSnapshot(
        {n: ("127.0.0.1", 9000 + n) for n in range(1, brokers + 1)}, {}, {}
    )
    conns: dict[int, Any] = {c.node_id: c for c in connections}
    cluster._connections = conns
    return cluster


def test_before_metadata_the_bootstrap_connection_is_asked() -> None:
    cluster = _cluster(0, [_Conn(BOOT)])
    assert cluster.least_loaded_candidates() == [BOOT]


def test_connected_brokers_go_first_by_load_then_healthy_ones_then_bootstrap() -> None:
    cluster = _cluster(4, [_Conn(BOOT), _Conn(2, in_flight=3), _Conn(4, in_flight=1)])
    ids = cluster.least_loaded_candidates()
    assert ids[:2] == [4, 2]
    assert set(ids[2:4]) == {1, 3}
    assert ids[4:] == [BOOT]


def test_brokers_that_failed_or_were_lost_are_asked_last() -> None:
    lost = _Conn(1, closed=True)
    cluster = _cluster(3, [_Conn(BOOT), lost])
    cluster._connect_errors[2] = KafkaConnectionError("refused")
    ids = cluster.least_loaded_candidates()
    assert ids[:2] == [3, BOOT]
    assert set(ids[2:]) == {1, 2}


def test_a_bootstrap_connection_to_a_lost_broker_is_asked_after_the_healthy_ones() -> None:
    # The bootstrap address is broker 1's. Its own connection timed out (it is frozen), but
    # the idle bootstrap connection to it still looks open: asking through it would hold
    # the refresh for a whole request timeout.
    cluster = Cluster(ProducerConfig.from_kwargs({"bootstrap_servers": "127.0.0.1:9001"}))
    cluster.snapshot = ClusterSnapshot({n: ("127.0.0.1", 9000 + n) for n in (1, 2, 3)}, {}, {})
    conns: dict[int, Any] = {BOOT: _Conn(BOOT), 1: _Conn(1, closed=True)}
    cluster._connections = conns
    ids = cluster.least_loaded_candidates()
    assert set(ids[:2]) == {2, 3}
    assert ids[2:] == [1, BOOT]
    # A bootstrap connection to a healthy broker keeps its place before the lost ones.
    conns[1] = _Conn(1)
    conns[2] = _Conn(2, closed=True)
    assert cluster.least_loaded_candidates() == [1, 3, BOOT, 2]
