"""Two-colour files drawn by dye: one image per dye, their merge in the dyes' colours (render), one layer per dye in
napari; the names from the run's summary."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.napari.layers import open_localizations
from decode_mem.render.__main__ import main
from decode_mem.render.colour import render_colours

PIXEL = 100.0


def _two_colour(path, n: int = 300):
    """Three clusters: dye 1 at (10, 10) px, dye 2 at (30, 20), unassigned at (20, 30); a 40 x 40 px field."""
    rng = np.random.default_rng(0)
    centres = {1: (10, 10), 2: (30, 20), 0: (20, 30)}
    dye = np.repeat([1, 2, 0], n)
    xy = np.vstack([np.array(centres[d]) + rng.normal(0, 0.1, 2) for d in dye])
    table = EmitterTable.from_arrays(frame=np.arange(len(dye)) % 50, x=xy[:, 0], y=xy[:, 1],
                                     photons=np.full(len(dye), 3000.0), sigma_x=np.full(len(dye), 0.1),
                                     sigma_y=np.full(len(dye), 0.1), dye=dye.astype(float),
                                     channel=np.zeros(len(dye)), ratio=np.where(dye == 1, 0.3, 0.6))
    write_localizations(table, path, pixel_size=PIXEL)
    (path.parent / f"{path.stem}.json").write_text(json.dumps({
        "camera": {"pixel_size": PIXEL}, "shape": [50, 40, 40],
        "two_colour": {"dyes": {"mode": "ratiometric", "dye_ratios": {"AF647": 0.3, "CF680": 0.6}}}}))
    return centres, n


def test_each_dye_its_image_and_colour(tmp_path):
    locs = tmp_path / "movie.csv"
    centres, n = _two_colour(locs)
    made = render_colours(locs, tmp_path / "merged.png", render_pixel=50.0)
    assert made.names == {0: "unassigned", 1: "AF647", 2: "CF680"}
    assert made.counts == {0: n, 1: n, 2: n}
    assert {p.name for p in made.files.values()} == {"merged_AF647.png", "merged_CF680.png", "merged_unassigned.png"}
    for k, (x, y) in centres.items():
        r, c = int((y + 0.5) * PIXEL / 50), int((x + 0.5) * PIXEL / 50)
        assert made.images[k][r - 2:r + 3, c - 2:c + 3].sum() == pytest.approx(n, rel=0.05)  # every one drawn there
        rgb = made.merged[r - 1:r + 2, c - 1:c + 2].max(axis=(0, 1))
        expected = {1: [1, 0, 1], 2: [0, 1, 0], 0: [0, 0, 0]}[k]  # magenta, green; unassigned left out of the merge
        assert np.allclose(rgb, expected, atol=0.05), (k, rgb)
    from matplotlib.image import imread

    png = imread(tmp_path / "merged.png")  # what the file shows: the merge, one pixel per render pixel
    assert png.shape[:2] == made.merged.shape[:2] and np.allclose(png[..., :3], made.merged, atol=1 / 255 + 1e-6)


def test_by_dye_the_cmap_colours_each_dyes_png_and_the_zoom_is_the_merges_densest_square(tmp_path, capsys):
    """--cmap and --zoom are not ignored by dye: each dye's own PNG in the colormap, ``<stem>_zoom.png`` the merge's
    densest square enlarged, in the dyes' colours (the unassigned cluster is left out of the merge, so the densest
    square of the merge's dyes holds dye 1 or 2)."""
    from matplotlib.image import imread

    locs = tmp_path / "movie.csv"
    _two_colour(locs, n=300)
    rng = np.random.default_rng(1)  # dye 1's cluster made the densest: 300 more there
    more = EmitterTable.from_arrays(frame=np.arange(300) % 50, x=10 + rng.normal(0, 0.1, 300),
                                    y=10 + rng.normal(0, 0.1, 300), photons=np.full(300, 3000.0),
                                    sigma_x=np.full(300, 0.1), sigma_y=np.full(300, 0.1), dye=np.ones(300),
                                    channel=np.zeros(300), ratio=np.full(300, 0.3))
    summary = (tmp_path / "movie.json").read_text()
    from decode_mem.io.localizations import iter_localizations

    table = EmitterTable.concat([*iter_localizations(locs, pixel_size=PIXEL), more])
    write_localizations(table, locs, pixel_size=PIXEL)
    (tmp_path / "movie.json").write_text(summary)
    assert main([str(locs), "--out", str(tmp_path / "m.png"), "--pixel", "50", "--cmap", "gray",
                 "--zoom", "0.5"]) == 0
    assert "densest square" in capsys.readouterr().out
    one = imread(tmp_path / "m_AF647.png")[..., :3]
    assert np.allclose(one[..., 0], one[..., 1]) and np.allclose(one[..., 1], one[..., 2]) and one.max() > 0.9
    zoom = imread(tmp_path / "m_zoom.png")[..., :3]
    assert min(zoom.shape[:2]) >= 600  # enlarged as render_file's zoom
    bright = zoom.reshape(-1, 3)[zoom.reshape(-1, 3).max(axis=1) > 0.9]
    assert len(bright) and np.allclose(bright.mean(axis=0), [1, 0, 1], atol=0.2)  # dye 1, magenta
    assert main([str(locs), "--out", str(tmp_path / "n.png"), "--pixel", "50", "--zoom", "none"]) == 0
    assert not (tmp_path / "n_zoom.png").exists()


