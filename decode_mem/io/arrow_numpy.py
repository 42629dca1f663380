"""pyarrow columns as numpy arrays without pandas (shared by the parquet and CSV table readers)."""

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
