"""A localization file as napari layer data (plain tuples: no napari or Qt import here).

Every layer is in nm from the camera frame's outer corner (``units`` nm): the super-resolution image rendered
from every localization, streamed (``decode_mem.render``, as ``render_file`` renders the file: each localization
a Gaussian of its own precision, on pixels of about half the median precision, its contrast from the non-empty
pixels; of a two-colour file one image per dye, each in its colour: ``render.colour``), and a Points layer with the
per-localization features
(frame 0-based as napari's time axis, photons, background, uncertainty and, for 3-D, z, by which it is
coloured). Above ``max_points`` localizations the Points layer holds a uniform random subsample of that many,
kept while the file streams by (memory: the subsample and one chunk, whatever the file's length), and its
name says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.io.channels import RGB, dye_colour
from decode_mem.io.localizations import iter_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import thunderstorm_columns
from decode_mem.render.auto import display_limit
from decode_mem.render.image import Rendering, file_render_settings

MAX_POINTS = 1_000_000  # localizations shown as points; above this a labelled random subsample
CHUNK_ROWS = 1 << 16  # rows read at a time: pyarrow's CSV reader held ~3x more at 2^18 (a 10^7-row file: 885
# against 299 MiB RssAnon while iterating; benchmarks/bench_napari.py)
LayerData = tuple[Any, dict[str, Any], str]  # napari's LayerDataTuple


@dataclass(frozen=True)
class Opened:
    """A file's layers and what they hold: ``n`` localizations in the file, ``shown`` of them as points."""

    layers: list[LayerData]
    n: int
    shown: int
    pixel_size: float


class Subsample:
    """A uniform random sample of at most ``limit`` rows of a stream of tables, in the stream's order: every row
    gets a random key and the ``limit`` smallest keys stay (all rows while there are no more than ``limit``).
    Tables wait until ``merge_rows`` rows have come, then join the sample at once (few copies of the sample)."""

    def __init__(self, limit: int, seed: int = 0, merge_rows: int = 1 << 18) -> None:
        self.limit, self.merge_rows, self.rng = int(limit), int(merge_rows), np.random.default_rng(seed)
        self._kept: EmitterTable | None = None
        self.keys = np.zeros(0)
        self.pending: list[EmitterTable] = []
        self.seen = 0

    def add(self, table: EmitterTable) -> None:
        self.seen += len(table)
        self.pending.append(table)
        if sum(len(t) for t in self.pending) >= self.merge_rows:
            self._merge()

    @property
    def kept(self) -> EmitterTable | None:
        """The sample of every row added so far (None before the first table)."""
        self._merge()
        return self._kept

    def _merge(self) -> None:
        if not self.pending:
            return
        tables = ([self._kept] if self._kept is not None else []) + self.pending
        n_new = sum(len(t) for t in self.pending)
        self._kept = EmitterTable.concat(tables) if len(tables) > 1 else tables[0]
        self.keys = np.concatenate([self.keys, self.rng.random(n_new)])
        self.pending = []
        if len(self.keys) > self.limit:
            keep = np.sort(np.argpartition(self.keys, self.limit - 1)[:self.limit])  # sorted: the stream's order
            self._kept, self.keys = self._kept.select(keep), self.keys[keep]


def open_localizations(path: str | os.PathLike, *, pixel_size: float | None = None,
                       render_pixel: float | None = None, max_points: int = MAX_POINTS, seed: int = 0,
                       name: str | None = None) -> Opened:
    """The image and points layers of a localization file (CSV, parquet, Picasso HDF5 + yaml), in one streamed
    pass; see the module docstring. A CSV takes its camera pixel and field from infer's ``<stem>.json`` beside
    it where there is one, else it is shown in its own nm (the render covers the localizations' extent)."""
    path = Path(path)
    how = file_render_settings(path, pixel_size=pixel_size)  # a CSV's camera from its run's summary (io)
    sample = Subsample(max_points, seed)
    rendering = Rendering(shape_px=how.shape, pixel_size=how.pixel_size, render_pixel=render_pixel, blur=how.blur,
                          sigma=how.sigma)
    dyes: set[int] = set()
    for table in iter_localizations(path, pixel_size=how.pixel_size, chunk_rows=CHUNK_ROWS):
        sample.add(table)
        rendering.add(table)
        if "dye" in table:
            dyes |= {int(v) for v in np.unique(table["dye"][np.isfinite(table["dye"])])}
    image = rendering.image(consume=True)
    rp = rendering.render_pixel
    assert rp is not None
    kept = sample.kept if sample.kept is not None else EmitterTable.empty()
    stem = name or path.stem
    label = f"{stem} localizations" + (f" ({len(kept):,} of {sample.seen:,} shown)" if len(kept) < sample.seen
                                       else "")
    info = {"path": str(path), "localizations": sample.seen, "shown": len(kept), "pixel_size": how.pixel_size,
            "render_pixel": rp, "blur": how.blur, "sigma": how.sigma}
    images = [image_layer(image, rp, f"{stem} render", info)]
    if dyes:  # two colours: an image per dye in its colour (render.colour), one more pass over the file
        images = dye_layers(path, how, rp, sorted(dyes), stem, info)
    return Opened([*images, points_layer(kept, how.pixel_size, rp, label, info)], sample.seen, len(kept),
                  how.pixel_size)


