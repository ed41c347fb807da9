# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled column encoder: a run of records straight from Arrow-layout column buffers.

:func:`encode_run` writes exactly the bytes ``columnar.encode_run`` (numpy) and
``RecordBatchBuilder.append`` (one record at a time) write, in one pass over the rows:
each record's size is known from its offsets alone, so the batch is cut first, then one
output buffer of the exact size is filled with varints and ``memcpy`` s of the key,
value and header bytes. No Python object per record, no plan kept between calls: a call
costs little enough to be made per batch.

The column buffers are read through the buffer protocol as they are: offsets int32 or
int64 (Arrow's ``binary`` and ``large_binary``), data uint8, validity one byte per row
(numpy bool) or None. A null row must span no bytes (``BinaryColumn`` makes sure of it).
"""

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy


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
    cdef Py_buffer bufs[9]
    cdef bint held[9]
    cdef Column cols[3]
    cdef Column *vc = &cols[0]
    cdef Column *kc = NULL
    cdef Column *hc = NULL
    cdef bint limited = max_bytes is not None
    cdef int64_t limit = 0
    cdef Py_ssize_t ts_len = len(ts_part)
    cdef const uint8_t *ts = <const uint8_t *>PyBytes_AS_STRING(ts_part)
    cdef Py_ssize_t i, end, count
    cdef int64_t used, body, vlen, klen, hlen, total, od, size, span
    cdef bint bad
    cdef uint8_t *out
    cdef bytes result
    cdef int k
    if start >= stop:
        return 0, b""
    if limited:
        limit = max_bytes
    if start < 0:
        raise ValueError("start must not be negative")
    for k in range(9):
        held[k] = False
    try:
        # Buffers are acquired one by one; `held` says which to release.
        _open(values, &bufs[0], &held[0], vc, stop, "values")
        _check_ends(vc, start, stop, "values")
        if keys is not None:
            kc = &cols[1]
            _open(keys, &bufs[3], &held[3], kc, stop, "keys")
            _check_ends(kc, start, stop, "keys")
        if headers is not None:
            hc = &cols[2]
            _open(headers, &bufs[6], &held[6], hc, stop, "headers")
            if hc.valid != NULL:
                raise ValueError("headers must have no null row")
            _check_ends(hc, start, stop, "headers")

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
        count = end - start
        if not count:
            return 0, b""

        # Pass 2: the bytes, record after record.
        result = PyBytes_FromStringAndSize(NULL, total)
        out = <uint8_t *>PyBytes_AS_STRING(result)
        with nogil:
            for i in range(start, end):
                od = first_offset_delta + (i - start)
                vlen = _length(vc, i)
                klen = _length(kc, i) if kc != NULL else -1
                hlen = _offset(hc, i + 1) - _offset(hc, i) if hc != NULL else 1
                body = (
                    1 + ts_len + _varint_size(_zigzag(od))
                    + _varint_size(_zigzag(vlen)) + (vlen if vlen > 0 else 0)
                    + _varint_size(_zigzag(klen)) + (klen if klen > 0 else 0)
                    + hlen
                )
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
                    memcpy(out, kc.data + _offset(kc, i), klen)
                    out += klen
                out = _put_varint(out, _zigzag(vlen))
                if vlen > 0:
                    memcpy(out, vc.data + _offset(vc, i), vlen)
                    out += vlen
                if hc != NULL:
                    memcpy(out, hc.data + _offset(hc, i), hlen)
                    out += hlen
                else:
                    out[0] = 0  # no headers
                    out += 1
        return count, result
    finally:
        for k in range(9):
            if held[k]:
                PyBuffer_Release(&bufs[k])
