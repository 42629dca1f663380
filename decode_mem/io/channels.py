"""Two colour channels: the halves of a split-view frame as two lazy stacks, and the dyes seen in them.

A split view images the two channels side by side on one chip. ``split_regions`` names the two halves: a preset
(``left-right``: channel 1 the left half, channel 2 the right; ``right-left``, ``top-bottom``, ``bottom-top``) or
two regions ``"y0:y1,x0:x1;y0:y1,x0:x1"`` (rows, columns; channel 1 first). The two regions must be of one size:
each channel is localized on its own and mapped onto the other, and equal halves are what a split view makes
(halves of different sizes are a sign of a wrong region). An odd frame width (height) leaves the middle column
(row) out of both halves.

``ChannelView(stack, region)`` is one region of a ``Stack`` as a stack of its own, ``(T, h, w)``, read region by
region (a memmap reads only the region's rows): what ``predict_stack`` takes. Coordinates in a view are the
region's own pixels (its corner pixel is 0, 0).

A dye is named with its ratio, the share of its photons that reach channel 2: ``I2 / (I1 + I2)``, from 0 (all in
channel 1) to 1 (all in channel 2). Two dyes imaged in their own channels are ratios 0 and 1; ratiometric
(salvaged fluorescence) dyes seen in both channels lie between. ``parse_dyes("AF647=0.2,CF680=0.5")``, or ratios
alone (``"0.2,0.5"``: named dye1, dye2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.blocks import edge_blocks

PRESETS = ("left-right", "right-left", "top-bottom", "bottom-top")
TWO_FILES = "two-files"  # the channels in two synchronized movies (two cameras)
LAYOUTS = (*PRESETS, TWO_FILES)


@dataclass(frozen=True)
class Region:
    """Rows ``y0 .. y1 - 1`` and columns ``x0 .. x1 - 1`` of a frame."""

    y0: int
    y1: int
    x0: int
    x1: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.y1 - self.y0, self.x1 - self.x0)

    def text(self) -> str:
        return f"{self.y0}:{self.y1},{self.x0}:{self.x1}"

    def to_list(self) -> list[int]:
        return [self.y0, self.y1, self.x0, self.x1]


def preset_regions(layout: str, frame: tuple[int, int]) -> tuple[Region, Region]:
    """The two halves (channel 1, channel 2) of a frame ``(H, W)`` for a preset layout."""
    h, w = int(frame[0]), int(frame[1])
    if layout in ("left-right", "right-left"):
        half = w // 2
        first, second = Region(0, h, 0, half), Region(0, h, w - half, w)
    elif layout in ("top-bottom", "bottom-top"):
        half = h // 2
        first, second = Region(0, half, 0, w), Region(h - half, h, 0, w)
    else:
        raise ConfigError(f"split: {layout!r} is not a split-view preset; choose from {', '.join(PRESETS)} or give "
                          "two regions 'y0:y1,x0:x1;y0:y1,x0:x1'")
    if min(first.shape) < 1:
        raise ConfigError(f"split {layout}: a frame of {h} x {w} px has no two halves")
    return (first, second) if layout in ("left-right", "top-bottom") else (second, first)


_REGION = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*,\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_regions(text: str) -> tuple[Region, Region]:
    """``"y0:y1,x0:x1;y0:y1,x0:x1"`` -> two regions (channel 1, channel 2); a ConfigError naming what is wrong."""
    parts = str(text).split(";")
    if len(parts) != 2:
        raise ConfigError(f"split {text!r}: give a preset ({', '.join(PRESETS)}) or two regions "
                          "'y0:y1,x0:x1;y0:y1,x0:x1' (rows, columns; channel 1 first)")
    regions = []
    for part in parts:
        m = _REGION.match(part)
        if not m:
            raise ConfigError(f"split {text!r}: {part.strip()!r} is not a region 'y0:y1,x0:x1' (rows, columns)")
        y0, y1, x0, x1 = (int(v) for v in m.groups())
        if not (y1 > y0 and x1 > x0):
            raise ConfigError(f"split {text!r}: the region {part.strip()!r} is empty (give y0 < y1 and x0 < x1)")
        regions.append(Region(y0, y1, x0, x1))
    return regions[0], regions[1]


def split_regions(layout: str | tuple[Region, Region], frame: tuple[int, int],
                  where: str = "split") -> tuple[Region, Region]:
    """The two channels' regions of frames ``(H, W)``: a preset, a regions text or two ``Region``; a ConfigError
    (naming ``where``, e.g. the file) when they leave the frame, overlap or differ in size."""
    if isinstance(layout, str):
        regions = preset_regions(layout, frame) if layout in PRESETS else parse_regions(layout)
    else:
        regions = (layout[0], layout[1])
    h, w = int(frame[0]), int(frame[1])
    for k, r in enumerate(regions, 1):
        if r.y1 > h or r.x1 > w:
            raise ConfigError(f"{where}: channel {k}'s region {r.text()} leaves the frame of {h} x {w} px (H x W)")
    a, b = regions
    if a.shape != b.shape:
        raise ConfigError(f"{where}: the two halves differ in size ({a.shape[0]} x {a.shape[1]} and "
                          f"{b.shape[0]} x {b.shape[1]} px): a split view's channels are equal halves")
    if a.y0 < b.y1 and b.y0 < a.y1 and a.x0 < b.x1 and b.x0 < a.x1:
        raise ConfigError(f"{where}: the two regions {a.text()} and {b.text()} overlap")
    return regions


def layout_text(layout: str | tuple[Region, Region]) -> str:
    """How a layout is written (a preset's name or the regions' text)."""
    return layout if isinstance(layout, str) else ";".join(r.text() for r in layout)


class ChannelView:
    """One region of a stack as a lazy ``(T, h, w)`` stack of its own (module docstring). Closing it closes
    nothing: the stack is its owner's."""

    ndim = 3

    def __init__(self, stack: Any, region: Region) -> None:
        _, h, w = stack.shape
        if region.y1 > h or region.x1 > w:
            raise ConfigError(f"{getattr(stack, 'path', 'stack')}: region {region.text()} leaves the frame of "
                              f"{h} x {w} px")
        self.stack, self.region = stack, region

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.stack.shape[0], *self.region.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(getattr(self.stack, "dtype", np.float32))

    @property
    def path(self) -> Any:
        return getattr(self.stack, "path", None)

    @property
    def metadata(self) -> Any:
        return self.stack.metadata

    @property
    def damage(self) -> Any:
        return getattr(self.stack, "damage", None)

    def notes(self) -> list[str]:
        return self.stack.notes() if hasattr(self.stack, "notes") else []

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        r = self.region
        key = key if isinstance(key, tuple) else (key,)
        t = key[0]
        rows = key[1] if len(key) > 1 else slice(None)
        cols = key[2] if len(key) > 2 else slice(None)
        frames = np.asarray(self.stack[t, r.y0:r.y1, r.x0:r.x1])
        return frames[..., rows, cols] if (len(key) > 1) else frames

    def read(self, t0: int, t1: int) -> np.ndarray:
        return self[t0:t1]

    def blocks(self, length: int, context: int = 1) -> Iterator[tuple[int, np.ndarray]]:
        """``(t0, frames)`` as ``Stack.blocks`` gives them, of the region only."""
        return edge_blocks(lambda lo, hi: self[lo:hi], self.shape[0], length, context)


