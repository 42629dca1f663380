"""Super-resolution rendering: localizations -> an image on a fine grid.

Geometry: the camera frame spans ``[-0.5, W - 0.5)`` px (pixel centres at integer coordinates), i.e.
``[0, W * pixel_size)`` nm from the outer corner, and render pixel ``i`` covers
``[i, i + 1) * render_pixel`` nm from that corner (the ThunderSTORM/CSV nm convention). Picasso's own
renderer bins ``x`` in ``[i, i + 1)`` camera px instead, which shifts its images by half a camera pixel.

Blur (``BLURS``):

- ``'precision'`` (the default): each localization a normalized 2-D Gaussian of its own precision (``sigma_x``,
  ``sigma_y``: the ``sigma_x [nm]``/``sigma_y [nm]`` columns of a CSV, Picasso's ``lpx``/``lpy``), as Picasso draws
  by default (``render.gaussians``). A σ under one render pixel (or under ``sigma`` nm where given) is raised to it,
  so that a very precise localization is not a single bright pixel; a table without precisions, and a row whose
  precision is NaN or not positive, takes ``fallback_sigma`` (``FALLBACK_SIGMA``, 20 nm: typical of SMLM).
- ``'gaussian'``: the histogram convolved with one Gaussian of ``sigma`` nm (``gaussian_filter``, zero
  outside the frame, so only mass blurred across the border is lost).
- ``'none'``: counts; their sum is the number of localizations inside the field of view.

The render pixel is chosen from the data where none is given (``render.auto``: about half the median precision,
bounded so the image has at most ``MAX_SIDE`` pixels on its longer side), from the first ``SAMPLE_ROWS``
localizations, which wait until then. Memory: the image (4/3 of it for 'precision', two for 'gaussian'), the waiting
rows and one chunk of ``chunk_rows``; tables are consumed one at a time (``Rendering``), so a file of any length
streams through.

``render_file`` renders a localization file straight into a PNG or TIFF (``python -m decode_mem.render``); the PNG
carries a scale bar and a colour bar (``save_image``), pasted into its lower-left corner (one pixel per render
pixel), its contrast from the non-empty pixels (``render.auto.display_limit``), and beside it the densest square
zoomed (``<stem>_zoom.png``) where the image is large.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.localizations import file_format, iter_localizations, localization_meta
from decode_mem.io.table import EmitterTable
from decode_mem.render.auto import (
    MAX_SIDE,
    PERCENTILE,
    display_limit,
    length_label,
    nice_length,
    render_pixel_for,
    zoom_edge,
    zoom_square,
)
from decode_mem.render.gaussians import GaussianImage

BLURS = ("precision", "gaussian", "none")
FALLBACK_SIGMA = 20.0  # nm: the precision of a localization whose table or row has none
FLOOR_PX = 1.0  # render pixels: the narrowest Gaussian of blur='precision'
GAUSSIAN_SIGMA = 10.0  # nm: blur='gaussian' without a sigma
CHUNK_ROWS = 1 << 20  # rows counted at a time (a histogram: ~30 bytes a row)
DRAW_ROWS = 1 << 16  # rows drawn at a time by Rendering (Gaussians: some 200 bytes a row while drawn)
SAMPLE_ROWS = 1 << 16  # localizations the render pixel is chosen from, where none is given
ZOOM_PNG_SIDE = 600  # px: the zoom PNG is enlarged (whole pixels) to at least this on its shorter side


def render_shape(shape_px: tuple[int, int], pixel_size: float, render_pixel: float) -> tuple[int, int]:
    """Rows and columns of the rendered image: the camera frame covered by whole render pixels."""
    return tuple(max(1, math.ceil(round(n * pixel_size / render_pixel, 9))) for n in shape_px)  # type: ignore[return-value]


def render(locs: EmitterTable | Iterable[EmitterTable], *, shape_px: tuple[int, int], pixel_size: float,
           render_pixel: float = 10.0, blur: str = "none", sigma: float | None = None,
           chunk_rows: int = DRAW_ROWS) -> np.ndarray:
    """Render localizations (px, as in :class:`EmitterTable`) to a float32 image of ``render_pixel`` nm.

    ``shape_px`` is the camera frame (H, W) and ``pixel_size`` its pixel in nm; ``sigma`` is in nm
    (``blur='gaussian'``: its width, default ``GAUSSIAN_SIGMA``; ``'precision'``: a lower bound). See the module
    docstring.
    """
    image, _ = render_counted(locs, shape_px=shape_px, pixel_size=pixel_size, render_pixel=render_pixel, blur=blur,
                              sigma=sigma, chunk_rows=chunk_rows)
    return image


def render_counted(locs: EmitterTable | Iterable[EmitterTable], *, shape_px: tuple[int, int], pixel_size: float,
                   render_pixel: float = 10.0, blur: str = "none", sigma: float | None = None,
                   chunk_rows: int = DRAW_ROWS) -> tuple[np.ndarray, int]:
    """:func:`render` plus the number of localizations inside the field of view."""
    rendering = Rendering(shape_px=shape_px, pixel_size=pixel_size, render_pixel=render_pixel, blur=blur, sigma=sigma,
                          chunk_rows=chunk_rows)
    for table in [locs] if isinstance(locs, EmitterTable) else locs:
        rendering.add(table)
    return rendering.image(consume=True), rendering.n


class Rendering:
    """A super-resolution image filled table by table as localizations come (read from a file, or produced by a
    run: the report's image, napari's live layer): ``add`` each table, then ``image()`` is what all of them together
    give, whatever the tables' sizes, and ``n`` the localizations inside the field of view.

    ``render_pixel`` None: chosen from the first ``sample_rows`` localizations (``render.auto.render_pixel_for``,
    at most ``max_side`` pixels on the longer side), which wait until then (or until ``image()``); the attribute
    holds it once chosen. Blur, ``sigma`` and ``fallback_sigma``: see the module docstring. Memory: the image (see
    the module docstring), the waiting rows and one chunk, whatever the number of localizations.
    """

    def __init__(self, *, shape_px: tuple[int, int], pixel_size: float, render_pixel: float | None = None,
                 blur: str = "precision", sigma: float | None = None, fallback_sigma: float = FALLBACK_SIGMA,
                 max_side: int = MAX_SIDE, chunk_rows: int = DRAW_ROWS, sample_rows: int = SAMPLE_ROWS) -> None:
        _check(shape_px, pixel_size, render_pixel, blur, sigma, fallback_sigma)
        self.shape_px = (int(shape_px[0]), int(shape_px[1]))
        self.pixel_size, self.blur, self.fallback_sigma = float(pixel_size), blur, float(fallback_sigma)
        self.sigma = GAUSSIAN_SIGMA if blur == "gaussian" and sigma is None else sigma
        self.max_side, self.chunk_rows, self.sample_rows = int(max_side), int(chunk_rows), int(sample_rows)
        self.render_pixel: float | None = None
        self.n = 0
        self._waiting: list[EmitterTable] = []
        self._waiting_rows = 0
        self._counts: np.ndarray | None = None  # 'none' and 'gaussian': counts per render pixel
        self._gaussians: GaussianImage | None = None  # 'precision'
        if render_pixel is not None:
            self._start(float(render_pixel))

    @property
    def shape(self) -> tuple[int, int] | None:
        """(rows, columns) of the image; None while the render pixel waits for the data."""
        return None if self.render_pixel is None else render_shape(self.shape_px, self.pixel_size, self.render_pixel)

    def add(self, table: EmitterTable) -> None:
        """Draw one table's localizations (or keep them until the render pixel is chosen)."""
        if self.render_pixel is None:
            self._waiting.append(table)
            self._waiting_rows += len(table)
            if self._waiting_rows >= self.sample_rows:
                self._choose()
            return
        for start in range(0, len(table), self.chunk_rows):
            self._draw(table.select(slice(start, start + self.chunk_rows)))

    def image(self, consume: bool = False) -> np.ndarray:
        """The image (float32, ``shape``). ``consume``: hand over the object's own memory (nothing may be added
        afterwards); else more can be added and ``image()`` asked again."""
        if self.render_pixel is None:
            self._choose()
        assert self.render_pixel is not None
        if self._gaussians is not None:
            return self._gaussians.image(consume)
        assert self._counts is not None
        if self.blur == "gaussian":
            assert self.sigma is not None
            from scipy.ndimage import gaussian_filter

            return gaussian_filter(self._counts, self.sigma / self.render_pixel, mode="constant")
        return self._counts if consume else self._counts.copy()

    def _choose(self) -> None:
        """The render pixel from the waiting localizations' precision; then they are drawn."""
        if self.blur == "gaussian":
            sample = np.array([self.sigma], np.float64)
        else:
            parts = [sum(self._sigma_nm(t)) / 2 for t in self._waiting]  # the mean of x and y
            sample = np.maximum(np.concatenate(parts), self.sigma or 0.0) if parts else np.zeros(0)
        field = (self.shape_px[0] * self.pixel_size, self.shape_px[1] * self.pixel_size)
        self._start(render_pixel_for(sample, field, fallback_sigma=self.fallback_sigma, max_side=self.max_side))
        waiting, self._waiting, self._waiting_rows = self._waiting, [], 0
        for table in waiting:
            self.add(table)

    def _start(self, render_pixel: float) -> None:
        self.render_pixel = render_pixel
        shape = render_shape(self.shape_px, self.pixel_size, render_pixel)
        if self.blur == "precision":
            self._gaussians = GaussianImage(shape)
        else:
            self._counts = np.zeros(shape, np.float32)

    def _draw(self, table: EmitterTable) -> None:
        rp = self.render_pixel
        assert rp is not None
        if self._counts is not None:
            self.n += _count_into(self._counts, table, self.shape_px, self.pixel_size, rp)
            return
        assert self._gaussians is not None
        xn, yn, inside = _nm_inside(table, self.shape_px, self.pixel_size)
        self.n += int(inside.sum())
        sx, sy = self._sigma_nm(table)
        floor = max(FLOOR_PX * rp, self.sigma or 0.0)
        self._gaussians.add(xn[inside] / rp, yn[inside] / rp, np.maximum(sx[inside], floor) / rp,
                            np.maximum(sy[inside], floor) / rp)

    def _sigma_nm(self, table: EmitterTable) -> tuple[np.ndarray, np.ndarray]:
        """Each localization's precision in x and y (nm); ``fallback_sigma`` where the table or the row has none."""
        if "sigma_x" not in table or "sigma_y" not in table:
            fallback = np.full(len(table), self.fallback_sigma)
            return fallback, fallback
        out = []
        for name in ("sigma_x", "sigma_y"):
            s = table[name].astype(np.float64) * self.pixel_size
            out.append(np.where(np.isfinite(s) & (s > 0), s, self.fallback_sigma))
        return out[0], out[1]


