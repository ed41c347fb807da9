"""Cluster view: bootstrap, metadata cache and refresh, leaders, one connection per broker.

Metadata is fetched only for the topics this producer uses (never "all topics"), by one
task that owns the refresh; everyone else reads the current immutable snapshot or waits
for the next one.

Two kinds of refresh, as in the Java client (KIP-526): a full one for every topic in use
(every ``metadata_max_age_ms``, and whenever a leader may have moved), and a partial one
that asks only for topics nobody has described yet, so a producer that meets thousands of
new topics does not ask for all the topics it knows once per new one. A topic no record
was drained to for ``metadata_max_idle_ms`` (and with nothing left unsent) leaves the
metadata at the next refresh, and :attr:`Cluster.on_topics_expired` tells the producer to
drop its own state of it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import random
import socket
import sys
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

import anyio
import anyio.abc

from .config import ProducerConfig
from .connection import BrokerConnection
from .errors import (
    AuthenticationError,
    ConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
    error_class_for_code,
    error_for_code,
)
from .hedge import first_answer
from .protocol.error_codes import ErrorCode
from .protocol.messages import MetadataRequest, MetadataResponse

if sys.version_info < (3, 11):  # anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup

__all__ = ["Cluster", "ClusterSnapshot", "TopicInfo"]

log = logging.getLogger("aioproducer.cluster")

_BOOTSTRAP_BASE = -1000  # node ids used for bootstrap addresses before metadata is known
# Backoff "attempt number" used after an authentication failure: high enough that the
# exponential backoff is at reconnect_backoff_max_ms for any sane base (50 ms * 2**31).
_AUTH_BACKOFF_ATTEMPTS = 32
# The plain warning about an address that cannot be reached is repeated at most this often.
_UNREACHABLE_WARN_INTERVAL_S = 30.0
#: With ``allow_auto_create_topics=False``: how long the metadata must keep answering
#: UNKNOWN_TOPIC_OR_PARTITION for a topic before ``send()`` gives up on it. Topic creation
#: reaches the brokers asynchronously, so a topic created a moment ago may look unknown to
#: one of them for a while (milliseconds, seldom more); re-asked every
#: ``retry_backoff_ms`` meanwhile.
MISSING_TOPIC_GRACE_S = 2.0
# What a topic's error in a Metadata answer means for this client, for its message.
_TOPIC_ERROR_HINTS = {
    int(ErrorCode.TOPIC_AUTHORIZATION_FAILED): (
        ": this client's principal may not use it; grant it DESCRIBE and WRITE on the topic"
    ),
    int(ErrorCode.INVALID_TOPIC_EXCEPTION): ": the broker refuses this topic name",
}


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    """Partitions of one topic and their leaders."""

    name: str
    partitions: tuple[int, ...]
    leaders: dict[int, int]
    leader_epochs: dict[int, int]
    #: Partitions with a live leader, for keyless records.
    available: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One immutable view of the cluster, replaced whole on each refresh."""

    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicInfo]
    #: topic -> error code for topics the last refresh could not describe.
    topic_errors: dict[str, int]
    cluster_id: str | None = None
    controller_id: int = -1


