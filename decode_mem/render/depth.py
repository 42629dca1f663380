"""A 3-D localization image coloured by z: hue = the mean z of a render pixel, brightness = its density.

Two images are accumulated chunk by chunk (counts and the sum of z per render pixel), blurred alike with a
Gaussian of ``sigma`` nm, and combined: ``colour = cmap((Σz/count − z_low)/(z_high − z_low)) · min(1,
count/p99.5)``. Memory: two float32 images plus the RGB result. ``z_range`` (nm) defaults to the widest of the
chunks' 1st–99th percentiles of z, measured in the same pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from scipy.ndimage import gaussian_filter

from decode_mem.errors import ConfigError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.table import EmitterTable
from decode_mem.render.image import CHUNK_ROWS, _flat_index, render_shape


def render_depth(locs: EmitterTable | Iterable[EmitterTable], *, shape_px: tuple[int, int], pixel_size: float,
                 render_pixel: float = 10.0, sigma: float = 10.0, z_range: tuple[float, float] | None = None,
                 cmap: str = "turbo", percentile: float = 99.5,
                 chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, tuple[float, float], int]:
    """(RGB image (H, W, 3) float32 in [0, 1], the z range the colours span (nm), localizations drawn)."""
    from matplotlib import colormaps

    if cmap not in colormaps:
        raise ConfigError(f"unknown colormap {cmap!r}")
    if not sigma > 0 or not render_pixel > 0 or not pixel_size > 0:
        raise ConfigError(f"render_depth: sigma, render_pixel and pixel_size must be > 0, got {sigma}, "
                          f"{render_pixel}, {pixel_size}")
    shape = render_shape(shape_px, pixel_size, render_pixel)
    counts = np.zeros(shape, np.float32)
    zsum = np.zeros(shape, np.float32)
    lo, hi, n = np.inf, -np.inf, 0
    for table in [locs] if isinstance(locs, EmitterTable) else locs:
        for start in range(0, len(table), chunk_rows):
            part = table.select(slice(start, start + chunk_rows))
            flat, inside = _flat_index(part, shape_px, pixel_size, render_pixel, shape)
            z = np.asarray(part["z"], np.float64)[inside]
            ok = np.isfinite(z)
            flat, z = flat[ok], z[ok]
            if not len(z):
                continue
            n += len(z)
            np.add.at(counts.reshape(-1), flat, 1.0)
            np.add.at(zsum.reshape(-1), flat, z)
            p1, p99 = np.percentile(z, [1, 99])
            lo, hi = min(lo, p1), max(hi, p99)
    if z_range is None:
        z_range = (float(lo), float(hi)) if n else (-1.0, 1.0)
    z_lo, z_hi = (float(v) for v in z_range)
    if not z_hi > z_lo:
        z_hi = z_lo + 1.0
    s = sigma / render_pixel
    counts = gaussian_filter(counts, s, mode="constant")
    zsum = gaussian_filter(zsum, s, mode="constant")
    mean_z = np.divide(zsum, counts, out=np.full_like(zsum, (z_lo + z_hi) / 2), where=counts > 1e-6)
    positive = counts[counts > 1e-6]
    vmax = float(np.percentile(positive, percentile)) if positive.size else 1.0
    value = np.clip(counts / (vmax or 1.0), 0.0, 1.0)[..., None]
    rgb = colormaps[cmap](np.clip((mean_z - z_lo) / (z_hi - z_lo), 0.0, 1.0))[..., :3].astype(np.float32)
    return rgb * value, (z_lo, z_hi), n


def save_depth_png(rgb: np.ndarray, z_range: tuple[float, float], path: str | os.PathLike, *, render_pixel: float,
                   cmap: str = "turbo") -> Path:
    """The z-coloured image with a colour bar in nm, axes in µm and a scale bar, as a PNG (atomically)."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from decode_mem.render.widefield import _scale_bar

    h, w = rgb.shape[:2]
    fig = Figure(figsize=(8, 8 * h / w + 0.6))
    ax = fig.add_subplot(1, 1, 1)
    width_um = w * render_pixel / 1000
    ax.imshow(rgb, extent=(0, width_um, h * render_pixel / 1000, 0))
    ax.set(xlabel="x [µm]", ylabel="y [µm]", title="localizations coloured by z")
    _scale_bar(ax, width_um)  # white, lower right, as on the side-by-side panels
    fig.colorbar(ScalarMappable(Normalize(*z_range), colormaps[cmap]), ax=ax, label="z [nm]", shrink=0.8)
    out = Path(path)
    with atomic_output(out) as tmp:  # cropped to what is drawn (the square image leaves bands above and below)
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight", pad_inches=0.1)
    return out
