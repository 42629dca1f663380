"""TIFF backend: a read-only numpy memmap where the data are contiguous, tifffile's zarr store otherwise.

Contiguous, uncompressed series (tifffile-written stacks, ImageJ hyperstacks incl. > 4 GB, BigTIFF,
tifffile's OME-TIFF) are mapped with ``mode='r'``: zero copy, the page cache does the I/O and the source
file is never opened writable (``tifffile.memmap`` defaults to ``'r+'``, so it is not used). Compressed,
tiled, multi-file and other non-contiguous series go through tifffile's zarr store, one chunk per page.
"""

from __future__ import annotations

import inspect
import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from decode_mem.errors import StackError
from decode_mem.io._layout import Source

# tifffile logs (instead of raising) when it drops, zeroes or cannot place image data; these messages mean
# the series is not whole. Its other warnings (unparsable vendor metadata, odd tags) are passed on as warnings.
_FATAL_LOG = ("missing data are zeroed", "failed to reshape", "or corrupted file", "series failed to read",
              "series is missing", "discontiguous storage", "invalid page offset", "invalid offset to page",
              "invalid offset to first page", "corrupted tag list of page", "missing data offset",
              "missing data bytecounts", "missing bytecounts", "missing required tags", "segments, got")


@contextmanager
def _tifffile_log(path: Path) -> Iterator[list[str]]:
    """Collect tifffile's logged warnings; the caller decides which are fatal, the rest become warnings."""
    records: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(re.sub(r"^<[^>]*>\s*", "", record.getMessage()))  # drop "<tifffile.TiffFile 'x'>"

    logger = logging.getLogger("tifffile")
    handler, propagate = _Collect(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    for message in records:
        if not is_fatal(message):
            warnings.warn(f"{path}: tifffile: {message}", stacklevel=4)


def is_fatal(message: str) -> bool:
    """Does this tifffile log message mean image data were lost or misplaced?"""
    return any(words in message.lower() for words in _FATAL_LOG)


def open_tiff(path: Path, series: int) -> Source:
    """Open series ``series`` of a TIFF file as a memmap if possible, else as tifffile's zarr store."""
    import tifffile

    with _tifffile_log(path) as log:
        try:
            tif = tifffile.TiffFile(path)
        except Exception as e:
            raise StackError(f"{path}: not a readable TIFF file ({e})") from e
        try:
            source = _open_series(tif, path, series, log)
        except Exception as e:
            tif.close()
            if isinstance(e, StackError):
                raise
            raise StackError(f"{path}: cannot read the TIFF structure ({type(e).__name__}: {e})") from e
    return source


def _open_series(tif, path: Path, series: int, log: list[str]) -> Source:
    n_series = len(tif.series)
    if not -n_series <= series < n_series:
        raise StackError(f"{path}: series={series} out of range, the file has {n_series} series")
    s = tif.series[series].levels[0]
    fatal = [m for m in log if is_fatal(m)]
    if fatal:
        raise StackError(f"{path}: corrupt, truncated or incomplete TIFF: tifffile reported " + "; ".join(fatal))
    if s.dataoffset is not None and tif.filehandle.is_file:
        end = s.dataoffset + s.nbytes
        size = tif.filehandle.size
        if end > size:
            raise StackError(f"{path}: truncated TIFF: image data end at byte {end} but the file has {size} bytes")
        dtype = np.dtype(tif.byteorder + s.dtype.char)
        mm = np.memmap(path, dtype=dtype, mode="r", offset=s.dataoffset, shape=s.shape, order="C")
        axes = s.axes
        tif.close()  # the mapping does not need the file handle
        return Source(mm, axes, "memmap", mapped=True)
    _check_extent(s, path)
    import tifffile
    import zarr

    # one chunk per page (chunkmode=2): strip-sized chunks make whole-frame reads 3x slower (aicsimageio#178)
    if "return_as" in inspect.signature(tifffile.imread).parameters:  # tifffile >= 2026.5.2: aszarr deprecated
        tif.close()
        store = tifffile.imread(path, return_as="zarr", series=series, level=0, chunkmode=2)
        closers = (store.close,)
    else:
        store = tif.aszarr(series=series, level=0, chunkmode=2)
        closers = (store.close, tif.close)
    array = zarr.open_array(store, mode="r")

    def close() -> None:
        for fn in closers:
            fn()

    return Source(array, s.axes, "tiff-zarr", thread_safe=False, close=close)


def _check_extent(s, path: Path) -> None:
    """Cheap truncation check: the first and last page's data must lie inside their files."""
    pages = s.pages
    for page in (pages[0], pages[-1]) if len(pages) else ():
        if page is None:
            raise StackError(f"{path}: incomplete TIFF series: a page of the series is missing")
        counts = [o + n for o, n in zip(page.dataoffsets, page.databytecounts, strict=True) if n]
        size = page.parent.filehandle.size
        if counts and max(counts) > size:
            raise StackError(f"{path}: truncated TIFF: page data end at byte {max(counts)} "
                             f"but the file has {size} bytes")