class Cluster:
    """Connections and metadata for one producer. Start it with :meth:`run` in a task group."""

    def __init__(
        self,
        config: ProducerConfig,
        authenticator: Callable[[BrokerConnection], Any] | None = None,
    ) -> None:
        self.config = config
        self._authenticator = authenticator
        self.snapshot = ClusterSnapshot({}, {}, {})
        self._task_group: anyio.abc.TaskGroup | None = None
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, anyio.Event] = {}
        self._connect_errors: dict[int, BaseException] = {}
        self._backoff_until: dict[int, float] = {}
        self._backoff_attempts: dict[int, int] = {}
        # Topics in use -> when a batch of theirs was last drained (or they were first
        # asked for). Written by add_topics(), touch() and the expiry in refresh().
        self._topics: dict[str, float] = {}
        # Topics added since the last response that described them: a partial refresh
        # asks for these alone.
        self._new_topics: set[str] = set()
        # The infos of the topics the latest expiry dropped, until the next refresh: a
        # record checked against one just before it expired can still be appended.
        self._just_expired: dict[str, TopicInfo] = {}
        # Set by request_refresh(): the next refresh asks for every topic in use.
        self._full_refresh_wanted = True
        self._refresh_wanted = anyio.Event()
        self._updated = anyio.Event()
        self._last_refresh = 0.0
        self.last_error: BaseException | None = None
        self.fatal_error: BaseException | None = None
        self._bootstrap_index = random.randrange(len(config.bootstrap_list))
        self._unreachable = _UnreachableLog()
        # Addresses learnt outside metadata (a coordinator named by FindCoordinator before
        # the first refresh lists its broker).
        self._extra_addresses: dict[int, tuple[str, int]] = {}
        #: Called with each new snapshot (the sender uses it to wake up).
        self.on_update: Callable[[], None] | None = None
        #: Topics that still have records queued or in flight: never expired (the
        #: producer sets it; they are in use whatever their last drain time).
        self.busy_topics: Callable[[], Collection[str]] = frozenset
        #: Called with the topics that left the metadata for being idle, so the producer
        #: drops its per-topic state too.
        self.on_topics_expired: Callable[[list[str]], None] | None = None

    # -- connections -----------------------------------------------------------------------

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        """Use ``task_group`` to own connection tasks."""
        self._task_group = task_group

    def connection_if_ready(self, node_id: int) -> BrokerConnection | None:
        """The open connection to ``node_id``; starts connecting in the background if none."""
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        if (
            node_id not in self._connecting
            and self._task_group is not None
            and time.monotonic() >= self._backoff_until.get(node_id, 0.0)
        ):
            self._task_group.start_soon(self._connect_quietly, node_id)
        return None

    def is_backing_off(self, node_id: int) -> bool:
        """Whether a connection attempt to ``node_id`` failed recently."""
        return self.backoff_remaining(node_id) > 0

    def backoff_remaining(self, node_id: int) -> float:
        """Seconds until ``node_id`` may be connected to again (0 if it may now)."""
        return max(0.0, self._backoff_until.get(node_id, 0.0) - time.monotonic())

    async def _connect_quietly(self, node_id: int) -> None:
        try:
            await self.connect(node_id)
        except KafkaError:
            pass  # recorded in last_error; the sender retries after the backoff
        except Exception:
            # Never let a background connection attempt take the producer down.
            log.exception("unexpected error connecting to node %s", node_id)
        if self.on_update is not None:
            self.on_update()

    async def connect(self, node_id: int) -> BrokerConnection:
        """Return an open connection to ``node_id``, opening one if needed."""
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        waiting = self._connecting.get(node_id)
        if waiting is not None:
            await waiting.wait()
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                return conn
            raise self._connect_errors.get(node_id) or ConnectionError(
                f"cannot connect to node {node_id}"
            )
        rejected = self._connect_errors.get(node_id)
        if isinstance(rejected, AuthenticationError) and self.is_backing_off(node_id):
            # Every caller (metadata refresh, producer id, sender) shares one schedule of
            # attempts, so a rejected credential costs one handshake per backoff period.
            raise rejected
        address = self._address(node_id)
        if address is None:
            raise ConnectionError(f"node {node_id} is not in the cluster metadata")
        assert self._task_group is not None, "Cluster.bind() was not called"
        event = self._connecting[node_id] = anyio.Event()
        if node_id >= 0:
            self._task_group.start_soon(self._refresh_while_connecting, event)
        conn = BrokerConnection(
            address[0],
            address[1],
            node_id=node_id,
            client_id=self.config.client_id,
            request_timeout=self.config.request_timeout_ms / 1000,
            ssl_context=self._ssl_context(),
            authenticator=self._authenticator,
            max_response_size=self.config.receive_message_max_bytes,
        )
        try:
            await conn.open(self._task_group, self.config.request_timeout_ms / 1000)
        except KafkaError as exc:
            self._connect_errors[node_id] = exc
            self.last_error = exc
            attempts = self._backoff_attempts.get(node_id, 0) + 1
            if isinstance(exc, AuthenticationError):
                self.fatal_error = exc
                # Credentials and certificates do not fix themselves within milliseconds:
                # go straight to the longest backoff rather than retrying in a burst.
                attempts = max(attempts, _AUTH_BACKOFF_ATTEMPTS)
            self._backoff_attempts[node_id] = attempts
            self._backoff_until[node_id] = time.monotonic() + backoff(
                attempts,
                self.config.reconnect_backoff_ms / 1000,
                self.config.reconnect_backoff_max_ms / 1000,
            )
            log.debug("connecting to node %s failed: %s", node_id, exc)
            if not isinstance(exc, AuthenticationError):
                self._unreachable.failed(f"{address[0]}:{address[1]}", exc)
            if node_id >= 0:
                # The broker may be gone for good and its partitions led elsewhere by now.
                # Nothing else asks for metadata when no request was in flight to it (or
                # when the last refresh still named it, before the controller fenced it),
                # so its partitions would wait for metadata_max_age_ms. The reconnect
                # backoff bounds how often this asks.
                self.request_refresh()
            raise
        finally:
            del self._connecting[node_id]
            event.set()
        self._connections[node_id] = conn
        self._unreachable.connected(f"{address[0]}:{address[1]}")
        self._backoff_attempts.pop(node_id, None)
        self._backoff_until.pop(node_id, None)
        self._connect_errors.pop(node_id, None)
        if isinstance(self.fatal_error, AuthenticationError):
            # The broker accepts us again (e.g. the user's SCRAM credentials were created
            # after the producer started): sending may resume, as with the Java client.
            self.fatal_error = None
        return conn

    def _ssl_context(self) -> Any:
        if self.config.security_protocol in ("SSL", "SASL_SSL"):
            if self.config.ssl_context is not None:
                return self.config.ssl_context
            import ssl

            return ssl.create_default_context()
        return None

    def _address(self, node_id: int) -> tuple[str, int] | None:
        if node_id <= _BOOTSTRAP_BASE:
            index = _BOOTSTRAP_BASE - node_id
            return self.config.bootstrap_list[index]
        return self.snapshot.brokers.get(node_id) or self._extra_addresses.get(node_id)

    def remember_address(self, node_id: int, host: str, port: int) -> None:
        """Know where ``node_id`` listens even if the metadata does not list it yet."""
        self._extra_addresses[node_id] = (host, port)

    def disconnect(self, node_id: int, reason: BaseException) -> None:
        """Drop the connection to ``node_id`` (its in-flight requests fail with ``reason``)."""
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            conn.close_nowait(reason)

    async def close(self) -> None:
        """Close every connection."""
        conns = list(self._connections.values())
        self._connections.clear()
        for conn in conns:
            await conn.aclose()

    def least_loaded_candidates(self) -> list[int]:
        """Node ids to ask for metadata: connected ones first (fewest in flight), then others.

        Once brokers are known, bootstrap connections come after them, and so do brokers
        whose last connection failed or was lost: either may lead to a broker that hangs
        (its address is fine, it just never answers), and asking it first would hold every
        metadata refresh for a whole request timeout while healthy brokers already know
        the new leaders.
        """
        live = [c for c in self._connections.values() if not c.closed]
        live.sort(key=lambda c: c.in_flight)
        ids = [c.node_id for c in live if c.node_id > _BOOTSTRAP_BASE]
        boot_live = [c.node_id for c in live if c.node_id <= _BOOTSTRAP_BASE]
        known = [n for n in self.snapshot.brokers if n not in ids]
        random.shuffle(known)
        ids.extend(n for n in known if not self._suspect(n))
        # A bootstrap connection reaches some broker: if that broker's own connection was
        # lost or failed, asking it through the bootstrap address is no safer.
        at = {address: n for n, address in self.snapshot.brokers.items()}
        doubtful = set()
        for b in boot_live:
            address = self._address(b)
            if address is not None and address in at and self._suspect(at[address]):
                doubtful.add(b)
        ids.extend(b for b in boot_live if b not in doubtful)
        ids.extend(n for n in known if self._suspect(n))
        ids.extend(b for b in boot_live if b in doubtful)
        n = len(self.config.bootstrap_list)
        boot = [_BOOTSTRAP_BASE - ((self._bootstrap_index + i) % n) for i in range(n)]
        ids.extend(b for b in boot if b not in ids)
        return ids

    def _suspect(self, node_id: int) -> bool:
        """Whether the last connection to ``node_id`` failed to open or was lost."""
        conn = self._connections.get(node_id)
        return node_id in self._connect_errors or (conn is not None and conn.closed)

    # -- metadata --------------------------------------------------------------------------

    def add_topics(self, topics: Iterable[str]) -> None:
        """Track ``topics`` in metadata refreshes (and ask for a refresh if any is new)."""
        new = False
        now = time.monotonic()
        for topic in topics:
            if topic not in self._topics:
                self._topics[topic] = now
                self._new_topics.add(topic)
                new = True
        if new:
            self._refresh_wanted.set()

    def touch(self, topic: str, now: float) -> None:
        """Note that a batch of ``topic`` was just drained (it is in use)."""
        self._topics[topic] = now

    async def _refresh_while_connecting(self, done: anyio.Event) -> None:
        # A broker that takes the TCP connection but never answers (frozen, swamped) holds
        # its partitions' batches for the whole handshake timeout, request_timeout_ms.
        # The controller may hand its leadership on meanwhile, and nothing else would ask:
        # the last refresh, after the request that timed out, still named it. Asking again
        # each retry_backoff_max_ms lets the batches follow the new leader at once.
        interval = self.config.retry_backoff_max_ms / 1000
        while True:
            with anyio.move_on_after(interval):
                await done.wait()
                return
            self.request_refresh()

    def request_refresh(self) -> None:
        """Ask the metadata task to refresh every topic in use soon."""
        self._full_refresh_wanted = True
        self._refresh_wanted.set()

    def _describe_again(self, topic: str) -> None:
        # A topic still being created: ask for it alone next time, not for all topics.
        if topic in self._topics:
            self._new_topics.add(topic)
            self._refresh_wanted.set()
        else:
            self.add_topics((topic,))

    def recall(self, topic: str) -> TopicInfo | None:
        """The info of ``topic`` if the latest expiry just dropped it, tracking it again
        (for a record checked against the metadata a moment before it expired)."""
        info = self._just_expired.pop(topic, None)
        if info is not None:
            self._topics[topic] = time.monotonic()
            old = self.snapshot
            self.snapshot = dataclasses.replace(old, topics={**old.topics, topic: info})
        return info

    @property
    def topics_in_use(self) -> int:
        """How many topics the metadata refreshes ask for."""
        return len(self._topics)

    async def wait_for_topic(self, topic: str, timeout: float) -> TopicInfo:
        """Wait until ``topic`` is in the metadata, up to ``timeout`` seconds.

        With ``allow_auto_create_topics=False`` a topic the metadata keeps calling
        UNKNOWN_TOPIC_OR_PARTITION for :data:`MISSING_TOPIC_GRACE_S` is declared missing
        at once rather than after the whole ``timeout``: the client will not create it, and
        a topic just created elsewhere reaches every broker well within that grace.
        """
        info = self.snapshot.topics.get(topic)
        if info is not None:
            return info
        self.add_topics((topic,))
        started = time.monotonic()
        deadline = started + timeout
        unknown_since: float | None = None
        while True:
            if self.fatal_error is not None:
                raise self.fatal_error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            updated = self._updated
            with anyio.move_on_after(remaining):
                await updated.wait()
            info = self.snapshot.topics.get(topic)
            if info is not None:
                return info
            code = self.snapshot.topic_errors.get(topic)
            if code is not None and not error_class_for_code(code).retriable:
                hint = _TOPIC_ERROR_HINTS.get(code, "")
                raise error_for_code(code, f"topic {topic!r}{hint}", topic=topic)
            if (
                code == UnknownTopicOrPartitionError.code
                and not self.config.allow_auto_create_topics
            ):
                now = time.monotonic()
                unknown_since = now if unknown_since is None else unknown_since
                if now - unknown_since >= MISSING_TOPIC_GRACE_S:
                    raise self._missing_topic(topic, now - started)
            elif code is not None:
                unknown_since = None
            if code is not None:
                # Not there yet (e.g. being auto-created): ask again after the retry
                # backoff, as the Java client does; nothing else would refresh before
                # metadata_max_age_ms.
                backoff_s = self.config.retry_backoff_ms / 1000
                await anyio.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
                self._describe_again(topic)
        code = self.snapshot.topic_errors.get(topic)
        ms = timeout * 1000
        if code == UnknownTopicOrPartitionError.code:
            raise self._missing_topic(topic, timeout)
        if not self.snapshot.brokers and self.last_error is not None:
            raise KafkaTimeoutError(
                f"no broker reachable within max_block_ms ({ms:.0f} ms): {self.last_error}"
            )
        raise KafkaTimeoutError(
            f"topic {topic!r} not present in metadata after {ms:.0f} ms (max_block_ms)"
        )

    def _missing_topic(self, topic: str, waited_s: float) -> UnknownTopicOrPartitionError:
        """The error for a topic the metadata says does not exist, naming why it was not
        created: the client setting, or the broker's."""
        if not self.config.allow_auto_create_topics:
            why = (
                "and allow_auto_create_topics=False keeps this producer from having it "
                "created: create the topic first, or set allow_auto_create_topics=True to "
                "let a broker with auto.create.topics.enable=true create it"
            )
        else:
            why = (
                "and the broker did not create it (its auto.create.topics.enable is false): "
                "create the topic first"
            )
        return UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist (the metadata still said so after "
            f"{waited_s * 1000:.0f} ms), {why}",
            topic=topic,
        )

    async def run(self) -> None:
        """The metadata task: refresh on request (with backoff) and at ``metadata_max_age_ms``."""
        max_age = self.config.metadata_max_age_ms / 1000
        backoff_min = self.config.retry_backoff_ms / 1000
        backoff_max = self.config.retry_backoff_max_ms / 1000
        attempts = 0
        while True:
            since = time.monotonic() - self._last_refresh
            wait = max(0.0, max_age - since)
            with anyio.move_on_after(wait):
                await self._refresh_wanted.wait()
            # Coalesce bursts of requests, and never hammer a struggling cluster.
            if attempts:
                await anyio.sleep(backoff(attempts, backoff_min, backoff_max))
            self._refresh_wanted = anyio.Event()
            try:
                await self.refresh()
                attempts = 0
            except KafkaError as exc:
                self.last_error = exc
                attempts += 1
                log.debug("metadata refresh failed: %s", exc)
                self._refresh_wanted.set()
                self._notify()

    async def refresh(self) -> ClusterSnapshot:
        """Fetch metadata from the least loaded reachable broker: for every tracked topic,
        or only for the new ones when nothing else calls for a full refresh.

        A broker that has not answered within ``retry_backoff_max_ms`` is not waited for
        alone: the next candidate is asked too, and the first answer counts.
        """
        now = time.monotonic()
        self._just_expired = {}
        self._expire_idle(now)
        full = (
            self._full_refresh_wanted
            or not self._new_topics
            or now - self._last_refresh >= self.config.metadata_max_age_ms / 1000
        )
        if full:
            self._full_refresh_wanted = False
        wanted = sorted(self._topics if full else self._new_topics)
        candidates = [
            node_id
            for node_id in self.least_loaded_candidates()
            if node_id in self._connections or not self.is_backing_off(node_id)
        ]
        if not candidates:
            if full:
                self._full_refresh_wanted = True
            # Everything is backing off: wait for the earliest backoff to end.
            soonest = min(self._backoff_until.values(), default=time.monotonic())
            await anyio.sleep(max(0.0, soonest - time.monotonic()))
            raise self.last_error or ConnectionError("no broker reachable")
        request = MetadataRequest(
            topics=wanted, allow_auto_topic_creation=self.config.allow_auto_create_topics
        )
        assert self._task_group is not None, "Cluster.bind() was not called"
        try:
            response: MetadataResponse = await first_answer(
                [functools.partial(self._ask, node_id, request) for node_id in candidates],
                self.config.retry_backoff_max_ms / 1000,
                self._task_group,
            )
        except KafkaError:
            if full:
                self._full_refresh_wanted = True
            raise
        self._new_topics.difference_update(wanted)
        self._apply(response, full)
        return self.snapshot

    async def _ask(self, node_id: int, request: MetadataRequest) -> MetadataResponse:
        conn = await self.connect(node_id)
        response: MetadataResponse = await conn.request(request)
        return response

    def _expire_idle(self, now: float) -> None:
        """Stop tracking topics idle for ``metadata_max_idle_ms`` with nothing unsent."""
        idle = self.config.metadata_max_idle_ms / 1000
        stale = [topic for topic, used in self._topics.items() if now - used >= idle]
        if not stale:
            return
        busy = self.busy_topics()
        gone = [topic for topic in stale if topic not in busy]
        for topic in stale:
            if topic in busy:
                self._topics[topic] = now
        if not gone:
            return
        for topic in gone:
            del self._topics[topic]
            self._new_topics.discard(topic)
        dropped = set(gone)
        old = self.snapshot
        self._just_expired = {n: i for n, i in old.topics.items() if n in dropped}
        self.snapshot = dataclasses.replace(
            old,
            topics={n: i for n, i in old.topics.items() if n not in dropped},
            topic_errors={n: c for n, c in old.topic_errors.items() if n not in dropped},
        )
        log.debug("%d idle topics left the metadata", len(gone))
        if self.on_topics_expired is not None:
            self.on_topics_expired(gone)

    def _apply(self, response: MetadataResponse, full: bool = True) -> None:
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, int] = {}
        for t in response.topics:
            if t.error_code or not t.partitions:
                errors[t.name] = t.error_code or UnknownTopicOrPartitionError.code
                continue
            parts = sorted(p.partition for p in t.partitions)
            leaders = {p.partition: p.leader_id for p in t.partitions}
            epochs = {p.partition: p.leader_epoch for p in t.partitions}
            available = tuple(p for p in parts if leaders[p] >= 0 and leaders[p] in brokers)
            topics[t.name] = TopicInfo(t.name, tuple(parts), leaders, epochs, available)
        # Keep what we knew about topics this response did not mention.
        for name, info in self.snapshot.topics.items():
            if name not in topics and name not in errors:
                topics[name] = info
        if not full:
            for name, code in self.snapshot.topic_errors.items():
                if name not in topics and name not in errors:
                    errors[name] = code
        self.snapshot = ClusterSnapshot(
            brokers, topics, errors, response.cluster_id, response.controller_id
        )
        if full:
            self._last_refresh = time.monotonic()
        # Drop connections to brokers that left the cluster.
        for node_id in [n for n in self._connections if n >= 0 and n not in brokers]:
            self.disconnect(node_id, ConnectionError(f"node {node_id} left the cluster"))
        self._notify()

    def _notify(self) -> None:
        updated, self._updated = self._updated, anyio.Event()
        updated.set()
        if self.on_update is not None:
            self.on_update()

    def shut_down(self, reason: BaseException) -> None:
        """Make every metadata waiter fail with ``reason`` (the producer is closing)."""
        self.fatal_error = reason
        self._notify()

    def leader(self, topic: str, partition: int) -> int:
        """The current leader node id of a partition, or -1."""
        info = self.snapshot.topics.get(topic)
        if info is None:
            return -1
        return info.leaders.get(partition, -1)


