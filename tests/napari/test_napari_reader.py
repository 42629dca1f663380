"""The reader through napari itself (its plugin manager finds decode_mem's manifest): a localization file opens as
a rendered image and points in nm; other files are left to napari's other readers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("napari", reason="the napari extra is not installed (pip install -e '.[napari]')")
pytest.importorskip("pytestqt", reason="the napari extra is not installed (pip install -e '.[napari]')")

from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.render.image import render_shape


def test_napari_opens_a_localization_file_with_decode_mems_reader(viewer, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 300
    locs = tmp_path / "run.hdf5"
    t = EmitterTable.from_arrays(frame=rng.integers(0, 20, n), x=rng.uniform(0, 40, n), y=rng.uniform(0, 24, n),
                                 photons=rng.uniform(500, 3000, n))
    write_localizations(t, locs, pixel_size=100.0, width=40, height=24)
    layers = viewer.open(str(locs), plugin="decode_mem")
    assert [layer.name for layer in layers] == ["run render", "run localizations"]
    image, points = layers
    rp = image.metadata["decode_mem"]["render_pixel"]  # chosen from the localizations' precision
    assert tuple(image.scale) == (rp, rp) and [str(u) for u in image.units] == ["nanometer"] * 2
    assert image.data.shape == render_shape((24, 40), 100.0, rp)
    np.testing.assert_allclose(points.data, (np.column_stack([t["y"], t["x"]]) + 0.5) * 100.0, rtol=1e-6)
    np.testing.assert_array_equal(points.features["frame"], t["frame"])
    assert viewer.layers[-1] is points


def test_a_csv_of_another_kind_is_not_taken(viewer, tmp_path: Path) -> None:
    from npe2 import PluginManager

    other = tmp_path / "table.csv"
    other.write_text("index,axis-0,axis-1\n0,1,2\n")
    readers = {r.plugin_name for r in PluginManager.instance().iter_compatible_readers([str(other)])}
    assert "decode_mem" in readers  # by name pattern ...
    from decode_mem.napari.reader import get_reader

    assert get_reader(str(other)) is None  # ... but it declines, and napari's built-in reader opens it
    layers = viewer.open(str(other))
    assert layers and all(layer.name != "table localizations" for layer in layers)


def test_the_sample_movie_opens_from_naparis_sample_menu_in_nm(viewer, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    layers = viewer.open_sample("decode_mem", "nuclear_pores")
    movie = tmp_path / "decode_mem" / "napari_sample" / "nuclear_pores_200x96x96.tif"
    assert movie.is_file() and movie.with_name(movie.stem + "_truth.csv").is_file()
    (layer,) = layers
    assert layer.data.shape == (200, 96, 96) and tuple(layer.scale) == (1.0, 100.0, 100.0)
