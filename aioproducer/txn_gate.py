"""What the sender asks of a transaction, and what it reports to one.

The sender (``sender.py``) drains and settles batches; a transactional producer's
:class:`~aioproducer.transactions.TransactionManager` decides which batches may go and
drives the sender's producer id. Each needs the other, so the sender depends only on this
narrow interface and the transaction manager on the sender: the dependency runs one way.

Package-internal.
"""

from __future__ import annotations

from typing import Protocol

from .accumulator import TopicPartition

__all__ = ["TransactionGate"]


class TransactionGate(Protocol):
    """The transaction state as the sender sees it (implemented by ``TransactionManager``).

    Read and written on the producer's loop only.
    """

    #: Whether the coordinator may know of the current transaction; the sender sets it
    #: when it drains a batch (the transaction must then end with EndTxn).
    started: bool
    #: The error that stops the producer for good (a fence, lost authorization), or None.
    fatal: BaseException | None

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` may be drained now."""
        ...

    def has_pending_partitions(self) -> bool:
        """Whether partitions wait to be added to the transaction
        (the sender then awaits :meth:`add_partitions`)."""
        ...

    async def add_partitions(self) -> None:
        """Add the pending partitions to the transaction."""
        ...

    def discard_error(self) -> BaseException | None:
        """The error for queued batches that must not be sent any more, or None."""
        ...

    def batch_failed(self, exc: BaseException) -> None:
        """A batch of the transaction failed: the transaction can no longer commit."""
        ...

    def fenced(self, exc: BaseException) -> BaseException:
        """A fatal error for the producer; returns the error to report."""
        ...
