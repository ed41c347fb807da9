# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled column encoder: a run of records straight from Arrow-layout column buffers
(and the grouping of keyed rows by partition that comes before it).

:func:`encode_run` writes exactly the bytes ``columnar.encode_run`` (numpy) and
``RecordBatchBuilder.append`` (one record at a time) write, in one pass over the rows:
each record's size is known from its offsets alone, so the batch is cut first, then one
output buffer of the exact size is filled with varints and ``memcpy`` s of the key,
value and header bytes. No Python object per record, no plan kept between calls: a call
costs little enough to be made per batch.

The column buffers are read through the buffer protocol as they are: offsets int32 or
int64 (Arrow's ``binary`` and ``large_binary``), data uint8, validity one byte per row
(numpy bool) or None. A null row must span no bytes (``BinaryColumn`` makes sure of it).

A bulk send of Python lists of bytes is grouped and encoded here too, from the lists'
items in place (:func:`group_rows`, :func:`encode_sequence_batches`).
"""

# Over 700 lines on purpose: one C unit, so that the columns' and the lists' encoders
# share the record writer, the varints and murmur2 as inline functions (a second
# extension module would need them in a .pxd and a build entry of its own).

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython cimport array
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

import array

# The template of the int64 arrays handed back (array.clone copies its type).
cdef array.array _INT64 = array.array("q")


cdef struct Column:
    const char *offsets   # int32 or int64 offsets, one more than the rows
    bint wide             # int64 offsets
    const uint8_t *data
    Py_ssize_t data_len
    const uint8_t *valid  # one byte per row, or NULL: no null row


cdef inline int64_t _offset(const Column *c, Py_ssize_t i) noexcept nogil:
    if c.wide:
        return (<const int64_t *>c.offsets)[i]
    return (<const int32_t *>c.offsets)[i]


cdef inline int64_t _length(const Column *c, Py_ssize_t i) noexcept nogil:
    """Row ``i``'s byte length, -1 if null."""
    if c.valid != NULL and not c.valid[i]:
        return -1
    return _offset(c, i + 1) - _offset(c, i)


cdef inline int _varint_size(uint64_t zz) noexcept nogil:
    cdef int size = 1
    while zz >= 0x80:
        zz >>= 7
        size += 1
    return size


cdef inline uint64_t _zigzag(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline uint8_t *_put_varint(uint8_t *out, uint64_t zz) noexcept nogil:
    while zz >= 0x80:
        out[0] = <uint8_t>((zz & 0x7F) | 0x80)
        out += 1
        zz >>= 7
    out[0] = <uint8_t>zz
    return out + 1


cdef inline int64_t _body_size(Py_ssize_t ts_len, int64_t od, int64_t klen, int64_t vlen,
                               int64_t hlen) noexcept nogil:
    """A record's bytes after its length varint (``klen``/``vlen`` -1 for null;
    ``hlen`` the bytes of its header section)."""
    return (
        1 + ts_len + _varint_size(_zigzag(od))
        + _varint_size(_zigzag(klen)) + (klen if klen > 0 else 0)
        + _varint_size(_zigzag(vlen)) + (vlen if vlen > 0 else 0)
        + hlen
    )


cdef inline uint8_t *_put_record(uint8_t *out, int64_t body, const uint8_t *ts,
                                 Py_ssize_t ts_len, int64_t od, const uint8_t *key,
                                 int64_t klen, const uint8_t *value,
                                 int64_t vlen) noexcept nogil:
    """A record's bytes up to its header section: its length, attributes, timestamp and
    offset deltas, key and value; returns where the header section goes."""
    out = _put_varint(out, _zigzag(body))
    out[0] = 0  # attributes
    out += 1
    if ts_len == 1:
        out[0] = ts[0]
    else:
        memcpy(out, ts, ts_len)
    out += ts_len
    out = _put_varint(out, _zigzag(od))
    out = _put_varint(out, _zigzag(klen))
    if klen > 0:
        memcpy(out, key, klen)
        out += klen
    out = _put_varint(out, _zigzag(vlen))
    if vlen > 0:
        memcpy(out, value, vlen)
        out += vlen
    return out


cdef int _open(object column, Py_buffer *bufs, bint *held, Column *c, Py_ssize_t stop,
               str name) except -1:
    """Acquire the buffers of one column ``(offsets, data, valid)`` into ``bufs[0:3]``
    (``held`` says which to release) and check they cover rows up to ``stop``."""
    off_obj, data_obj, valid_obj = column
    PyObject_GetBuffer(off_obj, &bufs[0], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    held[0] = True
    if bufs[0].itemsize == 8:
        c.wide = True
    elif bufs[0].itemsize == 4:
        c.wide = False
    else:
        raise ValueError(f"{name} offsets must be int32 or int64, got {bufs[0].itemsize}-byte items")
    if bufs[0].len // bufs[0].itemsize < stop + 1:
        raise ValueError(f"{name} has fewer than {stop} rows")
    c.offsets = <const char *>bufs[0].buf
    PyObject_GetBuffer(data_obj, &bufs[1], PyBUF_C_CONTIGUOUS)
    held[1] = True
    if bufs[1].itemsize != 1:
        raise ValueError(f"{name} data must be bytes (uint8)")
    c.data = <const uint8_t *>bufs[1].buf
    c.data_len = bufs[1].len
    c.valid = NULL
    if valid_obj is not None:
        PyObject_GetBuffer(valid_obj, &bufs[2], PyBUF_C_CONTIGUOUS)
        held[2] = True
        if bufs[2].itemsize != 1 or bufs[2].len < stop:
            raise ValueError(f"{name} validity must be one byte per row")
        c.valid = <const uint8_t *>bufs[2].buf
    return 0


cdef void _release(Py_buffer *bufs, const bint *held, int n) noexcept:
    """Release each of the first ``n`` buffers that was acquired (``held``)."""
    cdef int k
    for k in range(n):
        if held[k]:
            PyBuffer_Release(&bufs[k])


cdef int _check_ends(const Column *c, Py_ssize_t start, Py_ssize_t stop, str name) except -1:
    # With every row's span checked non-negative while sizing, this keeps every read
    # inside the data buffer whatever the offsets say.
    cdef int64_t first = _offset(c, start)
    cdef int64_t last = _offset(c, stop)
    if first < 0 or last < first or last > c.data_len:
        raise ValueError(f"{name} offsets point outside its data")
    return 0


def encode_run(
    values,
    keys,
    headers,
    Py_ssize_t start,
    Py_ssize_t stop,
    int64_t first_offset_delta,
    bytes ts_part not None,
    int64_t size_so_far,
    max_bytes,
):
    """Encode records ``start:stop`` into a batch holding ``first_offset_delta`` records
    and ``size_so_far`` bytes; returns ``(records encoded, their bytes)``.

    ``values`` is a tuple ``(offsets, data, valid)`` of buffers; ``keys`` and ``headers``
    are such tuples or None (no key, no headers: a header row is the record's encoded
    header section). Every record gets the encoded timestamp delta ``ts_part``. Encoding
    stops before the first record that would take the batch past ``max_bytes`` (None: no
    limit), unless the batch is empty (``first_offset_delta`` 0): then at least one
    record is encoded.
    """
    if start >= stop:
        return 0, b""
    limited = max_bytes is not None
    return _columns(
        values, keys, headers, start, stop, first_offset_delta, ts_part, size_so_far,
        limited, max_bytes if limited else 0, False, None,
    )


def encode_batches(
    values,
    keys,
    headers,
    Py_ssize_t start,
    Py_ssize_t stop,
    bytes ts_part not None,
    int64_t empty_size,
    int64_t max_bytes,
    compress=None,
):
    """Encode records ``start:stop`` into as many new batches as they fill: a list of
    ``(records, their bytes)`` (a ``bytearray``, which a batch keeps as it is), one per
    batch, in order; with ``compress`` (a function of a batch's bytes), ``(records, their
    bytes, compress(their bytes))``, each batch compressed as soon as it is encoded,
    while its bytes are still in the CPU's cache.

    Each batch starts empty (``empty_size`` bytes: its header) and takes records, with
    offset deltas from 0 and the timestamp delta ``ts_part``, as long as they keep it
    within ``max_bytes`` (at least one record each), exactly as :func:`encode_run`
    called once per batch would. The columns' buffers are acquired once for all of
    them. Arguments as :func:`encode_run`'s.
    """
    if start >= stop:
        return []
    return _columns(
        values, keys, headers, start, stop, 0, ts_part, empty_size, True, max_bytes, True,
        compress,
    )


cdef object _columns(object values, object keys, object headers, Py_ssize_t start,
                     Py_ssize_t stop, int64_t first_offset_delta, bytes ts_part,
                     int64_t size_so_far, bint limited, int64_t limit, bint many,
                     object compress):
    """Acquire the columns' buffers, encode, release them: one batch's records
    (``(count, bytes)``) or, if ``many``, a list of new batches' (``bytearray`` s, each
    with ``compress`` of it if that is not None)."""
    cdef Py_buffer bufs[9]
    cdef bint held[9]
    cdef Column cols[3]
    cdef Column *kc = NULL
    cdef Column *hc = NULL
    cdef Py_ssize_t count = 0
    cdef Py_ssize_t pos = start
    cdef list out
    cdef object result
    cdef int k, present
    if start < 0:
        raise ValueError("start must not be negative")
    for k in range(9):
        held[k] = False
    try:
        present = _open_all(values, keys, headers, bufs, held, cols, start, stop)
        kc = &cols[1] if present & 1 else NULL
        hc = &cols[2] if present & 2 else NULL
        if not many:
            result = _encode(
                &cols[0], kc, hc, start, stop, first_offset_delta, ts_part, size_so_far,
                limited, limit, &count, False,
            )
            return count, result
        out = []
        while pos < stop:
            result = _encode(
                &cols[0], kc, hc, pos, stop, 0, ts_part, size_so_far, True, limit, &count,
                True,
            )
            if compress is None:
                out.append((count, result))
            else:
                out.append((count, result, compress(result)))
            pos += count
        return out
    finally:
        _release(bufs, held, 9)


cdef int _open_all(object values, object keys, object headers, Py_buffer *bufs, bint *held,
                   Column *cols, Py_ssize_t start, Py_ssize_t stop) except -1:
    """Acquire the three columns' buffers into ``cols`` (``keys``/``headers`` may be
    None) and check rows ``start:stop``; returns 1 if there are keys, plus 2 if headers."""
    cdef int present = 0
    _open(values, &bufs[0], &held[0], &cols[0], stop, "values")
    _check_ends(&cols[0], start, stop, "values")
    if keys is not None:
        present |= 1
        _open(keys, &bufs[3], &held[3], &cols[1], stop, "keys")
        _check_ends(&cols[1], start, stop, "keys")
    if headers is not None:
        present |= 2
        _open(headers, &bufs[6], &held[6], &cols[2], stop, "headers")
        if cols[2].valid != NULL:
            raise ValueError("headers must have no null row")
        _check_ends(&cols[2], start, stop, "headers")
    return present


cdef object _encode(const Column *vc, const Column *kc, const Column *hc, Py_ssize_t start,
                    Py_ssize_t stop, int64_t first_offset_delta, bytes ts_part,
                    int64_t size_so_far, bint limited, int64_t limit, Py_ssize_t *count_out,
                    bint as_bytearray):
    """:func:`encode_run` on opened columns: the records' bytes (a ``bytearray`` if
    ``as_bytearray``), their count in ``count_out`` (empty and 0 if the first does not
    fit)."""
    cdef Py_ssize_t ts_len = len(ts_part)
    cdef const uint8_t *ts = <const uint8_t *>PyBytes_AS_STRING(ts_part)
    cdef Py_ssize_t i, end
    cdef int64_t used, body, vlen, klen, hlen, total, od, size, span
    cdef bint bad
    cdef uint8_t *out
    cdef object result

    # Pass 1: each record's size, and where the batch is cut.
    used = size_so_far
    total = 0
    bad = False
    with nogil:
        i = start
        while i < stop:
            od = first_offset_delta + (i - start)
            body = 1 + ts_len + _varint_size(_zigzag(od))
            span = _offset(vc, i + 1) - _offset(vc, i)
            bad |= span < 0
            vlen = _length(vc, i)
            body += _varint_size(_zigzag(vlen)) + (vlen if vlen > 0 else 0)
            if kc != NULL:
                span = _offset(kc, i + 1) - _offset(kc, i)
                bad |= span < 0
                klen = _length(kc, i)
                body += _varint_size(_zigzag(klen)) + (klen if klen > 0 else 0)
            else:
                body += 1
            if hc != NULL:
                span = _offset(hc, i + 1) - _offset(hc, i)
                bad |= span < 0
                body += span
            else:
                body += 1
            size = body + _varint_size(_zigzag(body))
            if limited and used + size > limit and (i > start or first_offset_delta != 0):
                break
            used += size
            total += size
            i += 1
        end = i
    if bad:
        raise ValueError("column offsets must not decrease")
    count_out[0] = end - start
    if end == start:
        return bytearray() if as_bytearray else b""

    # Pass 2: the bytes, record after record.
    if as_bytearray:
        result = PyByteArray_FromStringAndSize(NULL, total)
        out = <uint8_t *>PyByteArray_AS_STRING(result)
    else:
        result = PyBytes_FromStringAndSize(NULL, total)
        out = <uint8_t *>PyBytes_AS_STRING(result)
    with nogil:
        for i in range(start, end):
            od = first_offset_delta + (i - start)
            vlen = _length(vc, i)
            klen = _length(kc, i) if kc != NULL else -1
            hlen = _offset(hc, i + 1) - _offset(hc, i) if hc != NULL else 1
            body = _body_size(ts_len, od, klen, vlen, hlen)
            out = _put_record(
                out, body, ts, ts_len, od,
                kc.data + _offset(kc, i) if klen > 0 else NULL, klen,
                vc.data + _offset(vc, i), vlen,
            )
            if hc != NULL:
                memcpy(out, hc.data + _offset(hc, i), hlen)
                out += hlen
            else:
                out[0] = 0  # no headers
                out += 1
    return result


# -- grouping keyed rows by partition (a bulk send's columns, before encoding) ---------------


cdef inline uint32_t _murmur2(const uint8_t *p, int64_t n) noexcept nogil:
    # Kafka's murmur2 (Java's Utils.murmur2): unsigned 32-bit arithmetic wraps as Java's
    # int does, so the bits are the same.
    cdef uint32_t m = 0x5BD1E995U
    cdef uint32_t h = 0x9747B28CU ^ <uint32_t>n
    cdef uint32_t k
    cdef int64_t i
    cdef int64_t end = n - (n & 3)
    for i in range(0, end, 4):
        k = p[i] | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    if n & 3 == 3:
        h ^= <uint32_t>p[end + 2] << 16
    if n & 3 >= 2:
        h ^= <uint32_t>p[end + 1] << 8
    if n & 3 >= 1:
        h ^= p[end]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


cdef int _writable(object obj, Py_buffer *buf, Py_ssize_t itemsize, Py_ssize_t count,
                   str name) except -1:
    PyObject_GetBuffer(obj, buf, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    if buf.itemsize != itemsize or buf.len < count * itemsize:
        PyBuffer_Release(buf)
        raise ValueError(f"{name} must hold {count} items of {itemsize} bytes")
    return 0


def key_partitions(keys, Py_ssize_t count, Py_ssize_t num_partitions, out):
    """The partition Java's default partitioner picks for each of the first ``count`` keys
    of ``keys`` (``(offsets, data, valid)``) among ``num_partitions``, written into ``out``
    (int64, writable); -1 for a null key."""
    cdef Py_buffer bufs[4]
    cdef bint held[4]
    cdef Column c
    cdef int64_t *parts
    cdef Py_ssize_t i
    cdef int64_t span
    cdef bint bad = False
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    for i in range(4):
        held[i] = False
    try:
        _open(keys, &bufs[0], &held[0], &c, count, "keys")
        _check_ends(&c, 0, count, "keys")
        _writable(out, &bufs[3], 8, count, "out")
        held[3] = True
        parts = <int64_t *>bufs[3].buf
        with nogil:
            for i in range(count):
                span = _offset(&c, i + 1) - _offset(&c, i)
                bad |= span < 0
                if c.valid != NULL and not c.valid[i]:
                    parts[i] = -1
                elif span >= 0:
                    parts[i] = (_murmur2(c.data + _offset(&c, i), span) & 0x7FFFFFFF) % num_partitions
        if bad:
            raise ValueError("column offsets must not decrease")
    finally:
        _release(bufs, held, 4)


def partition_order(parts, Py_ssize_t count, Py_ssize_t bins, order, counts):
    """A stable counting sort of rows by partition: ``parts`` (int64, -1 for the sticky
    partitioner, else below ``bins - 1``) of ``count`` rows; writes the rows in order into
    ``order`` (int64) and each partition's row count (the sticky ones first) into
    ``counts`` (int64, ``bins`` items, zeroed)."""
    cdef Py_buffer bufs[3]
    cdef bint held[3]
    cdef const int64_t *p
    cdef int64_t *o
    cdef int64_t *n
    cdef int64_t *pos = NULL
    cdef Py_ssize_t i
    cdef int64_t b, total
    cdef bint bad = False
    for i in range(3):
        held[i] = False
    try:
        PyObject_GetBuffer(parts, &bufs[0], PyBUF_C_CONTIGUOUS)
        held[0] = True
        if bufs[0].itemsize != 8 or bufs[0].len < count * 8:
            raise ValueError(f"parts must hold {count} int64 items")
        _writable(order, &bufs[1], 8, count, "order")
        held[1] = True
        _writable(counts, &bufs[2], 8, bins, "counts")
        held[2] = True
        p = <const int64_t *>bufs[0].buf
        o = <int64_t *>bufs[1].buf
        n = <int64_t *>bufs[2].buf
        pos = <int64_t *>PyMem_Malloc(bins * sizeof(int64_t))
        if pos == NULL:
            raise MemoryError()
        with nogil:
            for i in range(bins):
                n[i] = 0
            for i in range(count):
                b = p[i] + 1
                if b < 0 or b >= bins:
                    bad = True
                    break
                n[b] += 1
            if not bad:
                total = 0
                for i in range(bins):
                    pos[i] = total
                    total += n[i]
                for i in range(count):
                    b = p[i] + 1
                    o[pos[b]] = i
                    pos[b] += 1
        if bad:
            raise ValueError(f"a partition is outside -1..{bins - 2}")
    finally:
        PyMem_Free(pos)
        _release(bufs, held, 3)


def gather(column, order, Py_ssize_t count, out_offsets, out_data):
    """Rows ``order`` (int64, ``count`` distinct ones, each below the column's length) of
    ``column`` (``(offsets, data, valid)``) one after the other: their offsets (int64,
    ``count + 1``, from 0) into ``out_offsets`` and their bytes into ``out_data`` (uint8,
    at least their total size). Returns the bytes written."""
    cdef Py_buffer bufs[6]
    cdef bint held[6]
    cdef Column c
    cdef const int64_t *o
    cdef int64_t *off
    cdef uint8_t *out
    cdef Py_ssize_t i, rows
    cdef int64_t row, start, span, written = 0, room
    cdef int64_t *dest = NULL
    cdef bint bad = False
    for i in range(6):
        held[i] = False
    try:
        PyObject_GetBuffer(column[0], &bufs[0], PyBUF_C_CONTIGUOUS)
        held[0] = True
        if bufs[0].itemsize not in (4, 8):
            raise ValueError("offsets must be int32 or int64")
        rows = bufs[0].len // bufs[0].itemsize - 1
        PyBuffer_Release(&bufs[0])
        held[0] = False
        _open(column, &bufs[0], &held[0], &c, rows, "column")
        _check_ends(&c, 0, rows, "column")
        PyObject_GetBuffer(order, &bufs[3], PyBUF_C_CONTIGUOUS)
        held[3] = True
        if bufs[3].itemsize != 8 or bufs[3].len < count * 8:
            raise ValueError(f"order must hold {count} int64 items")
        _writable(out_offsets, &bufs[4], 8, count + 1, "out_offsets")
        held[4] = True
        PyObject_GetBuffer(out_data, &bufs[5], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        held[5] = True
        o = <const int64_t *>bufs[3].buf
        off = <int64_t *>bufs[4].buf
        out = <uint8_t *>bufs[5].buf
        room = bufs[5].len
        # Where each source row goes, so that the copy reads the source in order (rows
        # bound for a dozen partitions read in partition order miss the cache on every
        # row; written in source order, each partition's rows still land one after the
        # other).
        dest = <int64_t *>PyMem_Malloc((rows if rows > 0 else 1) * sizeof(int64_t))
        if dest == NULL:
            raise MemoryError()
        with nogil:
            for i in range(rows):
                dest[i] = -1
            off[0] = 0
            for i in range(count):
                row = o[i]
                if row < 0 or row >= rows or dest[row] >= 0:
                    bad = True
                    break
                start = _offset(&c, row)
                span = _offset(&c, row + 1) - start
                if span < 0 or start + span > c.data_len or written + span > room:
                    bad = True
                    break
                dest[row] = written
                written += span
                off[i + 1] = written
            if not bad:
                for i in range(rows):
                    if dest[i] >= 0:
                        start = _offset(&c, i)
                        memcpy(out + dest[i], c.data + start, _offset(&c, i + 1) - start)
        if bad:
            raise ValueError("gather: a row twice, or a row or its bytes out of range")
        return written
    finally:
        PyMem_Free(dest)
        _release(bufs, held, 6)


# -- a bulk send of Python sequences (lists of bytes or None) --------------------------------
#
# The same grouping and encoding as for columns, read straight from the lists' items: no
# buffer is built from them first (the items are where the bytes already are).


cdef inline int64_t _item_len(object item) except -2:
    """An item's byte length, -1 for None; anything but bytes is refused."""
    if item is None:
        return -1
    if type(item) is not bytes:
        raise TypeError(f"expected bytes or None, got {type(item).__name__}")
    return PyBytes_GET_SIZE(item)


cdef list _runs(const int64_t *counts, int64_t *nexts, Py_ssize_t bins, Py_ssize_t *used):
    """The ``(partition or None, start, stop)`` runs of rows counted by slot (``counts``:
    slot 0 the sticky partitioner's, slot p + 1 partition p), where each slot's rows
    start (into ``nexts``), and how many slots have rows (into ``used``)."""
    cdef list runs = []
    cdef int64_t total = 0
    cdef Py_ssize_t slot
    used[0] = 0
    for slot in range(bins):
        nexts[slot] = total
        if counts[slot]:
            used[0] += 1
            runs.append((None if slot == 0 else slot - 1, total, total + counts[slot]))
            total += counts[slot]
    return runs


def group_rows(keys, parts, Py_ssize_t count, Py_ssize_t num_partitions, columns):
    """Group the first ``count`` rows of a bulk send of sequences by partition, stably.

    A row's partition is ``parts[i]`` if ``parts`` (a list of int or None) gives one,
    else the one Java's default partitioner picks for ``keys[i]`` among
    ``num_partitions`` if ``keys`` is a list and the key is not None, else None (the
    sticky partitioner's). Every given partition must be in ``0..num_partitions - 1``.

    Returns ``(order, runs, grouped)``: ``order`` each grouped row's position in the
    input (a list; None if all rows share a partition, then nothing moves), ``runs`` a
    ``(partition or None, start, stop)`` per partition, the sticky partitioner's rows
    first, then by partition; ``grouped`` the lists of ``columns`` (a list of lists or
    None) in that order, ``count`` items each.
    """
    cdef list klist = keys
    cdef list plist = parts
    cdef Py_ssize_t bins = num_partitions + 1
    cdef Py_ssize_t i, slot, used = 0, j
    cdef int64_t n
    cdef object item
    cdef int32_t *slots = NULL
    cdef int64_t *counts = NULL
    cdef int64_t *nexts = NULL
    cdef int64_t *order = NULL
    cdef list runs, out, grouped, column, moved
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if count < 0 or (klist is not None and len(klist) < count) or (
        plist is not None and len(plist) < count
    ):
        raise ValueError(f"keys and parts must hold {count} rows")
    for column in columns:
        if column is not None and len(column) < count:
            raise ValueError(f"every column must hold {count} rows")
    try:
        slots = <int32_t *>PyMem_Malloc((count if count > 0 else 1) * sizeof(int32_t))
        counts = <int64_t *>PyMem_Malloc(bins * sizeof(int64_t))
        nexts = <int64_t *>PyMem_Malloc(bins * sizeof(int64_t))
        order = <int64_t *>PyMem_Malloc((count if count > 0 else 1) * sizeof(int64_t))
        if slots == NULL or counts == NULL or nexts == NULL or order == NULL:
            raise MemoryError()
        for i in range(bins):
            counts[i] = 0
        for i in range(count):
            slot = 0
            item = plist[i] if plist is not None else None
            if item is not None:
                n = item
                if n < 0 or n >= num_partitions:
                    raise ValueError(f"partition {n} is outside 0..{num_partitions - 1}")
                slot = n + 1
            elif klist is not None:
                item = klist[i]
                n = _item_len(item)
                if n >= 0:
                    slot = (
                        _murmur2(<const uint8_t *>PyBytes_AS_STRING(item), n) & 0x7FFFFFFF
                    ) % num_partitions + 1
            slots[i] = <int32_t>slot
            counts[slot] += 1
        runs = _runs(counts, nexts, bins, &used)
        if used <= 1:
            return None, runs, [column for column in columns]
        for i in range(count):
            slot = slots[i]
            order[nexts[slot]] = i
            nexts[slot] += 1
        out = [order[i] for i in range(count)]
        grouped = []
        for column in columns:
            if column is None:
                grouped.append(None)
                continue
            moved = [None] * count
            for i in range(count):
                j = order[i]
                moved[i] = column[j]
            grouped.append(moved)
        return out, runs, grouped
    finally:
        PyMem_Free(slots)
        PyMem_Free(counts)
        PyMem_Free(nexts)
        PyMem_Free(order)


def scan_lists(list values not None, keys, Py_ssize_t num_partitions, bint hash_keys,
               int64_t framing, int64_t max_size):
    """A bulk send of lists checked, sized and grouped by partition in one pass: what
    ``sequences.prepare`` does in several when there are no headers, no partitions given,
    no serializer and no custom partitioner.

    ``values`` and ``keys`` (a list as long, or None) must hold bytes or None. With
    ``hash_keys`` (and keys) rows are grouped, stably, by the partition Java's default
    partitioner picks for their key among ``num_partitions``; rows with a null key are
    the sticky partitioner's (None), first. Without, all rows are the sticky
    partitioner's.

    Returns None if an item is not bytes or None, or if ``framing`` plus the largest
    value and the largest key exceeds ``max_size``: the general path then finds the
    record and names it. Else ``(order, runs, values, keys, bounds, largest)``:

    * ``order``: each grouped row's position in the input (``array('q')``), None if no
      row moved;
    * ``runs``: ``(partition or None, start, stop)`` per partition, in grouped order;
    * ``values``, ``keys``: the lists in grouped order (the same lists if no row moved);
    * ``bounds``: the running sums of the rows' size bounds (``framing`` plus key and
      value bytes), grouped, one more than rows (``array('q')``), so a slice's bound is
      one subtraction;
    * ``largest``: ``framing`` plus the largest value and the largest key.
    """
    cdef list klist = keys
    cdef Py_ssize_t count = len(values)
    cdef Py_ssize_t bins = num_partitions + 1
    cdef Py_ssize_t i, slot, used = 0, d
    cdef int64_t vlen, klen, vmax = 0, kmax = 0
    cdef object item
    cdef int32_t *slots = NULL
    cdef int64_t *row_bounds = NULL
    cdef int64_t *nexts = NULL
    cdef int64_t *bins_count = NULL
    cdef long long *sums
    cdef long long *o
    cdef array.array bounds, order
    cdef list runs, moved_values, moved_keys
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if klist is not None and len(klist) != count:
        raise ValueError(f"keys has {len(klist)} items but values has {count}")
    hash_keys = hash_keys and klist is not None
    bounds = array.clone(_INT64, count + 1, False)
    sums = bounds.data.as_longlongs
    sums[0] = 0
    try:
        if hash_keys:
            slots = <int32_t *>PyMem_Malloc((count if count > 0 else 1) * sizeof(int32_t))
            row_bounds = <int64_t *>PyMem_Malloc((count if count > 0 else 1) * sizeof(int64_t))
            bins_count = <int64_t *>PyMem_Malloc(bins * sizeof(int64_t))
            nexts = <int64_t *>PyMem_Malloc(bins * sizeof(int64_t))
            if slots == NULL or row_bounds == NULL or bins_count == NULL or nexts == NULL:
                raise MemoryError()
            for i in range(bins):
                bins_count[i] = 0
        # One pass: types, lengths, and (keys to hash) each row's partition.
        for i in range(count):
            item = values[i]
            if item is None:
                vlen = 0
            elif type(item) is bytes:
                vlen = PyBytes_GET_SIZE(item)
            else:
                return None
            klen = 0
            slot = 0
            if klist is not None:
                item = klist[i]
                if item is None:
                    pass
                elif type(item) is bytes:
                    klen = PyBytes_GET_SIZE(item)
                    if hash_keys:
                        slot = (
                            _murmur2(<const uint8_t *>PyBytes_AS_STRING(item), klen)
                            & 0x7FFFFFFF
                        ) % num_partitions + 1
                else:
                    return None
            if vlen > vmax:
                vmax = vlen
            if klen > kmax:
                kmax = klen
            if hash_keys:
                slots[i] = <int32_t>slot
                bins_count[slot] += 1
                row_bounds[i] = framing + vlen + klen
            else:
                sums[i + 1] = sums[i] + framing + vlen + klen
        if framing + vmax + kmax > max_size:
            return None
        if not hash_keys:
            runs = [(None, 0, count)] if count else []
            return None, runs, values, klist, bounds, framing + vmax + kmax
        runs = _runs(bins_count, nexts, bins, &used)
        if used <= 1:
            for i in range(count):
                sums[i + 1] = sums[i] + row_bounds[i]
            return None, runs, values, klist, bounds, framing + vmax + kmax
        # The scatter reads the rows in input order (the objects were most likely made in
        # that order, so their headers are touched one after the other) and writes each
        # to its place in its partition's run.
        order = array.clone(_INT64, count, False)
        o = order.data.as_longlongs
        moved_values = [None] * count
        moved_keys = [None] * count
        for i in range(count):
            slot = slots[i]
            d = nexts[slot]
            nexts[slot] = d + 1
            o[d] = i
            moved_values[d] = values[i]
            moved_keys[d] = klist[i]
            sums[d + 1] = row_bounds[i]
        for i in range(count):
            sums[i + 1] += sums[i]
        return order, runs, moved_values, moved_keys, bounds, framing + vmax + kmax
    finally:
        PyMem_Free(slots)
        PyMem_Free(row_bounds)
        PyMem_Free(bins_count)
        PyMem_Free(nexts)


def encode_sequence_batches(
    list values not None,
    keys,
    Py_ssize_t start,
    Py_ssize_t stop,
    bytes ts_part not None,
    int64_t empty_size,
    int64_t max_bytes,
):
    """:func:`encode_batches` for rows of lists: ``values`` and ``keys`` (a list, or None:
    no keys) hold bytes or None, and no record has headers. The same batches, byte for
    byte, as the columns of the same rows would give."""
    cdef list klist = keys
    cdef list out = []
    cdef Py_ssize_t pos = start
    cdef Py_ssize_t count = 0
    if start < 0 or stop > len(values) or (klist is not None and stop > len(klist)):
        raise ValueError(f"rows {start}:{stop} are not all in the lists")
    while pos < stop:
        result = _encode_items(values, klist, pos, stop, ts_part, 0, empty_size, max_bytes, &count)
        out.append((count, result))
        pos += count
    return out


def encode_sequence_run(
    list values not None,
    keys,
    Py_ssize_t start,
    Py_ssize_t stop,
    int64_t first_offset_delta,
    bytes ts_part not None,
    int64_t size_so_far,
    int64_t max_bytes,
):
    """:func:`encode_run` for rows of lists (as :func:`encode_sequence_batches` takes
    them): records ``start:stop`` into a batch already holding ``first_offset_delta``
    records and ``size_so_far`` bytes, up to ``max_bytes``; returns ``(records, their
    bytes)`` (a ``bytearray``). A batch that holds records takes none if the first does
    not fit; an empty one takes at least one. ``TypeError``, before anything is
    written, if an item is not bytes or None."""
    cdef list klist = keys
    cdef Py_ssize_t count = 0
    if (
        start < 0
        or stop > len(values)
        or (klist is not None and stop > len(klist))
        or first_offset_delta < 0
    ):
        raise ValueError(f"rows {start}:{stop} are not all in the lists")
    if start >= stop:
        return 0, bytearray()
    result = _encode_items(
        values, klist, start, stop, ts_part, first_offset_delta, size_so_far, max_bytes, &count
    )
    return count, result


cdef object _encode_items(list values, list keys, Py_ssize_t start, Py_ssize_t stop,
                          bytes ts_part, int64_t first_offset_delta, int64_t size_so_far,
                          int64_t limit, Py_ssize_t *count_out):
    """Records from rows ``start:`` of the lists into a batch holding
    ``first_offset_delta`` records, as :func:`_encode` does for columns: a ``bytearray``,
    its count in ``count_out`` (at least one record if the batch is empty, else none if
    the first does not fit)."""
    cdef Py_ssize_t ts_len = len(ts_part)
    cdef const uint8_t *ts = <const uint8_t *>PyBytes_AS_STRING(ts_part)
    cdef Py_ssize_t i, end
    cdef int64_t used, body, vlen, klen, total, od, size
    cdef uint8_t *out
    cdef object value, key
    cdef object result

    # Pass 1: each record's size, and where the batch is cut.
    used = size_so_far
    total = 0
    i = start
    while i < stop:
        od = first_offset_delta + i - start
        vlen = _item_len(values[i])
        klen = _item_len(keys[i]) if keys is not None else -1
        body = _body_size(ts_len, od, klen, vlen, 1)
        size = body + _varint_size(_zigzag(body))
        if used + size > limit and od > 0:
            break
        used += size
        total += size
        i += 1
    end = i
    count_out[0] = end - start

    # Pass 2: the bytes, record after record (the items cannot change in between: the
    # lists' items are bytes, which are immutable, and nothing else runs meanwhile).
    result = PyByteArray_FromStringAndSize(NULL, total)
    out = <uint8_t *>PyByteArray_AS_STRING(result)
    for i in range(start, end):
        od = first_offset_delta + i - start
        value = values[i]
        vlen = -1 if value is None else PyBytes_GET_SIZE(value)
        if keys is not None:
            key = keys[i]
            klen = -1 if key is None else PyBytes_GET_SIZE(key)
        else:
            key = None
            klen = -1
        out = _put_record(
            out, _body_size(ts_len, od, klen, vlen, 1), ts, ts_len, od,
            <const uint8_t *>PyBytes_AS_STRING(key) if klen > 0 else NULL, klen,
            <const uint8_t *>PyBytes_AS_STRING(value) if vlen > 0 else NULL, vlen,
        )
        out[0] = 0  # no headers
        out += 1
    return result


# -- where a run of rows is cut into fresh batches (before it is encoded) ---------------------


cdef inline int64_t _field_size(const Column *c, Py_ssize_t i, bint *bad) noexcept nogil:
    """A key's or value's bytes in a record: its length varint and its bytes (``c``
    NULL: a null key's one byte; ``bad`` set if its offsets decrease)."""
    if c == NULL:
        return 1
    cdef int64_t n = _length(c, i)
    bad[0] |= _offset(c, i + 1) - _offset(c, i) < 0
    return _varint_size(_zigzag(n)) + (n if n > 0 else 0)


cdef inline int64_t _section_size(const Column *c, Py_ssize_t i, bint *bad) noexcept nogil:
    """A record's header section bytes (``c`` NULL: no headers, one byte)."""
    if c == NULL:
        return 1
    cdef int64_t n = _offset(c, i + 1) - _offset(c, i)
    bad[0] |= n < 0
    return n


cdef inline bint _starts_batch(int64_t rest, int64_t *used, int64_t *od, int64_t empty_size,
                               int64_t max_bytes) noexcept nogil:
    """Add the next record (``rest``: its body but its offset delta varint) to a batch
    holding ``od`` records and ``used`` bytes, as the encoder would: to this batch if it
    fits within ``max_bytes`` or is its first, else as the first of a new one (True)."""
    cdef int64_t body = rest + _varint_size(_zigzag(od[0]))
    cdef int64_t size = body + _varint_size(_zigzag(body))
    cdef bint fresh = od[0] > 0 and used[0] + size > max_bytes
    if fresh:
        used[0] = empty_size
        od[0] = 0
        body = rest + 1
        size = body + _varint_size(_zigzag(body))
    used[0] += size
    od[0] += 1
    return fresh


def fresh_cuts(
    values,
    keys,
    headers,
    Py_ssize_t start,
    Py_ssize_t stop,
    Py_ssize_t ts_len,
    int64_t empty_size,
    int64_t max_bytes,
):
    """Where :func:`encode_batches` would cut records ``start:stop`` into new batches
    (timestamp deltas of ``ts_len`` bytes): ``[start, ..., stop]``, one item per batch
    boundary, from the same sizes in one pass over the offsets, nothing encoded.

    A bulk send cuts the rows the sticky partitioner places into one run per batch
    there. Arguments as :func:`encode_batches`'s (columns as ``(offsets, data, valid)``
    tuples); ``ValueError`` as it raises for offsets that decrease or point outside the
    data."""
    cdef Py_buffer bufs[9]
    cdef bint held[9]
    cdef Column cols[3]
    cdef Column *vc
    cdef Column *kc = NULL
    cdef Column *hc = NULL
    cdef Py_ssize_t i, nbatches = 0
    cdef int64_t used, rest, od
    cdef int64_t *ends = NULL
    cdef bint bad = False
    cdef int k, present
    if start < 0 or ts_len < 0:
        raise ValueError("start and ts_len must not be negative")
    if start >= stop:
        return [start]
    for k in range(9):
        held[k] = False
    try:
        present = _open_all(values, keys, headers, bufs, held, cols, start, stop)
        vc = &cols[0]
        kc = &cols[1] if present & 1 else NULL
        hc = &cols[2] if present & 2 else NULL
        ends = <int64_t *>PyMem_Malloc((stop - start) * sizeof(int64_t))
        if ends == NULL:
            raise MemoryError()
        with nogil:
            # _encode's first pass, batch after batch: a record joins the batch if it
            # keeps it within max_bytes or is its first.
            used = empty_size
            od = 0
            for i in range(start, stop):
                # rest: the record's body but its offset delta varint.
                rest = (
                    1 + ts_len + _field_size(vc, i, &bad) + _field_size(kc, i, &bad)
                    + _section_size(hc, i, &bad)
                )
                if _starts_batch(rest, &used, &od, empty_size, max_bytes):
                    ends[nbatches] = i
                    nbatches += 1
        if bad:
            raise ValueError("column offsets must not decrease")
        out = [start]
        for i in range(nbatches):
            out.append(ends[i])
        out.append(stop)
        return out
    finally:
        PyMem_Free(ends)
        _release(bufs, held, 9)


def sequence_cuts(
    list values not None,
    keys,
    Py_ssize_t start,
    Py_ssize_t stop,
    Py_ssize_t ts_len,
    int64_t empty_size,
    int64_t max_bytes,
):
    """:func:`fresh_cuts` for rows of lists (as :func:`encode_sequence_batches` takes
    them): where that would cut records ``start:stop`` into new batches, ``[start, ...,
    stop]``. ``TypeError`` if an item is not bytes or None."""
    cdef list klist = keys
    cdef list out = [start]
    cdef Py_ssize_t i
    cdef int64_t used, rest, od, vlen, klen
    if start < 0 or ts_len < 0:
        raise ValueError("start and ts_len must not be negative")
    if stop > len(values) or (klist is not None and stop > len(klist)):
        raise ValueError(f"rows {start}:{stop} are not all in the lists")
    if start >= stop:
        return out
    used = empty_size
    od = 0
    for i in range(start, stop):
        # rest: the record's body but its offset delta varint (no headers: one byte).
        vlen = _item_len(values[i])
        klen = _item_len(klist[i]) if klist is not None else -1
        rest = _body_size(ts_len, 0, klen, vlen, 1) - 1
        if _starts_batch(rest, &used, &od, empty_size, max_bytes):
            out.append(i)
    out.append(stop)
    return out
