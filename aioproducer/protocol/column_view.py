"""Binary columns: a read-only view of an Arrow binary or string column (or one built from
Python objects) that the column encoder (``columnar.py``) reads whole.

numpy is imported when a column is first made, not with this module (numpy and pyarrow
are optional dependencies).

Pure computation on buffers: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aioproducer.errors import SerializationError

__all__ = ["USE_ARROW", "USE_VIEWS", "BinaryColumn", "numpy"]


def numpy() -> Any:
    """The numpy module, imported on first use; ``ImportError`` naming the extra if absent."""
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy is installed where tests run
        raise ImportError(
            "columns (Arrow arrays, tables) need numpy (the 'spark' extra): pip install numpy"
        ) from exc
    return np


#: Whether pyarrow (where installed) does the interleaving copy, and whether by
#: binary_view arrays (else by ``take``); tests turn them off to exercise the other paths.
USE_ARROW = True
USE_VIEWS = True


def _pyarrow() -> Any:
    if not USE_ARROW:
        return None
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - the numpy fallback is tested by forcing it
        return None
    return pa


class BinaryColumn:
    """A read-only binary column: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``, or null
    where ``valid`` is False.

    ``offsets`` is a numpy int64 array of ``len + 1`` absolute offsets into ``data`` (a
    numpy uint8 array, usually a zero-copy view of an Arrow buffer); ``valid`` is a numpy
    bool array, or None when no row is null. A null row spans no bytes (the constructors
    make sure of it), so the payload of rows ``a:b`` is always the one slice
    ``data[offsets[a]:offsets[b]]``.
    """

    __slots__ = ("_plan", "data", "offsets", "plan_stop", "run_ends", "valid")

    def __init__(self, offsets: Any, data: Any, valid: Any = None) -> None:
        """Wrap numpy arrays as they are (see the class docstring for their meaning)."""
        self.offsets = offsets
        self.data = data
        self.valid = valid
        # The encoding planned ahead for the next batches (see columnar.encode_run).
        self._plan: Any = None  # a column_plan.Plan, or None
        #: Rows before this one may be encoded ahead of the calls that ask for them, when
        #: a fresh batch starts (a bulk send sets it for the rows the sticky partitioner
        #: places, which come in consecutive runs); None: only what a call asks for.
        self.plan_stop: int | None = None
        #: The ends of runs of rows bound for one partition each, ascending (a bulk send
        #: sets it for keyed rows, grouped by partition): from plan_stop on, the rows up
        #: to the end of a row's run may be encoded ahead, even mid-batch, since they
        #: follow one another into that partition's batches. None: no such runs.
        self.run_ends: list[int] | None = None

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_arrow(cls, array: Any, name: str = "column") -> BinaryColumn:
        """View an Arrow ``binary``, ``string``, ``large_binary`` or ``large_string`` array
        (or ChunkedArray, or dictionary array of those) as a column, copying as little as
        possible.

        Strings are read as their UTF-8 bytes (no cast). The array's slice offset and null
        bitmap are honoured; a ChunkedArray of several chunks is combined (one copy) and a
        dictionary array decoded (one copy). Anything else raises
        :class:`~aioproducer.errors.SerializationError` naming ``name``.
        """
        np = numpy()
        import pyarrow as pa  # an Arrow array exists, so pyarrow does

        if isinstance(array, pa.ChunkedArray):
            if array.num_chunks == 1:
                array = array.chunk(0)
            elif array.num_chunks == 0:
                array = pa.array([], type=array.type)
            else:
                array = array.combine_chunks()
        if not isinstance(array, pa.Array):
            raise SerializationError(
                f"{name} must be an Arrow array or a sequence, got {type(array).__name__}"
            )
        kind = array.type
        if pa.types.is_dictionary(kind):
            if not _is_binary_type(pa, kind.value_type):
                raise SerializationError(
                    f"{name} must be a binary or string column, got {kind} "
                    "(dictionary of a type that is not binary or string)"
                )
            array = array.dictionary_decode()
            kind = array.type
        if pa.types.is_binary(kind) or pa.types.is_string(kind):
            offset_type: Any = np.int32
        elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
            offset_type = np.int64
        else:
            raise SerializationError(
                f"{name} must be a binary or string column "
                f"(binary, string, large_binary or large_string), got {kind}"
            )
        n = len(array)
        validity, offsets_buf, data_buf = array.buffers()
        if n == 0:
            return cls(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8))
        start = array.offset
        offsets = np.frombuffer(offsets_buf, dtype=offset_type)[start : start + n + 1]
        offsets = offsets.astype(np.int64, copy=offset_type is not np.int64)
        if data_buf is None or data_buf.size == 0:
            data = np.zeros(0, dtype=np.uint8)
        else:
            data = np.frombuffer(data_buf, dtype=np.uint8)
        valid = None
        if array.null_count:
            bits = np.frombuffer(validity, dtype=np.uint8)
            valid = np.unpackbits(bits, bitorder="little")[start : start + n].astype(bool)
        return cls(offsets, data, valid)._empty_nulls()

    @classmethod
    def from_sequence(cls, items: Sequence[Any], name: str = "column") -> BinaryColumn:
        """A column of ``items``: ``bytes``-like objects or None (null); ``str`` is encoded
        as UTF-8. Anything else raises :class:`~aioproducer.errors.SerializationError`
        naming ``name`` and the row (see :meth:`from_sequence_until_error`)."""
        column, _count, error = cls.from_sequence_until_error(items, name)
        if error is not None:
            raise error
        return column

    @classmethod
    def from_sequence_until_error(
        cls, items: Sequence[Any], name: str = "column"
    ) -> tuple[BinaryColumn, int, SerializationError | None]:
        """:meth:`from_sequence` of the rows before the first bad one: returns the column,
        how many rows it holds, and the bad row's error (None if every row is good)."""
        np = numpy()
        parts: list[bytes] = []
        lengths: list[int] = []
        valid: list[bool] = []
        error: SerializationError | None = None
        for i, item in enumerate(items):
            if item is None:
                lengths.append(0)
                valid.append(False)
                continue
            if type(item) is not bytes:
                if isinstance(item, str):
                    item = item.encode("utf-8")
                elif isinstance(item, (bytearray, memoryview)):
                    item = bytes(item)
                else:
                    error = SerializationError(
                        f"record {i}: {name} must be bytes, bytearray, memoryview, str or "
                        f"None, got {type(item).__name__}"
                    )
                    break
            parts.append(item)
            lengths.append(len(item))
            valid.append(True)
        count = len(lengths)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.asarray(lengths, dtype=np.int64), out=offsets[1:])
        data = np.frombuffer(b"".join(parts), dtype=np.uint8)
        mask = np.asarray(valid, dtype=bool)
        return cls(offsets, data, None if mask.all() else mask), count, error

    @classmethod
    def from_headers(cls, rows: Sequence[Any]) -> BinaryColumn:
        """A column of encoded header sections, one per row of ``rows`` (each a sequence
        of ``(str, bytes | None)`` pairs, or None/empty for none), as ``columnar.encode_run``
        takes them. Raises :class:`~aioproducer.errors.SerializationError` for a bad
        header, as :meth:`~aioproducer.protocol.records.RecordBatchBuilder.append` does. Runs per row: header lists are
        Python objects already."""
        from aioproducer.protocol.record_encoder import encode_headers

        empty = b"\x00"
        return cls.from_sequence([encode_headers(h) if h else empty for h in rows])

    def _empty_nulls(self) -> BinaryColumn:
        """This column, or a compacted copy if a null row spans bytes (Arrow allows it)."""
        valid = self.valid
        if valid is None:
            return self
        np = numpy()
        lengths = np.diff(self.offsets)
        if not lengths[~valid].any():
            return self
        lengths = np.where(valid, lengths, 0)
        keep = np.repeat(valid, np.diff(self.offsets))
        data = self.data[self.offsets[0] : self.offsets[-1]][keep]
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return BinaryColumn(offsets, data, valid)

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.offsets) - 1

    def lengths(self, start: int = 0, stop: int | None = None) -> Any:
        """The byte lengths of rows ``start:stop`` (numpy int64), -1 for a null row."""
        if stop is None:
            stop = len(self)
        np = numpy()
        out = np.diff(self.offsets[start : stop + 1])
        if self.valid is not None:
            out[~self.valid[start:stop]] = -1
        return out

    def nbytes(self, start: int = 0, stop: int | None = None) -> int:
        """The payload bytes of rows ``start:stop``."""
        if stop is None:
            stop = len(self)
        return int(self.offsets[stop] - self.offsets[start])

    def null_count(self) -> int:
        """How many rows are null."""
        return 0 if self.valid is None else int(len(self.valid) - self.valid.sum())

    def row_length(self, index: int) -> int:
        """Row ``index``'s byte length, -1 if null (Python int: for single rows)."""
        if self.valid is not None and not self.valid[index]:
            return -1
        return int(self.offsets[index + 1] - self.offsets[index])

    def row(self, index: int) -> bytes | None:
        """Row ``index`` as ``bytes`` (None if null): for errors and tests, not hot paths."""
        if self.valid is not None and not self.valid[index]:
            return None
        return bytes(self.data[self.offsets[index] : self.offsets[index + 1]])

    def to_pylist(self) -> list[bytes | None]:
        """Every row as ``bytes`` or None (for tests and per-row fallbacks)."""
        return [self.row(i) for i in range(len(self))]

    def head(self, count: int) -> BinaryColumn:
        """The first ``count`` rows (a view)."""
        valid = self.valid[:count] if self.valid is not None else None
        return BinaryColumn(self.offsets[: count + 1], self.data, valid)

    def take(self, indices: Any) -> BinaryColumn:
        """A new column of rows ``indices`` (numpy integer array), in that order: one
        gathering copy of the payload, no Python object per row."""
        np = numpy()
        indices = np.asarray(indices, dtype=np.int64)
        lengths = np.diff(self.offsets)[indices]
        offsets = np.zeros(len(indices) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        valid = self.valid[indices] if self.valid is not None else None
        pa = _pyarrow()
        if pa is not None:
            source = _arrow_view(pa, np, self.offsets, self.data)
            taken = source.take(pa.array(indices.astype(np.int32)))
            data = _arrow_payload(np, taken)
        else:
            starts = self.offsets[:-1][indices]
            data = self.data[_gather_index(np, starts, lengths, offsets)]
        return BinaryColumn(offsets, data, valid)


def _is_binary_type(pa: Any, kind: Any) -> bool:
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_large_string(kind)
    )


def _arrow_view(pa: Any, np: Any, offsets: Any, data: Any) -> Any:
    """A large_binary Arrow array over numpy ``offsets`` (int64) and ``data``, no copy."""
    if len(data) == 0:
        data = np.zeros(1, dtype=np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(offsets) - 1,
        [None, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(data)],
    )


def _arrow_payload(np: Any, array: Any) -> Any:
    """The concatenated payload of a binary Arrow array made by ``take``, as uint8."""
    _validity, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)
    first, last = int(offsets[array.offset]), int(offsets[array.offset + len(array)])
    if data_buf is None or last == first:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(data_buf, dtype=np.uint8)[first:last]


def _gather_index(np: Any, starts: Any, lengths: Any, offsets: Any) -> Any:
    """Source index of every output byte when segments ``starts``/``lengths`` are copied
    back to back (output offsets ``offsets``): the numpy-only gathering copy."""
    total = int(offsets[-1])
    shift = np.repeat(starts - offsets[:-1], lengths)
    return shift + np.arange(total, dtype=np.int64)
