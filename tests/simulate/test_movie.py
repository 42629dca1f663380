"""Whole movies: determinism, prefix/block independence, ground truth matches the frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decode_mem.io.camera import Camera
from decode_mem.simulate import MovieSimulator, SimulationConfig, simulate_movie
from decode_mem.simulate.psf import render_emitters

CFG = SimulationConfig(frame_size=(16, 20), density=3.0)


def test_movie_shapes_and_types() -> None:
    adu, gt, bg = simulate_movie(CFG, 12, seed=0)
    assert adu.shape == (12, 16, 20) and adu.dtype == np.uint16
    assert bg.shape == (16, 20) and bg.dtype == np.float32
    assert len(gt) > 0 and gt["frame"].min() >= 0 and gt["frame"].max() <= 11
    assert np.all(np.diff(gt["frame"]) >= 0)
    assert np.all((gt["x"] >= -0.5) & (gt["x"] < 19.5) & (gt["y"] >= -0.5) & (gt["y"] < 15.5))
    np.testing.assert_allclose(gt["bg"], 100.0)


def test_same_seed_same_movie_and_blocks_do_not_matter() -> None:
    a, gta, _ = simulate_movie(CFG, 40, seed=5, block=40)
    b, gtb, _ = simulate_movie(CFG, 40, seed=5, block=3)
    c, _, _ = simulate_movie(CFG, 40, seed=6)
    prefix, gtp, _ = simulate_movie(CFG, 17, seed=5)
    assert np.array_equal(a, b)
    for name in gta.names:
        np.testing.assert_array_equal(gta[name], gtb[name])
    assert not np.array_equal(a, c)
    assert np.array_equal(prefix, a[:17])
    np.testing.assert_array_equal(gtp["x"], gta["x"][gta["frame"] < 17])


@pytest.mark.parametrize("psf", ["gauss2d", "astig3d"])
def test_ground_truth_rows_render_to_the_noise_free_frames(psf: str) -> None:
    cfg = SimulationConfig(frame_size=(16, 20), density=3.0, margin=0.0, psf=psf, bg_mode="smooth")
    sim = MovieSimulator(cfg, seed=2)
    sim.block(0, 5)
    blk = sim.block(5, 13)
    gt = blk.gt
    assert gt["frame"].min() >= 5 and gt["frame"].max() <= 12
    canvas = torch.zeros((8, 16, 20))
    t = lambda c: torch.from_numpy(gt[c])  # noqa: E731
    render_emitters(cfg, canvas, t("frame") - 5, t("x"), t("y"), t("z"), t("photons"))
    torch.testing.assert_close(canvas + sim.bg, blk.expected, rtol=1e-5, atol=1e-2)
    # and the counts are the camera's response to them
    mean_adu = cfg.camera.to_adu(blk.expected)
    assert float((blk.adu - mean_adu).mean()) == pytest.approx(0.0, abs=3.0)


def test_scmos_movie_with_sensor_maps() -> None:
    """Each pixel's counts follow its own offset and gain: the mean over 64 frames of (ADU - the pixel's own
    camera response to the expected photons) is zero within the noise at every pixel, and the maps spread by the
    asked-for 10 %, so that counts made with the camera's scalars are off by several sigma."""
    cfg = SimulationConfig(frame_size=(16, 16), camera=Camera.scmos(), sensor_variation=0.1)
    sim = MovieSimulator(cfg, seed=1)
    maps, camera = sim.sensor, sim.camera
    assert maps is not None
    for name, scalar in (("baseline", camera.baseline), ("e_per_adu", camera.e_per_adu)):
        spread = float((getattr(maps, name) / scalar).std())
        assert spread == pytest.approx(0.1, rel=0.25), (name, spread)  # 256 pixels: the std within ~10 %
    blk = sim.block(0, 64)
    assert blk.adu_uint16.dtype == np.uint16
    mean_adu = camera.qe * blk.expected / maps.e_per_adu + maps.baseline  # this pixel's response, in ADU
    variance = (camera.qe * blk.expected + maps.read_noise**2) / maps.e_per_adu**2 + 1 / 12  # shot, read, rounding
    z = (blk.adu - mean_adu).sum(0) / variance.sum(0).sqrt()  # per pixel: ~ N(0, 1)
    assert float(z.abs().max()) < 5.0 and abs(float(z.mean())) < 0.5, (float(z.abs().max()), float(z.mean()))
    scalars = camera.qe * blk.expected / camera.e_per_adu + camera.baseline  # the maps ignored
    assert float(((blk.adu - scalars).sum(0) / variance.sum(0).sqrt()).abs().max()) > 10.0
