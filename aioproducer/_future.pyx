# cython: language_level=3, binding=False
"""Compiled :class:`~aioproducer.DeliveryFuture`: a type the cyclic garbage collector never
sees.

``SyncProducer.send()`` gives back one future per record, and callers often keep them all
(to check each after ``flush()``). Instances of a type with garbage-collector support count
towards the collector's thresholds as they are created: holding a few hundred thousand
futures then triggers collections of every generation, full ones included, whose pauses
land in the send-to-ack latency of every record queued meanwhile. A future holds its
producer's hand-off, the chunk its record was handed over in, its position there and three
machine integers, so this type has no such support (``no_gc``).

That is safe only while no future sits in a reference cycle which nothing but the
collector could break. The chunk and the hand-off never reference a future, with one
exception: a callback added with :meth:`DeliveryFuture.add_done_callback` (or
``as_future()``) references its future until it has run. It waits in the chunk until the
loop has taken the record, then in the record's batch, and each drops it once run (or, at
a fork, for good: ``handoff.py``). A record's error is raised as a copy
(``results.raisable``), so that the frames it passes through are never referenced from
the chunk.

``sync.py`` makes this type the public ``aioproducer.DeliveryFuture`` where the compiled
``DeliveryHandle`` runs (``results.py``); its pure-Python class is the typed and
documented definition, whose behaviour this one repeats.
"""

cimport cython

import concurrent.futures

# Set by configure() (``sync.py``, which imports this module).
cdef object _batch_type = None
cdef object _new_handle = None
cdef object _raisable = None
cdef object _timeout_error = None
cdef object _callback = None


def configure(batch_type, new_handle, raisable, timeout_error, callback):
    """Package-internal: ``ProducerBatch``, the compiled handle's factory, ``raisable``,
    the error of a timed-out wait and ``FutureCallback``."""
    global _batch_type, _new_handle, _raisable, _timeout_error, _callback
    _batch_type = batch_type
    _new_handle = new_handle
    _raisable = raisable
    _timeout_error = timeout_error
    _callback = callback


@cython.no_gc
@cython.final
cdef class DeliveryFuture:
    """The pending delivery of one record sent with :meth:`SyncProducer.send`.

    It behaves like a :class:`concurrent.futures.Future` of a
    :class:`~aioproducer.RecordMetadata`: :meth:`result` and :meth:`exception` block (with
    an optional timeout), :meth:`done` and :meth:`add_done_callback` work as there, and a
    delivery cannot be cancelled. Callbacks run on the producer's loop thread (or at once in
    the caller's thread if the record is already done), so they must be quick and must not
    block. It is deliberately light: one small object per record, settled by its batch.
    For ``concurrent.futures.wait()`` or ``as_completed()`` use :meth:`as_future`.
    """

    cdef object _handoff
    cdef object _pending
    cdef Py_ssize_t _pos
    cdef long long _timestamp_ms
    cdef long long _key_size
    cdef long long _value_size
    cdef object __weakref__

    cdef object _taken(self):
        # The batch holding the record or the error that kept it out; None until the loop
        # has taken the record.
        outcomes = self._pending.outcomes
        if self._pos >= len(outcomes):
            return None
        return outcomes[self._pos]

    cpdef object _outcome(self):
        # The record's handle or its error; None until the loop has taken the record.
        out = self._taken()
        if isinstance(out, _batch_type):
            return _new_handle(
                out,
                self._pending.indexes[self._pos],
                self._timestamp_ms,
                self._key_size,
                self._value_size,
            )
        return out

    cpdef bint _is_done(self):
        out = self._taken()
        if out is None:
            return False
        return not isinstance(out, _batch_type) or out.done

    def done(self):
        """Whether the record has been delivered or has failed."""
        return self._is_done()

    def running(self):
        """Whether the delivery is still pending (it is never cancellable)."""
        return not self._is_done()

    def cancel(self):
        """Deliveries cannot be cancelled: always ``False``."""
        return False

    def cancelled(self):
        """Always ``False`` (see :meth:`cancel`)."""
        return False

    cdef object _wait(self, timeout):
        if not self._is_done() and not self._handoff.wait_for(self.done, timeout):
            raise _timeout_error(
                f"the record was not delivered within {timeout} s (still pending)"
            )
        return self._outcome()

    def result(self, timeout=None):
        """Wait up to ``timeout`` seconds for the record's metadata; raise its error if any.

        A timeout raises :class:`~aioproducer.errors.KafkaTimeoutError` (also a
        ``concurrent.futures.TimeoutError``) and does not affect the delivery.
        """
        out = self._wait(timeout)
        if isinstance(out, BaseException):
            raise _raisable(out)
        return out.result()

    def exception(self, timeout=None):
        """Wait like :meth:`result`; the delivery's error, or ``None`` if it succeeded."""
        if not self._is_done():
            self._wait(timeout)
        out = self._taken()
        if isinstance(out, _batch_type):
            return out.outcome(self._pending.indexes[self._pos])[2]
        return out

    def add_done_callback(self, fn):
        """Call ``fn(future)`` once the record is done (at once if it already is)."""
        callback = _callback(fn, self)
        if not self._handoff.when_done(self._pending, self._pos, callback):
            callback()

    def as_future(self):
        """A real :class:`concurrent.futures.Future` that completes with this record."""
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        self.add_done_callback(_Settle(future))
        return future

    def __repr__(self):
        out = self._outcome()
        if out is None:
            return "<DeliveryFuture pending (not yet handed to the loop)>"
        if isinstance(out, BaseException):
            return f"<DeliveryFuture failed {type(out).__name__}>"
        state = "done" if out.done() else "pending"
        return f"<DeliveryFuture {out.topic}-{out.partition} {state}>"


@cython.final
cdef class _Settle:
    # as_future()'s callback: completes the concurrent future with the record's outcome.
    # It references that future, never the DeliveryFuture (which FutureCallback passes).
    cdef object future

    def __init__(self, future):
        self.future = future

    def __call__(self, DeliveryFuture done):
        future = self.future
        out = done._outcome()
        try:
            if isinstance(out, BaseException):
                future.set_exception(_raisable(out))
            else:
                future.set_result(out.result())
        except BaseException as exc:
            future.set_exception(exc)


def new_future(handoff, pending, Py_ssize_t pos, record):
    """Package-internal: the future of entry ``pos`` of ``pending`` (a chunk of
    ``handoff``), the checked ``record`` handed over there (``sending.new_promise``)."""
    cdef DeliveryFuture future = DeliveryFuture.__new__(DeliveryFuture)
    future._handoff = handoff
    future._pending = pending
    future._pos = pos
    key = record[1]
    value = record[2]
    future._timestamp_ms = record[4]
    future._key_size = -1 if key is None else len(key)
    future._value_size = -1 if value is None else len(value)
    return future
