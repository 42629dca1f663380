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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from decode_mem.errors import EmptyStackError, StackError, exception_line
from decode_mem.io._layout import Source
from decode_mem.io.damage import Damage

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


def open_tiff(path: Path, series: int | None, channel: int | None = None, z: int | None = None) -> Source:
    """Open a TIFF file as a memmap if possible, else as tifffile's zarr store, else page by page.

    ``series=None``: series 0 and every series after it with the same frame size and type, as one movie (a file
    grown with ``imwrite(append=True)`` holds one series per write); series of another size are left out with a
    note. ``series=k``: that series alone. A file cut by a crash gives its complete frames (``Source.damage``).
    """
    import tifffile

    with _tifffile_log(path) as log:
        try:
            tif = tifffile.TiffFile(path)
        except Exception as e:
            cut = _pages_if_cut(path, series) if series is None else None
            if cut is not None:
                log.clear()
                return cut
            raise StackError(f"{path}: not a readable TIFF file ({exception_line(e, with_type=False)})") from e
        try:
            source = _open_series(tif, path, series, log, channel, z)
        except Exception as e:
            shape = _series_shape(tif)
            tif.close()
            if isinstance(e, StackError):
                raise
            if shape is not None and 0 in shape:  # 0 frames: said as for every other empty stack
                raise EmptyStackError(f"{path}: empty stack, the data have shape {shape}") from e
            cut = _pages_if_cut(path, series) if series is None else None
            if cut is not None:
                log.clear()
                return cut
            raise StackError(f"{path}: cannot read the TIFF structure ({exception_line(e)})") from e
        if source.damage:  # a cut file: tifffile's complaints are about the cut, which the damage record says
            log.clear()
    return source


def _series_shape(tif) -> tuple[int, ...] | None:
    """The first series' shape as tifffile reads it (a 0-frame file: ``(0, H, W)``), None where it cannot."""
    try:
        return tuple(int(n) for n in tif.series[0].shape) if tif.series else None
    except Exception:  # a broken structure: the caller's message says so
        return None


def _written_page_by_page(tif) -> bool:
    """A tifffile-written file with more pages than its first write's frames, each write plain (frames x Y x X,
    uncompressed, striped): ``imwrite(..., append=True)`` frame by frame. tifffile makes a series of every write,
    at a cost quadratic in their number (20 000 writes: minutes), so such a file is read page by page at once."""
    import json

    page = tif.pages.first
    if not tif.is_shaped or page.compression != 1 or page.is_tiled or page.samplesperpixel != 1:
        return False
    try:
        shape = json.loads(page.description)["shape"]
        frames = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
        return len(tif.pages) > frames
    except Exception:  # an odd description, or IFDs tifffile cannot follow: the general path decides
        return False


def _frame_key(s, channel: int | None, z: int | None) -> tuple | None:
    """What must agree for series to be frames of one movie: frame size and pixel type (None: not a movie)."""
    from decode_mem.io._layout import resolve_layout

    try:
        layout = resolve_layout(s.levels[0].shape, s.levels[0].axes, channel=channel, z=z, where="")
    except StackError:
        return None
    return layout.shape[1:], np.dtype(s.dtype).newbyteorder("=")


def _plain(s) -> bool:
    """Every page of the series is one frame: frames along the first axis, nothing else to select."""
    shape, axes = s.levels[0].shape, s.levels[0].axes
    return axes[-2:] == "YX" and all(n == 1 for n in shape[1:-2]) and len(s.pages) == (shape[0] if len(shape) > 2
                                                                                     else 1)


def _series_text(tif, k: int) -> str:
    s = tif.series[k].levels[0]
    return f"series {k} ({'x'.join(map(str, s.shape))} {s.axes} {np.dtype(s.dtype).name})"


