"""pyarrow columns to and from numpy arrays without pandas (the parquet writer, the parquet and CSV table readers).

pyarrow imports pandas, where installed, the first time it converts to or from numpy (~1 s of CPU, in every run
that writes or reads a table); number columns without nulls go through their buffers instead."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMPY_TYPES = {pa.int64(): np.int64, pa.int32(): np.int32, pa.float64(): np.float64, pa.float32(): np.float32}


def column_numpy(column: pa.Array) -> np.ndarray:
    """A column as a numpy array: a read-only view of its buffer where it is a number column without nulls (the
    columns decode_mem writes), as pyarrow's ``to_numpy`` gives it, which would first import pandas (~0.4 s of a
    resume that reads its journal); other columns through ``to_numpy``."""
    dtype = _NUMPY_TYPES.get(column.type)
    if dtype is None or column.null_count:
        return column.to_numpy(zero_copy_only=False)
    item = np.dtype(dtype).itemsize
    return np.frombuffer(column.buffers()[1], dtype, count=len(column), offset=column.offset * item)


def arrow_column(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """``values`` as an arrow column of ``type_``: over the numpy buffer (no copy where the dtype is already the
    type's, so the array must not change while the column lives) for the number types, without the pandas import
    ``pa.array`` makes; other types through ``pa.array``."""
    dtype = _NUMPY_TYPES.get(type_)
    values = np.asarray(values)
    if dtype is None or not np.can_cast(values.dtype, dtype, "safe"):  # pyarrow checks what could lose values
        return pa.array(values, type=type_)
    a = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
    return pa.Array.from_buffers(type_, len(a), [None, pa.py_buffer(a)])