class Histogram:
    """A ``blur='none'`` image filled table by table as localizations are produced (no file to read back):
    ``add`` each table, then ``image`` holds what :func:`render_counted` gives for all of them together and ``n``
    the localizations inside the field of view. Memory: the image (``render_shape`` float32), whatever the
    number of localizations."""

    def __init__(self, *, shape_px: tuple[int, int], pixel_size: float, render_pixel: float = 10.0,
                 chunk_rows: int = CHUNK_ROWS) -> None:
        _check(shape_px, pixel_size, render_pixel, "none", None, FALLBACK_SIGMA)
        self.shape_px = (int(shape_px[0]), int(shape_px[1]))
        self.pixel_size, self.render_pixel, self.chunk_rows = float(pixel_size), float(render_pixel), chunk_rows
        self.image = np.zeros(render_shape(self.shape_px, self.pixel_size, self.render_pixel), np.float32)
        self.n = 0

    def add(self, table: EmitterTable) -> None:
        """Count one table's localizations into the image."""
        for start in range(0, len(table), self.chunk_rows):
            self.n += _count_into(self.image, table.select(slice(start, start + self.chunk_rows)), self.shape_px,
                                  self.pixel_size, self.render_pixel)


def _check(shape_px, pixel_size, render_pixel, blur, sigma, fallback_sigma) -> None:
    if len(shape_px) != 2 or min(shape_px) < 1:
        raise ConfigError(f"render: shape_px must be (H, W) >= 1, got {tuple(shape_px)}")
    if not pixel_size > 0 or (render_pixel is not None and not render_pixel > 0):
        raise ConfigError(f"render: pixel_size and render_pixel must be > 0 nm, got {pixel_size}, {render_pixel}")
    if blur not in BLURS:
        raise ConfigError(f"render: blur must be one of {', '.join(BLURS)}, got {blur!r}")
    if sigma is not None and not sigma > 0:
        raise ConfigError(f"render: sigma must be > 0 nm, got {sigma}")
    if not fallback_sigma > 0:
        raise ConfigError(f"render: fallback_sigma must be > 0 nm, got {fallback_sigma}")


