"""Reading a file: the low-level errors of its libraries (h5py, zipfile, zlib, numpy) as one StackError that names
the file, so that a damaged or foreign file is one line, never a traceback."""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from decode_mem.errors import DecodeMemError, StackError, exception_line

LOW_LEVEL = (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, EOFError, RuntimeError,
             NotImplementedError, zlib.error, zipfile.BadZipFile, UnicodeDecodeError, OverflowError)


@contextmanager
def reading(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Errors inside the block as ``StackError("<path>: cannot be read as <what>: ...")``; decode_mem's own errors
    pass as they are."""
    try:
        yield
    except DecodeMemError:
        raise
    except LOW_LEVEL as e:
        raise StackError(f"{path}: cannot be read as {what}: {exception_line(e)}") from e