@dataclass(frozen=True)
class Dye:
    """A dye: its name and ``ratio``, the share of its photons in channel 2 (module docstring)."""

    name: str
    ratio: float


def parse_dyes(value: str | list[Any] | dict[str, float] | tuple[Any, ...]) -> tuple[Dye, ...]:
    """Dyes from ``"AF647=0.2,CF680=0.5"``, ``"0.2,0.5"``, a mapping ``{name: ratio}`` or a list of ratios or of
    ``[name, ratio]``; at least one, ratios in [0, 1], names unique, ratios distinct (a ConfigError otherwise)."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for k, part in enumerate(p.strip() for p in value.split(",") if p.strip()):
            name, _, ratio = part.rpartition("=")
            items.append((name.strip() or f"dye{k + 1}", ratio))
    else:
        items = [(f"dye{k + 1}", v) if not isinstance(v, (list, tuple)) else tuple(v) for k, v in enumerate(value)]
    dyes = []
    for item in items:
        if len(item) != 2:
            raise ConfigError(f"dyes: {item!r} is not a name and a ratio")
        name, ratio = str(item[0]), item[1]
        try:
            r = float(ratio)
        except (TypeError, ValueError):
            raise ConfigError(f"dyes: the ratio of {name} must be a number in [0, 1], got {ratio!r} (give "
                              "NAME=RATIO, the share of its photons in channel 2)") from None
        if not 0 <= r <= 1:
            raise ConfigError(f"dyes: the ratio of {name} must be in [0, 1] (the share of its photons in channel 2), "
                              f"got {r:g}")
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
            raise ConfigError(f"dyes: {name!r} is not a dye name (letters, digits, _ . + -)")
        dyes.append(Dye(name, r))
    if not dyes:
        raise ConfigError("dyes: give at least one dye, NAME=RATIO (the share of its photons in channel 2)")
    names = [d.name for d in dyes]
    if len(set(names)) != len(names) or len({d.ratio for d in dyes}) != len(dyes):
        raise ConfigError(f"dyes: names and ratios must be distinct, got {dyes_text(tuple(dyes))}")
    return tuple(dyes)


def dyes_text(dyes: tuple[Dye, ...]) -> str:
    """``"AF647=0.2,CF680=0.5"``: what ``parse_dyes`` reads back."""
    return ",".join(f"{d.name}={d.ratio:g}" for d in dyes)


DYE_COLOURS = ("magenta", "green", "cyan", "yellow", "red", "blue")  # names napari's colormaps have too
RGB = {"magenta": "#ff00ff", "green": "#00ff00", "cyan": "#00ffff", "yellow": "#ffff00", "red": "#ff0000",
       "blue": "#0000ff", "gray": "#808080"}
UNASSIGNED_COLOUR = "gray"


def dye_colours(n: int) -> list[str]:
    """One colour name per dye, the same in every figure, image and viewer: magenta, green, cyan, yellow, red, blue
    (``RGB``: their hex)."""
    return [DYE_COLOURS[k % len(DYE_COLOURS)] for k in range(n)]


def dye_colour(dye: int) -> str:
    """The colour of dye number ``dye`` (a table's ``dye`` column: 1, 2, ...; 0 unassigned: ``UNASSIGNED_COLOUR``),
    by its number, so a dye has its colour whichever dyes a file holds: dye k is ``dye_colours``' k-th."""
    return UNASSIGNED_COLOUR if dye < 1 else DYE_COLOURS[(dye - 1) % len(DYE_COLOURS)]