def _nm_inside(table: EmitterTable, shape_px, pixel_size) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x and y in nm from the frame's outer corner, and the mask of the localizations inside the frame."""
    xn = (table["x"].astype(np.float64) + 0.5) * pixel_size
    yn = (table["y"].astype(np.float64) + 0.5) * pixel_size
    inside = (xn >= 0) & (yn >= 0) & (xn < shape_px[1] * pixel_size) & (yn < shape_px[0] * pixel_size)
    return xn, yn, inside


def _flat_index(table: EmitterTable, shape_px, pixel_size, render_pixel, shape) -> tuple[np.ndarray, np.ndarray]:
    """Flattened render-pixel index of every localization inside the frame, and the mask of those."""
    xn, yn, inside = _nm_inside(table, shape_px, pixel_size)
    ix = np.minimum((xn[inside] / render_pixel).astype(np.int64), shape[1] - 1)
    iy = np.minimum((yn[inside] / render_pixel).astype(np.int64), shape[0] - 1)
    return iy * shape[1] + ix, inside


def _count_into(image: np.ndarray, table: EmitterTable, shape_px, pixel_size, render_pixel) -> int:
    """Add each localization inside the frame to its render pixel's count; returns how many were inside. Memory
    O(table), not O(image) as ``np.bincount`` would need."""
    flat, _ = _flat_index(table, shape_px, pixel_size, render_pixel, image.shape)
    idx, counts = np.unique(flat, return_counts=True)
    image.reshape(-1)[idx] += counts
    return len(flat)


