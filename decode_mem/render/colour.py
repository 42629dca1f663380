"""Two-colour images: one super-resolution image per dye (the table's ``dye`` column) and their merge, each dye in
its colour by its number (``io.channels.dye_colour``: dye 1 magenta, 2 green, 3 cyan, ...).

``render_colours(LOCS, OUT)`` streams the file twice: once for the render pixel (chosen from all localizations, as
``render_file`` does; given: not needed) and once into one ``Rendering`` per dye on that pixel. Each dye's image is
scaled to its own display limit (``render.auto.display_limit``: a dim dye is not lost beside a bright one) and the
scaled images, coloured, are added into ``OUT`` (an RGB PNG with each dye's name in its colour and a scale bar); each
dye's image alone goes to ``<OUT stem>_<dye>.png`` (or ``.tif``: float32 counts). Localizations whose dye is 0
(ratiometric, unassigned) get their image too (``_unassigned``) and stay out of the merge. Dye names come from the
``<stem>.json`` the two-colour ``infer`` run wrote beside the file (``dye 1``, ``dye 2``, ... without one).
Each dye's own PNG takes ``cmap``; a PNG also gets ``<OUT stem>_zoom.png``, the merge's densest square (as
``render_file``'s zoom, found on the merged dyes' localizations together). Memory: one image per dye.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.channels import RGB, dye_colour
from decode_mem.io.localizations import iter_localizations, run_summary
from decode_mem.render.auto import PERCENTILE, display_limit, length_label, nice_length
from decode_mem.render.image import (
    ZOOM_PNG_SIDE,
    FileRender,
    Rendering,
    check_zoom,
    enlarged,
    file_render_settings,
    legend_figure,
    paste_legend,
    save_image,
    zoom_region,
)


class ColourRender(NamedTuple):
    """What ``render_colours`` made: the merged image (RGB float 0-1), each dye's name, image and file, the render
    pixel (nm) and the localizations drawn per dye."""

    merged: np.ndarray
    names: dict[int, str]
    images: dict[int, np.ndarray]
    files: dict[int, Path]
    render_pixel: float
    counts: dict[int, int]
    zoom: Path | None = None


def dye_names(path: str | os.PathLike, dyes: list[int]) -> dict[int, str]:
    """A name per dye number: the two-colour run's (``<stem>.json``), else ``dye k``; 0 is 'unassigned'."""
    record = run_summary(path).get("two_colour", {}).get("dyes", {})
    known = list(record.get("dye_ratios", {})) if record.get("mode") == "ratiometric" else list(record.get("dyes", {}))
    return {k: "unassigned" if k == 0 else (known[k - 1] if 0 < k <= len(known) else f"dye {k}") for k in dyes}


def _dyes_of(path: str | os.PathLike, pixel_size: float) -> list[int]:
    found: set[int] = set()
    for table in iter_localizations(path, pixel_size=pixel_size):
        if "dye" not in table:
            raise ConfigError(f"{path}: has no dye column (a two-colour infer run writes one: infer --registration)")
        found |= {int(v) for v in np.unique(table["dye"][np.isfinite(table["dye"])])}
    return sorted(found)


