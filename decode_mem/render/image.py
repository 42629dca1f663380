"""Super-resolution rendering: localizations -> a histogram image on a fine grid, optionally blurred.

Geometry: the camera frame spans ``[-0.5, W - 0.5)`` px (pixel centres at integer coordinates), i.e.
``[0, W * pixel_size)`` nm from the outer corner, and render pixel ``i`` covers
``[i, i + 1) * render_pixel`` nm from that corner (the ThunderSTORM/CSV nm convention). Picasso's own
renderer bins ``x`` in ``[i, i + 1)`` camera px instead, which shifts its images by half a camera pixel.

Memory: the image is the only big array. Tables are consumed one at a time and in chunks; counts go in
by ``np.unique`` on flattened indices (memory O(chunk), not O(image) like ``np.bincount``). Blur:

- ``'none'``: counts; their sum is the number of localizations inside the field of view.
- ``'gaussian'``: the histogram convolved with one Gaussian of ``sigma`` nm (``gaussian_filter``, zero
  outside the frame, so only mass blurred across the border is lost). Peak memory: two images.
- ``'precision'``: each localization blurred by its own precision (mean of ``sigma_x``, ``sigma_y``,
  at least ``sigma`` nm if given), quantised to classes spaced by √2 from half a render pixel (8 by
  default); one histogram per class that occurs, each blurred once. Peak memory: classes + 2 images.

``render_file`` renders a localization file straight into a PNG or TIFF (``python -m decode_mem.render``), with
``blur='auto'`` by default: each localization's own precision where the file has it, else a Gaussian of 20 nm
— single-pixel counts of a sparse file are invisible at a 10 nm grid. The PNG carries a scale bar and a colour
bar (``save_image``), pasted into its lower-left corner: the PNG keeps one pixel per render pixel.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.ndimage import gaussian_filter

from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.localizations import file_format, iter_localizations, localization_meta
from decode_mem.io.table import EmitterTable

BLURS = ("none", "gaussian", "precision")
FILE_BLURS = ("auto", *BLURS)  # render_file: 'auto' picks 'precision' or 'gaussian' by the file's columns
AUTO_SIGMA = 20.0  # nm: blur='auto' on a file without precisions, and the lower bound of 'precision' under 'auto'
CHUNK_ROWS = 1 << 20
NICE = (1, 2, 5)  # scale-bar lengths: 1, 2, 5 x 10^k nm


def render_shape(shape_px: tuple[int, int], pixel_size: float, render_pixel: float) -> tuple[int, int]:
    """Rows and columns of the rendered image: the camera frame covered by whole render pixels."""
    return tuple(max(1, math.ceil(round(n * pixel_size / render_pixel, 9))) for n in shape_px)  # type: ignore[return-value]


def render(locs: EmitterTable | Iterable[EmitterTable], *, shape_px: tuple[int, int], pixel_size: float,
           render_pixel: float = 10.0, blur: str = "none", sigma: float | None = None,
           sigma_classes: int = 8, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """Render localizations (px, as in :class:`EmitterTable`) to a float32 image of ``render_pixel`` nm.

    ``shape_px`` is the camera frame (H, W) and ``pixel_size`` its pixel in nm; ``sigma`` is in nm
    (required for ``blur='gaussian'``, a lower bound for ``'precision'``). See the module docstring.
    """
    image, _ = render_counted(locs, shape_px=shape_px, pixel_size=pixel_size, render_pixel=render_pixel, blur=blur,
                              sigma=sigma, sigma_classes=sigma_classes, chunk_rows=chunk_rows)
    return image


def render_counted(locs: EmitterTable | Iterable[EmitterTable], *, shape_px: tuple[int, int], pixel_size: float,
                   render_pixel: float = 10.0, blur: str = "none", sigma: float | None = None,
                   sigma_classes: int = 8, chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, int]:
    """:func:`render` plus the number of localizations inside the field of view."""
    _check(shape_px, pixel_size, render_pixel, blur, sigma, sigma_classes)
    shape = render_shape(shape_px, pixel_size, render_pixel)
    tables = [locs] if isinstance(locs, EmitterTable) else locs
    images: dict[int, np.ndarray] = {}  # blur class -> histogram (class 0 only, unless 'precision')
    n_in = 0
    for table in tables:
        for start in range(0, len(table), chunk_rows):
            part = table.select(slice(start, start + chunk_rows))
            flat, inside = _flat_index(part, shape_px, pixel_size, render_pixel, shape)
            n_in += len(flat)
            if blur == "precision":
                classes = _sigma_class(part, inside, pixel_size, render_pixel, sigma, sigma_classes)
            else:
                classes = np.zeros(len(flat), np.int64)
            for c in np.unique(classes):
                img = images.setdefault(int(c), np.zeros(shape, np.float32))
                idx, counts = np.unique(flat[classes == c], return_counts=True)
                img.reshape(-1)[idx] += counts
    if not images:
        return np.zeros(shape, np.float32), 0
    if blur == "none":
        return images[0], n_in
    if blur == "gaussian":
        return gaussian_filter(images.pop(0), sigma / render_pixel, mode="constant"), n_in
    out = np.zeros(shape, np.float32)
    for c in sorted(images):
        out += gaussian_filter(images.pop(c), _class_sigma(c, render_pixel, sigma) / render_pixel, mode="constant")
    return out, n_in


class Histogram:
    """A ``blur='none'`` image filled table by table as localizations are produced (no file to read back):
    ``add`` each table, then ``image`` holds what :func:`render_counted` gives for all of them together and ``n``
    the localizations inside the field of view. Memory: the image (``render_shape`` float32), whatever the
    number of localizations."""

    def __init__(self, *, shape_px: tuple[int, int], pixel_size: float, render_pixel: float = 10.0,
                 chunk_rows: int = CHUNK_ROWS) -> None:
        _check(shape_px, pixel_size, render_pixel, "none", None, 1)
        self.shape_px = (int(shape_px[0]), int(shape_px[1]))
        self.pixel_size, self.render_pixel, self.chunk_rows = float(pixel_size), float(render_pixel), chunk_rows
        self.image = np.zeros(render_shape(self.shape_px, self.pixel_size, self.render_pixel), np.float32)
        self.n = 0

    def add(self, table: EmitterTable) -> None:
        """Count one table's localizations into the image."""
        for start in range(0, len(table), self.chunk_rows):
            part = table.select(slice(start, start + self.chunk_rows))
            flat, _ = _flat_index(part, self.shape_px, self.pixel_size, self.render_pixel, self.image.shape)
            idx, counts = np.unique(flat, return_counts=True)
            self.image.reshape(-1)[idx] += counts
            self.n += len(flat)


