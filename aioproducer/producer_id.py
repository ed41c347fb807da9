"""Getting a producer id for idempotent writes (InitProducerId without a transactional id).

The sender (``sender.py``) asks for one when it starts and whenever it must start over
under a fresh id; it keeps retrying until the cluster gives one, since nothing can be sent
without it. Only a refusal to authorize ends the attempts: the producer cannot have an id.

Package-internal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from .cluster import Cluster, backoff
from .errors import ClusterAuthorizationFailedError, KafkaError, error_for_code
from .errors import ConnectionError as KafkaConnectionError
from .protocol.messages import InitProducerIdRequest, InitProducerIdResponse

__all__ = ["any_connection", "request_producer_id"]

# The sender's logger: these messages are about what the sender is waiting for.
log = logging.getLogger("aioproducer.sender")


async def request_producer_id(
    cluster: Cluster,
    stopped: anyio.Event,
    retry_min: float,
    retry_max: float,
    on_retry: Callable[[], None],
) -> InitProducerIdResponse:
    """A fresh producer id and epoch 0 from any broker, retried with backoff until one
    answers; ``on_retry`` runs after each failure, and ``stopped`` cuts a backoff short.

    Raises ``ClusterAuthorizationFailedError`` if the producer may not have one.
    """
    attempts = 0
    while True:
        try:
            conn = await any_connection(cluster)
            response: InitProducerIdResponse = await conn.request(InitProducerIdRequest())
            if response.error_code:
                raise error_for_code(response.error_code, "InitProducerId")
            return response
        except ClusterAuthorizationFailedError:
            raise
        except KafkaError as exc:
            attempts += 1
            log.debug("InitProducerId failed (attempt %d), retrying: %s", attempts, exc)
            # A fresh broker answers COORDINATOR_LOAD_IN_PROGRESS for a moment; only
            # a persistent failure (nothing is sent meanwhile) deserves a warning, and
            # one is enough. An unreachable broker is reported by the cluster instead.
            if attempts == 5 and not isinstance(exc, KafkaConnectionError):
                log.warning(
                    "the cluster has not given this producer an id for idempotent "
                    "writes yet (%s); nothing is sent until it does, still trying",
                    exc,
                )
            cluster.request_refresh()
            on_retry()
            with anyio.move_on_after(backoff(attempts, retry_min, retry_max)):
                await stopped.wait()


async def any_connection(cluster: Cluster) -> Any:
    """A connection to the first broker that can be reached, least loaded first."""
    last: BaseException | None = None
    for node_id in cluster.least_loaded_candidates():
        try:
            return await cluster.connect(node_id)
        except KafkaError as exc:
            last = exc
    raise last or KafkaConnectionError("no broker reachable")
