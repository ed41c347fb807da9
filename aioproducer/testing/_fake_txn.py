"""The fake cluster's transaction coordinator (transaction version 1).

Package-internal: :class:`TransactionCoordinator` and :class:`EndedTransaction` are its interface, for
:mod:`aioproducer.testing.fake` and its other internal modules.

Every transactional id lives here: its producer id and epoch, the partitions of its open
transaction and the transactions it ended. The state changes at once (no PrepareCommit
phase, no markers written to the partitions): enough to check what a producer asks of its
coordinator and in which order, and to answer its requests with injected errors. All
methods run under the cluster's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.error_codes import ErrorCode

__all__ = ["EndedTransaction", "TransactionCoordinator"]


@dataclass(frozen=True, slots=True)
class EndedTransaction:
    """A transaction the coordinator ended: by EndTxn, or aborted when the id was
    initialized again while it was open (``fenced``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: tuple[tuple[str, int], ...]
    fenced: bool = False


@dataclass(slots=True)
class _Id:
    producer_id: int
    epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    # The last transaction's outcome, so a retried EndTxn is answered as the first time.
    last_committed: bool | None = None


class TransactionCoordinator:
    """The state of every transactional id the fake has seen."""

    def __init__(self) -> None:
        self._ids: dict[str, _Id] = {}
        self._by_producer: dict[int, str] = {}
        self.ended: list[EndedTransaction] = []

    def init_producer_id(
        self, transactional_id: str, producer_id: int, epoch: int, new_producer_id: int
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id.

        A known id gets its epoch bumped, which fences the producer that held it; a
        transaction it left open is aborted. ``producer_id``/``epoch`` other than -1
        (KIP-360) must name the current holder. ``new_producer_id`` is used for a new id.
        """
        state = self._ids.get(transactional_id)
        if state is None:
            state = _Id(new_producer_id, 0)
            self._ids[transactional_id] = state
            self._by_producer[new_producer_id] = transactional_id
            return ErrorCode.NONE, state.producer_id, state.epoch
        if producer_id >= 0 and (producer_id, epoch) != (state.producer_id, state.epoch):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if state.partitions:
            self._end(transactional_id, state, committed=False, fenced=True)
        state.epoch += 1
        state.last_committed = None
        return ErrorCode.NONE, state.producer_id, state.epoch

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> int:
        """The error of AddPartitionsToTxn (v0-3) for these partitions, adding them."""
        code = self._check(transactional_id, producer_id, epoch)
        if code == ErrorCode.NONE:
            state = self._ids[transactional_id]
            state.partitions.update(partitions)
            state.last_committed = None
        return code

    def end(self, transactional_id: str, producer_id: int, epoch: int, committed: bool) -> int:
        """The error of EndTxn; ends the open transaction."""
        code = self._check(transactional_id, producer_id, epoch)
        if code != ErrorCode.NONE:
            return code
        state = self._ids[transactional_id]
        if not state.partitions:
            # Nothing open: a retry of the EndTxn that ended the last one succeeds again,
            # anything else is out of turn.
            if state.last_committed is committed:
                return ErrorCode.NONE
            return ErrorCode.INVALID_TXN_STATE
        self._end(transactional_id, state, committed=committed, fenced=False)
        return ErrorCode.NONE

    def check_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> int:
        """The error for a transactional batch: its partition must be in the producer's
        open transaction (version 1 verification)."""
        transactional_id = self._by_producer.get(producer_id)
        if transactional_id is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        state = self._ids[transactional_id]
        if epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if (topic, partition) not in state.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def _check(self, transactional_id: str, producer_id: int, epoch: int) -> int:
        state = self._ids.get(transactional_id)
        if state is None or state.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != state.epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    def _end(self, transactional_id: str, state: _Id, *, committed: bool, fenced: bool) -> None:
        self.ended.append(
            EndedTransaction(
                transactional_id,
                state.producer_id,
                state.epoch,
                committed,
                tuple(sorted(state.partitions)),
                fenced,
            )
        )
        state.partitions.clear()
        state.last_committed = committed