def _check(shape_px, pixel_size, render_pixel, blur, sigma, sigma_classes) -> None:
    if len(shape_px) != 2 or min(shape_px) < 1:
        raise ConfigError(f"render: shape_px must be (H, W) >= 1, got {tuple(shape_px)}")
    if not pixel_size > 0 or not render_pixel > 0:
        raise ConfigError(f"render: pixel_size and render_pixel must be > 0 nm, got {pixel_size}, {render_pixel}")
    if blur not in BLURS:
        raise ConfigError(f"render: blur must be one of {', '.join(BLURS)}, got {blur!r}")
    if blur == "gaussian" and (sigma is None or not sigma > 0):
        raise ConfigError(f"render: blur='gaussian' needs sigma > 0 nm, got {sigma}")
    if sigma_classes < 1:
        raise ConfigError(f"render: sigma_classes must be >= 1, got {sigma_classes}")


def _flat_index(table: EmitterTable, shape_px, pixel_size, render_pixel, shape) -> tuple[np.ndarray, np.ndarray]:
    """Flattened render-pixel index of every localization inside the frame, and the mask of those."""
    xn = (table["x"].astype(np.float64) + 0.5) * pixel_size  # nm from the outer corner
    yn = (table["y"].astype(np.float64) + 0.5) * pixel_size
    inside = (xn >= 0) & (yn >= 0) & (xn < shape_px[1] * pixel_size) & (yn < shape_px[0] * pixel_size)
    ix = np.minimum((xn[inside] / render_pixel).astype(np.int64), shape[1] - 1)
    iy = np.minimum((yn[inside] / render_pixel).astype(np.int64), shape[0] - 1)
    return iy * shape[1] + ix, inside


