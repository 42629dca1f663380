"""The widefield image (the mean frame of a stack, streamed) and the widefield | super-resolution comparison.

What the microscope shows without localization is the mean frame: every blink blurred by the PSF. Beside
the super-resolution image of the same field (same physical extent, µm axes), the gain is plain to see.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from decode_mem.io.atomic import atomic_output
from decode_mem.io.first_frames import FirstFramesMean
from decode_mem.io.stack import Stack, open_stack
from decode_mem.render.auto import binned, zoom_square

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BLOCK_PIXELS = 1 << 22  # frames read at a time: about this many pixels
# longest side of an image as drawn in a figure (binned beyond): a panel is about 700 px wide at the 150 dpi
# ``save_side_by_side`` writes (500 at the report's 110), so finer pixels would not show, while matplotlib keeps
# several float copies of what it is given while it resamples (the report of a 2048² camera peaked there)
DISPLAY_PIXELS = 1024
OVERVIEW_PIXELS = 400  # the super-resolution overview's longer side (sums of blocks): about its panel's on screen
PANEL_INCHES = (4.6, 4.9)  # width, height of each panel of the side-by-side figure, its colour bar included
PANEL_MARGINS = (0.7, 0.2, 0.5, 1.05)  # inches: left (y ticks and label), right, top (two title lines), bottom
BAR_GAP = 0.5  # inches between an image and its colour bar: the x ticks and label
MIN_BAR = 2.4  # inches: the shortest colour bar


def mean_frame(stack: str | os.PathLike | Stack, max_frames: int | None = None) -> np.ndarray:
    """(H, W) float64 mean over all frames (or the first ``max_frames``), read block by block (memory: one
    block of frames)."""
    if not isinstance(stack, Stack):
        with open_stack(stack) as s:
            return mean_frame(s, max_frames)
    t, h, w = stack.shape
    n = t if max_frames is None else max(0, min(t, int(max_frames)))
    first = FirstFramesMean(n)  # the same sums as a run's report makes of the frames it reads
    blocks = stack.blocks(max(1, BLOCK_PIXELS // (h * w)), context=0) if n else ()
    for _, frames in blocks:
        first.add(frames)
        if first.count >= n:
            break
    mean, _ = first.mean()
    return np.zeros((h, w), np.float64) if mean is None else mean


def display_range(image: np.ndarray, low: float = 0.5, high: float = 99.8) -> tuple[float, float]:
    """Percentile contrast limits (``low``, ``high`` of the finite pixels); ``(0, 1)`` for an empty image."""
    finite = image[np.isfinite(image)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = (float(v) for v in np.percentile(finite, [low, high]))
    return lo, hi if hi > lo else lo + 1.0


def save_widefield(image: np.ndarray, path: str | os.PathLike, *, pixel_size: float | None = None) -> Path:
    """The widefield image alone as a grey PNG (percentile contrast). With ``pixel_size`` (nm) a small frame is
    enlarged to whole screen pixels per camera pixel (at least 480 px on its short side) and gets a scale bar and
    a colour bar in mean ADU; without, one PNG pixel per camera pixel and no legend."""
    from matplotlib import colormaps
    from matplotlib.image import imsave  # no pyplot: no global figure state

    from decode_mem.render.auto import length_label, nice_length
    from decode_mem.render.image import _legend_rgba, paste_legend

    lo, hi = display_range(image)
    rgba = colormaps["gray"](np.clip((image - lo) / ((hi - lo) or 1.0), 0.0, 1.0), bytes=True)
    if pixel_size is not None:
        f = max(1, -(-480 // max(1, min(image.shape))))  # whole screen pixels per camera pixel
        rgba = np.repeat(np.repeat(rgba, f, axis=0), f, axis=1)
        shown = pixel_size / f  # nm per PNG pixel
        bar = nice_length(rgba.shape[1] * shown / 5)
        paste_legend(rgba, _legend_rgba(max(1, round(bar / shown)), length_label(bar), hi, "gray", "mean frame\n[ADU]",
                                  vmin=lo))
    with atomic_output(path) as tmp:
        imsave(tmp, rgba, format="png", origin="upper")
    return Path(path)


def save_side_by_side(widefield: np.ndarray, superres: np.ndarray, path: str | os.PathLike, *, pixel_size: float,
                      render_pixel: float, n_frames: int | None = None, n_locs: int | None = None,
                      zoom: float | str | None = None, cmap: str = "magma") -> Path:
    """One PNG: the widefield image (grey) beside the super-resolution image, both over the same field in µm.

    ``pixel_size``: camera pixel (nm); ``render_pixel``: the super-resolution pixel (nm). ``zoom`` (µm): add a
    third panel with the super-resolution image of the ``zoom`` × ``zoom`` µm square that holds the most
    localizations (boxed in the other panels). ``n_frames`` and ``n_locs`` (the localizations inside the field,
    what the image holds) only label the panels.
    """
    fig = side_by_side_figure(widefield, superres, pixel_size=pixel_size, render_pixel=render_pixel,
                              n_frames=n_frames, n_locs=n_locs, zoom=zoom, cmap=cmap)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150)
    return Path(path)


def overview(image: np.ndarray) -> tuple[np.ndarray, int]:
    """A super-resolution image as its panel shows it: sums of ``f`` × ``f`` blocks (at most ``OVERVIEW_PIXELS`` on
    the longer side) and, where ``f`` > 1, each localization at least one shown pixel wide (a Gaussian of
    ``FLOOR_PX`` shown pixels, less the block's own width): the rendering's floor at the shown pixel, without which
    the localizations of a sparse image are single pixels lost in the panel. Sums are kept. Returns it and ``f``."""
    from scipy.ndimage import gaussian_filter

    from decode_mem.render.image import FLOOR_PX

    shown, f = binned(image, OVERVIEW_PIXELS)
    if f == 1:
        return shown, 1
    return gaussian_filter(shown, math.sqrt(FLOOR_PX ** 2 - 1.0 / 12.0), mode="constant"), f


def side_by_side_figure(widefield: np.ndarray | None, superres: np.ndarray | None, *, pixel_size: float,
                        render_pixel: float | None = None, n_frames: int | None = None, n_locs: int | None = None,
                        zoom: float | str | None = None, cmap: str = "magma") -> Figure:
    """The figure of :func:`save_side_by_side` (a matplotlib Figure, no pyplot); a missing image is left out.
    ``zoom='auto'``: a zoom panel of ``render.auto.zoom_edge`` µm where the image is large enough.

    Every panel has its axes in µm, a scale bar and a colour bar (mean ADU of the widefield, localizations per
    render pixel of the super-resolution panels, whose colours run from 0 to ``render.auto.display_limit`` of
    the panel's own non-empty pixels). The super-resolution overview is shown as :func:`overview` makes it, about
    the pixels its panel has on screen: drawn finer, matplotlib would average a sparse image's isolated
    localizations into the black around them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    from decode_mem.render.auto import display_limit, zoom_edge

    if widefield is None and superres is None:
        raise ValueError("side_by_side_figure: no image")
    rp = render_pixel or pixel_size
    panels = []  # (kind, image, extent in µm from the outer corner: left, right, bottom, top)
    if widefield is not None:  # a big camera frame is shown as means of f x f pixels, for the same reason
        shown, f = binned(widefield, DISPLAY_PIXELS)
        panels.append(("widefield", shown if f == 1 else shown / (f * f), _extent(shown.shape, pixel_size * f)))
    box = None
    if superres is not None:
        # a big image is shown binned (sums of f x f pixels): the figure's memory stays bounded, whatever the camera
        shown, f = overview(superres)
        panels.append(("superres", shown, _extent(shown.shape, rp * f)))
        if zoom == "auto":
            zoom = zoom_edge(superres.shape, rp)
        square = None if zoom is None else zoom_square(superres, rp, float(zoom))
        if square is not None:
            r, c, size = square
            box = (c * rp / 1000.0, r * rp / 1000.0, size * rp / 1000.0)  # x0, y0, edge in µm
            crop, g = overview(superres[r:r + size, c:c + size])  # an explicit large square: as the overview
            panels.append(("zoom", crop, (box[0], box[0] + crop.shape[1] * g * rp / 1000.0,
                                          box[1] + crop.shape[0] * g * rp / 1000.0, box[1])))
    fig = Figure(figsize=(PANEL_INCHES[0] * len(panels), PANEL_INCHES[1]))
    FigureCanvasAgg(fig)
    boxes = [_panel_boxes(i, len(panels), extent) for i, (_, _, extent) in enumerate(panels)]
    axes = [fig.add_axes(image_box) for image_box, _ in boxes]
    for ax, (kind, image, extent), (_, bar_box) in zip(axes, panels, boxes, strict=True):
        if kind == "widefield":
            lo, hi = display_range(image)
            shown = ax.imshow(image, cmap="gray", vmin=lo, vmax=hi, extent=extent, interpolation="nearest")
            ax.set_title("widefield" + (f" (mean of {n_frames} frames)" if n_frames else ""), loc="left")
            unit = "mean frame [ADU]"
        else:
            shown = ax.imshow(image, cmap=cmap, vmin=0.0, vmax=display_limit(image), extent=extent,
                              interpolation="antialiased" if kind == "superres" else "nearest")
            shown_pixel = abs(extent[1] - extent[0]) * 1000.0 / image.shape[1]  # nm: binned when the image is big
            if kind == "superres":  # the pixels shown, which the colour bar counts in (binned: sums of rendered ones)
                label = f"super-resolution ({shown_pixel:.3g} nm pixels" + (
                    f", sums of {render_pixel:g} nm" if render_pixel and abs(shown_pixel - render_pixel) > 1e-6
                    else "") + ")"
                if n_locs is not None:  # what the image holds: drift correction moves some out of the field
                    label += f"\n{n_locs} localizations inside the field"
            else:
                label = f"super-resolution, zoom {zoom:g} µm"
            ax.set_title(label, loc="left", fontsize="medium")
            unit = f"localizations per {shown_pixel:.3g} nm pixel"
        if box is not None and kind != "zoom":
            ax.add_patch(Rectangle(box[:2], box[2], box[2], fill=False, edgecolor="tab:cyan", linewidth=1.2))
        ax.set_xlabel("x [µm]")
        ax.set_ylabel("y [µm]")
        ax.xaxis.set_major_locator(MaxNLocator(5))  # a narrow zoom's labels (e.g. 20.75 to 22.50) would touch
        ax.set_facecolor("black")
        _scale_bar(ax, abs(extent[1] - extent[0]))
        fig.colorbar(shown, cax=fig.add_axes(bar_box), orientation="horizontal", label=unit)
    return fig


def _panel_boxes(i: int, n: int, extent: tuple[float, float, float, float]) -> tuple[list[float], list[float]]:
    """Where panel ``i`` of ``n`` and its colour bar go (figure fractions: left, bottom, width, height): fixed
    margins for the title above and the ticks, axis label and colour bar below, the image's box shaped like its
    field (so that the colour bar sits right under it; a narrow one at the left, its title running right).
    Fixed, not matplotlib's constrained layout: that lays the figure out by drawing it once more (0.51 -> 0.29 s of
    CPU per figure on 256² and 2560² images, measured for commit f4cb274; not in a results file)."""
    width, height = PANEL_INCHES
    left, right, top, bottom = PANEL_MARGINS
    aspect = abs(extent[2] - extent[3]) / max(abs(extent[1] - extent[0]), 1e-12)  # height / width of the field
    room_w, room_h = width - left - right, height - top - bottom
    w = min(room_w, room_h / aspect)
    h = w * aspect
    x0 = i * width + left
    y0 = height - top - h
    bar_w = max(0.8 * w, min(MIN_BAR, room_w))  # 80 % of the image's width, room for its ticks however narrow
    bar_h = min(0.8 * w, room_w) / 30
    bar = [max(i * width + BAR_GAP / 2, x0 + (w - bar_w) / 2), y0 - BAR_GAP - bar_h, bar_w, bar_h]
    to_fraction = [n * width, height, n * width, height]
    return ([v / f for v, f in zip([x0, y0, w, h], to_fraction, strict=True)],
            [v / f for v, f in zip(bar, to_fraction, strict=True)])


def _scale_bar(ax: object, width_um: float) -> None:
    """A white bar of a round length (about a fifth of the panel) in the panel's lower-right corner."""
    from matplotlib.font_manager import FontProperties
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    from decode_mem.render.auto import length_label, nice_length

    length = nice_length(width_um / 5)
    ax.add_artist(AnchoredSizeBar(ax.transData, length, length_label(length * 1000), "lower right", pad=0.4,
                                  color="white", frameon=False, size_vertical=width_um / 150,
                                  fontproperties=FontProperties(size="small")))


def _extent(shape: tuple[int, ...], pixel_nm: float) -> tuple[float, float, float, float]:
    h, w = shape[-2:]
    return 0.0, w * pixel_nm / 1000.0, h * pixel_nm / 1000.0, 0.0
