# cython: language_level=3, binding=False
"""Compiled :class:`~aioproducer.DeliveryHandle`: a type the cyclic garbage collector never
sees.

``await producer.send()`` gives back one handle per record, and callers often keep them
all (to check each later). Instances of a Python class, or of any type with garbage
collector support, count towards the collector's thresholds as they are created: holding
a few hundred thousand handles then triggers collections of every generation, full ones
included, whose pauses land in the send-to-ack latency of every record queued meanwhile.
A handle holds only its batch, its index there and three machine integers, so it needs
no such support: this type has none (``no_gc``), and creating one counts towards nothing.

That is safe only while no handle sits in a reference cycle, which nothing but the
collector could break: a batch never references a handle, and the one object that does
while the batch is pending (a callback added with :meth:`DeliveryHandle.add_done_callback`)
is dropped by the batch once it has run it (``accumulator.ProducerBatch``).

``results.py`` makes this type the public ``aioproducer.DeliveryHandle`` when the compiled
hot path runs (``speedups.py``); its pure-Python class is the typed and documented
definition, whose behaviour this one repeats.
"""

cimport cython
from cpython.object cimport PyObject_GenericSetAttr


cdef extern from "Python.h":
    int PyObject_IS_GC(object)
    void PyObject_GC_UnTrack(object)

import logging

_log = logging.getLogger("aioproducer")

# RecordMetadata and raisable() (``results.py``, which imports this module): set by
# configure().
cdef object _metadata = None
cdef object _raisable = None


cdef object _object_new = object.__new__
cdef tuple _METADATA_FIELDS = (
    "topic", "partition", "offset", "timestamp_ms", "serialized_key_size",
    "serialized_value_size",
)


cdef object _new_metadata(topic, partition, offset, timestamp_ms, key_size, value_size):
    # RecordMetadata is a frozen dataclass: its __init__ sets each field through
    # object.__setattr__, about 10,000 machine instructions per record, more than the
    # rest of awaiting a delivered handle. Its fields are plain slots, so the instance is
    # made and filled here directly: the same object, equal and hashed alike, for about
    # a tenth of that. (Frozen means only that the class's own __setattr__ refuses.)
    metadata = _object_new(_metadata)
    PyObject_GenericSetAttr(metadata, "topic", topic)
    PyObject_GenericSetAttr(metadata, "partition", partition)
    PyObject_GenericSetAttr(metadata, "offset", offset)
    PyObject_GenericSetAttr(metadata, "timestamp_ms", timestamp_ms)
    PyObject_GenericSetAttr(metadata, "serialized_key_size", key_size)
    PyObject_GenericSetAttr(metadata, "serialized_value_size", value_size)
    return metadata


def configure(metadata, raisable):
    """Package-internal: the class of the metadata a delivered record's handle returns, and
    what copies a failed record's error to raise it (``results.raisable``)."""
    global _metadata, _raisable
    # _new_metadata() fills these fields by name, bypassing the class's constructor.
    fields = tuple(getattr(metadata, "__slots__", ()))
    if fields != _METADATA_FIELDS:
        raise RuntimeError(f"RecordMetadata's fields changed: {fields}, not {_METADATA_FIELDS}")
    _metadata = metadata
    _raisable = raisable