def _sigma_class(table, inside, pixel_size, render_pixel, sigma, n_classes) -> np.ndarray:
    if "sigma_x" not in table or "sigma_y" not in table:
        raise ConfigError("render: blur='precision' needs sigma_x and sigma_y columns (use 'gaussian' with a sigma)")
    s = (table["sigma_x"][inside].astype(np.float64) + table["sigma_y"][inside]) / 2 * pixel_size
    s = np.nan_to_num(np.maximum(s, sigma or 0.0), nan=render_pixel / 2, posinf=render_pixel / 2)
    c = np.rint(2 * np.log2(np.maximum(s, 1e-12) / (render_pixel / 2)))
    return np.clip(c, 0, n_classes - 1).astype(np.int64)


def _class_sigma(c: int, render_pixel: float, sigma: float | None) -> float:
    return max(render_pixel / 2 * 2 ** (c / 2), sigma or 0.0)


# --------------------------------------------------------------------------------------------- output

def nice_length(target: float) -> float:
    """The largest 1, 2 or 5 x 10^k not above ``target`` (> 0): a scale bar's length."""
    k = math.floor(math.log10(target))
    return max(m * 10.0 ** k for m in NICE if m * 10.0 ** k <= target * (1 + 1e-9))


def length_label(nm: float) -> str:
    """``'500 nm'``, ``'2 µm'``."""
    return f"{nm / 1000:g} µm" if nm >= 1000 else f"{nm:g} nm"