def dye_layers(path: Path, how: Any, render_pixel: float, dyes: list[int], stem: str,
               info: dict[str, Any]) -> list[LayerData]:
    """One image layer per dye of a two-colour file, in the dye's colour (unassigned: gray, hidden), blended."""
    from decode_mem.render.colour import dye_names, images_by_dye

    images, counts = images_by_dye(path, how, render_pixel, dyes)
    names = dye_names(path, dyes)
    layers = []
    for k in dyes:
        layer = image_layer(images[k], render_pixel, f"{stem} {names[k]}", {**info, "dye": k, "drawn": counts[k]})
        layer[1].update(colormap=dye_colour(k), visible=k > 0)
        layers.append(layer)
    return layers


def image_layer(image: np.ndarray, render_pixel: float, name: str, info: dict[str, Any]) -> LayerData:
    """The rendered image in nm: render pixel ``i`` covers ``[i, i + 1) * render_pixel`` nm, centre at
    ``(i + 0.5) * render_pixel``."""
    return (image, {"name": name, "scale": (render_pixel, render_pixel), "translate": (render_pixel / 2,) * 2,
                    "units": ("nm", "nm"), "colormap": "magma", "contrast_limits": (0.0, display_limit(image)),
                    "blending": "additive", "metadata": {"decode_mem": info}}, "image")


def point_features(table: EmitterTable, pixel_size: float) -> tuple[np.ndarray, dict[str, np.ndarray], bool]:
    """``(y, x)`` in nm from the corner (the CSV's numbers), the features, and whether the data are 3-D."""
    three_d = bool(len(table)) and bool(np.any(table["z"] != 0))
    cols = thunderstorm_columns(table, pixel_size, three_d=three_d)
    features = {"frame": table["frame"].astype(np.int64), "photons": cols["intensity [photon]"],
                "background": cols["offset [photon]"], "uncertainty_nm": cols["uncertainty [nm]"]}
    if three_d:
        features["z_nm"] = cols["z [nm]"]
    if "prob" in table:
        features["prob"] = table["prob"].astype(np.float64)
    if "dye" in table:
        features["dye"] = table["dye"].astype(np.int64)
    return np.column_stack([cols["y [nm]"], cols["x [nm]"]]), features, three_d


def points_layer(table: EmitterTable, pixel_size: float, render_pixel: float, name: str,
                 info: dict[str, Any]) -> LayerData:
    """The localizations as points (nm), sized two render pixels; coloured by z for 3-D data."""
    data, features, three_d = point_features(table, pixel_size)
    colour: dict[str, Any] = {"face_color": "cyan"}
    if "dye" in features:  # two colours: each point in its dye's colour (unassigned gray), as the images
        dyes = np.clip(features["dye"], 0, None)
        lut = np.array([_rgba(RGB[dye_colour(k)]) for k in range(int(dyes.max(initial=0)) + 1)])
        colour = {"face_color": lut[dyes] if len(dyes) else "cyan"}
    elif three_d:
        z = features["z_nm"]
        low, high = (float(np.nanmin(z)), float(np.nanmax(z))) if len(z) else (0.0, 1.0)
        colour = {"face_color": "z_nm", "face_colormap": "turbo",
                  "face_contrast_limits": (low, high if high > low else low + 1.0)}
    return (data, {"name": name, "features": features, "size": 2 * render_pixel, "border_width": 0.0,
                   "units": ("nm", "nm"), "opacity": 0.7,
                   "metadata": {"decode_mem": info}, **colour}, "points")


def _rgba(hex_colour: str) -> tuple[float, float, float, float]:
    return (*(int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)), 1.0)
