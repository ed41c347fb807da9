"""The drain coroutine: ready -> drain -> send -> complete / retry / expire.

One task runs :meth:`Sender.run` and owns batch and sequence state. Connection tasks put
each response into the sender's inbox and wake it, so completions, retries and epoch
changes happen in one place, in order. The one exception is timing only: while the
sender sleeps with nothing else to do, the reader runs that same inbox step at once (one
loop pass sooner for the acknowledgement), which changes nothing the sleeping sender is
in the middle of; whatever it raises is raised by the sender's loop.

Idempotence follows the Java producer: a producer id and epoch from InitProducerId, a
per-partition sequence assigned when a batch is first drained, up to five batches of a
partition in flight. A batch that must be retried goes back to the head of its queue in
sequence order, and a partition with a retry pending sends only that batch until it is
acknowledged, so retries never reorder records. When the broker's sequence state and
ours can no longer be reconciled (UNKNOWN_PRODUCER_ID, a genuine OUT_OF_ORDER_SEQUENCE,
a sequenced batch that failed or expired), the sender waits for everything in flight,
bumps the epoch of its producer id and renumbers every unacknowledged batch from zero.

Why the epoch and not a fresh producer id (KIP-360): a batch that timed out may still sit
in a frozen broker's socket buffer and be written whenever the broker wakes. Once a batch
under the bumped epoch has been written to a partition, the broker refuses anything of
that partition still carrying the old epoch (INVALID_PRODUCER_EPOCH), so a timed-out
record can no longer land after a record sent later; under a fresh id the broker would
have nothing to compare with. The bump is made here, not by the broker: for a producer
without a transactional id, InitProducerId always answers with a new id, whatever id
and epoch it is given, so the Java producer bumps on the client too. A new id is taken
only when the epoch is exhausted or the broker refuses a batch of the current epoch.

A transactional producer never bumps on its own: its id and epoch come from the
transaction coordinator (``transactions.py``), and the errors that would make an
idempotent producer bump make its transaction abortable instead (a refusal of the current
epoch is a fence, fatal). It drains a batch only when its transaction allows (a
partition new to a version 1 transaction waits for AddPartitionsToTxn, which this loop
sends), and it fails the queued batches of a transaction that is aborting or can no
longer commit. The sender sees the transaction only through
:class:`~aioproducer.txn_gate.TransactionGate`, so ``transactions.py`` depends on this
module and not the other way round.

Helpers with a job of their own: ``produce_call.py`` builds each produce request just
before it is written, ``producer_id.py`` gets the producer id of an idempotent producer.
"""

# Over 700 lines, on purpose: it is one class, the Sender, whose state (in-flight calls,
# sequences, retries, the producer id) only its own steps change; splitting its steps
# across modules would spread that state, not shrink it. The request's build and the
# errors' mapping are elsewhere already (produce_call.py, produce_errors.py, producer_id.py).

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from .accumulator import Accumulator, ProducerBatch, TopicPartition
from .adaptive import DrainClock
from .cluster import Cluster, backoff
from .config import ProducerConfig
from .errors import (
    ClusterAuthorizationFailedError,
    DeliveryTimeoutError,
    KafkaError,
    error_class_for_code,
)
from .metrics import Metrics
from .produce_call import ProduceCall
from .produce_errors import produce_error
from .producer_id import request_producer_id
from .protocol.error_codes import ErrorCode
from .protocol.messages import ProducePartitionResponse, ProduceResponse
from .protocol.records import restamp_producer_state
from .protocol.versions import ApiKey
from .txn_gate import TransactionGate

__all__ = ["Sender"]

log = logging.getLogger("aioproducer.sender")

# How far ahead the sender looks for batches whose linger ends. Event loops wake timers on
# whole milliseconds (epoll's timeout is in milliseconds, rounded up, on asyncio, uvloop
# and trio alike), so a sleep until a batch's linger ends overshoots by up to 1 ms and the
# batch leaves late by that much on top of the wake-up itself. Taking a batch whose linger
# ends within this much of now, and sleeping until that much before the next one's, moves
# the error to the other side: a batch leaves at most this much before its linger ends,
# about on time on average. Never more than half the linger (see _lookahead).
_TIMER_GRANULARITY = 0.001
# The epoch is an int16: past this, only a fresh producer id can fence.
_MAX_EPOCH = 32767
# Errors after which the leader may have moved: refresh metadata before retrying.
_METADATA_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


