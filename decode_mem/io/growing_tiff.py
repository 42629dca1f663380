"""A TIFF (classic or BigTIFF, OME-TIFF included) that a camera is still writing, read page by page as pages complete.

tifffile parses finished files; while a file grows its IFD chain is being written (the last page's next-IFD
offset is 0, or points past the end of the file, or the page's pixels are only partly there). This reader walks
the chain itself, one IFD at a time, and keeps a safety margin of one page: a page counts as complete only when
its IFD and all its pixel bytes are in the file *and* the writer has linked the next page (a sequential writer
starts page k+1 only after page k), or when the acquisition is over (``poll(final=True)``: the writer stopped or
rolled over to the next file). A half-written last page is therefore waited for, never read.

Micro-Manager rolls an acquisition over to ``<name>_1.ome.tif``, ``<name>_2.ome.tif``, ... at about 4 GB: when
the current file's chain ends and the next file of that name exists, the current file is finished and reading
goes on in the next one. Every full-resolution page is one frame (single-channel, single-position
acquisitions); reduced-resolution pages (thumbnails) are skipped. Pages must be uncompressed and striped, as
camera software writes them. Only the offsets of frames not yet read are kept (``release``), 28 bytes a frame.
A page of another size or pixel type ends the movie (a warning says so; ``open_stack`` leaves out the series of
another size the same way). ``read_pages`` reads a finished file this way for ``open_stack``: files grown one
write at a time (one series per write) and files cut by a crash (their complete pages).
"""

from __future__ import annotations

import os
import re
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError

_FORMATS = {1: "B", 2: "B", 3: "H", 4: "I", 6: "b", 7: "B", 8: "h", 9: "i", 11: "f", 12: "d", 13: "I", 16: "Q",
            17: "q", 18: "Q"}
_WANTED = {254, 256, 257, 258, 259, 273, 277, 279, 322, 324, 339}
_KINDS = {1: "u", 2: "i", 3: "f"}
_SUFFIX = re.compile(r"^(?P<base>.*?)(?:_(?P<index>\d+))?(?P<ext>\.ome\.tiff?|\.tiff?)$", re.IGNORECASE)
MAX_TAGS = 4096


@dataclass(frozen=True)
class _Page:
    strips: tuple[tuple[int, int], ...]  # (offset, bytes) of the pixel data
    shape: tuple[int, int]
    dtype: np.dtype
    reduced: bool  # a thumbnail / reduced-resolution page, not a frame
    next_pos: int  # where this IFD's next-IFD offset is stored

    @property
    def data_end(self) -> int:
        return max((o + n for o, n in self.strips), default=0)


