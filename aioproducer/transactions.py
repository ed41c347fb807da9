"""Transactions: the state machine of a producer with a ``transactional_id``.

Everything that decides what a transactional producer may do next lives here; the sender
asks (:meth:`TransactionManager.may_send`) and reports (:meth:`TransactionManager.batch_failed`,
:meth:`TransactionManager.fenced`), the producer's public methods call in. It follows the
Java producer's ``TransactionManager``::

    UNINITIALIZED --start()--> INITIALIZING --InitProducerId--> READY
    READY --begin_transaction()--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction()--> COMMITTING --EndTxn(commit)--> READY
    IN_TRANSACTION --abort_transaction()--> ABORTING --EndTxn(abort)--> READY
    IN_TRANSACTION / COMMITTING --abortable error--> ABORTABLE_ERROR
    ABORTABLE_ERROR --abort_transaction()--> ABORTING --> READY
    any state --fatal error--> FATAL_ERROR   (the producer can only be closed)

``start()`` runs InitProducerId with the transactional id at its transaction coordinator
(found with FindCoordinator, key type 1). That bumps the epoch of the id, which fences any
older producer with the same id and makes the coordinator abort a transaction it left open.

``send()`` outside a transaction raises :class:`~aioproducer.errors.TransactionStateError`
at once, as Java's ``send()`` throws ``IllegalStateException``; in ABORTABLE_ERROR it raises
:class:`~aioproducer.errors.TransactionFailedError`, in FATAL_ERROR the fatal error.

Abortable errors (the application aborts and carries on with a new transaction): a batch of
the transaction failed for any reason that is not a fence (delivery timeout, a sequence
error such as OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID, TRANSACTION_ABORTABLE,
topic authorization, a non-retriable broker error), AddPartitionsToTxn or TxnOffsetCommit
failing likewise. Records still unsent then fail too (their transaction cannot commit), the
commit raises ``TransactionFailedError``, and the abort works. Unlike a plain idempotent
producer, a transactional one never bumps its epoch on its own (KIP-360 client bump): the
coordinator does, through InitProducerId with the current id and epoch after the abort
(transaction version 1), or at every EndTxn (version 2, KIP-890).

Fatal errors (the producer can only be closed): ``ProducerFencedError`` (a newer producer
took the id; INVALID_PRODUCER_EPOCH for the current epoch means the same and is reported
as a fence), ``TransactionalIdAuthorizationFailedError``, ``ClusterAuthorizationFailedError``,
INVALID_TXN_STATE and INVALID_PRODUCER_ID_MAPPING from the coordinator, an EndTxn error the
client does not know. Every operation after one raises it again.

A commit first flushes: it waits until every record sent in the transaction has its
outcome (batches leave without lingering), and only if all of them were written does it
send EndTxn(commit). An abort fails the records not yet sent with
:class:`~aioproducer.errors.TransactionAbortedError`, waits for the ones in flight, then
sends EndTxn(abort). An empty transaction sends nothing to the coordinator.

Coordinator requests retry until ``max_block_ms``: NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE (the coordinator moved) and a lost connection lead to a fresh
FindCoordinator; COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS (the previous
transaction's markers are still being written) are retried after a short backoff. If the
time runs out, a commit or abort raises ``KafkaTimeoutError`` and may be called again to
resume. Finding the coordinators and this retrying are the job of ``txn_coordinator.py``.

Transaction versions: a broker whose ApiVersions response finalizes ``transaction.version``
at 2 or more gets version 2 (KIP-890): no AddPartitionsToTxn (Produce v12 carries the
transactional id and adds partitions implicitly), no AddOffsetsToTxn (TxnOffsetCommit v5
adds the offsets partition), and EndTxn v5 returns the bumped epoch the producer continues
with. Otherwise version 1: each partition new to the transaction is added with
AddPartitionsToTxn before the sender drains a batch for it (all new partitions in one
request), and Produce, EndTxn and TxnOffsetCommit stay below the versions that mean
version 2 (11, 4 and 4).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import anyio

from .accumulator import Accumulator, TopicPartition
from .cluster import Cluster, backoff
from .config import ProducerConfig
from .errors import (
    BrokerResponseError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionFailedError,
    TransactionStateError,
    error_for_code,
)
from .protocol.error_codes import ErrorCode
from .protocol.messages import (
    KEY_TYPE_GROUP,
    KEY_TYPE_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
)
from .sender import Sender
from .txn_coordinator import TV1_CAPS, CoordinatorClient, speaks_tv2

__all__ = ["TransactionManager", "TransactionState"]

log = logging.getLogger("aioproducer.transactions")

# After these the producer can only be closed.
_FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    }
)


class TransactionState(enum.Enum):
    """Where a transactional producer stands (see the module docstring)."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_SENDING = (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)