class _UnreachableLog:
    """One plain WARNING per unreachable address, then at most one per interval.

    A producer retries a missing broker every second or so for as long as ``max_block_ms``
    and ``delivery_timeout_ms`` allow; a line per attempt would bury the first one, the only
    one that tells the user something new. Details of every attempt stay at DEBUG.
    """

    def __init__(self, interval: float = _UNREACHABLE_WARN_INTERVAL_S) -> None:
        self._interval = interval
        #: address -> (time of the last warning, failures since then not warned about,
        #: whether "connected" was said since that warning). Kept after a reconnect, so a
        #: flapping broker (connects, drops, connects...) gets no more than a warning and
        #: an all-clear per interval, not a pair per flap.
        self._state: dict[str, tuple[float, int, bool]] = {}

    def failed(self, address: str, exc: BaseException) -> None:
        now = time.monotonic()
        last = self._state.get(address)
        if last is not None and now - last[0] < self._interval:
            self._state[address] = (last[0], last[1] + 1, last[2])
            return
        self._state[address] = (now, 0, False)
        reason, advice = _why_unreachable(exc)
        repeats = ""
        if last is not None and last[1]:
            repeats = f" ({last[1]} more failed attempts since the last warning)"
        log.warning("cannot connect to %s (%s): %s%s", address, reason, advice, repeats)

    def connected(self, address: str) -> None:
        last = self._state.get(address)
        if last is not None and not last[2]:
            self._state[address] = (last[0], last[1], True)
            log.info("connected to %s", address)


