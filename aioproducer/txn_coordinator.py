"""Finding the coordinators of a transactional producer and talking to them, with retries.

A transactional id has a transaction coordinator and a consumer group a group coordinator,
each a broker found with FindCoordinator. :class:`CoordinatorClient` remembers which broker
that is, sends a request to it until the answer is not one to retry, and looks the
coordinator up again when it moved. What an answer means for the transaction is decided by
:class:`~aioproducer.transactions.TransactionManager` (``transactions.py``).

Package-internal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from .cluster import Cluster, backoff
from .config import ProducerConfig
from .connection import BrokerConnection
from .errors import (
    BrokerResponseError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for_code,
)
from .errors import ConnectionError as KafkaConnectionError
from .protocol.error_codes import ErrorCode
from .protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from .protocol.versions import ApiKey

__all__ = ["TV1_CAPS", "CoordinatorClient", "speaks_tv2"]

# The transaction manager's logger: these are steps of its transactional calls.
log = logging.getLogger("aioproducer.transactions")

# The coordinator moved (or is not there yet): find it again.
_LOOKUP_AGAIN = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
# Wait a moment and ask the same coordinator again.
_RETRY_SAME = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
    }
)
# CONCURRENT_TRANSACTIONS clears within milliseconds (the markers of the previous
# transaction are being written): Java retries AddPartitionsToTxn after 20 ms.
_SHORT_BACKOFF = 0.02
# Produce, EndTxn and TxnOffsetCommit versions that tell the broker the client speaks
# transaction version 2; a version 1 client stays below them.
TV1_CAPS: Mapping[ApiKey, int] = {
    ApiKey.PRODUCE: 11,
    ApiKey.END_TXN: 4,
    ApiKey.TXN_OFFSET_COMMIT: 4,
}


class CoordinatorClient:
    """The requests of one transactional producer to its coordinators.

    Used on the producer's loop only; :meth:`open` must run there before the first call.
    """

    def __init__(self, config: ProducerConfig, cluster: Cluster) -> None:
        self.config = config
        self.cluster = cluster
        # Coordinator node id per (key type, key).
        self._coordinators: dict[tuple[int, str], int] = {}
        self._lock: anyio.Lock | None = None
        self._retry_min = config.retry_backoff_ms / 1000
        self._retry_max = config.retry_backoff_max_ms / 1000

    def open(self) -> None:
        """Make the lock that orders the calls (on the loop that will make them)."""
        if self._lock is None:
            self._lock = anyio.Lock()

    async def call(
        self,
        key_type: int,
        key: str,
        make: Callable[[], Any],
        deadline: float,
        *,
        tv2: bool,
        min_version: int = 0,
    ) -> Any:
        """Send ``make()`` to the coordinator of ``key`` until it succeeds, retrying what
        the coordinator asks to retry until ``deadline``; raises the typed error else.
        A broker below ``min_version`` of the request raises ``UnsupportedVersionError``;
        ``tv2`` false keeps the request below the versions that mean transaction version 2.
        One call at a time: the lock orders them as the transactional calls are."""
        assert self._lock is not None
        attempts = 0
        async with self._lock:
            while True:
                attempts += 1
                delay = backoff(attempts, self._retry_min, self._retry_max)
                request = make()
                try:
                    conn = await self._coordinator(key_type, key)
                    version = _version(conn, request.API_KEY, tv2)
                    if version < min_version:
                        raise UnsupportedVersionError(
                            f"{type(request).__name__} needs version {min_version} or later; "
                            f"the broker offers {version}"
                        )
                    response = await conn.request(request, version)
                    code = _first_error(response)
                    if code == ErrorCode.NONE:
                        return response
                    error: KafkaError = error_for_code(code, f"{type(request).__name__}")
                except KafkaError as exc:
                    error = exc
                    code = exc.code if isinstance(exc, BrokerResponseError) else -2
                    if isinstance(exc, KafkaConnectionError):
                        code = ErrorCode.NOT_COORDINATOR
                if code in _LOOKUP_AGAIN:
                    self._coordinators.pop((key_type, key), None)
                elif code == ErrorCode.CONCURRENT_TRANSACTIONS:
                    delay = _SHORT_BACKOFF
                elif code not in _RETRY_SAME and not error.retriable:
                    raise error
                log.debug(
                    "%s to the coordinator of %r: %s, retrying", type(request).__name__, key, error
                )
                if time.monotonic() + delay > deadline:
                    raise KafkaTimeoutError(
                        f"{type(request).__name__} for {key!r} did not succeed within "
                        f"max_block_ms ({self.config.max_block_ms} ms): {error}"
                    ) from error
                await anyio.sleep(delay)

    async def _coordinator(self, key_type: int, key: str) -> BrokerConnection:
        node_id = self._coordinators.get((key_type, key))
        if node_id is None:
            node_id = await self._find_coordinator(key_type, key)
            self._coordinators[(key_type, key)] = node_id
        try:
            return await self.cluster.connect(node_id)
        except KafkaError:
            self._coordinators.pop((key_type, key), None)
            raise

    async def _find_coordinator(self, key_type: int, key: str) -> int:
        last: BaseException | None = None
        for candidate in self.cluster.least_loaded_candidates():
            try:
                conn = await self.cluster.connect(candidate)
            except KafkaError as exc:
                last = exc
                continue
            version = conn.versions.get(ApiKey.FIND_COORDINATOR)
            if version is None:
                raise UnsupportedVersionError("the broker does not support FindCoordinator")
            if version >= 4:
                request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            else:
                request = FindCoordinatorRequest(key=key, key_type=key_type)
            response: FindCoordinatorResponse = await conn.request(request, version)
            if response.coordinators:
                found = response.coordinators[0]
                code, node_id, host, port = found.error_code, found.node_id, found.host, found.port
            else:
                code, node_id = response.error_code, response.node_id
                host, port = response.host, response.port
            if code:
                raise error_for_code(code, f"FindCoordinator for {key!r}")
            self.cluster.remember_address(node_id, host, port)
            return node_id
        raise last or KafkaConnectionError("no broker reachable to find a coordinator")

    async def connection_with_retries(
        self, key_type: int, key: str, deadline: float
    ) -> BrokerConnection:
        """A connection to the coordinator of ``key``, looked for until ``deadline``."""
        attempts = 0
        while True:
            attempts += 1
            try:
                return await self._coordinator(key_type, key)
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    if exc.retriable:
                        raise KafkaTimeoutError(
                            f"no transaction coordinator found for {key!r} within "
                            f"max_block_ms ({self.config.max_block_ms} ms): {exc}"
                        ) from exc
                    raise
                log.debug("finding the coordinator of %r: %s, retrying", key, exc)
                await anyio.sleep(backoff(attempts, self._retry_min, self._retry_max))


def speaks_tv2(conn: BrokerConnection) -> bool:
    """Whether the broker behind ``conn`` speaks transaction version 2 (KIP-890)."""
    level = conn.finalized_features.get("transaction.version", (0, 0))[1]
    versions = conn.versions
    return (
        level >= 2
        and versions.get(ApiKey.PRODUCE, 0) >= 12
        and versions.get(ApiKey.END_TXN, 0) >= 5
    )


def _version(conn: BrokerConnection, api: ApiKey, tv2: bool) -> int:
    version = conn.versions.get(api)
    if version is None:
        raise UnsupportedVersionError(f"the broker does not support {api.name}")
    if not tv2:
        version = min(version, TV1_CAPS.get(api, version))
    return version


def _first_error(response: Any) -> int:
    """The error of a coordinator response: its own code, or its first partition's."""
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    topics = getattr(response, "results_by_topic_v3_and_below", None)
    if topics is None:
        topics = getattr(response, "topics", None)
    if topics:
        worst = 0
        for _name, partitions in topics:
            for _index, part_code in partitions:
                if part_code and (worst == 0 or worst == ErrorCode.OPERATION_NOT_ATTEMPTED):
                    worst = part_code
        return worst
    return 0
