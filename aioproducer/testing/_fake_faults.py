"""The fake cluster's fault rules: which request gets which injected fault.

Package-internal: :class:`Rule`, :class:`Faults`, :func:`api_key`, :func:`error_code` and
:func:`request_names` are its interface, for :mod:`aioproducer.testing.fake` and its
other internal modules.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..errors import BrokerResponseError
from ..protocol.error_codes import ErrorCode
from ..protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
    Request,
)
from ..protocol.versions import ApiKey

__all__ = ["Faults", "Rule", "api_key", "error_code", "request_names"]


@dataclass(slots=True)
class Rule:
    """One injected fault: what it does, to how many of which requests, after how many."""

    # "error", "delay", "drop_before", "drop_after", "throttle", "hold", "oversize", "trickle"
    kind: str
    api: int
    remaining: int
    skip: int
    broker: int | None
    topic: str | None
    partition: int | None
    error: int = 0
    seconds: float = 0.0
    throttle_ms: int = 0
    size: int = 0

    def matches_partition(self, topic: str, partition: int) -> bool:
        """Whether the rule applies to this partition of a request it matched."""
        return (self.topic is None or self.topic == topic) and (
            self.partition is None or self.partition == partition
        )


class Faults:
    """The pending rules, oldest first, guarded by the cluster's ``lock``."""

    def __init__(self, lock: threading.Condition) -> None:
        self._lock = lock
        self._rules: list[Rule] = []

    def add(self, rule: Rule) -> None:
        """Make ``rule`` pending after the others."""
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        """Forget every pending rule."""
        with self._lock:
            self._rules.clear()

    def take(
        self,
        kind: str,
        api: int,
        broker: int,
        names: list[tuple[str, int | None]] | None = None,
    ) -> Rule | None:
        """Find, count and return the first fault of ``kind`` that applies to this request.

        ``api`` and ``broker`` are the request's, ``names`` what :func:`request_names` says.
        """
        with self._lock:
            for rule in self._rules:
                if rule.kind != kind or rule.api != api:
                    continue
                if rule.broker is not None and rule.broker != broker:
                    continue
                if (rule.topic is not None or rule.partition is not None) and not any(
                    (rule.topic is None or rule.topic == t)
                    and (rule.partition is None or p is None or rule.partition == p)
                    for t, p in names or ()
                ):
                    continue
                if rule.skip > 0:
                    rule.skip -= 1
                    continue
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._rules.remove(rule)
                return rule
        return None


def api_key(api: str | int | ApiKey) -> int:
    """The key of an API given by name (``"produce"``, ``"init-producer-id"``) or number."""
    if isinstance(api, str):
        try:
            return int(ApiKey[api.upper().replace("-", "_")])
        except KeyError:
            raise ValueError(f"unknown API name {api!r}") from None
    return int(api)


def error_code(error: int | str | BrokerResponseError | type[BrokerResponseError]) -> int:
    """The code of an error given as a number, an :class:`ErrorCode` name or an error class."""
    if isinstance(error, str):
        return int(ErrorCode[error.upper()])
    if isinstance(error, BrokerResponseError) or (
        isinstance(error, type) and issubclass(error, BrokerResponseError)
    ):
        return int(error.code)
    return int(error)


def request_names(request: Request[Any]) -> list[tuple[str, int | None]] | None:
    """The (topic, partition) pairs a request names, for fault matching."""
    if isinstance(request, ProduceRequest):
        return [(name, index) for name, parts in request.topics for index, _ in parts]
    if isinstance(request, FetchRequest):
        return [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    if isinstance(request, ListOffsetsRequest):
        return [(name, p.partition_index) for name, parts in request.topics for p in parts]
    if isinstance(request, MetadataRequest):
        return None if request.topics is None else [(name, None) for name in request.topics]
    if isinstance(request, CreateTopicsRequest):
        return [(t.name, None) for t in request.topics]
    return None