def _why_unreachable(exc: BaseException) -> tuple[str, str]:
    """A short reason and what to check, in plain words, for a failed connection attempt."""
    # The connection raises its own ConnectionError from the OSError (or TimeoutError)
    # that caused it; anyio wraps the per-address errors of one attempt in turn.
    causes: list[BaseException] = []
    pending: list[BaseException | None] = [exc.__context__]
    while pending and len(causes) < 16:
        cause = pending.pop(0)
        if cause is None:
            continue
        causes.append(cause)
        pending.append(cause.__cause__)
        if isinstance(cause, BaseExceptionGroup):
            pending.extend(cause.exceptions)
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            return "unknown host name", "is the address in bootstrap_servers spelled right?"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused", "is Kafka running there?"
    for cause in causes:
        if isinstance(cause, TimeoutError):
            return (
                "no answer",
                "is the host reachable from here (firewall, network), and is this the "
                "address of a Kafka listener?",
            )
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower(), "is Kafka running there?"
    return str(exc), "is Kafka running there, and is this the address of its listener?"


def backoff(attempts: int, base: float, cap: float) -> float:
    """Exponential backoff with +-20% jitter, as the Java client does."""
    if base <= 0:
        return 0.0
    exp = min(cap, base * math.pow(2, max(0, attempts - 1)))
    return exp * random.uniform(0.8, 1.2)