def _open_series(tif, path: Path, series: int | None, log: list[str], channel: int | None = None,
                 z: int | None = None) -> Source:
    if series is None and _written_page_by_page(tif):  # before tif.series: tifffile's is quadratic in the writes
        pages = _pages(path, chain_frames=0)
        if pages is not None:
            tif.close()
            return pages
    n_series = len(tif.series)
    if series is not None and not -n_series <= series < n_series:
        raise StackError(f"{path}: series={series} out of range, the file has {n_series} series")
    notes: list[str] = []
    if series is None:
        key = _frame_key(tif.series[0], channel, z)
        chain = 1
        while chain < n_series and key is not None and _frame_key(tif.series[chain], channel, z) == key:
            chain += 1
        plain = all(_plain(tif.series[k]) for k in range(chain))
        left = [k for k in range(chain, n_series)]
        if chain > 1 and not plain:  # not page by page: only series 0 is read, and said so
            left, chain = list(range(1, n_series)), 1
        if left:
            notes.append(f"{path}: took {'series 0' if chain == 1 else f'series 0-{chain - 1}'} as the movie; "
                         f"left out {', '.join(_series_text(tif, k) for k in left[:3])}"
                         f"{f' and {len(left) - 3} more' if len(left) > 3 else ''}: infer --series k (open_stack(path, "
                         f"series=k)) reads series k alone")
        fatal = [m for m in log if is_fatal(m)]
        s = tif.series[0].levels[0]
        contiguous = s.dataoffset is not None and tif.filehandle.is_file and chain == 1
        if (chain > 1 or (fatal and not contiguous)) and plain:
            pages = _pages(path, chain_frames=sum(len(tif.series[k].pages) for k in range(chain)) if not fatal
                           else None)
            if pages is None:  # compressed or tiled pages, which the page reader does not decode: tifffile's
                pages = _page_frames(path)
                frames = sum(len(tif.series[k].pages) for k in range(chain))
                # damaged: only a cut this reader sees (not a missing file of a multi-file series); whole: the
                # frames tifffile's series hold
                if pages is not None and not (pages.damage or (not fatal and pages.array.shape[0] == frames)):
                    pages.close()
                    pages = None
            if pages is not None:
                tif.close()
                return replace(pages, notes=notes or pages.notes)
        if chain > 1:  # no reader takes the series as one movie: series 0 alone, and said so (never silently)
            notes.append(f"{path}: took series 0 as the movie; series 1-{chain - 1} of the same frame size could not "
                         "be read as its continuation: open_stack(path, series=k) reads series k alone")
        series = 0
    s = tif.series[series].levels[0]
    fatal = [m for m in log if is_fatal(m)]
    damage: list[Damage] = []
    imagej = _imagej_cut(tif) if fatal and series == 0 else None
    if imagej is not None:  # tifffile gave up on a cut ImageJ hyperstack; its metadata say what the file held
        s = imagej
    if s.dataoffset is not None and tif.filehandle.is_file:
        shape = tuple(s.shape)
        size = tif.filehandle.size
        end = s.dataoffset + s.nbytes
        if end > size:  # cut by a crash: the complete frames along the first axis are read
            outer = s.nbytes // shape[0] if len(shape) > 2 else s.nbytes
            whole = max(0, size - s.dataoffset) // outer if len(shape) > 2 else 0
            if whole == 0:
                raise StackError(f"{path}: truncated TIFF: image data end at byte {end} but the file has {size} "
                                 "bytes: not one complete frame")
            damage.append(Damage(whole, f"the file ends at byte {size}, inside frame {whole} (its data end at "
                                        f"byte {end}: cut by a crash?)",
                                 f"frames {whole}..{shape[0] - 1} left out; the stack ends with frame {whole - 1}, "
                                 "the last complete one"))
            shape = (whole, *shape[1:])
        elif fatal:
            notes.append(f"{path}: the TIFF's page directories are damaged (tifffile: {'; '.join(fatal)}); the "
                         f"series' image data are all in the file and were read whole")
        dtype = np.dtype(tif.byteorder + s.dtype.char)
        mm = np.memmap(path, dtype=dtype, mode="r", offset=s.dataoffset, shape=shape, order="C")
        axes = s.axes
        tif.close()  # the mapping does not need the file handle
        return Source(mm, axes, "memmap", mapped=True, notes=notes, damage=damage)
    try:
        if fatal:
            raise StackError(f"{path}: corrupt, truncated or incomplete TIFF: tifffile reported " + "; ".join(fatal))
        _check_extent(s, path)
    except StackError:  # a compressed file cut by a crash: its complete pages, when every page is a frame
        pages = _page_frames(path) if _plain(tif.series[series]) else None
        if pages is None or not pages.damage:
            if pages is not None:
                pages.close()
            raise
        tif.close()
        return pages
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

    return Source(array, s.axes, "tiff-zarr", thread_safe=False, close=close, notes=notes)


@dataclass
class _Contiguous:
    """A series as its contiguous image data: what ``_open_series`` needs of a tifffile series."""

    shape: tuple[int, ...]
    axes: str
    dtype: np.dtype
    dataoffset: int
    nbytes: int