class _PartitionState:
    __slots__ = ("acked_next", "in_flight", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.acked_next = 0
        self.in_flight = 0


class Sender:
    """Drains ready batches to their leaders and settles every batch's outcome."""

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: Accumulator,
        cluster: Cluster,
        metrics: Metrics,
        drain_clock: DrainClock | None = None,
    ) -> None:
        self.config = config
        self.acc = accumulator
        self.cluster = cluster
        self.metrics = metrics
        self.idempotent = config.enable_idempotence
        self.producer_id = -1
        self.producer_epoch = -1
        # _need_bump: renumber under a bumped epoch; _need_new_pid: under a fresh id.
        self._need_bump = False
        # A transactional producer gets its id from the transaction coordinator instead.
        self._need_new_pid = self.idempotent and config.transactional_id is None
        #: The transaction state of a transactional producer (set by the producer), else None.
        self.txn: TransactionGate | None = None
        #: Highest version to send per API (a version 1 transactional producer stays below
        #: the Produce version that means transaction version 2). Set by ``txn``.
        self.version_caps: dict[ApiKey, int] = {}
        self._fatal: BaseException | None = None
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        # Set when forget_topics() dropped sequence state under the current epoch: a
        # partition without state may then be one the broker still holds sequences of.
        self._sequences_forgotten = False
        self._inbox: collections.deque[tuple[ProduceCall, Any, BaseException | None]] = (
            collections.deque()
        )
        self._wakeup = anyio.Event()
        # True while run() sleeps with nothing to do: a response that arrives then is
        # settled at once, in the reader's pass (see _on_response).
        self._idle = False
        # While idle: when the loop wakes on its own (its timer; inf: it waits for a wake-up).
        self._sleep_until = math.inf
        # What settling a response in the reader's pass raised, for the loop to raise.
        self._inline_error: BaseException | None = None
        #: How early a lingering batch may leave (seconds): the loop's timer granularity,
        #: at most half the linger, so a short linger still batches.
        self.lookahead = _lookahead(accumulator.linger)
        self._drain_index: dict[int, int] = {}
        self._throttled_until: dict[int, float] = {}
        self._in_flight_calls = 0
        self._stopped = anyio.Event()
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._request_timeout_ms = config.request_timeout_ms
        self._retry_min = config.retry_backoff_ms / 1000
        self._retry_max = config.retry_backoff_max_ms / 1000
        #: With partitioner_availability_timeout_ms: when each broker had batches waiting
        #: and when it last took a request (written here only, read by the partitioner).
        self._drain_clock = drain_clock
        # Partitions due to send but held back by their requests in flight, in this pass
        # (collected only for the drain clock).
        self._held_back: list[TopicPartition] = []
        cluster.on_update = self.wakeup

    # -- public ----------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Make the sender loop look at its queues now."""
        self._wakeup.set()

    def appended(self) -> None:
        """An append started or filled a batch (the intake's wake-up): wake the loop unless
        it already sleeps until no later than anything queued is due.

        At a few thousand records a second nearly every batch is opened by one record and
        leaves on its linger timer: waking the loop for the new batch cost a whole pass
        (a cancel scope, an event, a task switch) per request, only for the loop to find
        nothing due and sleep until the same or an earlier time. A full batch, a second
        batch queued behind the head, a flush or waiting senders make a batch due now, so
        they still wake it, as does anything while the loop is not asleep on its timer. A
        transactional producer is always woken: a partition new to its transaction is
        added by the loop as soon as it sees the batch.
        """
        if self._idle and self.txn is None and self._sleep_until < math.inf:
            now = time.monotonic()
            # No veto here: a batch due but held back counts as due (a wake-up too many,
            # never one too few).
            ready, delay = self.acc.ready(now + self.lookahead, _any_batch)
            if not ready and self._sleep_until <= now + delay:
                return
        self._wakeup.set()

    @property
    def in_flight_requests(self) -> int:
        """Produce requests sent and not yet answered."""
        return self._in_flight_calls

    @property
    def fatal_error(self) -> BaseException | None:
        """An error that stops this producer from sending anything (e.g. not authorized)."""
        fatal = self._fatal or self.cluster.fatal_error
        if fatal is None and self.txn is not None:
            fatal = self.txn.fatal
        return fatal

    def adopt_producer(self, producer_id: int, producer_epoch: int) -> None:
        """Continue under ``producer_id``/``producer_epoch`` (from the transaction
        coordinator), numbering every partition's batches from zero again.

        Called only when nothing is in flight (between transactions).
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._need_bump = False
        self._need_new_pid = False
        self._partitions.clear()
        for batch in self.acc.queued_batches():
            batch.sequence = -1

    def forget_topics(self, topics: list[str]) -> None:
        """Drop the per-partition state of ``topics`` (idle: nothing queued or in flight).

        Sequence numbers cannot simply restart at zero under the same epoch (the broker
        would take a batch numbered like one it still remembers for a duplicate), so an
        idempotent producer that forgot some bumps its epoch before it next sends to a
        partition it holds no state for. A transactional producer keeps them: its epoch
        belongs to the coordinator.
        """
        if not self.idempotent or self.txn is not None:
            return
        dropped = set(topics)
        stale = [tp for tp, st in self._partitions.items() if tp[0] in dropped and not st.in_flight]
        for tp in stale:
            del self._partitions[tp]
        if stale:
            self._sequences_forgotten = True

    @property
    def partitions_tracked(self) -> int:
        """Partitions this sender keeps sequence state for."""
        return len(self._partitions)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        while True:
            # A wake-up that came during the last pass is seen by this one: only a set
            # event needs replacing (a fresh one every pass cost an object per pass).
            if self._wakeup.is_set():
                self._wakeup = anyio.Event()
            now = time.monotonic()
            self._process_inbox(now)
            if (
                (self._need_new_pid or self._need_bump)
                and self._in_flight_calls == 0
                and self._fatal is None
            ):
                await self._reset_producer_state()
                now = time.monotonic()
                self._process_inbox(now)
            fatal = self.fatal_error
            if fatal is not None:
                self._fail_all_queued(fatal)
            txn = self.txn
            if txn is not None:
                discard = txn.discard_error()
                if discard is not None:
                    self._fail_all_queued(discard)
            if self.acc.next_deadline() <= now:
                # A queue's head is its oldest batch: with none past its deadline there
                # is nothing to expire, and no pass scans every queued batch (thousands
                # when a bulk send has filled the buffer).
                self._expire(now)
            delay = self._send_ready(now)
            if (
                (self._need_new_pid or self._need_bump)
                and self._in_flight_calls == 0
                and self._fatal is None
            ):
                # _send_ready held a batch back for a new epoch (e.g. its partition's
                # sequences were forgotten): bump now, nothing else would wake us for it.
                continue
            if txn is not None and txn.has_pending_partitions():
                # Batches of partitions new to the transaction wait for this.
                await txn.add_partitions()
                continue
            delay = min(delay, self.acc.next_deadline() - now)
            if self._inbox:
                continue
            if delay > 0:
                self._idle = True
                self._sleep_until = now + delay
                try:
                    if delay == math.inf:
                        # Nothing to time: no cancel scope (and timer) to set up and undo.
                        await self._wakeup.wait()
                    else:
                        with anyio.move_on_after(delay):
                            await self._wakeup.wait()
                finally:
                    self._idle = False
                if self._inline_error is not None:
                    error, self._inline_error = self._inline_error, None
                    raise error
            else:
                await anyio.lowlevel.checkpoint()

    # -- producer id -----------------------------------------------------------------------

    async def _reset_producer_state(self) -> None:
        """Bump the epoch (or take a fresh id) and renumber every unacknowledged batch.

        Called only with nothing in flight, so no request of the old epoch is still
        expected to answer: whatever the broker still holds of it is fenced, not awaited.
        """
        if self._need_new_pid or self.producer_id < 0 or self.producer_epoch >= _MAX_EPOCH:
            replacing = self.producer_id >= 0
            if not await self._init_producer_id():
                return
            if replacing:
                self.metrics.producer_id_resets += 1
        else:
            self.producer_epoch += 1
            self.metrics.producer_epoch_bumps += 1
            log.debug("producer id %s: epoch bumped to %s", self.producer_id, self.producer_epoch)
        self._need_new_pid = False
        self._need_bump = False
        self._partitions.clear()
        self._sequences_forgotten = False
        for batch in self.acc.queued_batches():
            if batch.sequence >= 0:
                batch.sequence = -1

    async def _init_producer_id(self) -> bool:
        """Get a fresh producer id and epoch 0; False if the producer cannot have one."""
        try:
            response = await request_producer_id(
                self.cluster,
                self._stopped,
                self._retry_min,
                self._retry_max,
                # Batches keep expiring while the cluster is away.
                lambda: self._expire(time.monotonic()),
            )
        except ClusterAuthorizationFailedError as exc:
            self._fatal = exc
            return False
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch
        log.debug("producer id %s epoch %s", self.producer_id, self.producer_epoch)
        return True

    # -- draining --------------------------------------------------------------------------

    def _sendable(self, tp: TopicPartition, batch: ProducerBatch) -> bool:
        if (self._need_new_pid or self._need_bump) and self.idempotent:
            return False
        if self.txn is not None and not self.txn.may_send(tp):
            return False
        if self.idempotent:
            state = self._partitions.get(tp)
            if state is None and self._sequences_forgotten and batch.sequence < 0:
                # Perhaps a partition whose sequences were forgotten: renumber everything
                # under a bumped epoch first (see forget_topics).
                self._need_bump = True
                return False
            # A retried batch goes alone: nothing after it may overtake it. So does the
            # first batch of a partition under a producer id: a broker with no state for
            # the id accepts any sequence, so a later batch in flight would be written
            # ahead of a first batch that fails (e.g. MESSAGE_TOO_LARGE, then split).
            if (
                state is not None
                and state.in_flight
                and (
                    batch.attempts
                    or state.acked_next == 0
                    or state.in_flight >= self._max_in_flight
                )
            ):
                if self._drain_clock is not None:
                    # Waiting on its broker's answers: the broker is not draining it.
                    self._held_back.append(tp)
                return False
        return True

    def _send_ready(self, now: float) -> float:
        clock = self._drain_clock
        if clock is not None:
            self._held_back.clear()
        # Looking ahead by the timer granularity: see _TIMER_GRANULARITY.
        ready, delay = self.acc.ready(now + self.lookahead, self._sendable)
        if clock is not None and self._held_back:
            for tp in self._held_back:
                node = self.cluster.leader(tp[0], tp[1])
                if node >= 0:
                    clock.waiting(node, now)
        if not ready:
            return delay
        by_node: dict[int, list[TopicPartition]] = {}
        unled: set[str] = set()
        for tp in ready:
            leader = self.cluster.leader(tp[0], tp[1])
            if leader < 0:
                unled.add(tp[0])
                continue
            by_node.setdefault(leader, []).append(tp)
        if unled:
            # Tracked again if a record was appended just as its topic expired.
            self.cluster.add_topics(unled)
            self.cluster.request_refresh()
        for node_id, tps in by_node.items():
            if clock is not None:
                # Marked drained below if a request goes out to it in this pass.
                clock.waiting(node_id, now)
            throttled = self._throttled_until.get(node_id, 0.0) - now
            if throttled > 0:
                delay = min(delay, throttled)
                continue
            conn = self.cluster.connection_if_ready(node_id)
            if conn is None:
                # A finished connection attempt wakes us; one that is backing off will not,
                # so come back when its backoff ends.
                backing_off = self.cluster.backoff_remaining(node_id)
                if backing_off > 0:
                    delay = min(delay, backing_off)
                continue
            if conn.in_flight >= self._max_in_flight:
                continue
            if self._drain_node(node_id, conn, tps, now):
                if clock is not None:
                    clock.drained(node_id, now)
                # A request takes one batch per partition: a partition with more batches
                # queued (or one the request had no room for) may be ready again at once,
                # so look again instead of sleeping. With none, the delay above stands: a
                # drained partition with an empty queue has nothing to wait for (another
                # pass would only find that out, once per request at low rates).
                head = self.acc.head
                for tp in tps:
                    if head(tp) is not None:
                        delay = 0.0
                        break
        return delay

    def _drain_node(self, node_id: int, conn: Any, tps: list[TopicPartition], now: float) -> bool:
        # Rotate the starting partition so a large ready set cannot starve its tail.
        start = self._drain_index.get(node_id, 0) % len(tps)
        self._drain_index[node_id] = start + 1
        budget = self.config.max_request_size
        size = 0
        batches: list[ProducerBatch] = []
        # Runs for every batch sent: what it calls is looked up once.
        acc = self.acc
        touch = self.cluster.touch
        stamp = self._stamp if self.idempotent else None
        count = len(tps)
        for i in range(count):
            tp = tps[(start + i) % count]
            head = acc.head(tp)
            if head is None:
                continue
            # Bytes on the wire: compressed batches count by their built size, or their
            # estimate, as a request holds them compressed.
            built = head.built
            batch_size = (
                len(built)
                if built is not None
                else acc.compressed_estimate(tp[0], head.builder.size_in_bytes)
            )
            if batches and size + batch_size > budget:
                continue
            batch = acc.pop_head(tp)
            touch(tp[0], now)
            if stamp is not None:
                stamp(tp, batch)
            batch.in_flight = True
            batches.append(batch)
            size += batch_size
        if not batches:
            return False
        if self.txn is not None:
            # The broker may now hold records of the transaction: it must end with EndTxn.
            self.txn.started = True
        call = ProduceCall(
            node_id,
            self.config.acks_value,
            self._request_timeout_ms,
            batches,
            self.config.compression_offload_bytes,
            self.metrics,
            self.config.transactional_id,
            self.acc.observe_compression,
        )
        self._in_flight_calls += 1
        self.metrics.requests_sent += 1
        version = conn.versions[ApiKey.PRODUCE]
        cap = self.version_caps.get(ApiKey.PRODUCE)
        conn.submit(
            call,
            version if cap is None else min(version, cap),
            lambda response, error: self._on_response(call, response, error),
            expect_response=self.config.acks_value != 0,
        )
        return True

    def _stamp(self, tp: TopicPartition, batch: ProducerBatch) -> None:
        if not self.idempotent:
            return
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = _PartitionState()
        if batch.sequence < 0:
            batch.sequence = state.next_sequence
            state.next_sequence += batch.record_count
        if batch.built is not None:
            # A retry after renumbering: rewrite the header instead of recompressing.
            batch.built = restamp_producer_state(
                batch.built, self.producer_id, self.producer_epoch, batch.sequence
            )
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        state.in_flight += 1

    # -- responses -------------------------------------------------------------------------

    def _on_response(self, call: ProduceCall, response: Any, error: BaseException | None) -> None:
        # Runs in a connection task: only hand over, never touch batch state here. A call
        # is settled once; a second answer would corrupt the in-flight accounting.
        if call.answered:
            log.warning("ignoring a second outcome for a produce request to node %s", call.node_id)
            return
        call.answered = True
        self._inbox.append((call, response, error))
        if self._idle and self._inline_error is None:
            # The loop sleeps between passes, so no batch or sequence state is being
            # changed: settle the response now, as the loop would first thing on waking,
            # instead of one loop pass later (the ack reaches its awaiting task sooner).
            try:
                self._process_inbox(time.monotonic())
            except BaseException as exc:  # raised by the loop, as if it had run it
                self._inline_error = exc
            else:
                if self._settled_quietly(call, response, error):
                    return
        # The loop wakes to send what the freed request slot allows, to retry, to bump.
        self._wakeup.set()

    def _settled_quietly(
        self, call: ProduceCall, response: Any, error: BaseException | None
    ) -> bool:
        # Whether settling ``call`` in the reader's pass left the sleeping loop nothing to
        # do before its own timer: every batch written, no throttle, epoch or transaction
        # to act on, and no batch due but still queued (one the last pass held back, for a
        # request slot the answer may have freed, or for any other reason: a wake-up too
        # many, never one too few). At low rates that is nearly every answer, and waking
        # the loop anyway cost a pass per request that found nothing to send.
        if error is not None or self.txn is not None:
            return False
        if self._need_bump or self._need_new_pid or self._fatal is not None:
            return False
        if response is not None and response.throttle_time_ms > 0:
            return False
        if not all(batch.done and batch.exception is None for batch in call.batches):
            return False
        ready, _delay = self.acc.ready(time.monotonic() + self.lookahead, _any_batch)
        return not ready

    def _process_inbox(self, now: float) -> None:
        inbox = self._inbox
        partitions = self._partitions if self.idempotent else None
        while inbox:
            call, response, error = inbox.popleft()
            self._in_flight_calls -= 1
            self.metrics.observe_latency(now - call.sent_at if call.sent_at else 0.0, call.node_id)
            for batch in call.batches:
                batch.in_flight = False
                if partitions is not None:
                    state = partitions.get((batch.topic, batch.partition))
                    if state is not None and state.in_flight > 0:
                        state.in_flight -= 1
            if error is not None:
                self.cluster.request_refresh()
                for batch in call.batches:
                    self._retry_or_fail(batch, error, now)
                continue
            if response is None:  # acks=0: nothing to wait for
                for batch in call.batches:
                    self._succeed(batch, -1, -1)
                continue
            self._handle_produce_response(call, response, now)

    def _handle_produce_response(
        self, call: ProduceCall, response: ProduceResponse, now: float
    ) -> None:
        if response.throttle_time_ms > 0:
            self._throttled_until[call.node_id] = now + response.throttle_time_ms / 1000
            self.metrics.throttle_time_ms += response.throttle_time_ms
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        for topic in response.topics:
            name = topic.name
            for answer in topic.partitions:
                results[(name, answer.index)] = answer
        # The common case, every batch written, is _succeed's work inline, with what it
        # reads held in locals: it runs for every batch the producer sends.
        partitions = self._partitions if self.idempotent else None
        batch_sent = self.metrics.batch_sent
        complete = self.acc.complete_batch
        for batch in call.batches:
            part = results.get((batch.topic, batch.partition))
            if part is None:
                self._retry_or_fail(
                    batch, MissingPartitionError(f"{batch.topic}-{batch.partition}"), now
                )
                continue
            code = part.error_code
            if code == 0:  # ErrorCode.NONE
                if partitions is not None and batch.sequence >= 0:
                    state = partitions.get((batch.topic, batch.partition))
                    if state is not None:
                        acked = batch.sequence + batch.record_count
                        if acked > state.acked_next:
                            state.acked_next = acked
                batch_sent(batch)
                complete(batch, part.base_offset, part.log_append_time_ms)
            elif code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                # The broker already has this batch (an earlier attempt's answer was lost).
                self._succeed(batch, part.base_offset, part.log_append_time_ms)
            else:
                self._handle_error(batch, code, part, now)

    def _handle_error(self, batch: ProducerBatch, code: int, part: Any, now: float) -> None:
        said = part.error_message
        if part.record_errors:
            details = "; ".join(f"record {i}: {m}" for i, m in part.record_errors)
            said = f"{said}; {details}" if said else details
        # Every error names the partition, the batch's size and the setting involved.
        built = batch.built
        size = len(built) if built is not None else batch.builder.size_in_bytes
        error = produce_error(
            code,
            said,
            topic=batch.topic,
            partition=batch.partition,
            record_count=batch.record_count,
            size=size,
            config=self.config,
        )
        tp = (batch.topic, batch.partition)
        if code == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1:
            self.metrics.batches_split += 1
            self.acc.split(batch, max(1024, batch.builder.size_in_bytes // 2), now)
            if self.idempotent and batch.sequence >= 0:
                self._sequence_lost(error)
            return
        if self.idempotent and code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            state = self._partitions.get(tp)
            if state is not None and batch.sequence > state.acked_next:
                # An earlier batch of this partition failed: this one goes again after it.
                self._retry_or_fail(batch, error, now)
                return
            # Either the broker refuses the very next sequence, or it already holds later
            # ones (it took a later batch first): this sequence can never be accepted, so
            # renumber under a bumped epoch rather than retry it forever.
            self._sequence_lost_retry(batch, error, now)
            return
        if self.idempotent and code == ErrorCode.UNKNOWN_PRODUCER_ID:
            # The broker lost our state (e.g. the log was truncated): start over at 0.
            self._sequence_lost_retry(batch, error, now)
            return
        if self.idempotent and code in (
            ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.PRODUCER_FENCED,
        ):
            if (batch.producer_id, batch.producer_epoch) != (
                self.producer_id,
                self.producer_epoch,
            ):
                # Refused for carrying an epoch we have since left behind: that is the
                # fence working. Its records are failed, never retried under a newer epoch
                # (which would write them after records sent since).
                self._fail(batch, error)
                return
            # The broker refuses our current epoch: it knows a later one for this id.
            if self.txn is not None:
                # For a transactional id that is a newer producer holding it: fatal.
                self._fail(batch, self.txn.fenced(error))
                return
            self._need_new_pid = True
            self._retry_or_fail(batch, error, now)
            return
        if code in _METADATA_ERRORS:
            self.cluster.request_refresh()
        if error_class_for_code(code).retriable:
            self._retry_or_fail(batch, error, now)
        else:
            self._fail(batch, error)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self.idempotent and batch.sequence >= 0:
            state = self._partitions.get((batch.topic, batch.partition))
            if state is not None:
                state.acked_next = max(state.acked_next, batch.sequence + batch.record_count)
        self.metrics.batch_sent(batch)
        self.acc.complete_batch(batch, base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        if self.idempotent and batch.sequence >= 0:
            # The broker's sequence chain now has a hole, and the batch may still be
            # written by a broker that holds it: renumber what follows under a new epoch,
            # which also fences it.
            self._sequence_lost(exc)
        self.metrics.batch_failed(batch, exc)
        self.acc.fail_batch(batch, exc)

    def _sequence_lost(self, exc: BaseException) -> None:
        """The broker's sequence state and ours disagree: an idempotent producer bumps its
        epoch; a transactional one lets the coordinator do it after an abort."""
        if self.txn is not None:
            self.txn.batch_failed(exc)
        else:
            self._need_bump = True

    def _sequence_lost_retry(self, batch: ProducerBatch, exc: BaseException, now: float) -> None:
        if self.txn is not None:
            # No bump until the transaction is aborted: retrying under this epoch cannot
            # succeed, and the transaction cannot commit anyway.
            self._fail(batch, exc)
            return
        self._need_bump = True
        self._retry_or_fail(batch, exc, now)

    def _retry_or_fail(self, batch: ProducerBatch, exc: BaseException, now: float) -> None:
        if now >= batch.deadline:
            self._fail(batch, _timeout_error(batch, exc, self.config.delivery_timeout_ms))
            return
        batch.attempts += 1
        batch.last_error = exc
        self.metrics.batch_retried(batch)
        retry_at = now + backoff(batch.attempts, self._retry_min, self._retry_max)
        self.acc.reenqueue(batch, min(retry_at, batch.deadline))

    def _expire(self, now: float) -> None:
        for batch in self.acc.expired(now):
            cause = batch.last_error or self.cluster.last_error
            self._fail(batch, _timeout_error(batch, cause, self.config.delivery_timeout_ms))

    def _fail_all_queued(self, exc: BaseException) -> None:
        for batch in list(self.acc.queued_batches()):
            self._fail(batch, exc)

    # -- shutdown --------------------------------------------------------------------------

    def abort_everything(self, exc_factory: Callable[[], BaseException]) -> None:
        """Fail every batch that is not yet complete, queued or in flight."""
        self._process_inbox(time.monotonic())
        for batch in list(self.acc.incomplete):
            self._fail(batch, exc_factory())

    def stop(self) -> None:
        """Release anything waiting inside the sender (it is about to be cancelled)."""
        self._stopped.set()


def _any_batch(_tp: TopicPartition, _batch: ProducerBatch) -> bool:
    return True


def _lookahead(linger: float) -> float:
    """How far ahead of now the sender takes lingering batches (seconds): the loop's
    timer granularity, at most half of ``linger``."""
    return min(_TIMER_GRANULARITY, linger / 2)


class MissingPartitionError(KafkaError):
    """The broker's answer did not mention a partition that was in the request."""

    retriable = True

    def __init__(self, tp: str) -> None:
        super().__init__(f"produce response did not include partition {tp}")


def _timeout_error(
    batch: ProducerBatch, cause: BaseException | None, delivery_timeout_ms: int
) -> DeliveryTimeoutError:
    text = (
        f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} not delivered "
        f"within delivery_timeout_ms ({delivery_timeout_ms} ms)"
    )
    if cause is not None:
        text += f"; last error: {cause}"
    err = DeliveryTimeoutError(text)
    err.__cause__ = cause
    return err