def test_render_takes_the_dyes_by_itself_and_one_image_when_asked(tmp_path, capsys):
    locs = tmp_path / "movie.csv"
    _two_colour(locs)
    assert main([str(locs), "--out", str(tmp_path / "a.png"), "--pixel", "50"]) == 0
    assert "rendered by dye" in capsys.readouterr().out and (tmp_path / "a_CF680.png").is_file()
    assert main([str(locs), "--out", str(tmp_path / "b.png"), "--pixel", "50", "--colour", "none"]) == 0
    assert not (tmp_path / "b_CF680.png").exists()


def test_napari_shows_a_layer_per_dye(tmp_path):
    locs = tmp_path / "movie.csv"
    _, n = _two_colour(locs)
    opened = open_localizations(locs, render_pixel=50.0)
    images = [(meta["name"], meta["colormap"], meta["visible"], data) for data, meta, kind in opened.layers
              if kind == "image"]
    assert [(name, cmap, visible) for name, cmap, visible, _ in images] == [
        ("movie unassigned", "gray", False), ("movie AF647", "magenta", True), ("movie CF680", "green", True)]
    assert all(data.sum() == pytest.approx(n, rel=1e-3) for *_, data in images)
    points = next(meta for _, meta, kind in opened.layers if kind == "points")
    colours = np.asarray(points["face_color"])
    dye = points["features"]["dye"]
    assert np.allclose(colours[dye == 1], [1, 0, 1, 1]) and np.allclose(colours[dye == 2], [0, 1, 0, 1])


def test_a_dye_has_its_colour_by_number_whichever_dyes_a_file_holds(tmp_path):
    """A file holding dyes 0 and 2 only (dye 1 filtered out): dye 2 is green in the merge, in napari's image layer
    and in its points, as in the file with both dyes (the images once took colours by the order of the dyes
    present, the points by number)."""
    locs = tmp_path / "movie.csv"
    _two_colour(locs)
    from decode_mem.io.localizations import iter_localizations

    table = EmitterTable.concat(t.select(t["dye"] != 1) for t in iter_localizations(locs, pixel_size=PIXEL))
    summary = (tmp_path / "movie.json").read_text()
    write_localizations(table, locs, pixel_size=PIXEL)
    (tmp_path / "movie.json").write_text(summary)
    made = render_colours(locs, tmp_path / "merged.png", render_pixel=50.0)
    r, c = int((20 + 0.5) * PIXEL / 50), int((30 + 0.5) * PIXEL / 50)  # dye 2 at (30, 20) px
    assert np.allclose(made.merged[r - 1:r + 2, c - 1:c + 2].max(axis=(0, 1)), [0, 1, 0], atol=0.05)
    opened = open_localizations(locs, render_pixel=50.0)
    cmaps = {meta["metadata"]["decode_mem"]["dye"]: meta["colormap"] for _, meta, kind in opened.layers
             if kind == "image"}
    assert cmaps == {0: "gray", 2: "green"}
    points = next(meta for _, meta, kind in opened.layers if kind == "points")
    dye = points["features"]["dye"]
    assert np.allclose(np.asarray(points["face_color"])[dye == 2], [0, 1, 0, 1])
