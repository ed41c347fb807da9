"""An in-process fake Kafka cluster that speaks the real wire protocol.

:class:`FakeCluster` runs N brokers, each with its own listening socket on loopback, on
a thread of its own with its own event loop, so any client can use it: this package's
producer on asyncio, uvloop or trio, and third-party clients such as confluent-kafka or
kafka-python. It stores record batches per partition (the bytes as sent, with the base
offset and partition leader epoch filled in), keeps idempotent-producer state like a real
broker, serves Fetch and ListOffsets so consumers can read back, and injects the faults a
real broker will not produce on demand::

    from aioproducer.testing import FakeCluster

    with FakeCluster(brokers=3) as fc:
        fc.create_topic("events", partitions=6)
        fc.inject_error("produce", "NOT_LEADER_OR_FOLLOWER", count=1, skip=2)
        ...  # produce to fc.bootstrap_servers
        assert [r.value for r in fc.records("events", 0)] == [b"a", b"b"]

It advertises only the API versions it implements (Produce 3-12, Fetch 4-12, ListOffsets
1-11, Metadata 0-12, ApiVersions 0-4, CreateTopics 2-7, InitProducerId 0-5,
FindCoordinator 0-6, AddPartitionsToTxn 0-3, EndTxn 0-4; with SASL also SaslHandshake
0-1 and SaslAuthenticate 0-2), so clients negotiate down to them. There is no
replication, no consumer groups and no TLS: every partition has exactly one replica, its
leader. SASL is checked by the mechanisms a test gives (see :class:`FakeCluster`).

Transactions are served as a transaction version 1 coordinator (the lowest running node)
sees them: InitProducerId with a transactional id (a new epoch for a known id, which
fences its holder and aborts its open transaction), AddPartitionsToTxn, EndTxn, and
transactional batches only for partitions added to their transaction. Outcomes are kept
by the coordinator (:meth:`FakeCluster.transactions`); no markers are written to the
partitions, so consumers reading ``read_committed`` get no isolation from the fake.

Tests wait for what they expect instead of sleeping: :meth:`FakeCluster.wait_for_requests`
and :meth:`FakeCluster.wait_for_records` block (their ``async`` twins
:meth:`~FakeCluster.requests_received` and :meth:`~FakeCluster.records_stored` await)
until the request log or a partition reaches a count. :meth:`FakeCluster.hold` freezes
requests the way a stopped broker does, and :meth:`FakeCluster.release` lets them be
handled later, even after the client gave up on them and closed the connection.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

import anyio

from ..errors import BrokerResponseError
from ..protocol.error_codes import ErrorCode
from ..protocol.records import Record, RecordBatch, decode_batches
from ..protocol.versions import ApiKey
from ..runner import LoopRunner

# Versions the fake implements and advertises (plus SASL's when it serves SASL).
from ._fake_apis import ADVERTISED_VERSIONS as ADVERTISED_VERSIONS
from ._fake_faults import Faults, Rule, api_key, error_code
from ._fake_log import Log
from ._fake_sasl import Authentication, SaslCheck, SaslGate
from ._fake_server import BatchInfo, RequestRecord, Server
from ._fake_txn import EndedTransaction

__all__ = [
    "Authentication",
    "BatchInfo",
    "EndedTransaction",
    "ErrorCode",
    "FakeCluster",
    "RequestRecord",
    "SaslCheck",
]

# Defined with the server that fills them in; shown and pickled as this module's.
BatchInfo.__module__ = RequestRecord.__module__ = EndedTransaction.__module__ = __name__
Authentication.__module__ = __name__

_T = TypeVar("_T")


class FakeCluster:
    """An in-process Kafka cluster of ``brokers`` nodes on 127.0.0.1 (see the module doc).

    Node ids are 1..N. Topics are created with :meth:`create_topic`, by CreateTopics
    requests, or on first Metadata request when ``auto_create_topics`` is true (with
    ``num_partitions`` partitions). Partition leaders are spread round-robin over the
    brokers. Use it as a context manager (sync or async) or call :meth:`start` and
    :meth:`close`. Every method is thread-safe and may be called from any thread except
    the fake's own.

    SASL: ``sasl`` maps each mechanism the brokers accept to ``check(auth_bytes) ->
    principal``, which raises ``ValueError`` to reject the client's message (its text is
    the broker's error message). Connections must then authenticate before anything but
    ApiVersions; each session lasts ``sasl_session_lifetime_ms`` (0: unlimited), after
    which a connection that did not re-authenticate (KIP-368) is closed at its next
    request. :meth:`authentications` lists what was accepted.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        auto_create_topics: bool = True,
        num_partitions: int = 1,
        cluster_id: str = "fake-cluster",
        host: str = "127.0.0.1",
        sasl: Mapping[str, SaslCheck] | None = None,
        sasl_session_lifetime_ms: int = 0,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if sasl_session_lifetime_ms < 0:
            raise ValueError("sasl_session_lifetime_ms must be 0 (unlimited) or more")
        self.host = host
        self.cluster_id = cluster_id
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self._lock = threading.RLock()
        # Notified whenever the request log, a request's answer or a partition changes.
        self._changed = threading.Condition(self._lock)
        nodes = range(1, brokers + 1)
        self._log = Log(nodes)
        self._faults = Faults(self._changed)
        # The server reads the settings above from here when it needs them.
        self._server = Server(self._log, self._faults, self._changed, nodes, self)
        if sasl:
            self._server.sasl = SaslGate(sasl, sasl_session_lifetime_ms)
            self._server.apis.sasl = True
        # The brokers' event loop and its thread, while started.
        self._runner: LoopRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeCluster:
        """Start the event-loop thread and every broker's listener; returns ``self``."""
        if self._runner is not None:
            raise RuntimeError("FakeCluster is already started")
        # Its thread starts with the first call.
        self._runner = LoopRunner(use_uvloop=False, name="aioproducer-fake-cluster")
        try:
            self._call(self._server.start)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every broker and the loop thread. Calling it again does nothing."""
        runner = self._runner
        if runner is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._server.stop)
        runner.close(10)
        self._runner = None

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> FakeCluster:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.close)

    def _call(self, func: Callable[[], Coroutine[Any, Any, _T]], timeout: float = 30) -> _T:
        runner = self._runner
        if runner is None:
            raise RuntimeError("FakeCluster is not started")
        if runner.in_loop_thread():
            raise RuntimeError("FakeCluster methods cannot be called from its own thread")
        return runner.submit(func).result(timeout)

    # -- cluster layout ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every running broker."""
        return ",".join(
            f"{self.host}:{b.port}" for b in self._server.brokers.values() if b.running and b.port
        )

    @property
    def broker_ids(self) -> list[int]:
        """The node ids of every broker, running or not."""
        return list(self._server.brokers)

    def address(self, broker: int) -> tuple[str, int]:
        """``(host, port)`` of one broker."""
        return self.host, self._server.brokers[broker].port

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        leaders: Iterable[int] | None = None,
        config: dict[str, str] | None = None,
    ) -> None:
        """Create a topic; ``leaders`` gives each partition's leader (default: round-robin).

        ``config`` supports ``message.timestamp.type`` (``CreateTime`` or
        ``LogAppendTime``) and ``max.message.bytes``. Raises ``ValueError`` if it exists.
        """
        with self._lock:
            if name in self._log.topics:
                raise ValueError(f"topic {name!r} already exists")
            self._log.create(
                name, partitions, list(leaders) if leaders is not None else None, config
            )

    def topics(self) -> list[str]:
        """Names of every topic."""
        with self._lock:
            return list(self._log.topics)

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading a partition."""
        with self._lock:
            return self._log.partition(topic, partition).leader

    def move_leader(self, topic: str, partition: int, to_broker: int) -> None:
        """Make ``to_broker`` the partition's leader (and bump the leader epoch).

        Metadata shows the new leader at once; the old leader answers Produce, Fetch and
        ListOffsets for it with NOT_LEADER_OR_FOLLOWER. Data and producer state move along,
        as they would with replication.
        """
        if to_broker not in self._server.brokers:
            raise ValueError(f"no broker {to_broker}")
        with self._lock:
            p = self._log.partition(topic, partition)
            p.leader = to_broker
            p.leader_epoch += 1

    # -- reading back ------------------------------------------------------------------------

    def batches(self, topic: str, partition: int) -> list[RecordBatch]:
        """Every stored batch of a partition, decoded, in offset order."""
        with self._lock:
            data = self._log.partition(topic, partition).data()
        return decode_batches(data)

    def records(self, topic: str, partition: int) -> list[Record]:
        """Every stored record of a partition (offset, timestamp, key, value, headers)."""
        return [record for batch in self.batches(topic, partition) for record in batch.records]

    def end_offset(self, topic: str, partition: int) -> int:
        """The next offset the partition will assign (its high watermark)."""
        with self._lock:
            return self._log.partition(topic, partition).next_offset

    # -- fault injection ---------------------------------------------------------------------

    def _add_rule(
        self,
        kind: str,
        api: str | int | ApiKey,
        count: int,
        broker: int | None,
        topic: str | None,
        partition: int | None,
        skip: int,
        **values: Any,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        if broker is not None and broker not in self._server.brokers:
            raise ValueError(f"no broker {broker}")
        self._faults.add(Rule(kind, api_key(api), count, skip, broker, topic, partition, **values))

    def inject_error(
        self,
        api: str | int | ApiKey,
        error: int | str | BrokerResponseError | type[BrokerResponseError],
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Answer the next ``count`` matching requests with ``error``, after ``skip`` of them.

        A request matches if it is for ``api`` (``"produce"``, ``ApiKey.FETCH``, 0, ...) on
        ``broker`` (any if ``None``) and, when given, names ``topic``/``partition``. Produce,
        Fetch and ListOffsets get the error on each matching partition (nothing is written);
        Metadata and CreateTopics on each matching topic; other APIs in their error code.
        ``error`` is a code, an :class:`ErrorCode` name or an error class of
        :mod:`aioproducer.errors`.
        """
        self._add_rule("error", api, count, broker, topic, partition, skip, error=error_code(error))

    def delay(
        self,
        api: str | int | ApiKey,
        seconds: float,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Hold the response of the next ``count`` matching requests for ``seconds``.

        The request is handled first (a produce request is written), then the answer waits;
        as with a real broker, later requests of that connection wait behind it.
        """
        self._add_rule("delay", api, count, broker, topic, partition, skip, seconds=seconds)

    def drop_connections(self, broker: int | None = None) -> None:
        """Close every client connection of ``broker`` (of all brokers if ``None``) now."""
        self._call(lambda: self._server.drop_connections(broker))

    def drop_connection_on(
        self,
        api: str | int | ApiKey,
        count: int = 1,
        *,
        after_handling: bool = True,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Close the connection on the next ``count`` matching requests without answering.

        With ``after_handling`` (the default) the request is handled first, so a produce
        request is *written* and then its answer is lost; otherwise it is dropped unread.
        """
        kind = "drop_after" if after_handling else "drop_before"
        self._add_rule(kind, api, count, broker, topic, partition, skip)

    def throttle(
        self,
        api: str | int | ApiKey,
        throttle_ms: int,
        count: int = 1,
        *,
        broker: int | None = None,
        skip: int = 0,
    ) -> None:
        """Put ``throttle_ms`` in the next ``count`` matching responses, as a quota would.

        Like a real broker, the answer goes out at once and the connection then reads
        nothing more for ``throttle_ms``.
        """
        self._add_rule("throttle", api, count, broker, None, None, skip, throttle_ms=throttle_ms)

    def oversize_response(
        self,
        api: str | int | ApiKey,
        size: int = 2**31 - 1,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Send the answer of the next ``count`` matching requests behind a size prefix
        that claims ``size`` bytes (2 GiB - 1 by default), as a hostile or broken broker
        might; the connection then stays open with the rest of the frame never coming.

        The request is handled first (a produce request is written).
        """
        if not 0 < size < 2**31:
            raise ValueError(f"size must be a positive int32, not {size}")
        self._add_rule("oversize", api, count, broker, topic, partition, skip, size=size)

    def trickle(
        self,
        api: str | int | ApiKey,
        seconds: float,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Send the answer of the next ``count`` matching requests a few bytes at a time,
        spread over ``seconds``: a slow link, or a broker that keeps a client waiting
        without ever being silent for long. Later answers of the connection wait behind it.
        """
        self._add_rule("trickle", api, count, broker, topic, partition, skip, seconds=seconds)

    def hold(
        self,
        api: str | int | ApiKey,
        count: int = 1,
        *,
        broker: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        skip: int = 0,
    ) -> None:
        """Receive the next ``count`` matching requests but handle none until :meth:`release`.

        Like a broker stopped with SIGSTOP: the request waits unhandled and later requests
        of its connection wait behind it. A client that times out and closes the
        connection does not take the request back: on :meth:`release` it is still
        handled (a produce request is written, or refused, as the log then stands), as a
        real broker handles what was in its socket buffer when it wakes; the answer goes
        nowhere if the connection is gone.
        """
        self._add_rule("hold", api, count, broker, topic, partition, skip)

    def release(self) -> int:
        """Handle every held request now, oldest first; returns how many there were."""
        return self._call(self._server.release)

    def held(self) -> list[RequestRecord]:
        """The requests held by :meth:`hold` and not yet released, oldest first."""
        with self._lock:
            return [item.record for item in self._server.held]

    def clear_faults(self) -> None:
        """Forget every pending injected fault."""
        self._faults.clear()

    def stop_broker(self, broker: int) -> None:
        """Stop a broker: close its listener and connections. Its partitions lose their leader.

        Metadata from the other brokers shows them with leader -1 (LEADER_NOT_AVAILABLE)
        until :meth:`start_broker` or :meth:`move_leader`. Stored data is kept.
        """
        target = self._server.brokers[broker]
        self._call(lambda: self._server.shutdown(target))

    def start_broker(self, broker: int) -> None:
        """Start a stopped broker again on the same port."""
        target = self._server.brokers[broker]
        if not target.running:
            self._call(lambda: self._server.listen(target))

    # -- transactions ------------------------------------------------------------------------

    def authentications(self) -> list[Authentication]:
        """Every SASL authentication the brokers accepted, oldest first."""
        with self._lock:
            return list(self._server.sasl.accepted)

    def transactions(self, transactional_id: str | None = None) -> list[EndedTransaction]:
        """Transactions the coordinator ended (by EndTxn, or aborted when their id was
        initialized again), oldest first; those of one ``transactional_id`` if given."""
        with self._lock:
            ended = list(self._server.apis.coordinator.ended)
        if transactional_id is None:
            return ended
        return [t for t in ended if t.transactional_id == transactional_id]

    # -- request log -------------------------------------------------------------------------

    def requests(
        self, api: str | int | ApiKey | None = None, *, broker: int | None = None
    ) -> list[RequestRecord]:
        """Requests received so far, oldest first, optionally of one API and/or broker."""
        key = None if api is None else api_key(api)
        with self._lock:
            return [
                r
                for r in self._server.requests
                if (key is None or r.api_key == key) and (broker is None or r.broker == broker)
            ]

    def max_in_flight(
        self, api: str | int | ApiKey = "produce", *, broker: int | None = None
    ) -> int:
        """The most requests of ``api`` one connection had unanswered at once."""
        return max((r.in_flight for r in self.requests(api, broker=broker)), default=0)

    def clear_requests(self) -> None:
        """Empty the request log."""
        with self._lock:
            self._server.requests.clear()

    def wait_for_requests(
        self,
        api: str | int | ApiKey | None = None,
        count: int = 1,
        *,
        broker: int | None = None,
        answered: bool = False,
        held: bool = False,
        timeout: float = 30.0,
    ) -> list[RequestRecord]:
        """Block until ``count`` matching requests are in the log; return the log's matches.

        ``answered`` counts only requests already answered; ``held`` only requests that
        :meth:`hold` is holding. Raises :class:`TimeoutError` after ``timeout`` seconds.
        """

        def matching() -> list[RequestRecord]:
            if held:
                key = None if api is None else api_key(api)
                found = [
                    item.record
                    for item in self._server.held
                    if (key is None or item.record.api_key == key)
                    and (broker is None or item.record.broker == broker)
                ]
            else:
                found = self.requests(api, broker=broker)
            return [r for r in found if r.answered] if answered else found

        with self._changed:
            if not self._changed.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(
                    f"{len(matching())} of {count} {api or 'any'} request(s) within {timeout} s"
                )
            return matching()

    async def requests_received(
        self,
        api: str | int | ApiKey | None = None,
        count: int = 1,
        *,
        broker: int | None = None,
        answered: bool = False,
        held: bool = False,
        timeout: float = 30.0,
    ) -> list[RequestRecord]:
        """:meth:`wait_for_requests` for async code (asyncio or trio): waits on a thread."""
        return await anyio.to_thread.run_sync(
            lambda: self.wait_for_requests(
                api, count, broker=broker, answered=answered, held=held, timeout=timeout
            )
        )

    def wait_for_records(
        self, topic: str, partition: int, count: int, *, timeout: float = 30.0
    ) -> list[Record]:
        """Block until the partition holds at least ``count`` records; return them all.

        Raises :class:`TimeoutError` after ``timeout`` seconds.
        """

        def stored() -> int:
            topic_ = self._log.topics.get(topic)
            if topic_ is None or not 0 <= partition < len(topic_.partitions):
                return 0  # not created yet: auto-creation may still make it
            return topic_.partitions[partition].next_offset

        with self._changed:
            if not self._changed.wait_for(lambda: stored() >= count, timeout):
                raise TimeoutError(
                    f"{topic}-{partition} holds {stored()} of {count} record(s) after {timeout} s"
                )
        return self.records(topic, partition)

    async def records_stored(
        self, topic: str, partition: int, count: int, *, timeout: float = 30.0
    ) -> list[Record]:
        """:meth:`wait_for_records` for async code (asyncio or trio): waits on a thread."""
        return await anyio.to_thread.run_sync(
            lambda: self.wait_for_records(topic, partition, count, timeout=timeout)
        )