class _File:
    """One file of the series: its IFD chain, walked as far as it is complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.order: str | None = None  # '<' or '>' once the header is there
        self.big = False
        self.ptr_pos = 0  # where the offset of the next IFD to parse is stored
        self.current: _Page | None = None  # parsed, not yet accepted
        self.at = 0  # the offset of the IFD parsed last
        self.back: set[int] = set()  # IFD offsets a pointer led back to (writers go forward: a loop repeats one)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def read(self, n: int, offset: int) -> bytes:
        return os.pread(self.fd, n, offset)

    def close(self) -> None:
        os.close(self.fd)

    def header(self, size: int) -> bool:
        """Parse the header once it is there; False while the file is shorter than a header."""
        if self.order is not None:
            return True
        head = self.read(16, 0) if size >= 4 else b""
        if len(head) >= 4 and head[:4] not in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
            raise StackError(f"{self.path}: not a TIFF file (it starts with {head[:4]!r})")
        big = head[2:4] in (b"+\0", b"\0+")
        if len(head) < (16 if big else 8):
            return False
        self.order, self.big = ("<" if head[:2] == b"II" else ">"), big
        self.ptr_pos = 8 if big else 4
        return True

    def pointer(self, pos: int, size: int) -> int | None:
        n = 8 if self.big else 4
        if pos + n > size:
            return None
        return struct.unpack(self.order + ("Q" if self.big else "I"), self.read(n, pos))[0]

    def parse(self, offset: int, size: int) -> _Page | None:
        """The IFD at ``offset``, or None while it (or a value it points to) is not completely in the file."""
        o, big = self.order, self.big
        count_size, entry, ptr = (8, 20, 8) if big else (2, 12, 4)
        if offset + count_size > size:
            return None
        count = struct.unpack(o + ("Q" if big else "H"), self.read(count_size, offset))[0]
        if not 0 < count <= MAX_TAGS:
            return None  # not written yet (zeros) or being written
        if offset + count_size + count * entry + ptr > size:
            return None
        raw = self.read(count * entry, offset + count_size)
        tags: dict[int, tuple] = {}
        for i in range(count):
            e = raw[i * entry:(i + 1) * entry]
            tag, typ = struct.unpack(o + "HH", e[:4])
            if tag not in _WANTED or typ not in _FORMATS:
                continue
            n = struct.unpack(o + ("Q" if big else "I"), e[4:12] if big else e[4:8])[0]
            if n == 0:  # a tag without values is no tag (a damaged entry)
                continue
            inline = e[12:] if big else e[8:]
            nbytes = n * struct.calcsize(_FORMATS[typ])
            if nbytes <= len(inline):
                data = inline[:nbytes]
            else:
                at = struct.unpack(o + ("Q" if big else "I"), inline)[0]
                if at + nbytes > size:
                    return None
                data = self.read(nbytes, at)
            tags[tag] = struct.unpack(f"{o}{n}{_FORMATS[typ]}", data)
        return self._page(tags, offset + count_size + count * entry, offset)

    def _page(self, tags: dict[int, tuple], next_pos: int, offset: int) -> _Page:
        where = f"{self.path}: page at byte {offset}"
        if 322 in tags or 324 in tags:
            raise StackError(f"{where} is tiled; --follow reads striped pages (as cameras write them)")
        compression = tags.get(259, (1,))[0]
        if compression != 1:
            raise StackError(f"{where} is compressed (TIFF compression {compression}); --follow reads "
                             "uncompressed pages (as cameras write them)")
        if tags.get(277, (1,))[0] != 1:
            raise StackError(f"{where} has {tags[277][0]} samples per pixel; decode_mem needs one value per pixel")
        if 256 not in tags or 257 not in tags or 273 not in tags or 279 not in tags:
            raise StackError(f"{where} lacks its size or strip tags")
        bits, kind = tags.get(258, (16,))[0], _KINDS.get(tags.get(339, (1,))[0])
        if kind is None or bits not in (8, 16, 32, 64):
            raise StackError(f"{where}: unsupported pixel type ({bits} bits, sample format {tags.get(339)})")
        dtype = np.dtype(f"{self.order}{kind}{bits // 8}")
        shape = (int(tags[257][0]), int(tags[256][0]))
        strips = tuple(zip(tags[273], tags[279], strict=False))
        if sum(n for _, n in strips) != shape[0] * shape[1] * dtype.itemsize:
            raise StackError(f"{where}: its strips hold {sum(n for _, n in strips)} bytes, not the "
                             f"{shape[0]}x{shape[1]} {dtype.name} pixels")
        return _Page(strips, shape, dtype, bool(tags.get(254, (0,))[0] & 1), next_pos)


def successor(path: Path, k: int) -> Path:
    """The ``k``-th file a Micro-Manager acquisition rolls over to: ``x.ome.tif`` -> ``x_1.ome.tif``."""
    m = _SUFFIX.match(path.name)
    if m is None:
        return path.with_name(f"{path.stem}_{k}{path.suffix}")
    return path.with_name(f"{m['base']}_{k}{m['ext']}")


class GrowingTiff:
    """``poll()`` -> frames complete so far; ``read(lo, hi)`` reads complete frames only."""

    def __init__(self, path: str | os.PathLike, roll: bool = True) -> None:
        self.path = Path(path)
        self.roll = roll  # go on in Micro-Manager's roll-over files (x_1.ome.tif, ...)
        self.other: str | None = None  # set at the first page of another size or type: the movie ended before it
        self.files = [_File(self.path)]
        # frames not yet released, compactly (28 bytes a frame: a long lag of many frames stays small): the file
        # of each, the index of its first strip, and the strips' offsets and byte counts
        self._file, self._first, self._off, self._count = array("i"), array("q"), array("q"), array("q")
        self._base = self._strip_base = 0  # frame / strip number of the first entry kept
        self.n = 0
        self.frame_shape: tuple[int, int] | None = None
        self.dtype: np.dtype | None = None
        self.warnings: list[str] = []

    def activity(self) -> tuple[int, int]:
        """Changes whenever the writer wrote anything (file count, size of the last file)."""
        return len(self.files), self.files[-1].size()

    def poll(self, final: bool = False) -> int:
        """Accept every page complete now; ``final``: the writer has stopped, so a last page whose bytes are all
        there is complete too (and a last page that is not is reported in ``warnings``)."""
        while self.other is None:
            f = self.files[-1]
            rolled = successor(self.path, len(self.files))
            more = self.roll and rolled.exists()
            self._walk(f, final or more)
            if more and self._chain_ended(f):
                self.files.append(_File(rolled))
                continue
            break
        return self.n

    def _chain_ended(self, f: _File) -> bool:
        size = f.size()
        return f.order is not None and f.current is None and f.pointer(f.ptr_pos, size) == 0

    def _walk(self, f: _File, final: bool) -> None:
        size = f.size()
        if not f.header(size):
            if final and size:
                raise StackError(f"{f.path}: not a TIFF file (only {size} bytes)")
            return
        while self.other is None:
            if f.current is None:
                offset = f.pointer(f.ptr_pos, size)
                if not offset:
                    return
                f.current, f.at = f.parse(offset, size), offset
                if f.current is None:
                    if final:
                        self.warnings.append(f"{f.path}: the last page is incomplete (its IFD at byte {offset} "
                                             f"is not all in the {size}-byte file); its frame was left out")
                    return
            page = f.current
            if page.data_end > size:
                if final:
                    self.warnings.append(f"{f.path}: the last page is incomplete (its pixels end at byte "
                                         f"{page.data_end}, the file has {size}); its frame was left out")
                return
            nxt = f.pointer(page.next_pos, size)
            if nxt is None or (nxt == 0 and not final):
                return
            if nxt and nxt <= f.at:  # a pointer back: a damaged chain may loop, and a loop takes it again
                if nxt in f.back:
                    raise StackError(f"{f.path}: its page directories loop back to byte {nxt} (a damaged file)")
                f.back.add(nxt)
            self._accept(f, page)
            if nxt == 0:
                return

    def _accept(self, f: _File, page: _Page) -> None:
        f.ptr_pos, f.current = page.next_pos, None
        if page.reduced:
            return
        if self.frame_shape is None:
            self.frame_shape, self.dtype = page.shape, page.dtype
        elif (page.shape, page.dtype) != (self.frame_shape, self.dtype):  # another image: the movie ends here
            self.other = (f"{f.path}: the movie's {self.n} frames are {self.frame_shape[0]}x{self.frame_shape[1]} "
                          f"{self.dtype.name}; the page after them is {page.shape[0]}x{page.shape[1]} "
                          f"{page.dtype.name}: it and the pages after it were left out (infer --series k, "
                          "open_stack(path, series=k), reads a TIFF series k alone)")
            self.warnings.append(self.other)
            return
        self._file.append(len(self.files) - 1)
        self._first.append(self._strip_base + len(self._off))
        for offset, count in page.strips:
            self._off.append(offset)
            self._count.append(count)
        self.n += 1

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Frames ``lo .. hi-1`` (complete, not released) as a native-endian ``(hi - lo, H, W)`` array."""
        out = np.empty((hi - lo, *self.frame_shape), self.dtype.newbyteorder("="))
        for i, t in enumerate(range(lo, hi)):
            j = t - self._base
            if not 0 <= j < len(self._file):
                raise StackError(f"{self.path}: frame {t} is not complete or was released")
            a = self._first[j] - self._strip_base
            b = self._first[j + 1] - self._strip_base if j + 1 < len(self._first) else len(self._off)
            f = self.files[self._file[j]]
            buf = b"".join(f.read(self._count[s], self._off[s]) for s in range(a, b))
            out[i] = np.frombuffer(buf, self.dtype).reshape(self.frame_shape)
        return out

    def release(self, before: int) -> None:
        """Forget the offsets of frames before ``before`` (they will not be read again)."""
        drop = min(before - self._base, len(self._file))
        if drop < max(1024, len(self._file) // 2):  # compact now and then, not at every block
            return
        strips = self._first[drop] - self._strip_base if drop < len(self._first) else len(self._off)
        del self._file[:drop], self._first[:drop], self._off[:strips], self._count[:strips]
        self._base += drop
        self._strip_base += strips

    def close(self) -> None:
        for f in self.files:
            f.close()


def read_pages(path: str | os.PathLike) -> tuple[Any, bool]:
    """A finished TIFF read as ``--follow`` reads it: ``(Source or None when it holds no complete frame, cut)``;
    ``cut``: the file ends inside a page (its complete frames are the source, the cut is in ``damage``)."""
    from decode_mem.io._layout import FramesArray, Source
    from decode_mem.io.damage import Damage

    pages = GrowingTiff(path, roll=False)
    try:
        n = pages.poll(final=True)
    except BaseException:
        pages.close()
        raise
    if n == 0:
        pages.close()
        return None, False
    cut = [w for w in pages.warnings if w != pages.other]
    damage = [Damage(n, f"{w} (cut by a crash?)", f"the stack ends with frame {n - 1}, the last complete one")
              for w in cut]
    notes = [pages.other] if pages.other else []
    array = FramesArray(pages.read, (pages.n, *pages.frame_shape), pages.dtype.newbyteorder("="))
    source = Source(array, "TYX", "tiff-pages", close=pages.close, notes=notes, damage=damage)
    return source, bool(cut)