# --------------------------------------------------------------------------------------------- output

LEGEND_SIDE = 1000  # px: PNGs larger than this (shorter side) get a legend enlarged in proportion

def legend_figure(w: float, h: float, bar: float, bar_label: str, *, top: float, dpi: float = 100) -> tuple:
    """A legend tile's matplotlib figure of ``w`` x ``h`` px (at 100 dpi) and its canvas: a translucent black
    backdrop, a white scale bar of ``bar`` px ``top`` px below its top edge and its label; the caller adds the
    rest and draws it (the colour bar here, the dyes' names in ``render.colour``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=(w / 100, h / 100), dpi=dpi)
    fig.patch.set_alpha(0.0)
    canvas = FigureCanvasAgg(fig)
    frac = fig.transFigure
    fig.add_artist(Rectangle((0, 0), 1, 1, transform=frac, color="black", alpha=0.75, linewidth=0, zorder=-1))
    fig.add_artist(Rectangle((8 / w, (h - top) / h), bar / w, 6 / h, transform=frac, color="white", linewidth=0))
    fig.text((bar + 14) / w, (h - top + 3) / h, bar_label, color="white", fontsize=10, va="center")
    return fig, canvas


def _legend_rgba(bar_px: int, bar_label: str, vmax: float, cmap: str, unit: str, vmin: float = 0.0,
                 scale: float = 1.0) -> np.ndarray:
    """A small RGBA tile (uint8): a scale bar of ``bar_px`` pixels over a colour bar from ``vmin`` to ``vmax``;
    ``scale`` enlarges everything but the bar's length (an image of thousands of pixels, seen scaled down, needs
    labels of more than 10 pt to be read)."""
    bar = bar_px / scale  # in the tile's own units (pixels at scale 1)
    w, h = max(230, bar + 110), 84  # labels of 10 pt in white: readable on any image
    fig, canvas = legend_figure(w, h, bar, bar_label, top=20, dpi=100 * scale)
    ax = fig.add_axes((20 / w, 30 / h, 108 / w, 12 / h))  # room for the first tick label at its left
    ax.imshow(np.linspace(0, 1, 256)[None], cmap=cmap, aspect="auto", extent=(vmin, vmax, 0, 1))
    ax.set_yticks([])
    ax.set_xticks([vmin, vmax], [f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}" for v in (vmin, vmax)])
    ax.tick_params(colors="white", labelcolor="white", labelsize=10, length=3, pad=2)
    for side in ax.spines.values():
        side.set_color("white")
    fig.text(136 / w, 36 / h, unit, color="white", fontsize=10, va="center")
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def legend_scale(shape: tuple[int, ...]) -> float:
    """How much a PNG's legend is enlarged: 1 up to ``LEGEND_SIDE`` px on the shorter side, in proportion above
    (a 4000-px image shown in a 1000-px window keeps legible labels)."""
    return max(1.0, min(shape[:2]) / LEGEND_SIDE)


def paste_legend(rgba: np.ndarray, tile: np.ndarray, margin: int = 6) -> bool:
    """Alpha-blend ``tile`` into the lower-left corner of ``rgba`` (both uint8 RGBA); False where it does not fit
    with room to spare (an image under three tiles high or two wide keeps no legend)."""
    th, tw = tile.shape[:2]
    h, w = rgba.shape[:2]
    if h < 3 * th or w < 2 * tw:
        return False
    region = rgba[h - th - margin:h - margin, margin:margin + tw]
    alpha = tile[..., 3:4].astype(np.float32) / 255.0
    region[..., :3] = (tile[..., :3] * alpha + region[..., :3] * (1 - alpha)).astype(np.uint8)
    return True


def enlarged(rgba: np.ndarray, render_pixel: float, min_side: int) -> tuple[np.ndarray, float]:
    """``rgba`` (H, W, 4) with each render pixel repeated to whole PNG pixels, enough for at least ``min_side`` on its
    shorter side (a small zoom; 0: as it is), and the nm a PNG pixel then shows."""
    f = max(1, -(-min_side // max(1, min(rgba.shape[:2]))))  # PNG pixels per render pixel, each way
    if f > 1:
        rgba = np.repeat(np.repeat(rgba, f, axis=0), f, axis=1)
    return rgba, render_pixel / f


def zoom_region(image: np.ndarray, out: str | os.PathLike, render_pixel: float, zoom: float | str | None
                ) -> tuple[tuple[slice, slice], Path] | None:
    """Where ``<out stem>_zoom.png`` shows: the densest square of ``image`` (render pixels) of ``zoom`` µm
    ('auto': ``render.auto.zoom_edge``; None: none), and its path; None where there is none (not a PNG, an image too
    small, a square covering most of it)."""
    edge = zoom_edge(image.shape, render_pixel) if zoom == "auto" else zoom
    if Path(out).suffix.lower() != ".png" or edge is None:
        return None
    square = zoom_square(image, render_pixel, float(edge))
    if square is None:
        return None
    r, c, size = square
    return (slice(r, r + size), slice(c, c + size)), Path(out).with_name(f"{Path(out).stem}_zoom.png")


def save_image(image: np.ndarray, path: str | Path, *, render_pixel: float, percentile: float = PERCENTILE,
               cmap: str = "magma", legend: bool = True, min_side: int = 0) -> None:
    """Write ``.tif``/``.tiff`` (float32, ImageJ, µm calibration) or ``.png`` (colormap from 0 to ``percentile`` of
    the non-empty pixels: ``render.auto.display_limit``).

    The PNG has one pixel per render pixel (``min_side``: whole PNG pixels per render pixel, enough for at least
    that many on its shorter side: a small zoom) and, with ``legend``, a scale bar and a colour bar (localizations
    per render pixel) in its lower-left corner (left out of an image too small to hold them)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".tif", ".tiff"):
        raise ConfigError(f"{path}: output must be .png, .tif or .tiff")
    if not 0 < percentile <= 100:
        raise ConfigError(f"percentile must be in (0, 100], got {percentile}")
    if suffix == ".png":
        from matplotlib import colormaps

        if cmap not in colormaps:
            raise ConfigError(f"unknown colormap {cmap!r}")
    with atomic_output(path) as tmp:
        if suffix == ".png":
            from matplotlib import colormaps
            from matplotlib.image import imsave  # no pyplot: no global figure state

            vmax = display_limit(image, percentile)
            rgba = colormaps[cmap](np.clip(image / vmax, 0.0, 1.0), bytes=True)  # what imsave would make
            rgba, shown = enlarged(rgba, render_pixel, min_side)
            if legend:
                k = legend_scale(rgba.shape)
                bar = nice_length(min(rgba.shape[1] * shown / 5, 100 * k * shown))
                paste_legend(rgba, _legend_rgba(max(1, round(bar / shown)), length_label(bar), vmax, cmap,
                                                f"locs per\n{render_pixel:g} nm px", scale=k), margin=round(6 * k))
            imsave(tmp, rgba, format="png", origin="upper")
        else:
            import tifffile

            per_um = 1000.0 / render_pixel
            tifffile.imwrite(tmp, image.astype(np.float32, copy=False), imagej=True, resolution=(per_um, per_um),
                             metadata={"unit": "um"})


