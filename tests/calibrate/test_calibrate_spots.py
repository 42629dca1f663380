"""Spot fits: the erf model, the batched Levenberg–Marquardt fit, subtraction; and the tracks of blinking."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.calibrate.blinking import link, on_time
from decode_mem.calibrate.spots import Candidates, fit_spots, gaussian_model, localize_block, subtract_spots, windows


def test_noise_free_spots_are_fitted_exactly() -> None:
    rng = np.random.default_rng(0)
    n, r = 50, 5
    x, y = rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)
    photons, sigma, bg = rng.uniform(500, 5000, n), rng.uniform(0.7, 2.0, n), rng.uniform(5, 500, n)
    values = gaussian_model(x, y, photons, sigma, r) + bg[:, None, None]
    fits = fit_spots(values, np.ones_like(values, dtype=bool), sigma0=1.2)
    assert fits.ok.all()
    np.testing.assert_allclose(fits.x, x, atol=1e-4)
    np.testing.assert_allclose(fits.y, y, atol=1e-4)
    np.testing.assert_allclose(fits.sigma, sigma, rtol=1e-4)
    np.testing.assert_allclose(fits.photons, photons, rtol=1e-4)
    np.testing.assert_allclose(fits.bg, bg, rtol=1e-4, atol=1e-3)


def test_pixel_integrated_model_sums_to_the_photons() -> None:
    model = gaussian_model(np.array([0.3]), np.array([-0.2]), np.array([1000.0]), np.array([0.8]), radius=6)
    assert model.sum() == pytest.approx(1000.0, rel=1e-6)  # the window holds ±7σ


def test_spots_cut_by_the_frame_edge_use_only_pixels_inside() -> None:
    frames = np.full((1, 20, 20), 50.0)
    true = gaussian_model(np.array([0.4]), np.array([0.1]), np.array([3000.0]), np.array([1.3]), radius=5)[0]
    frames[0, 0:6, 0:6] += true[5:, 5:]  # centre at (row 0.1, col 0.4): most of the spot lies outside
    cands = Candidates(np.array([0]), np.array([0]), np.array([0]), np.array([10.0]))
    values, valid = windows(frames, cands, 5)
    assert valid.sum() == 36
    fits = fit_spots(values, valid, 1.2)
    assert fits.ok[0]
    assert (fits.x[0], fits.y[0]) == pytest.approx((0.4, 0.1), abs=1e-3)
    assert fits.photons[0] == pytest.approx(3000.0, rel=1e-3)
    subtract_spots(frames, cands, fits, 5)
    np.testing.assert_allclose(frames, 50.0, atol=1e-3)


def test_close_spots_are_fitted_one_after_the_other() -> None:
    """Two spots 4 px (3.3σ) apart: fitted at once, each fit would take in the other's light."""
    rng = np.random.default_rng(1)
    h = w = 32
    frame = np.full((1, h, w), 20.0)
    for cx, cy in ((12.2, 15.0), (16.2, 15.4)):
        spot = gaussian_model(np.array([cx % 1]), np.array([cy % 1]), np.array([4000.0]), np.array([1.2]), 6)[0]
        frame[0, int(cy) - 6:int(cy) + 7, int(cx) - 6:int(cx) + 7] += spot
    noisy = rng.poisson(frame).astype(float)
    loc = localize_block(noisy, np.full((h, w), 20.0), sigma=1.2, threshold=5.0, radius=5)
    good = loc.fits.ok
    assert good.sum() == 2
    order = np.argsort(loc.cands.col[good] + loc.fits.x[good])
    np.testing.assert_allclose((loc.cands.col[good] + loc.fits.x[good])[order], [12.2, 16.2], atol=0.2)
    np.testing.assert_allclose((loc.cands.row[good] + loc.fits.y[good])[order], [15.0, 15.4], atol=0.2)
    np.testing.assert_allclose(loc.fits.sigma[good], 1.2, rtol=0.1)
    np.testing.assert_allclose(loc.fits.photons[good], 4000.0, rtol=0.15)
    assert abs(loc.residual.mean() - 20.0) < 0.5  # both spots' light is gone from the residual


def test_tracks_bridge_one_missed_frame_and_respect_the_sampled_frames() -> None:
    # molecule A: frames 0-4 with frame 2 missed; B: frames 3-4 elsewhere; C: frame 9 only, the last sampled
    frame = np.array([0, 1, 3, 4, 3, 4, 9])
    x = np.array([5.0, 5.2, 5.1, 4.9, 20.0, 20.3, 40.0])
    y = np.array([5.0, 5.1, 4.8, 5.0, 20.0, 19.8, 40.0])
    tracks = link(frame, x, y, sampled=np.arange(10), n_frames=100)
    ids = tracks.track
    assert len(set(ids[:4])) == 1 and len(set(ids[4:6])) == 1 and len({ids[0], ids[4], ids[6]}) == 3
    assert sorted(tracks.length) == [1, 2, 5]
    assert tracks.censored[ids[6]] and not tracks.censored[ids[0]]  # frames 10, 11 were not looked at
    assert tracks.interior.tolist() == [False, True, True, False, False, False, False]


def test_on_time_estimate_corrects_for_censoring() -> None:
    """Geometric track lengths of mean 4 cut by sampling windows of 6 frames: the MLE finds the mean."""
    rng = np.random.default_rng(2)
    mean, window = 4.0, 6
    frames, xs = [], []
    for i in range(4000):
        start = rng.integers(0, 600)
        length = rng.geometric(1 / mean)
        for f in range(start, start + length):
            if (f % 10) < window:  # frames 0-5 of every 10 are sampled
                frames.append(f)
                xs.append(10.0 * i)
    frame, x = np.array(frames), np.array(xs)
    sampled = np.array([f for f in range(700) if f % 10 < window])
    tracks = link(frame, x, np.zeros_like(x), sampled, n_frames=700, gap=0)
    naive = tracks.length.mean()
    est = on_time(tracks)
    assert naive < 0.85 * mean  # cut tracks look short
    assert est.frames == pytest.approx(mean, rel=0.08)
    assert est.se < 0.05 * mean
