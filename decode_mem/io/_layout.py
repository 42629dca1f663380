"""How an N-D image on disk maps onto a ``(T, H, W)`` stack: axis names, selections, frame indexing.

A reader hands over a :class:`Source` (an array indexable with ints and slices, e.g. ``np.memmap`` or
``zarr.Array``, plus its axis letters); :func:`resolve_layout` decides which axis holds the frames
and which index every other axis is pinned to. Indexing stays lazy: one basic-indexing call per read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decode_mem.errors import EmptyStackError, StackError

FRAME_AXES = "TIQ"  # tifffile's time-like axes: time, image sequence, unknown
SELECTABLE = {"C": "channel", "S": "channel", "Z": "z"}  # axis letter -> open_stack argument
DIMENSION_NAMES = {"t": "T", "time": "T", "c": "C", "channel": "C", "z": "Z", "y": "Y", "x": "X"}


@dataclass
class Source:
    """What a backend opened: the N-D array and how to let go of it."""

    array: Any  # N-D, indexable with ints and positive-step slices
    axes: str | None  # one letter per dimension ('TZCYX'), None where the format does not say
    backend: str  # 'memmap' | 'tiff-zarr' | 'zarr' | 'npy'
    mapped: bool = False  # the array is a file mapping: a read must copy
    thread_safe: bool = True  # False: reads must be serialized (tifffile's store shares one file handle)
    close: Callable[[], None] = field(default=lambda: None)
    notes: list[str] = field(default_factory=list)  # what the reader chose (series left out, ...), one line each
    damage: list = field(default_factory=list)  # io.damage.Damage records found when opening (a cut file)
    # (layout, t, ys, xs) -> {index in the read: (mask of pixels not in the file or None for all, what)}
    holes: Callable[..., dict] | None = None
    # (layout, frames) -> how many of the stack's first ``frames`` frames are known damaged when it opens (chunks
    # missing from a zarr store, frame files that cannot be read, images an index lacks): checked against the budget
    damaged: Callable[..., int] | None = None
    metadata: Any = None  # io.metadata.MovieMetadata where the format states its camera as it opens (None: TIFF's own)
    names: dict[str, list[str]] = field(default_factory=dict)  # axis letter -> its entries' names (channel names)


@dataclass(frozen=True)
class Layout:
    """Which source axis is the frame axis, which are Y and X, and what every other axis is pinned to."""

    ndim: int
    frame: int | None  # None: a single image, a 1-frame stack
    y: int
    x: int
    fixed: tuple[tuple[int, int], ...]  # (axis, index) of selected and length-1 axes
    shape: tuple[int, int, int]  # (T, H, W)

    def index(self, t: int | slice, ys: slice, xs: slice) -> tuple:
        """The basic-indexing tuple into the source array for frames ``t`` and the region ``ys, xs``."""
        idx: list[Any] = [slice(None)] * self.ndim
        for axis, i in self.fixed:
            idx[axis] = i
        idx[self.y], idx[self.x] = ys, xs
        if self.frame is not None:
            idx[self.frame] = t
        return tuple(idx)

    def to_tyx(self, data: np.ndarray, t: int | slice) -> np.ndarray:
        """Put the axes left after indexing ``t`` in (frames, y, x) order; a view, no copy."""
        t_is_slice = isinstance(t, slice)
        wanted = [self.y, self.x] if self.frame is None or not t_is_slice else [self.frame, self.y, self.x]
        kept = sorted(wanted)  # basic indexing keeps the remaining axes in source order
        data = np.transpose(data, [kept.index(a) for a in wanted])
        if self.frame is None and t_is_slice:
            data = data[None][t]  # a single image: frames 0..0, or none for an empty slice
        return data


def normalize_axes(names: Any, ndim: int) -> str | None:
    """zarr ``dimension_names`` / OME-Zarr axis names -> axis letters; None if they do not name every axis."""
    if not names or len(names) != ndim:
        return None
    letters = []
    for name in names:
        name = name.get("name") if isinstance(name, dict) else name
        letter = DIMENSION_NAMES.get(str(name).lower()) if name is not None else None
        if letter is None:
            return None
        letters.append(letter)
    return "".join(letters) if len(set(letters)) == ndim else None


def _guess_axes(shape: tuple[int, ...]) -> str:
    """Axis letters for an array whose format does not name them ('?' = unknown)."""
    ndim = len(shape)
    if ndim >= 3 and shape[-1] in (3, 4) and min(shape[-3:-1]) > 4:
        return "?" * (ndim - 3) + "YXS"  # trailing RGB(A) samples: a 3- or 4-pixel-wide image is implausible
    return "YX" if ndim == 2 else ("Q" if ndim == 3 else "?" * (ndim - 2)) + "YX"


def resolve_layout(
    shape: tuple[int, ...], axes: str | None, *, channel: int | None, z: int | None, where: str,
    names: dict[str, list[str]] | None = None,
) -> Layout:
    """Pick the frame axis and pin every other non-spatial axis; raise StackError saying what to pass."""
    try:
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError) as e:  # a damaged header's dimensions (tifffile gave a tuple for one)
        raise StackError(f"{where}: the file's dimensions are not whole numbers (a damaged header)") from e
    ndim = len(shape)
    if ndim < 2:
        raise StackError(f"{where}: {ndim}-D data of shape {shape} is not an image")
    if axes is not None and len(axes) != ndim:
        raise StackError(f"{where}: axes={axes!r} has {len(axes)} letters but the data is {ndim}-D {shape}")
    if 0 in shape:
        raise EmptyStackError(f"{where}: empty stack, the data have shape {shape}")
    axes = (axes or _guess_axes(shape)).upper()
    y, x = axes.rfind("Y"), axes.rfind("X")
    if y < 0 or x < 0:
        raise StackError(f"{where}: no Y and X axes in axes {axes!r} (shape {shape})")

    pinned: dict[int, int] = {}
    for arg, value, letters in (("channel", channel, "CS"), ("z", z, "Z")):
        if value is None:
            continue
        axis = next((axes.index(c) for c in letters if c in axes), None)
        if axis is None:
            raise StackError(f"{where}: {arg}={value} given, but the data has no {letters[0]} axis "
                             f"(axes {axes}, shape {shape})")
        n = shape[axis]
        if not -n <= value < n:
            raise StackError(f"{where}: {arg}={value} out of range: axis {axes[axis]} has {n} entries")
        pinned[axis] = value % n

    rest = [a for a in range(ndim) if a not in (y, x) and a not in pinned and shape[a] > 1]
    if len(rest) == 1 and axes[rest[0]] != "S":
        frame = rest[0]  # the one axis left holds the frames, whatever its letter (ImageJ writes 3-D as CYX)
    elif not rest:
        frame = None
    else:  # several candidates (or RGB samples): say which argument settles each one
        timelike = [a for a in rest if axes[a] in FRAME_AXES]
        frame = timelike[0] if len(timelike) == 1 else None
        raise StackError(f"{where}: cannot reduce axes {axes} (shape {shape}) to frames x Y x X: "
                         + "; ".join(_hint(axes[a], shape[a], (names or {}).get(axes[a])) for a in rest if a != frame))
    fixed = {a: 0 for a in range(ndim) if a not in (y, x, frame)} | pinned
    n_frames = 1 if frame is None else shape[frame]
    return Layout(ndim, frame, y, x, tuple(sorted(fixed.items())), (n_frames, shape[y], shape[x]))


def _hint(letter: str, n: int, names: list[str] | None = None) -> str:
    if letter == "S":
        return f"RGB/samples axis S has {n} entries: pass channel= to pick one (decode_mem needs one value per pixel)"
    if letter in SELECTABLE:
        listed = f": {entries_text(names)}" if names and len(names) == n else ""
        return f"pass {SELECTABLE[letter]}= (axis {letter} has {n} entries{listed})"
    if letter == "?":
        return f"an unnamed axis has {n} entries: pass axes= to name the dimensions (e.g. axes='TCYX') and select one"
    return f"axis {letter} has {n} entries and no selection argument: convert the file to T x Y x X"


def entries_text(names: list[str], shown: int = 8) -> str:
    """``0 'Cy5', 1 'Cy3'``: a selection's entries by index and name, the first ``shown`` of them."""
    text = ", ".join(f"{i} {name!r}" for i, name in enumerate(names[:shown]))
    return text + (f", ... ({len(names)} in all)" if len(names) > shown else "")


class FramesArray:
    """A ``(T, H, W)`` source array over ``read(lo, hi)`` (frames ``lo .. hi-1`` as an array): page-by-page TIFF
    files and folders of frame files. A region is cut from whole frames."""

    ndim = 3

    def __init__(self, read: Callable[[int, int], np.ndarray], shape: tuple[int, int, int], dtype: Any) -> None:
        self.read, self.shape, self.dtype = read, tuple(shape), np.dtype(dtype)

    def __getitem__(self, key: tuple) -> np.ndarray:
        t, ys, xs = key
        if isinstance(t, int):
            return self.read(t, t + 1)[0, ys, xs]
        r = range(self.shape[0])[t]
        if not r:
            return np.empty((0, *self.shape[1:]), self.dtype)[:, ys, xs]
        return self.read(r.start, r[-1] + 1)[:: r.step, ys, xs]

