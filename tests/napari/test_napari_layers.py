"""Localization files as napari layer data (decode_mem.napari.layers): no napari needed, so these run in the core
install too. The points are the file's rows in nm, the image is render_file's, a big file's points a labelled
uniform subsample while the image counts every row."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.napari.layers import Subsample, open_localizations
from decode_mem.napari.reader import get_reader, is_localization_file
from decode_mem.render.image import render_file

PIXEL = 110.0  # nm


def table(n: int, seed: int = 0, *, z: bool = False) -> EmitterTable:
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.05, 0.3, n)
    return EmitterTable.from_arrays(frame=rng.integers(0, 30, n), x=rng.uniform(-0.4, 47.4, n),
                                    y=rng.uniform(-0.4, 31.4, n), z=rng.uniform(-300, 300, n) if z else np.zeros(n),
                                    photons=rng.uniform(500, 5000, n), bg=rng.uniform(5, 50, n), sigma_x=s,
                                    sigma_y=s * 1.1, prob=rng.uniform(0.4, 1, n))


def csv_rows(path: Path) -> dict[str, np.ndarray]:
    """The CSV's columns as numbers, read without decode_mem."""
    header = path.read_text().splitlines()[0].split(",")
    values = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {h.strip('"'): values[:, i] for i, h in enumerate(header)}


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".hdf5"])
def test_the_points_are_the_files_rows_in_nm_and_the_image_is_render_files(tmp_path: Path, suffix: str) -> None:
    locs = tmp_path / f"movie{suffix}"
    write_localizations(table(500), locs, pixel_size=PIXEL, width=48, height=32, frames=30)
    if suffix == ".csv":  # infer's summary beside it gives the camera pixel and field a CSV does not record
        (tmp_path / "movie.json").write_text(json.dumps({"camera": {"pixel_size": PIXEL}, "shape": [30, 32, 48]}))
        rows = csv_rows(locs)
        yx, frames, photons = np.column_stack([rows["y [nm]"], rows["x [nm]"]]), rows["frame"] - 1, \
            rows["intensity [photon]"]
    elif suffix == ".parquet":
        rows = pq.read_table(locs).to_pydict()
        yx, frames, photons = np.column_stack([rows["y [nm]"], rows["x [nm]"]]), np.array(rows["frame"]) - 1, \
            np.array(rows["intensity [photon]"])
    else:
        with h5py.File(locs) as f:
            raw = f["locs"][()]
        yx = (np.column_stack([raw["y"], raw["x"]]).astype(np.float64) + 0.5) * PIXEL
        frames, photons = raw["frame"], raw["photons"]
    opened = open_localizations(locs)
    (image, image_kw, image_kind), (points, points_kw, points_kind) = opened.layers
    assert (image_kind, points_kind) == ("image", "points") and opened.n == opened.shown == 500
    np.testing.assert_allclose(points, yx, rtol=1e-6)
    np.testing.assert_array_equal(points_kw["features"]["frame"], frames)
    np.testing.assert_allclose(points_kw["features"]["photons"], photons, rtol=1e-6)
    assert points_kw["units"] == image_kw["units"] == ("nm", "nm")
    rp = image_kw["metadata"]["decode_mem"]["render_pixel"]  # chosen from the precision: ~half the median 20 nm
    assert 8.0 <= rp <= 12.0 and image_kw["scale"] == (rp, rp) and image_kw["translate"] == (rp / 2, rp / 2)
    assert image.shape == (round(32 * PIXEL / rp), round(48 * PIXEL / rp))  # the camera's field (48 x 32 px)
    done = render_file(locs, tmp_path / "render.tif", pixel_size=PIXEL if suffix == ".csv" else None,
                       shape=(32, 48) if suffix == ".csv" else None)
    np.testing.assert_array_equal(image, done.image)
    assert done.render_pixel == rp
    assert done.n == 500 and image.sum() == pytest.approx(500, rel=0.05)  # blur loses what crosses the border


def test_a_csv_without_its_summary_is_shown_in_its_own_nm(tmp_path: Path) -> None:
    locs = tmp_path / "locs.csv"
    write_localizations(table(200, 1), locs, pixel_size=PIXEL)
    rows = csv_rows(locs)
    (image, image_kw, _), (points, _, _) = open_localizations(locs).layers
    np.testing.assert_allclose(points, np.column_stack([rows["y [nm]"], rows["x [nm]"]]), rtol=1e-6)
    top = np.array([rows["y [nm]"].max(), rows["x [nm]"].max()])
    assert np.all(np.array(image.shape) * image_kw["scale"] >= top)  # the render covers every localization


def test_3d_points_are_coloured_by_z(tmp_path: Path) -> None:
    locs = tmp_path / "locs.parquet"
    t = table(300, 2, z=True)
    write_localizations(t, locs, pixel_size=PIXEL, width=48, height=32)
    _, (_, kw, _) = open_localizations(locs).layers
    assert kw["face_color"] == "z_nm"
    np.testing.assert_allclose(kw["features"]["z_nm"], t["z"], rtol=1e-6)
    assert kw["face_contrast_limits"] == pytest.approx((t["z"].min(), t["z"].max()), rel=1e-6)


def test_above_the_limit_the_points_are_a_labelled_uniform_subsample_and_the_image_counts_every_row(
        tmp_path: Path) -> None:
    locs = tmp_path / "many.parquet"
    t = table(5000, 3)
    write_localizations(t, locs, pixel_size=PIXEL, width=48, height=32)
    full = open_localizations(locs)
    few = open_localizations(locs, max_points=400)
    (image, _, _), (points, kw, _) = few.layers
    assert (few.n, few.shown, len(points)) == (5000, 400, 400)
    assert kw["name"] == "many localizations (400 of 5,000 shown)"
    np.testing.assert_array_equal(image, full.layers[0][0])
    all_points = full.layers[1][0]
    index = {tuple(p): i for i, p in enumerate(all_points)}
    rows = np.array([index[tuple(p)] for p in points])  # every shown point is a row of the file, in file order
    assert np.all(np.diff(rows) > 0)
    assert 0.35 < np.mean(rows < 2500) < 0.65  # from the whole file, not its start


def test_the_subsample_is_uniform_over_chunks() -> None:
    sample = Subsample(1000, seed=5, merge_rows=2500)  # merged several times
    for start in range(0, 20_000, 3000):  # uneven chunks
        n = min(3000, 20_000 - start)
        sample.add(EmitterTable.from_arrays(frame=np.arange(start, start + n), x=np.zeros(n), y=np.zeros(n),
                                            photons=np.zeros(n)))
    kept = sample.kept["frame"]
    assert len(kept) == 1000 and sample.seen == 20_000 and len(np.unique(kept)) == 1000
    counts, _ = np.histogram(kept, bins=4, range=(0, 20_000))
    assert counts.min() > 200  # 250 expected per quarter


def test_only_localization_files_get_the_reader(tmp_path: Path) -> None:
    ours = tmp_path / "locs.csv"
    write_localizations(table(10), ours, pixel_size=PIXEL)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    lone = tmp_path / "lone.hdf5"
    with h5py.File(lone, "w") as f:
        f["x"] = np.zeros(3)
    assert get_reader(str(ours)) is not None and is_localization_file(ours)
    assert get_reader(str(other)) is None and get_reader(str(lone)) is None
    assert get_reader([str(ours), str(other)]) is None and get_reader(str(tmp_path / "missing.csv")) is None