@cython.no_gc
@cython.final
cdef class DeliveryHandle:
    """The pending delivery of one record: ``await handle`` gives its :class:`RecordMetadata`.

    Awaiting is optional and may be repeated; cancelling an ``await handle`` never cancels
    the delivery. A failed delivery raises a :class:`~aioproducer.errors.KafkaError`.
    ``timestamp_ms``, ``key_size`` and ``value_size`` are the record's timestamp and its
    serialized key and value sizes (-1 for None).
    """

    cdef object _batch
    cdef Py_ssize_t _index
    cdef readonly long long timestamp_ms
    cdef readonly long long key_size
    cdef readonly long long value_size

    @property
    def topic(self):
        """The record's topic."""
        return self._batch.topic

    @property
    def partition(self):
        """The partition chosen for the record."""
        return self._batch.partition

    def done(self):
        """Whether the record has been delivered or has failed."""
        return self._batch.done

    def result(self):
        """The metadata of a delivered record; raises its error if it failed (a copy of
        what :meth:`exception` returns).

        Raises ``RuntimeError`` if the delivery is still pending.
        """
        batch = self._batch
        if not batch.done:
            raise RuntimeError("the record's delivery is still pending; await the handle")
        offset, log_append_time, exc = batch.outcome(self._index)
        if exc is not None:
            # A copy: raised, the batch's own error would reference the caller's frames,
            # and they this handle (a cycle the collector cannot see; results.raisable).
            raise _raisable(exc)
        return _new_metadata(
            batch.topic,
            batch.partition,
            offset,
            log_append_time if log_append_time >= 0 else self.timestamp_ms,
            self.key_size,
            self.value_size,
        )

    def exception(self):
        """The error of a failed delivery, ``None`` if delivered (``RuntimeError`` if pending)."""
        if not self._batch.done:
            raise RuntimeError("the record's delivery is still pending; await the handle")
        return self._batch.outcome(self._index)[2]

    def add_done_callback(self, callback):
        """Call ``callback(handle)`` on the producer's loop once the record is done (at once
        if it is). An exception it raises is logged to the ``aioproducer`` logger."""
        cdef _DoneCallback wrapper = _DoneCallback.__new__(_DoneCallback)
        wrapper.handle = self
        wrapper.callback = callback
        self._batch.add_done_callback(wrapper)

    async def wait(self):
        """Wait for the delivery and return its metadata (same as ``await handle``)."""
        batch = self._batch
        if not batch.done:
            await batch.wait()
        return self.result()

    def __await__(self):
        # A generator, not wait()'s coroutine and its wrapper: a handle awaited once its
        # batch is done (most are, when a caller awaits them after sending) returns at
        # once, with one object made instead of two.
        batch = self._batch
        if not batch.done:
            yield from batch.wait().__await__()
        return self.result()

    def __repr__(self):
        state = "done" if self._batch.done else "pending"
        return f"<DeliveryHandle {self.topic}-{self.partition} #{self._index} {state}>"

    def position(self):
        """Package-internal (instrumentation): the batch holding the record, and the
        record's index in it."""
        return self._batch, self._index

    def settled(self):
        """Package-internal: whether the record's batch is done."""
        return self._batch.done

    def failure(self):
        """Package-internal: the error of a record whose batch is done, None if it was
        delivered."""
        return self._batch.outcome(self._index)[2]


@cython.final
cdef class _DoneCallback:
    # What a handle's batch calls once done: ``callback(handle)``. It is the one object
    # that references a handle from a batch; the batch drops it once it has called it.
    # Unlike the handle it is a collector-tracked type (it holds arbitrary objects).
    cdef object handle
    cdef object callback

    def __call__(self, _batch):
        # The producer's loop runs it: an error of the caller's callback must not stop the
        # sender or the batch's other callbacks, so it is logged (as asyncio does).
        try:
            self.callback(self.handle)
        except Exception:
            _log.exception("a DeliveryHandle done-callback raised")


def untrack(obj):
    """Package-internal: take ``obj`` off the cyclic garbage collector's lists for good.

    For an object that can no longer be part of a reference cycle: no collection moves it
    to an older generation (which would bring the next full collection nearer) or visits
    it again, as CPython does for a tuple of atomic values. It is still freed when its
    last reference goes. ``accumulator.ProducerBatch`` untracks a delivered batch this
    way: its handles keep it alive, and it references nothing that could lead back to it.
    """
    # The collector's header exists only on objects of a type with collector support.
    if PyObject_IS_GC(obj):
        PyObject_GC_UnTrack(obj)


def new_handle(batch, Py_ssize_t index, long long timestamp_ms, long long key_size,
               long long value_size):
    """Package-internal: the handle of record ``index`` of ``batch``, with its timestamp and
    its serialized key and value sizes (-1 for None); ``accumulator.new_handle`` calls it."""
    cdef DeliveryHandle handle = DeliveryHandle.__new__(DeliveryHandle)
    handle._batch = batch
    handle._index = index
    handle.timestamp_ms = timestamp_ms
    handle.key_size = key_size
    handle.value_size = value_size
    return handle