class RenderedFile(NamedTuple):
    """What :func:`render_file` made: the image, the localizations inside the field, the render pixel (nm; chosen
    from the data where none was given) and the zoomed PNG (None: none written)."""

    image: np.ndarray
    n: int
    render_pixel: float
    zoom: Path | None = None


def render_file(locs: str | os.PathLike, out: str | os.PathLike, *, render_pixel: float | None = None,
                pixel_size: float | None = None, shape: tuple[int, int] | None = None, blur: str = "precision",
                sigma: float | None = None, percentile: float = PERCENTILE, cmap: str = "magma",
                zoom: float | str | None = "auto") -> RenderedFile:
    """Render a localization file (CSV, Picasso, parquet; streamed) into ``out`` (.png or .tif).

    ``pixel_size`` (nm) and ``shape`` (H, W px) default to the file's metadata (the camera's field); a CSV
    without them is rendered over the localizations' extent from the corner, in nm. ``render_pixel`` None: chosen
    from the data (module docstring). ``zoom`` (a PNG only): also write ``<stem>_zoom.png``, the densest square of
    that edge in µm (``'auto'``: ``render.auto.zoom_edge``, none for a small image; None: no zoom).
    """
    suffix = Path(out).suffix.lower()
    if suffix not in (".png", ".tif", ".tiff"):
        raise ConfigError(f"{out}: the image must end in .png, .tif or .tiff")
    check_zoom(zoom)
    how = file_render_settings(locs, pixel_size=pixel_size, shape=shape, blur=blur, sigma=sigma)
    rendering = Rendering(shape_px=how.shape, pixel_size=how.pixel_size, render_pixel=render_pixel, blur=how.blur,
                          sigma=how.sigma)
    for table in iter_localizations(locs, pixel_size=how.pixel_size):
        rendering.add(table)
    image = rendering.image(consume=True)
    rp = rendering.render_pixel
    assert rp is not None
    save_image(image, out, render_pixel=rp, percentile=percentile, cmap=cmap)
    region = zoom_region(image, out, rp, zoom)
    if region is not None:
        save_image(image[region[0]], region[1], render_pixel=rp, percentile=percentile, cmap=cmap,
                   min_side=ZOOM_PNG_SIDE)
    return RenderedFile(image, rendering.n, rp, None if region is None else region[1])


