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
    cfg = SimulationConfig(frame_size=(16, 16), camera=Camera.scmos(), sensor_variation=0.1)
    adu, _, _ = simulate_movie(cfg, 4, seed=1)
    assert adu.dtype == np.uint16 and 50 < adu.mean() < 2000