def render_colours(locs: str | os.PathLike, out: str | os.PathLike, *, render_pixel: float | None = None,
                   pixel_size: float | None = None, shape: tuple[int, int] | None = None, blur: str = "precision",
                   sigma: float | None = None, percentile: float = PERCENTILE, cmap: str = "magma",
                   zoom: float | str | None = "auto") -> ColourRender:
    """Render a two-colour localization file per dye and merged (module docstring); ``cmap`` and ``zoom`` as
    ``render_file``'s (``cmap`` colours each dye's own PNG; the merge has the dyes' colours)."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".tif", ".tiff"):
        raise ConfigError(f"{out}: the image must end in .png, .tif or .tiff")
    check_zoom(zoom)
    how = file_render_settings(locs, pixel_size=pixel_size, shape=shape, blur=blur, sigma=sigma)
    dyes = _dyes_of(locs, how.pixel_size)
    if not dyes:
        raise ConfigError(f"{locs}: holds no localizations to render")
    if render_pixel is None:  # chosen from all localizations, as one image of the file would be
        first = Rendering(shape_px=how.shape, pixel_size=how.pixel_size, blur=how.blur, sigma=how.sigma)
        for table in iter_localizations(locs, pixel_size=how.pixel_size):
            first.add(table)
            if first.render_pixel is not None:
                break
        if first.render_pixel is None:
            first.image()
        render_pixel = first.render_pixel
        del first
    assert render_pixel is not None
    done, counts = images_by_dye(locs, how, render_pixel, dyes)
    names = dye_names(locs, dyes)
    colours = {k: dye_colour(k) for k in dyes if k > 0}
    merged = np.zeros((*next(iter(done.values())).shape, 3), np.float32)
    for k, colour in colours.items():
        rgb = np.array([int(RGB[colour][i:i + 2], 16) / 255 for i in (1, 3, 5)], np.float32)
        merged += np.clip(done[k] / display_limit(done[k], percentile), 0, 1)[..., None] * rgb
    np.clip(merged, 0, 1, out=merged)
    files = {}
    for k in dyes:
        files[k] = out.with_name(f"{out.stem}_{_safe(names[k])}{out.suffix}")
        save_image(done[k], files[k], render_pixel=render_pixel, percentile=percentile, cmap=cmap)
    legend = [(names[k], colours[k]) for k in colours]
    save_merged(merged, out, render_pixel, legend)
    region = zoom_region(sum(done[k] for k in colours), out, render_pixel, zoom)  # the merge's dyes
    if region is not None:
        save_merged(merged[region[0]], region[1], render_pixel, legend, min_side=ZOOM_PNG_SIDE)
    return ColourRender(merged, names, done, files, render_pixel, counts, None if region is None else region[1])


def images_by_dye(locs: str | os.PathLike, how: FileRender, render_pixel: float, dyes: list[int] | None = None
                  ) -> tuple[dict[int, np.ndarray], dict[int, int]]:
    """One image per dye (``dyes``, default: every dye in the file) on ``render_pixel`` nm pixels, in one pass, and
    the localizations drawn in each (inside the field)."""
    dyes = _dyes_of(locs, how.pixel_size) if dyes is None else dyes
    images = {k: Rendering(shape_px=how.shape, pixel_size=how.pixel_size, render_pixel=render_pixel, blur=how.blur,
                           sigma=how.sigma) for k in dyes}
    for table in iter_localizations(locs, pixel_size=how.pixel_size):
        dye = table["dye"]
        for k, r in images.items():
            r.add(table.select(dye == k))
    return {k: r.image(consume=True) for k, r in images.items()}, {k: r.n for k, r in images.items()}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name.strip()) or "dye"


def save_merged(rgb: np.ndarray, path: Path, render_pixel: float, legend: list[tuple[str, str]], *,
                min_side: int = 0) -> None:
    """The merged image: a PNG (one pixel per render pixel, each dye's name in its colour and a scale bar in the
    lower-left corner; ``min_side`` as ``save_image``'s: whole PNG pixels per render pixel for at least that many on
    the shorter side) or a TIFF (float32 RGB, 0-1)."""
    with atomic_output(path) as tmp:
        if path.suffix.lower() == ".png":
            from matplotlib.image import imsave

            rgba = np.concatenate([(rgb * 255).round().astype(np.uint8), np.full((*rgb.shape[:2], 1), 255, np.uint8)],
                                  axis=2)
            rgba, shown = enlarged(rgba, render_pixel, min_side)
            bar = nice_length(min(rgba.shape[1] * shown / 5, 100 * shown))
            paste_legend(rgba, _legend(max(1, round(bar / shown)), length_label(bar), legend))
            imsave(tmp, rgba, format="png", origin="upper")
        else:
            import tifffile

            tifffile.imwrite(tmp, rgb.astype(np.float32), photometric="rgb")


def _legend(bar_px: int, bar_label: str, dyes: list[tuple[str, str]]) -> np.ndarray:
    """An RGBA tile: a scale bar of ``bar_px`` pixels and each dye's name in its colour."""
    w, h = max(180, bar_px + 100), 30 + 16 * len(dyes)
    fig, canvas = legend_figure(w, h, bar_px, bar_label, top=16)
    for i, (name, colour) in enumerate(dyes):
        fig.text(8 / w, (h - 34 - 16 * i) / h, name, color=RGB[colour], fontsize=10, va="center")
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def has_dyes(path: str | os.PathLike, pixel_size: float | None = None) -> bool:
    """Whether the file's localizations carry a ``dye`` column (its first rows are read)."""
    how = file_render_settings(path, pixel_size=pixel_size)
    for table in iter_localizations(path, pixel_size=how.pixel_size):
        return "dye" in table
    return False