def check_zoom(zoom: float | str | None) -> None:
    """``zoom``: an edge > 0 µm, 'auto' or None (a ConfigError otherwise)."""
    if zoom is not None and zoom != "auto" and (isinstance(zoom, str) or not zoom > 0):
        raise ConfigError(f"render: zoom must be > 0 µm, 'auto' or None, got {zoom!r}")


class FileRender(NamedTuple):
    """How :func:`render_file` renders a file: its camera pixel (nm), field (H, W px), blur and sigma (nm)."""

    pixel_size: float
    shape: tuple[int, int]
    blur: str
    sigma: float | None


def file_render_settings(locs: str | os.PathLike, *, pixel_size: float | None = None,
                         shape: tuple[int, int] | None = None, blur: str = "precision",
                         sigma: float | None = None) -> FileRender:
    """:func:`render_file`'s choices for a file (its metadata), also for viewers that render it themselves: one
    small read (and, for a CSV without a ``shape``, one pass for its extent)."""
    if blur not in BLURS:
        raise ConfigError(f"render: blur must be one of {', '.join(BLURS)}, got {blur!r}")
    file_format(locs)
    meta = localization_meta(locs)
    pixel_size = pixel_size or meta.pixel_size
    if pixel_size is None:
        if shape:
            raise ConfigError(f"{locs}: a shape in px needs the camera pixel size (nm) for this file")
        pixel_size = 1.0  # CSV in nm: 1 "pixel" = 1 nm, so the frame is the localizations' extent in nm
    if shape:
        shape = (int(shape[0]), int(shape[1]))
    elif meta.height and meta.width:  # the recorded field, in pixels of the size used (a given one may differ)
        scale = meta.pixel_size / pixel_size if meta.pixel_size else 1.0
        shape = (math.ceil(meta.height * scale - 1e-9), math.ceil(meta.width * scale - 1e-9))
    else:
        shape = _extent_px(locs, pixel_size)
    if sigma is None and blur == "gaussian":
        sigma = GAUSSIAN_SIGMA
    return FileRender(float(pixel_size), shape, blur, sigma)


def _extent_px(path: str | os.PathLike, pixel_size: float) -> tuple[int, int]:
    """(H, W) px covering every localization: one extra pass over the file."""
    hi = np.array([0.0, 0.0])
    for t in iter_localizations(path, pixel_size=pixel_size):
        if len(t):
            hi = np.maximum(hi, [np.nanmax(t["y"]), np.nanmax(t["x"])])
    return math.floor(hi[0] + 0.5) + 1, math.floor(hi[1] + 0.5) + 1