class TransactionManager:
    """The transaction state of one producer, and its requests to the coordinators.

    State is read from any thread (``check_send`` runs in the caller's), written only on
    the producer's loop: by the transactional calls (one at a time) and by the sender.
    """

    def __init__(
        self, config: ProducerConfig, cluster: Cluster, acc: Accumulator, sender: Sender
    ) -> None:
        assert config.transactional_id is not None
        self.transactional_id: str = config.transactional_id
        self.config = config
        self.cluster = cluster
        self._acc = acc
        self._sender = sender
        #: Written by the transactional calls and the sender's reports.
        self.state = TransactionState.UNINITIALIZED
        #: Transaction version 2 (KIP-890); decided by :meth:`initialize`.
        self.tv2 = False
        #: Whether the coordinator may know of the current transaction (a partition or the
        #: offsets were added, or, under version 2, a batch was drained): then it must end
        #: with EndTxn. Set by the sender and the offset calls, cleared when it ends.
        self.started = False
        # Partitions in the current transaction / waiting for AddPartitionsToTxn (v1).
        self._added: set[TopicPartition] = set()
        self._pending: set[TopicPartition] = set()
        # The error that made the transaction abortable, or the fatal one.
        self._last_error: BaseException | None = None
        self.fatal: BaseException | None = None
        # A sequenced batch failed: under version 1 the epoch must be bumped by the
        # coordinator after the abort, since the broker's sequence chain has a hole.
        self._bump_needed = False
        # EndTxn(commit) was sent: from then on the transaction can only be committed.
        self._commit_sent = False
        # Finds the coordinators and sends them the transactional requests.
        self._coordinators = CoordinatorClient(config, cluster)
        self._max_block = config.max_block_ms / 1000
        self._retry_min = config.retry_backoff_ms / 1000
        self._retry_max = config.retry_backoff_max_ms / 1000

    # -- questions (any thread / the sender) ------------------------------------------------

    def check_send(self) -> None:
        """Raise unless records may be sent now (in a transaction, no error)."""
        state = self.state
        if state is TransactionState.IN_TRANSACTION:
            return
        if state is TransactionState.FATAL_ERROR:
            raise self._fatal_again()
        if state is TransactionState.ABORTABLE_ERROR:
            raise self._failed("send")
        if state is TransactionState.READY:
            raise TransactionStateError(
                "send() on a transactional producer outside a transaction: call "
                "begin_transaction() (or use 'async with producer.transaction()') first"
            )
        raise TransactionStateError(f"cannot send while the transaction is {state.value}")

    def may_send(self, tp: TopicPartition) -> bool:
        """The sender's gate: whether a batch of ``tp`` may be drained now.

        A partition new to a version 1 transaction is noted for AddPartitionsToTxn and
        waits until the coordinator has added it.
        """
        if self.state not in _SENDING:
            return False
        if self.tv2 or tp in self._added:
            return True
        self._pending.add(tp)
        return False

    def has_pending_partitions(self) -> bool:
        """Whether partitions wait for AddPartitionsToTxn (the sender then calls
        :meth:`add_partitions`)."""
        return bool(self._pending) and self.state in _SENDING

    def discard_error(self) -> BaseException | None:
        """The error for queued batches that must not be sent any more (the transaction
        is aborting or can no longer commit), or None."""
        state = self.state
        if state is TransactionState.ABORTING:
            return TransactionAbortedError("the transaction was aborted")
        if state is TransactionState.ABORTABLE_ERROR:
            err = TransactionAbortedError(
                f"the transaction can no longer commit because of an earlier error: "
                f"{self._last_error}"
            )
            err.__cause__ = self._last_error
            return err
        return None

    # -- reports from the sender -------------------------------------------------------------

    def batch_failed(self, exc: BaseException) -> None:
        """A batch of the transaction failed: the transaction can no longer commit."""
        self._bump_needed = True
        if self.state in _SENDING:
            log.debug("transaction %r is abortable: %s", self.transactional_id, exc)
            self._last_error = exc
            self.state = TransactionState.ABORTABLE_ERROR
            self._sender.wakeup()

    def fenced(self, exc: BaseException) -> BaseException:
        """A fatal error (a fence, lost authorization): returns the error to report."""
        if isinstance(exc, BrokerResponseError) and exc.code == ErrorCode.INVALID_PRODUCER_EPOCH:
            fence = ProducerFencedError(
                f"transactional id {self.transactional_id!r}: the broker refuses the "
                f"producer's current epoch ({exc})"
            )
            fence.__cause__ = exc
            exc = fence
        if self.state is not TransactionState.FATAL_ERROR:
            log.warning("transactional producer %r: %s", self.transactional_id, exc)
            self.fatal = exc
            self.state = TransactionState.FATAL_ERROR
            self._sender.wakeup()
        return exc

    # -- the transactional calls (the producer's loop) -----------------------------------------

    async def initialize(self) -> None:
        """Get the producer id and epoch of the transactional id (fencing older holders)."""
        self._coordinators.open()
        self.state = TransactionState.INITIALIZING
        deadline = time.monotonic() + self._max_block
        try:
            conn = await self._coordinators.connection_with_retries(
                KEY_TYPE_TRANSACTION, self.transactional_id, deadline
            )
            self.tv2 = speaks_tv2(conn)
            caps = {} if self.tv2 else TV1_CAPS
            self._sender.version_caps = dict(caps)
            await self._init_producer_id(-1, -1, deadline)
        except BaseException as exc:
            if isinstance(exc, BrokerResponseError) and exc.code in _FATAL:
                self.fenced(exc)
            else:
                self.state = TransactionState.UNINITIALIZED
            raise
        log.debug(
            "transactional producer %r: producer id %s epoch %s, transaction version %d",
            self.transactional_id,
            self._sender.producer_id,
            self._sender.producer_epoch,
            2 if self.tv2 else 1,
        )
        self.state = TransactionState.READY

    def begin(self) -> None:
        """Start a transaction (local only: the coordinator learns of it with its first
        partition)."""
        state = self.state
        if state is TransactionState.READY:
            self.state = TransactionState.IN_TRANSACTION
            return
        if state is TransactionState.FATAL_ERROR:
            raise self._fatal_again()
        if state is TransactionState.ABORTABLE_ERROR:
            raise self._failed("begin_transaction")
        if state in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
            raise TransactionStateError("the producer is not started")
        raise TransactionStateError(f"cannot begin a transaction while one is {state.value}")

    async def commit(self) -> None:
        """Flush the transaction's records, then commit it (see the module docstring)."""
        state = self.state
        if state is TransactionState.FATAL_ERROR:
            raise self._fatal_again()
        if state is TransactionState.ABORTABLE_ERROR:
            raise self._failed("commit_transaction")
        if state is TransactionState.IN_TRANSACTION:
            self.state = TransactionState.COMMITTING
            self._commit_sent = False
        elif state is not TransactionState.COMMITTING:
            raise TransactionStateError(f"no transaction to commit (the producer is {state.value})")
        await self._settle_batches(flush=True)
        if self.state is not TransactionState.COMMITTING:
            # A batch failed (or the producer was fenced) while flushing.
            if self.state is TransactionState.FATAL_ERROR:
                raise self._fatal_again()
            raise self._failed("commit_transaction")
        if self.started:
            self._commit_sent = True
            await self._end_transaction(commit=True)
        self._finish()

    async def abort(self) -> None:
        """Discard the transaction's unsent records, wait for those in flight, abort it."""
        state = self.state
        if state is TransactionState.FATAL_ERROR:
            raise self._fatal_again()
        if state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR) or (
            state is TransactionState.COMMITTING and not self._commit_sent
        ):
            self.state = TransactionState.ABORTING
            self._sender.wakeup()
        elif state is not TransactionState.ABORTING:
            raise TransactionStateError(f"no transaction to abort (the producer is {state.value})")
        await self._settle_batches(flush=False)
        if self.state is TransactionState.FATAL_ERROR:
            raise self._fatal_again()
        deadline = time.monotonic() + self._max_block
        if self.started:
            await self._end_transaction(commit=False)
        if self._bump_needed and not self.tv2:
            # A batch's sequence was lost: the next transaction starts under an epoch
            # bumped by the coordinator (KIP-360), with sequences from zero.
            sender = self._sender
            await self._guarded(
                self._init_producer_id(sender.producer_id, sender.producer_epoch, deadline)
            )
        self._finish()

    async def send_offsets(
        self,
        offsets: Mapping[tuple[str, int], int],
        group_id: str,
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Add consumer offsets (with their metadata strings, where given) to the
        transaction: committed with it, dropped on abort."""
        if not isinstance(group_id, str) or not group_id:
            raise TransactionStateError(f"group_id must be a non-empty str, got {group_id!r}")
        notes = dict(metadata or {})
        stray = [tp for tp in notes if tp not in offsets]
        if stray:
            raise TransactionStateError(f"metadata for partitions without an offset: {stray!r}")
        for tp, text in notes.items():
            if not isinstance(text, str):
                raise TransactionStateError(f"metadata of {tp!r} must be a str, got {text!r}")
        self.check_send()
        by_topic: dict[str, list[TxnOffsetCommitPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitPartition(
                    partition, offset, committed_metadata=notes.get((topic, partition))
                )
            )
        if not by_topic:
            return
        sender = self._sender
        deadline = time.monotonic() + self._max_block
        try:
            if not self.tv2:
                self.started = True
                await self._call(
                    KEY_TYPE_TRANSACTION,
                    self.transactional_id,
                    lambda: AddOffsetsToTxnRequest(
                        self.transactional_id, sender.producer_id, sender.producer_epoch, group_id
                    ),
                    deadline,
                )
            self.started = True
            await self._call(
                KEY_TYPE_GROUP,
                group_id,
                lambda: TxnOffsetCommitRequest(
                    self.transactional_id,
                    group_id,
                    sender.producer_id,
                    sender.producer_epoch,
                    list(by_topic.items()),
                ),
                deadline,
            )
        except BrokerResponseError as exc:
            if exc.code in _FATAL:
                raise self.fenced(exc) from None
            self.batch_failed(exc)
            raise

    async def committed_offsets(
        self, partitions: Iterable[tuple[str, int]], group_id: str
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """The offsets (and their metadata) ``group_id`` committed for ``partitions``;
        offset -1 where it has none.

        Asked with ``require_stable`` (OffsetFetch v7+): while an open transaction holds a
        partition's offset the coordinator answers UNSTABLE_OFFSET_COMMIT, and the question
        is asked again until that transaction ends (committed or aborted), within
        ``max_block_ms``. Read right after :meth:`initialize`, it is the offset as the
        last transaction of this id left it: an open one was aborted by the initialisation.
        """
        if not isinstance(group_id, str) or not group_id:
            raise TransactionStateError(f"group_id must be a non-empty str, got {group_id!r}")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(set(partitions)):
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            return {}
        deadline = time.monotonic() + self._max_block
        attempts = 0
        while True:
            attempts += 1
            response: OffsetFetchResponse = await self._call(
                KEY_TYPE_GROUP,
                group_id,
                lambda: OffsetFetchRequest(group_id, list(by_topic.items()), require_stable=True),
                deadline,
                min_version=7,
            )
            found: dict[tuple[str, int], tuple[int, str | None]] = {}
            unstable = False
            for topic, results in response.offsets:
                for result in results:
                    code = result.error_code
                    if code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        unstable = True
                    elif code:
                        raise error_for_code(
                            code, f"OffsetFetch of {topic}[{result.partition_index}]"
                        )
                    found[(topic, result.partition_index)] = (
                        result.committed_offset,
                        result.metadata,
                    )
            if not unstable:
                return found
            delay = backoff(attempts, self._retry_min, self._retry_max)
            if time.monotonic() + delay > deadline:
                raise KafkaTimeoutError(
                    f"the offsets of group {group_id!r} stayed held by an open transaction "
                    f"for max_block_ms ({self.config.max_block_ms} ms)"
                )
            await anyio.sleep(delay)

    async def abort_on_close(self, timeout: float | None) -> None:
        """Abort a transaction left open when the producer closes (as Java does)."""
        if self.state not in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
            TransactionState.ABORTING,
        ):
            return
        log.info(
            "aborting the open transaction of %r: the producer is closing", self.transactional_id
        )
        with anyio.move_on_after(self._max_block if timeout is None else max(0.0, timeout)):
            try:
                await self.abort()
            except KafkaError as exc:
                log.warning("aborting the open transaction on close failed: %s", exc)

    # -- sender step: AddPartitionsToTxn ------------------------------------------------------

    async def add_partitions(self) -> None:
        """Add the pending partitions to the transaction (all in one request)."""
        tps = sorted(self._pending)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        sender = self._sender
        # The coordinator may add them even if the answer is lost: from here the
        # transaction must end with EndTxn.
        self.started = True
        deadline = min(time.monotonic() + self._max_block, self._acc.next_deadline())
        try:
            await self._call(
                KEY_TYPE_TRANSACTION,
                self.transactional_id,
                lambda: AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=self.transactional_id,
                    v3_and_below_producer_id=sender.producer_id,
                    v3_and_below_producer_epoch=sender.producer_epoch,
                    v3_and_below_topics=list(by_topic.items()),
                ),
                deadline,
            )
        except BrokerResponseError as exc:
            if exc.code in _FATAL:
                self.fenced(exc)
            else:
                self.batch_failed(exc)
            return
        except KafkaTimeoutError as exc:
            self.batch_failed(exc)
            return
        self._added.update(tps)
        self._pending.difference_update(tps)
        log.debug("added %d partition(s) to transaction %r", len(tps), self.transactional_id)

    # -- internals ---------------------------------------------------------------------------------

    def _finish(self) -> None:
        self.state = TransactionState.READY
        self.started = False
        self._added.clear()
        self._pending.clear()
        self._last_error = None
        self._bump_needed = False
        self._commit_sent = False

    def _fatal_again(self) -> BaseException:
        """A fresh instance of the fatal error (raising one object again and again would
        pile up its traceback)."""
        fatal = self.fatal
        assert fatal is not None
        try:
            if isinstance(fatal, BrokerResponseError):
                again: BaseException = type(fatal)(fatal.message)
            else:
                again = type(fatal)(*fatal.args)
        except Exception:
            return fatal
        again.__cause__ = fatal
        return again

    def _failed(self, what: str) -> TransactionFailedError:
        err = TransactionFailedError(
            f"{what}: the transaction can no longer commit ({self._last_error}); "
            "call abort_transaction() and start a new one"
        )
        err.__cause__ = self._last_error
        return err

    async def _settle_batches(self, *, flush: bool) -> None:
        """Wait until every batch has its outcome (aborting: the sender discards the
        queued ones; committing: they leave without lingering)."""
        acc = self._acc
        if flush:
            acc.flushing += 1
        self._sender.wakeup()
        try:
            while acc.incomplete:
                batch = next(iter(acc.incomplete))
                await batch.wait()
        finally:
            if flush:
                acc.flushing -= 1

    async def _guarded(self, work: Awaitable[Any]) -> Any:
        """Run a coordinator call; a fatal answer moves the producer to FATAL_ERROR."""
        try:
            return await work
        except BrokerResponseError as exc:
            if exc.code in _FATAL:
                raise self.fenced(exc) from None
            raise

    async def _end_transaction(self, *, commit: bool) -> None:
        sender = self._sender
        deadline = time.monotonic() + self._max_block
        try:
            response = await self._call(
                KEY_TYPE_TRANSACTION,
                self.transactional_id,
                lambda: EndTxnRequest(
                    self.transactional_id, sender.producer_id, sender.producer_epoch, commit
                ),
                deadline,
            )
        except BrokerResponseError as exc:
            if exc.code == ErrorCode.TRANSACTION_ABORTABLE and commit:
                self._commit_sent = False
                self.batch_failed(exc)
                raise self._failed("commit_transaction") from None
            # Any other answer the client does not expect leaves the transaction's fate
            # unknown to it: Java treats those as fatal too.
            raise self.fenced(exc) from None
        if self.tv2 and response.producer_id >= 0:
            sender.adopt_producer(response.producer_id, response.producer_epoch)

    async def _init_producer_id(self, producer_id: int, epoch: int, deadline: float) -> None:
        response = await self._call(
            KEY_TYPE_TRANSACTION,
            self.transactional_id,
            lambda: InitProducerIdRequest(
                self.transactional_id,
                self.config.transaction_timeout_ms,
                producer_id,
                epoch,
            ),
            deadline,
        )
        self._sender.adopt_producer(response.producer_id, response.producer_epoch)

    async def _call(
        self,
        key_type: int,
        key: str,
        make: Callable[[], Any],
        deadline: float,
        *,
        min_version: int = 0,
    ) -> Any:
        """Send ``make()`` to the coordinator of ``key`` (see
        :meth:`CoordinatorClient.call`), at this transaction version."""
        return await self._coordinators.call(
            key_type, key, make, deadline, tv2=self.tv2, min_version=min_version
        )