def _legend_rgba(bar_px: int, bar_label: str, vmax: float, cmap: str, unit: str, vmin: float = 0.0) -> np.ndarray:
    """A small RGBA tile (uint8): a scale bar of ``bar_px`` pixels over a colour bar from ``vmin`` to ``vmax``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    w, h, dpi = max(230, bar_px + 110), 84, 100  # labels of 10 pt in white: readable on any image
    fig = Figure(figsize=(w / dpi, h / dpi), dpi=dpi)
    fig.patch.set_alpha(0.0)
    canvas = FigureCanvasAgg(fig)
    fig.add_artist(Rectangle((0, 0), w, h, transform=None, color="black", alpha=0.75, linewidth=0, zorder=-1))
    fig.add_artist(Rectangle((8, h - 20), bar_px, 6, transform=None, color="white", linewidth=0))
    fig.text((bar_px + 14) / w, (h - 17) / h, bar_label, color="white", fontsize=10, va="center")
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


def _paste(rgba: np.ndarray, tile: np.ndarray, margin: int = 6) -> bool:
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


def save_image(image: np.ndarray, path: str | Path, *, render_pixel: float, percentile: float = 99.5,
               cmap: str = "magma", legend: bool = True) -> None:
    """Write ``.tif``/``.tiff`` (float32, ImageJ, µm calibration) or ``.png`` (colormap, percentile clip).

    The PNG has one pixel per render pixel and, with ``legend``, a scale bar and a colour bar (localizations
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

            positive = image[image > 0]
            vmax = float(np.percentile(positive, percentile)) if positive.size else 1.0
            vmax = vmax or 1.0
            rgba = colormaps[cmap](np.clip(image / vmax, 0.0, 1.0), bytes=True)  # what imsave would make
            if legend:
                width_nm = image.shape[1] * render_pixel
                bar = nice_length(min(width_nm / 5, 100 * render_pixel))
                _paste(rgba, _legend_rgba(max(1, round(bar / render_pixel)), length_label(bar), vmax, cmap,
                                          f"locs per\n{render_pixel:g} nm px"))
            imsave(tmp, rgba, format="png", origin="upper")
        else:
            import tifffile

            per_um = 1000.0 / render_pixel
            tifffile.imwrite(tmp, image.astype(np.float32, copy=False), imagej=True, resolution=(per_um, per_um),
                             metadata={"unit": "um"})


def render_file(locs: str | os.PathLike, out: str | os.PathLike, *, render_pixel: float = 10.0,
                pixel_size: float | None = None, shape: tuple[int, int] | None = None, blur: str = "auto",
                sigma: float | None = None, percentile: float = 99.5, cmap: str = "magma") -> tuple[np.ndarray, int]:
    """Render a localization file (CSV, Picasso, parquet; streamed) into ``out`` (.png or .tif).

    ``pixel_size`` (nm) and ``shape`` (H, W px) default to the file's metadata (the camera's field); a CSV,
    which records neither, is rendered over the localizations' extent from the corner, in nm without a pixel
    size. ``blur='auto'``: 'precision' (at least ``sigma`` or 20 nm) where the
    file has sigma_x / sigma_y, else 'gaussian' of ``sigma`` or 20 nm. Returns the image and the number of
    localizations inside the field.
    """
    if Path(out).suffix.lower() not in (".png", ".tif", ".tiff"):
        raise ConfigError(f"{out}: the image must end in .png, .tif or .tiff")
    how = file_render_settings(locs, pixel_size=pixel_size, shape=shape, blur=blur, sigma=sigma)
    image, n = render_counted(iter_localizations(locs, pixel_size=how.pixel_size), shape_px=how.shape,
                              pixel_size=how.pixel_size, render_pixel=render_pixel, blur=how.blur, sigma=how.sigma)
    save_image(image, out, render_pixel=render_pixel, percentile=percentile, cmap=cmap)
    return image, n


class FileRender(NamedTuple):
    """How :func:`render_file` renders a file: its camera pixel (nm), field (H, W px), blur and sigma (nm)."""

    pixel_size: float
    shape: tuple[int, int]
    blur: str
    sigma: float | None


def file_render_settings(locs: str | os.PathLike, *, pixel_size: float | None = None,
                         shape: tuple[int, int] | None = None, blur: str = "auto",
                         sigma: float | None = None) -> FileRender:
    """:func:`render_file`'s choices for a file (its metadata, 'auto' blur), also for viewers that render it
    themselves: at most one small read (and, for a CSV without a ``shape``, one pass for its extent)."""
    if blur not in FILE_BLURS:
        raise ConfigError(f"render: blur must be one of {', '.join(FILE_BLURS)}, got {blur!r}")
    file_format(locs)
    meta = localization_meta(locs)
    pixel_size = pixel_size or meta.pixel_size
    if pixel_size is None:
        if shape:
            raise ConfigError(f"{locs}: a shape in px needs the camera pixel size (nm) for this file")
        pixel_size = 1.0  # CSV in nm: 1 "pixel" = 1 nm, so the frame is the localizations' extent in nm
    if shape:
        shape = (int(shape[0]), int(shape[1]))
    elif meta.height and meta.width:
        shape = (meta.height, meta.width)
    else:
        shape = _extent_px(locs, pixel_size)
    if blur == "auto":
        first = next(iter(iter_localizations(locs, pixel_size=pixel_size, chunk_rows=1)), None)
        has_precision = first is not None and "sigma_x" in first and "sigma_y" in first
        blur = "precision" if has_precision else "gaussian"
        sigma = AUTO_SIGMA if sigma is None else sigma
    if sigma is None and blur == "gaussian":
        sigma = 10.0
    return FileRender(float(pixel_size), shape, blur, sigma)


def _extent_px(path: str | os.PathLike, pixel_size: float) -> tuple[int, int]:
    """(H, W) px covering every localization: one extra pass over the file."""
    hi = np.array([0.0, 0.0])
    for t in iter_localizations(path, pixel_size=pixel_size):
        if len(t):
            hi = np.maximum(hi, [np.nanmax(t["y"]), np.nanmax(t["x"])])
    return math.floor(hi[0] + 0.5) + 1, math.floor(hi[1] + 0.5) + 1
