"""Rendering: counts conserved, pixel-centre geometry, blur conserves mass, the CLI writes PNG and TIFF."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile

from decode_mem.errors import ConfigError
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.render import render, render_counted, render_shape
from decode_mem.render.__main__ import main

PX = 100.0  # camera pixel, nm
RP = 10.0  # render pixel, nm


def locs(x, y, **extra) -> EmitterTable:
    x = np.asarray(x, np.float64)
    return EmitterTable.from_arrays(frame=np.zeros(len(x), np.int64), x=x, y=np.asarray(y, np.float64),
                                    photons=np.full(len(x), 1000.0), **extra)


def random_locs(n: int, seed: int = 0, shape=(16, 32), margin: float = 0.0) -> EmitterTable:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5 + margin, shape[1] - 0.5 - margin, n)
    y = rng.uniform(-0.5 + margin, shape[0] - 0.5 - margin, n)
    return locs(x, y, sigma_x=rng.uniform(0.05, 0.4, n), sigma_y=rng.uniform(0.05, 0.4, n))


def test_histogram_counts_every_localization_inside_the_frame() -> None:
    t = random_locs(5000, shape=(20, 36))  # frame is 16 x 32, so some fall outside
    img = render(t, shape_px=(16, 32), pixel_size=PX, render_pixel=RP)
    assert img.shape == (160, 320) and img.dtype == np.float32
    nm_x, nm_y = (t["x"] + 0.5) * PX, (t["y"] + 0.5) * PX
    inside = (nm_x >= 0) & (nm_x < 32 * PX) & (nm_y >= 0) & (nm_y < 16 * PX)
    assert 0 < inside.sum() < len(t)
    assert img.sum() == inside.sum()


def test_a_localization_lands_in_the_right_render_pixel() -> None:
    # camera pixel centres sit at integer coordinates: x = 0 is 50 nm from the frame's outer corner
    cases = {(0.0, 3.0): (35, 5), (-0.5, -0.5): (0, 0), (31.49, 15.49): (159, 319), (2.26, 0.0): (5, 27)}
    for (x, y), (row, col) in cases.items():
        img = render(locs([x], [y]), shape_px=(16, 32), pixel_size=PX, render_pixel=RP)
        assert img.sum() == 1
        assert tuple(np.argwhere(img)[0]) == (row, col), (x, y)
    outside = render(locs([-0.51, 31.5], [0.0, 0.0]), shape_px=(16, 32), pixel_size=PX, render_pixel=RP)
    assert outside.sum() == 0


def test_render_shape_covers_the_frame() -> None:
    assert render_shape((16, 32), 100.0, 10.0) == (160, 320)
    assert render_shape((16, 32), 100.0, 30.0) == (54, 107)  # partial last pixel kept
    assert render_shape((3, 3), 0.1 * 3, 0.1) == (9, 9)  # no float round-up to 10


def test_tables_chunks_and_iterables_give_the_same_image() -> None:
    t = random_locs(3000, seed=2)
    whole = render(t, shape_px=(16, 32), pixel_size=PX, render_pixel=RP)
    parts = render((t.select(slice(i, i + 700)) for i in range(0, 3000, 700)), shape_px=(16, 32), pixel_size=PX,
                   render_pixel=RP, chunk_rows=256)
    np.testing.assert_array_equal(parts, whole)


@pytest.mark.parametrize("blur", ["gaussian", "precision"])
def test_blur_conserves_the_total(blur) -> None:
    t = random_locs(2000, seed=3, margin=1.0)  # away from the border, where blur leaks out of the frame
    img, n = render_counted(t, shape_px=(16, 32), pixel_size=PX, render_pixel=RP, blur=blur, sigma=10.0)
    hist = render(t, shape_px=(16, 32), pixel_size=PX, render_pixel=RP)
    assert n == len(t)
    assert img.sum() == pytest.approx(len(t), rel=0.01)
    assert img.max() < hist.max()  # it did spread


def test_precision_blur_follows_each_localizations_sigma() -> None:
    def spread(sigma_px: float) -> float:
        t = locs([8.0], [8.0], sigma_x=[sigma_px], sigma_y=[sigma_px])
        img = render(t, shape_px=(16, 16), pixel_size=PX, render_pixel=RP, blur="precision")
        rows = np.arange(img.shape[0])
        profile = img.sum(axis=1) / img.sum()
        mean = (rows * profile).sum()
        return float(np.sqrt(((rows - mean) ** 2 * profile).sum())) * RP  # nm

    narrow, wide = spread(0.1), spread(0.3)  # 10 nm and 30 nm
    assert narrow == pytest.approx(10.0, rel=0.25)
    assert wide == pytest.approx(30.0, rel=0.25)


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="sigma"):
        render(locs([1.0], [1.0]), shape_px=(4, 4), pixel_size=PX, blur="gaussian", sigma=0.0)
    with pytest.raises(ConfigError, match="blur"):
        render(locs([1.0], [1.0]), shape_px=(4, 4), pixel_size=PX, blur="box")


def test_cli_writes_png_and_float_tiff(tmp_path, capsys) -> None:
    t = random_locs(500, seed=5)
    write_localizations(t, tmp_path / "l.hdf5", pixel_size=PX, width=32, height=16)
    assert main([str(tmp_path / "l.hdf5"), "--out", str(tmp_path / "img.png"), "--pixel", "20"]) == 0
    assert (tmp_path / "img.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([str(tmp_path / "l.hdf5"), "--out", str(tmp_path / "img.tif"), "--blur", "gaussian",
                 "--sigma", "15", "--pixel", "10"]) == 0
    img = tifffile.imread(tmp_path / "img.tif")
    assert img.dtype == np.float32 and img.shape == (160, 320)  # frame size and pixel from the Picasso yaml
    assert img.sum() == pytest.approx(500, rel=0.05)
    assert "rendered 500 localizations" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.partial"))


def test_cli_csv_needs_no_pixel_size_and_honours_shape(tmp_path) -> None:
    t = random_locs(200, seed=6)
    write_localizations(t, tmp_path / "l.csv", pixel_size=PX)
    assert main([str(tmp_path / "l.csv"), "--out", str(tmp_path / "a.tif"), "--blur", "none",
                 "--quiet"]) == 0  # rendered in nm
    assert tifffile.imread(tmp_path / "a.tif").sum() == 200
    assert main([str(tmp_path / "l.csv"), "--out", str(tmp_path / "b.tif"), "--pixel_size", "100",
                 "--shape", "16", "32", "--blur", "none", "--pixel", "10", "--quiet"]) == 0
    b = tifffile.imread(tmp_path / "b.tif")
    np.testing.assert_array_equal(b, render(t, shape_px=(16, 32), pixel_size=PX, render_pixel=RP))


def test_cli_missing_file_and_bad_output(tmp_path, capsys) -> None:
    missing = tmp_path / "missing_locs.csv"
    assert main([str(missing), "--out", str(tmp_path / "x.png")]) == 2
    assert "missing_locs.csv" in capsys.readouterr().err
    write_localizations(random_locs(5), tmp_path / "l.parquet", pixel_size=PX)
    assert main([str(tmp_path / "l.parquet"), "--out", str(tmp_path / "x.jpg")]) == 2
    assert ".png" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_mean_frame_is_streamed_block_by_block(tmp_path, monkeypatch) -> None:
    from decode_mem.render import widefield

    rng = np.random.default_rng(1)
    stack = rng.integers(0, 60000, (13, 8, 16), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(widefield, "BLOCK_PIXELS", 8 * 16 * 3)  # blocks of 3 frames: 13 = 3 + 3 + 3 + 3 + 1
    np.testing.assert_allclose(widefield.mean_frame(tmp_path / "s.tif"), stack.mean(axis=0, dtype=np.float64),
                               rtol=1e-12)


def test_densest_window_finds_the_cluster() -> None:
    from decode_mem.render.auto import densest_window

    image = np.zeros((100, 120), np.float32)
    image[::7, ::5] = 1.0  # a sparse background
    image[61:69, 33:41] = 5.0  # the densest 10 x 10 window holds this 8 x 8 block
    r, c = densest_window(image, 10)
    assert r <= 61 and r + 10 >= 69 and c <= 33 and c + 10 >= 41
    assert densest_window(image, 500) == (0, 0)  # a window larger than the image is the image


def test_side_by_side_png_has_three_panels_with_zoom(tmp_path) -> None:
    from decode_mem.render import save_side_by_side

    wide = np.random.default_rng(0).normal(100, 5, (20, 30))
    sr = np.zeros((200, 300), np.float32)
    sr[50:60, 100:110] = 1.0
    with_zoom = save_side_by_side(wide, sr, tmp_path / "z.png", pixel_size=PX, render_pixel=RP, zoom=0.5)
    without = save_side_by_side(wide, sr, tmp_path / "n.png", pixel_size=PX, render_pixel=RP)
    from matplotlib.image import imread

    assert imread(with_zoom).shape[1] > 1.4 * imread(without).shape[1]  # a third panel


def test_binned_keeps_the_sum_of_whole_blocks() -> None:
    from decode_mem.render.auto import binned

    image = np.random.default_rng(2).random((1000, 700)).astype(np.float32)
    same, f1 = binned(image, 1000)
    assert f1 == 1 and same is image
    small, f = binned(image, 300)
    assert f == 4 and small.shape == (250, 175)
    np.testing.assert_allclose(small.sum(), image[:1000, :700].sum(), rtol=1e-5)
    np.testing.assert_allclose(small[1, 2], image[4:8, 8:12].sum(), rtol=1e-5)


def test_figures_draw_big_images_binned_to_the_display_size() -> None:
    """A big camera frame and super-resolution image reach matplotlib binned (bounded figure memory); the
    widefield panel shows block means in camera units, over the same field."""
    from decode_mem.render.widefield import DISPLAY_PIXELS, side_by_side_figure

    rng = np.random.default_rng(3)
    wide = rng.normal(500.0, 20.0, (2 * DISPLAY_PIXELS + 100, DISPLAY_PIXELS + 10))
    sr = rng.poisson(0.1, (4 * DISPLAY_PIXELS, 2 * DISPLAY_PIXELS)).astype(np.float32)
    fig = side_by_side_figure(wide, sr, pixel_size=PX, render_pixel=PX / 4)
    (shown_wide,), (shown_sr,) = (ax.get_images() for ax in fig.axes if ax.get_images())
    assert max(shown_wide.get_array().shape) <= DISPLAY_PIXELS and max(shown_sr.get_array().shape) <= DISPLAY_PIXELS
    w = shown_wide.get_array().shape[1]
    np.testing.assert_allclose(shown_wide.get_array()[0, 0], wide[:3, :3].mean(), rtol=1e-5)  # means of 3 x 3
    np.testing.assert_allclose(shown_wide.get_extent()[1], w * 3 * PX / 1000.0)  # µm: the field it covers


def test_cli_default_shows_few_localizations_on_the_camera_field_with_a_legend(tmp_path, capsys) -> None:
    """21 localizations: the default blurs each by its precision (at least a render pixel), so the PNG is not black
    dots on a black field; the canvas is the camera's field from the file, the printed size is the PNG's width x
    height, and a scale bar + colour bar sit in the lower-left corner (and nowhere without ``legend``)."""
    from matplotlib.image import imread

    from decode_mem.render import save_image

    t = random_locs(21, seed=7, shape=(48, 64), margin=4.0)
    write_localizations(t, tmp_path / "few.hdf5", pixel_size=PX, width=64, height=48)
    assert main([str(tmp_path / "few.hdf5"), "--out", str(tmp_path / "auto.png"), "--pixel", "10"]) == 0
    out = capsys.readouterr().out
    assert "640 x 480 px (width x height)" in out and "the camera's field" in out
    assert main([str(tmp_path / "few.hdf5"), "--out", str(tmp_path / "none.png"), "--blur", "none",
                 "--pixel", "10"]) == 0
    auto, none = imread(tmp_path / "auto.png"), imread(tmp_path / "none.png")
    assert auto.shape[:2] == (480, 640)  # rows x columns: the camera's 48 x 64 px at 10 nm
    lit = lambda img: int((img[:300, :, :3].max(axis=2) > 0.2).sum())  # noqa: E731 (above the legend)
    assert lit(auto) > 10 * lit(none) > 0
    image = np.zeros((480, 640), np.float32)
    save_image(image, tmp_path / "legend.png", render_pixel=RP)
    save_image(image, tmp_path / "plain.png", render_pixel=RP, legend=False)
    legend, plain = imread(tmp_path / "legend.png"), imread(tmp_path / "plain.png")
    corner = legend[400:, :200, :3]
    assert (corner > 0.95).all(axis=2).sum() > 100  # the white scale bar (1 µm = 100 px) and its label
    assert np.array_equal(legend[:380], plain[:380]) and plain[..., :3].max() == plain[0, 0, :3].max()
    tiny = np.ones((40, 60), np.float32)  # too small to hold a legend: the image alone
    save_image(tiny, tmp_path / "tiny.png", render_pixel=RP)
    assert imread(tmp_path / "tiny.png").shape[:2] == (40, 60)


def test_side_by_side_panels_have_labels_scale_and_colour_bars() -> None:
    from matplotlib.offsetbox import AnchoredOffsetbox

    from decode_mem.render.widefield import side_by_side_figure

    wide = np.random.default_rng(0).normal(100, 5, (20, 30))
    sr = np.zeros((200, 300), np.float32)
    sr[50:60, 100:110] = 1.0
    fig = side_by_side_figure(wide, sr, pixel_size=PX, render_pixel=RP, n_locs=42, zoom=0.5)
    panels = [ax for ax in fig.axes if ax.get_images()]
    bars = [ax for ax in fig.axes if not ax.get_images()]
    assert len(panels) == 3 and len(bars) == 3  # a colour bar under each panel
    assert all(ax.get_ylabel() == "y [µm]" and ax.get_xlabel() == "x [µm]" for ax in panels)  # the zoom's too
    assert all(any(isinstance(a, AnchoredOffsetbox) for a in ax.artists) for ax in panels)  # scale bars
    assert "42 localizations inside the field" in panels[1].get_title(loc="left")
    assert bars[1].get_xlabel() == "localizations per 10 nm pixel"


def test_histogram_filled_table_by_table_equals_the_rendered_image() -> None:
    """The report's image is counted block by block as emitters are written: the same counts as rendering all
    localizations at once, those outside the field of view left out of the image and the count."""
    from decode_mem.render import Histogram

    rng = np.random.default_rng(1)
    n = 5000
    ones = np.ones(n, np.float32)
    table = EmitterTable({"frame": np.sort(rng.integers(0, 50, n)).astype(np.int64),
                          "x": rng.uniform(-2, 66, n).astype(np.float32),
                          "y": rng.uniform(-2, 50, n).astype(np.float32), "z": 0 * ones, "photons": ones, "bg": ones})
    whole, n_in = render_counted(table, shape_px=(48, 64), pixel_size=100.0, render_pixel=10.0, blur="none")
    hist = Histogram(shape_px=(48, 64), pixel_size=100.0, render_pixel=10.0, chunk_rows=700)
    for start in range(0, n, 1234):
        hist.add(table.select(slice(start, start + 1234)))
    assert hist.image.shape == whole.shape and hist.image.dtype == np.float32
    np.testing.assert_array_equal(hist.image, whole)
    assert hist.n == n_in == int(whole.sum()) < n


def test_render_depth_colours_by_z_and_shows_density() -> None:
    """Two clusters at z = −300 and +300 nm get the two ends of the colour map; empty pixels stay black."""
    from matplotlib import colormaps

    from decode_mem.render import render_depth

    n = 200
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(5, 0.05, n), rng.normal(15, 0.05, n)])
    y = np.full(2 * n, 10.0) + rng.normal(0, 0.05, 2 * n)
    z = np.concatenate([np.full(n, -300.0), np.full(n, 300.0)])
    table = EmitterTable.from_arrays(frame=np.zeros(2 * n, np.int64), x=x, y=y, z=z, photons=np.ones(2 * n))
    rgb, z_range, drawn = render_depth(table, shape_px=(20, 20), pixel_size=100.0, render_pixel=10.0, sigma=10.0)
    assert drawn == 2 * n and z_range == (-300.0, 300.0) and rgb.shape == (200, 200, 3)
    low, high = rgb[105, 55], rgb[105, 155]  # the two cluster centres (render px = 10 nm)
    turbo = colormaps["turbo"]
    assert np.allclose(low / low.max(), np.asarray(turbo(0.0)[:3]) / max(turbo(0.0)[:3]), atol=0.05)
    assert np.allclose(high / high.max(), np.asarray(turbo(1.0)[:3]) / max(turbo(1.0)[:3]), atol=0.05)
    assert rgb[20, 20].max() == 0.0


@pytest.mark.parametrize("band", [1, 3, 256])
def test_a_coarse_grid_is_interpolated_linearly_onto_the_finer_one(band) -> None:
    """Each fine pixel gets 3/4 of its coarse pixel and 1/4 of the neighbour on its side (the edge repeated),
    divided by 4 (sums kept), in each direction; a target cut to an odd shape takes what falls on it."""
    from decode_mem.render.gaussians import _upsample2_into

    rng = np.random.default_rng(band)
    coarse = rng.random((7, 5)).astype(np.float32)
    padded = np.pad(coarse.astype(np.float64), 1, mode="edge")
    i = np.arange(14)
    rows = 0.75 * padded[1 + i // 2] + 0.25 * padded[1 + i // 2 + np.where(i % 2, 1, -1)]  # (14, 7) with edges
    j = np.arange(10)
    want = (0.75 * rows[:, 1 + j // 2] + 0.25 * rows[:, 1 + j // 2 + np.where(j % 2, 1, -1)]) / 4
    for shape in ((14, 10), (13, 9)):
        start = rng.random(shape).astype(np.float32)
        target = start.copy()
        _upsample2_into(target, coarse, band=band)
        np.testing.assert_allclose(target - start, want[:shape[0], :shape[1]], atol=1e-6)
    whole = np.zeros((14, 10), np.float32)
    _upsample2_into(whole, coarse, band=band)
    assert whole.sum() == pytest.approx(coarse.sum(), rel=1e-6)
