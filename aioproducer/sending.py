"""``Producer.send``'s common case, compiled: a record admitted at once costs no Python frame.

:class:`SendPath` holds one producer's ``send``. Where the hot path is compiled
(``speedups.py``), its ``send`` is a compiled coroutine: awaiting it runs the intake's
checks, admission and append (:meth:`~aioproducer.intake.Intake.offer`) and returns the
record's handle without creating a Python frame or suspending. Everything else (a
producer not running, tracing, a topic whose metadata is not loaded yet, a full buffer)
goes to the producer's own coroutine, which behaves as ``send()`` always did.

The documented behaviour holds on both paths: bad input raises at ``send()`` and harms no
other record; the record is appended before the first suspension point, so a cancelled
``send()`` leaves it fully buffered or not at all; and when an append started or filled
a batch, ``send()`` passes a cancel-shielded checkpoint, so the sender runs between
batches even if the caller never yields.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from anyio.lowlevel import cancel_shielded_checkpoint

from .intake import Intake, PreparedRecord
from .results import DeliveryHandle

__all__ = ["TRACING", "SendPath"]

#: ``TRACING[0]`` is true once any producer may trace its sends (set by ``otel.py``, never
#: reset): until then the common case skips looking up the producer's tracing hook.
TRACING: Final = [False]

#: ``Producer._send_waiting``: the rest of a send whose record must wait.
Waiting = Callable[[PreparedRecord, Any], Awaitable[DeliveryHandle]]
#: ``Producer._send_other``: a send the fast path does not take, from its arguments.
Other = Callable[[Any, Any, Any, Any, Any, Any], Awaitable[DeliveryHandle]]


class SendPath:
    """Package-internal: one producer's ``send``, as :meth:`send` (bound, it is what
    ``producer.send`` finds).

    ``producer`` is read for its tracing hook (``_instrumentation``, which may be set on
    the class or on the producer at any time) once :data:`TRACING` says that any producer
    may trace.
    """

    def __init__(self, producer: Any, intake: Intake, waiting: Waiting, other: Other) -> None:
        self.producer = producer
        self.intake = intake
        self._waiting = waiting
        self._other = other

    async def send(
        self,
        topic: Any,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: Any = None,
        timestamp_ms: Any = None,
    ) -> DeliveryHandle:
        """``Producer.send`` (see there)."""
        intake = self.intake
        if not intake.accepting or (TRACING[0] and self.producer._instrumentation is not None):
            return await self._other(topic, value, key, headers, partition, timestamp_ms)
        result = intake.offer(topic, key, value, headers, partition, timestamp_ms)
        if isinstance(result, PreparedRecord):
            # Checked, but it must wait for its topic's metadata or for buffer space.
            return await self._waiting(result, partition)
        if intake.woke:
            # A batch started or filled: let the sender run even if the caller never
            # yields (shielded: the record is already buffered).
            await cancel_shielded_checkpoint()
        return result
