"""Rendering by localization precision (issue 72, item 3): each localization a normalized Gaussian of its own σ,
a floor and a fallback, the render pixel and the zoom square chosen from the data, contrast from the non-empty
pixels, the same in ``render``, the report's panel and napari, streamed in bounded memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tifffile

from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.render import render
from decode_mem.render.__main__ import main

RP = 10.0  # render pixel, nm


def locs(x, y, pixel_size: float = 100.0, sigma_nm=None, sigma_y_nm=None, frame=None) -> EmitterTable:
    """Localizations at ``x``, ``y`` camera px, precisions in nm (None: a table without them)."""
    x = np.atleast_1d(np.asarray(x, np.float64))
    extra = {}
    if sigma_nm is not None:
        sx = np.broadcast_to(np.asarray(sigma_nm, np.float64), x.shape) / pixel_size
        sy = sx if sigma_y_nm is None else np.broadcast_to(np.asarray(sigma_y_nm, np.float64), x.shape) / pixel_size
        extra = {"sigma_x": sx, "sigma_y": sy}
    frame = np.zeros(len(x), np.int64) if frame is None else frame
    return EmitterTable.from_arrays(frame=frame, x=x, y=np.atleast_1d(np.asarray(y, np.float64)),
                                    photons=np.full(len(x), 1000.0), **extra)


def moments(image: np.ndarray) -> tuple[float, float, float, float, float]:
    """Total, centre (row, col) and standard deviation (rows, cols) in render pixels, pixel centres at i + 0.5."""
    rows, cols = np.indices(image.shape) + 0.5
    total = float(image.sum())
    my, mx = (rows * image).sum() / total, (cols * image).sum() / total
    sy = np.sqrt(((rows - my) ** 2 * image).sum() / total)
    sx = np.sqrt(((cols - mx) ** 2 * image).sum() / total)
    return total, float(my), float(mx), float(sy), float(sx)


@pytest.mark.parametrize(("sigma_x", "sigma_y"), [(17.0, 17.0), (25.0, 12.0), (60.0, 60.0), (130.0, 45.0)])
def test_each_localization_is_a_normalized_gaussian_of_its_own_precision(sigma_x, sigma_y) -> None:
    """Its sum is 1, its peak in the pixel that holds it, its centre at it and its width the σ asked in x and in y
    (the wide ones drawn on coarser grids and interpolated: the same moments)."""
    x, y = 20.13, 15.71  # camera px of 100 nm: (x + 0.5) * 10 render px from the corner
    image = render(locs([x], [y], sigma_nm=sigma_x, sigma_y_nm=sigma_y), shape_px=(32, 40), pixel_size=100.0,
                   render_pixel=RP, blur="precision")
    total, my, mx, sy, sx = moments(image)
    assert total == pytest.approx(1.0, abs=1e-5)
    peak = np.unravel_index(int(np.argmax(image)), image.shape)
    assert peak == (int((y + 0.5) * 10), int((x + 0.5) * 10))
    assert (mx, my) == (pytest.approx((x + 0.5) * 10, abs=0.02), pytest.approx((y + 0.5) * 10, abs=0.02))
    assert sx * RP == pytest.approx(sigma_x, rel=0.03) and sy * RP == pytest.approx(sigma_y, rel=0.03)


def test_a_tiny_precision_is_floored_and_a_missing_one_falls_back() -> None:
    """σ of 0.5 nm on 10 nm pixels is drawn one pixel wide, not as a single bright pixel; a table without precisions,
    and a row whose precision is NaN, take the fallback (20 nm) instead of failing."""
    from decode_mem.render.image import FALLBACK_SIGMA, FLOOR_PX

    tiny = render(locs([10.0], [10.0], sigma_nm=0.5), shape_px=(20, 20), pixel_size=100.0, render_pixel=RP,
                  blur="precision")
    assert moments(tiny)[4] == pytest.approx(FLOOR_PX, rel=0.03)
    assert tiny.max() < 0.2 * tiny.sum()  # the brightest pixel holds a sixth, not all of it
    for table in (locs([10.0], [10.0]), locs([10.0], [10.0], sigma_nm=np.nan)):
        image = render(table, shape_px=(20, 20), pixel_size=100.0, render_pixel=RP, blur="precision")
        assert moments(image)[4] * RP == pytest.approx(FALLBACK_SIGMA, rel=0.03)


def test_the_total_is_the_localizations_inside_and_the_split_into_tables_does_not_matter() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    t = locs(rng.uniform(2, 45, n), rng.uniform(2, 29, n), sigma_nm=rng.lognormal(np.log(20), 0.5, n))
    whole = render(t, shape_px=(32, 48), pixel_size=100.0, render_pixel=RP, blur="precision")
    parts = render((t.select(slice(i, i + 700)) for i in range(0, n, 700)), shape_px=(32, 48), pixel_size=100.0,
                   render_pixel=RP, blur="precision", chunk_rows=300)
    assert whole.sum() == pytest.approx(n, rel=1e-4)  # none within 1.5 px of the border: nothing spills out
    np.testing.assert_allclose(parts, whole, rtol=1e-4, atol=1e-6)


def test_the_render_pixel_follows_the_precision_and_stays_a_sensible_size() -> None:
    """About half the median precision (rounded to two digits), from the first localizations; a field too large for
    that pixel at MAX_SIDE pixels gets the finest pixel that fits."""
    from decode_mem.render.auto import MAX_SIDE
    from decode_mem.render.image import Rendering

    rng = np.random.default_rng(1)
    for median, expected in ((8.0, 4.0), (20.0, 10.0), (44.0, 22.0)):
        rendering = Rendering(shape_px=(64, 64), pixel_size=100.0)
        for _ in range(3):
            rendering.add(locs(rng.uniform(0, 63, 5000), rng.uniform(0, 63, 5000),
                               sigma_nm=median * rng.lognormal(0, 0.3, 5000)))
        image = rendering.image()
        assert rendering.render_pixel == pytest.approx(expected, rel=0.06)
        assert image.shape == (round(6400 / rendering.render_pixel),) * 2 and rendering.n == 15000
    big = Rendering(shape_px=(2048, 1024), pixel_size=100.0)  # 205 x 102 µm: 10 nm pixels would be 20480 wide
    big.add(locs(rng.uniform(0, 1000, 100), rng.uniform(0, 2000, 100), sigma_nm=20.0))
    assert max(big.image().shape) == MAX_SIDE and big.render_pixel == 50.0


def test_the_zoom_square_holds_the_densest_cluster(tmp_path: Path) -> None:
    """A cluster in a sparse 41 µm field: the report's figure gets a zoom panel over it, boxed in the overview, and
    render writes the same square as <out>_zoom.png."""
    from matplotlib.image import imread

    from decode_mem.render.image import render_file
    from decode_mem.render.widefield import side_by_side_figure

    rng = np.random.default_rng(2)
    centre = np.array([70.3, 180.6])  # camera px (x, y) of 160 nm: 11.3 µm, 29.0 µm from the corner
    background = locs(rng.uniform(0, 255, 1200), rng.uniform(0, 255, 1200), pixel_size=160.0, sigma_nm=15.0)
    cluster = locs(rng.normal(centre[0], 0.6, 300), rng.normal(centre[1], 0.6, 300), pixel_size=160.0,
                   sigma_nm=15.0)
    table = EmitterTable.concat([background, cluster])
    write_localizations(table, tmp_path / "l.hdf5", pixel_size=160.0, width=256, height=256)
    done = render_file(tmp_path / "l.hdf5", tmp_path / "l.png")
    assert done.zoom == tmp_path / "l_zoom.png"
    zoomed = imread(done.zoom)  # ~200 render pixels, each shown as whole PNG pixels: room for the legend
    assert zoomed.shape[0] == zoomed.shape[1] >= 600 and (zoomed[-80:, :150, :3] > 0.95).all(axis=2).sum() > 50
    centre_um = (centre + 0.5) * 0.160
    fig = side_by_side_figure(None, done.image, pixel_size=160.0, render_pixel=done.render_pixel, zoom="auto")
    zoom_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("super-resolution, zoom"))
    left, right, bottom, top = zoom_ax.get_images()[0].get_extent()
    assert left < centre_um[0] < right and top < centre_um[1] < bottom  # y grows downwards
    assert right - left < 0.2 * 41.0


def test_a_sparse_field_is_not_black_in_the_report_panel(tmp_path: Path) -> None:
    """The issue's sCMOS movie: ~1 500 localizations over 41 x 41 µm. The report's super-resolution panel (made as
    a run makes it: ReportImage filled block by block, then the figure) lights at least a few pixels per
    localization; drawn as one-pixel counts in an overview of 1024 binned pixels it was black."""
    from decode_mem.infer.batch_report import ReportImage, _images
    from decode_mem.render.widefield import side_by_side_figure

    rng = np.random.default_rng(3)
    n_sites = 500
    sites = rng.uniform(0, 255, (n_sites, 2))
    site = rng.integers(0, n_sites, 1500)  # a site blinks about three times: localizations near one another
    table = locs(sites[site, 0] + rng.normal(0, 0.06, 1500), sites[site, 1] + rng.normal(0, 0.06, 1500),
                 pixel_size=160.0, sigma_nm=rng.uniform(4, 15, 1500), frame=np.sort(rng.integers(0, 20, 1500)))
    tifffile.imwrite(tmp_path / "movie.tif", rng.integers(90, 110, (4, 256, 256), dtype=np.uint16),
                     photometric="minisblack")
    image = ReportImage((256, 256), 160.0)
    for start in range(0, len(table), 200):  # block by block, as the run writes them
        image.add(table.select(slice(start, start + 200)))
    images = _images(SimpleNamespace(stack=str(tmp_path / "movie.tif"), extra={}), image, 160.0)
    fig = side_by_side_figure(images.widefield, images.superres, pixel_size=images.pixel_size,
                              render_pixel=images.render_pixel, n_frames=images.n_frames, n_locs=images.n_locs,
                              zoom=images.zoom)  # what report.figures.images_png draws, at the report's dpi
    fig.set_dpi(110)
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    ax = next(a for a in fig.axes if a.get_title(loc="left").startswith("super-resolution ("))
    box = ax.get_window_extent()
    h = rgba.shape[0]
    panel = rgba[int(h - box.y1) + 2:int(h - box.y0) - 2, int(box.x0) + 2:int(box.x1) - 2, :3]
    lit = int((panel.max(axis=2) > 0.35 * 255).sum())
    assert lit > 2 * n_sites, f"{lit} bright pixels in the panel for {n_sites} sites"
    assert images.zoom is not None and sum(a.get_title(loc="left").startswith("super-resolution, zoom")
                                           for a in fig.axes) == 1


def test_contrast_comes_from_the_non_empty_pixels() -> None:
    """Not the maximum (one spot repeated 1000 times would make every other black) and not all pixels (a sparse
    image's percentile is 0)."""
    from decode_mem.render.auto import display_limit

    image = np.zeros((1000, 1000), np.float32)
    image[::20, ::20] = 1.0  # 2 500 single localizations on 0.25 % of the pixels
    image[500, 500] = 1000.0
    assert display_limit(image) == 1.0
    assert np.percentile(image, 99.5) == 0.0 and image.max() == 1000.0  # what the other two would give
    assert display_limit(np.zeros((5, 5))) == 1.0


def test_rendering_streams_in_memory_flat_in_the_number_of_rows() -> None:
    """Tables from a generator, the render pixel chosen from the first rows: the peak of traced allocations does not
    grow with the rows (4x more rows: within 2 MiB), and the rows kept for the choice are let go once it is made."""
    from decode_mem.render.image import Rendering

    def peak(n_tables: int) -> tuple[float, Rendering]:
        rng = np.random.default_rng(4)
        tracemalloc.start()
        rendering = Rendering(shape_px=(128, 128), pixel_size=100.0, sample_rows=1 << 14, chunk_rows=1 << 13)
        for _ in range(n_tables):
            rendering.add(locs(rng.uniform(0, 127, 1 << 14), rng.uniform(0, 127, 1 << 14),
                               sigma_nm=rng.uniform(15, 25, 1 << 14)))
            assert rendering.render_pixel is not None  # chosen after the first table: nothing kept waiting
        image = rendering.image(consume=True)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert image.sum() == pytest.approx(n_tables << 14, rel=0.01)
        return top / 2**20, rendering

    small, _ = peak(4)
    large, _ = peak(16)
    assert large < small + 2.0, f"peak {small:.1f} MiB for 4 tables, {large:.1f} MiB for 16"


def test_cli_chooses_the_pixel_writes_the_zoom_and_checks_zoom_first(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(5)
    t = locs(rng.uniform(0, 255, 3000), rng.uniform(0, 255, 3000), sigma_nm=rng.uniform(30, 50, 3000))
    write_localizations(t, tmp_path / "l.parquet", pixel_size=100.0, width=256, height=256)
    assert main([str(tmp_path / "l.parquet"), "--out", str(tmp_path / "a.png")]) == 0
    out = capsys.readouterr().out
    assert "of 20 nm (from the precision)" in out and "a_zoom.png" in out and (tmp_path / "a_zoom.png").is_file()
    assert main([str(tmp_path / "l.parquet"), "--out", str(tmp_path / "b.tif"), "--pixel", "25", "--quiet"]) == 0
    assert tifffile.imread(tmp_path / "b.tif").shape == (1024, 1024) and not (tmp_path / "b_zoom.png").exists()
    assert main([str(tmp_path / "l.parquet"), "--out", str(tmp_path / "c.png"), "--zoom", "none", "--quiet"]) == 0
    assert not (tmp_path / "c_zoom.png").exists()
    assert main([str(tmp_path / "l.parquet"), "--out", str(tmp_path / "d.png"), "--zoom", "-2"]) == 2
    assert "--zoom -2" in capsys.readouterr().err and not (tmp_path / "d.png").exists()


def test_napari_shows_the_same_precision_rendering_on_the_chosen_pixel(tmp_path: Path) -> None:
    from decode_mem.napari.layers import open_localizations
    from decode_mem.render.auto import display_limit
    from decode_mem.render.image import render_file

    rng = np.random.default_rng(6)
    t = locs(rng.uniform(0, 47, 400), rng.uniform(0, 31, 400), pixel_size=110.0, sigma_nm=rng.uniform(35, 45, 400))
    write_localizations(t, tmp_path / "l.hdf5", pixel_size=110.0, width=48, height=32)
    (image, kw, _), _ = open_localizations(tmp_path / "l.hdf5").layers
    done = render_file(tmp_path / "l.hdf5", tmp_path / "l.tif")
    assert kw["scale"] == (done.render_pixel,) * 2 and done.render_pixel == 20.0  # half the median 40 nm
    np.testing.assert_array_equal(image, done.image)
    assert kw["contrast_limits"] == (0.0, display_limit(image))


def test_the_pipelines_render_step_draws_by_precision_by_default() -> None:
    from decode_mem.errors import ConfigError
    from decode_mem.pipeline.config import RenderStep

    step = RenderStep()
    assert (step.blur, step.pixel, step.sigma, step.zoom) == ("precision", None, None, "auto")
    for bad in ({"zoom": "wide"}, {"pixel": 0}, {"sigma": -1.0}):
        with pytest.raises(ConfigError, match="render"):
            RenderStep(**bad)


def test_a_given_pixel_size_keeps_the_recorded_field_in_nm(tmp_path):
    """infer's CSV records its 100 nm camera pixel and 32 x 48 px frame; a user who renders it with another pixel size
    gets the same field in nm (not 32 x 48 of their pixels), and a PNG whose legend grows with the image."""
    import json

    from decode_mem.io.localizations import write_localizations
    from decode_mem.io.table import EmitterTable
    from decode_mem.render.image import file_render_settings

    t = EmitterTable({"frame": np.zeros(3, np.int64), "x": np.array([1.0, 20.0, 47.0]), "z": np.zeros(3),
                      "y": np.array([1.0, 10.0, 31.0]), "photons": np.ones(3), "bg": np.ones(3),
                      "prob": np.ones(3)})
    csv = tmp_path / "movie.csv"
    write_localizations(t, csv, pixel_size=100.0)
    (tmp_path / "movie.json").write_text(json.dumps({"camera": {"pixel_size": 100.0}, "shape": [1, 32, 48]}))
    assert file_render_settings(csv).shape == (32, 48)
    assert file_render_settings(csv, pixel_size=50.0).shape == (64, 96)  # the same 3.2 x 4.8 µm


def test_the_legend_of_a_large_png_grows_with_it():
    from decode_mem.render.image import _legend_rgba, legend_scale

    assert legend_scale((800, 900)) == 1.0 and legend_scale((4000, 4100)) == 4.0
    small, large = (_legend_rgba(50, "2 µm", 3.0, "magma", "locs", scale=k) for k in (1.0, 4.0))
    assert large.shape[0] == 4 * small.shape[0]
    # the scale bar keeps its length in image pixels: 50 px of white at both sizes
    rows = [np.flatnonzero((tile[..., :3] > 250).all(axis=-1).any(axis=0)) for tile in (small, large)]
    assert all(len(r) for r in rows)