def _imagej_cut(tif) -> _Contiguous | None:
    """An ImageJ hyperstack whose data the file no longer holds whole (tifffile then reads only its first
    image): the hyperstack as its ImageJ metadata describe it (ImageJ writes the images contiguously)."""
    meta = tif.imagej_metadata or {}
    images = int(meta.get("images", 1) or 1)
    page = tif.pages.first
    if images <= 1 or not tif.is_imagej or page.is_tiled or page.compression != 1 or not page.dataoffsets:
        return None
    sizes = [("T", int(meta.get("frames", 1) or 1)), ("Z", int(meta.get("slices", 1) or 1)),
             ("C", int(meta.get("channels", 1) or 1))]
    if np.prod([n for _, n in sizes]) != images:
        sizes = [("I", images)]
    kept = [(a, n) for a, n in sizes if n > 1]
    shape = (*(n for _, n in kept), *page.shape)
    axes = "".join(a for a, _ in kept) + "YX"
    dtype = np.dtype(page.dtype)
    return _Contiguous(shape, axes, dtype, page.dataoffsets[0], int(np.prod(shape)) * dtype.itemsize)


def _pages(path: Path, chain_frames: int | None) -> Source | None:
    """The file read page by page as ``--follow`` reads it (``growing_tiff``); None where that reader cannot.

    ``chain_frames``: tifffile found this many frames in an undamaged file (then the pages are used if the page
    reader agrees); None: tifffile saw damage, and the pages are used only if the page reader finds the file cut.
    """
    from decode_mem.io.growing_tiff import read_pages

    try:
        source, cut = read_pages(path)
    except StackError:
        return None
    if source is not None and chain_frames is None and not cut:  # damage elsewhere (a missing file): not this
        source.close()
        return None
    return source


def _pages_if_cut(path: Path, series: int | None) -> Source | None:
    """tifffile could not parse the file: its complete pages, if the page reader finds any."""
    from decode_mem.io.growing_tiff import read_pages

    try:
        source, _ = read_pages(path)
    except StackError:
        return _page_frames(path)
    return source if source is not None else _page_frames(path)


def _page_frames(path: Path) -> Source | None:
    """Every page of the first page's shape and type a frame, decoded by tifffile page by page (compressed or
    tiled pages, which ``growing_tiff``'s reader does not decode; linear in the pages, where tifffile's series of
    every ``append`` write are quadratic). Pages up to the first the file does not hold whole — its directory or
    its data cut by a crash (``Source.damage``); None when there is no complete 2-D page."""
    import tifffile

    from decode_mem.io._layout import FramesArray

    with _tifffile_log(path) as log:
        try:
            tif = tifffile.TiffFile(path, is_shaped=False, is_imagej=False, is_ome=False)
        except Exception:
            return None
        kept: list = []
        cut = loop = False
        seen: set[int] = set()
        try:
            size = tif.filehandle.size
            for page in tif.pages:  # a directory cut by a crash raises, or is logged, here
                if page is not None and page.offset in seen:  # a damaged chain of directories that loops back
                    cut = loop = True
                    break
                if page is None or any(o + n > size for o, n in zip(page.dataoffsets, page.databytecounts,
                                                                     strict=True)):
                    cut = True
                    break
                seen.add(page.offset)
                if kept and (page.shape != kept[0].shape or page.dtype != kept[0].dtype):
                    continue  # another image in the file (a thumbnail, a mask): not a frame
                kept.append(page)
        except Exception:
            cut = True
        cut = cut or any(is_fatal(m) for m in log)
        log.clear()
    if not kept or len(kept[0].shape) != 2:
        tif.close()
        return None
    damage = []
    if cut:
        where = (f"the file's page directories loop back after page {len(kept) - 1} (a damaged file)" if loop else
                 f"the file ends at byte {size}, after page {len(kept) - 1} (cut by a crash?)")
        damage.append(Damage(len(kept), where, f"the stack ends with frame {len(kept) - 1}, the last complete one"))
    dtype = np.dtype(kept[0].dtype).newbyteorder("=")

    def read(lo: int, hi: int) -> np.ndarray:
        return np.stack([kept[i].asarray() for i in range(lo, hi)]).astype(dtype, copy=False)

    return Source(FramesArray(read, (len(kept), *kept[0].shape), dtype), "TYX", "tiff-pages", thread_safe=False,
                  close=tif.close, damage=damage)


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
