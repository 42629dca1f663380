"""PSFs: photon conservation, sub-pixel centroid, exactness against a direct evaluation, astigmatism vs z."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import erf

from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.psf import astig_sigma, psf_sigmas, render, render_emitters


def _moments(img: torch.Tensor) -> tuple[float, float, float, float]:
    """Centroid (x, y) and variances (x, y) of an image; pixel integration adds 1/12 px² per axis."""
    img = img.double()
    total = img.sum()
    rows, cols = torch.meshgrid(torch.arange(img.shape[0]), torch.arange(img.shape[1]), indexing="ij")
    cx = float((img * cols).sum() / total)
    cy = float((img * rows).sum() / total)
    vx = float((img * (cols - cx) ** 2).sum() / total) - 1 / 12
    vy = float((img * (rows - cy) ** 2).sum() / total) - 1 / 12
    return cx, cy, vx, vy


@pytest.mark.parametrize("psf", ["gauss2d", "astig3d"])
def test_photons_are_conserved_and_centroid_is_subpixel_exact(psf: str) -> None:
    cfg = SimulationConfig(psf=psf, psf_sigma=1.3, frame_size=(64, 64))
    gen = torch.Generator().manual_seed(1)
    n = 8
    x = 20 + 24 * torch.rand(n, generator=gen)  # far from the border
    y = 20 + 24 * torch.rand(n, generator=gen)
    z = torch.linspace(-700, 700, n) if psf == "astig3d" else torch.zeros(n)
    photons = torch.full((n,), 5000.0)
    canvas = torch.zeros((n, 64, 64))
    render_emitters(cfg, canvas, torch.arange(n), x, y, z, photons)
    for i in range(n):
        total = float(canvas[i].sum())
        assert total == pytest.approx(5000.0, rel=1e-3)  # spec asks 1%; the 4σ patch loses < 1e-4
        cx, cy, _, _ = _moments(canvas[i])
        assert abs(cx - float(x[i])) < 0.01 and abs(cy - float(y[i])) < 0.01


def test_batched_patches_equal_a_direct_full_frame_evaluation() -> None:
    h, w = 20, 24
    x = torch.tensor([3.3, 10.0, 22.8, -1.2])  # the last two are clipped by the border
    y = torch.tensor([4.7, 10.5, 18.9, 5.0])
    sx = torch.tensor([1.0, 1.7, 1.2, 0.9])
    sy = torch.tensor([1.4, 1.1, 0.8, 1.3])
    photons = torch.tensor([1000.0, 2000.0, 3000.0, 4000.0])
    fast = render((1, h, w), torch.zeros(4, dtype=torch.long), x, y, photons, sx, sy, size=15)[0].double().numpy()
    cols, rows = np.arange(w), np.arange(h)
    direct = np.zeros((h, w))
    for xi, yi, sxi, syi, n in zip(x.double().numpy(), y.double().numpy(), sx.double().numpy(), sy.double().numpy(),
                                   photons.double().numpy(), strict=True):
        ex = 0.5 * (erf((cols + 0.5 - xi) / (math.sqrt(2) * sxi)) - erf((cols - 0.5 - xi) / (math.sqrt(2) * sxi)))
        ey = 0.5 * (erf((rows + 0.5 - yi) / (math.sqrt(2) * syi)) - erf((rows - 0.5 - yi) / (math.sqrt(2) * syi)))
        direct += n * ey[:, None] * ex[None, :]
    # float32 erf differences vs float64: ~1e-6 of the 4000 photons
    np.testing.assert_allclose(fast, direct, rtol=0, atol=0.02)


def test_spots_outside_the_canvas_are_dropped_not_wrapped() -> None:
    one = torch.ones(1)
    img = render((2, 10, 10), torch.tensor([0]), torch.tensor([-0.5]), torch.tensor([5.0]), 1000 * one, one, one)
    assert float(img[0].sum()) == pytest.approx(500.0, rel=1e-3)  # half of the spot is left of the frame
    assert float(img[1].sum()) == 0.0
    assert float(img[0, :, -3:].sum()) == 0.0  # nothing wrapped to the right edge
    off = render((1, 10, 10), torch.tensor([0]), torch.tensor([30.0]), torch.tensor([5.0]), 1000 * one, one, one)
    assert float(off.sum()) == 0.0


def test_astigmatic_widths_follow_the_calibration() -> None:
    cfg = SimulationConfig(psf="astig3d", psf_sigma=1.0, frame_size=(64, 64))
    c = cfg.astigmatism.focal_offset[0]
    d = cfg.astigmatism.depth[0]
    z = torch.tensor([c, -c, 0.0, 600.0])
    sx, sy = psf_sigmas(cfg, z)
    wide = math.sqrt(1 + (2 * c / d) ** 2)
    torch.testing.assert_close(sx[:2], torch.tensor([1.0, wide]))  # x in focus at +c
    torch.testing.assert_close(sy[:2], torch.tensor([wide, 1.0]))  # y in focus at -c
    assert float(sx[2]) == pytest.approx(float(sy[2]))  # round at z = 0
    # the rendered spots have those widths (second moments)
    canvas = torch.zeros((4, 64, 64))
    render_emitters(cfg, canvas, torch.arange(4), torch.full((4,), 31.6), torch.full((4,), 32.2), z,
                    torch.full((4,), 1e4))
    for i in range(4):
        _, _, vx, vy = _moments(canvas[i])
        assert math.sqrt(vx) == pytest.approx(float(sx[i]), rel=0.02)
        assert math.sqrt(vy) == pytest.approx(float(sy[i]), rel=0.02)


def test_higher_order_terms_change_the_width() -> None:
    from decode_mem.simulate import AstigmatismCalibration

    calib = AstigmatismCalibration(cubic=(0.1, 0.0), quartic=(0.05, 0.0))
    z = torch.tensor([250.0 + 560.0])  # u = 2 on the x axis
    sx, _ = astig_sigma(z, (1.0, 1.0), calib)
    assert float(sx) == pytest.approx(math.sqrt(1 + 4 + 0.1 * 8 + 0.05 * 16), rel=1e-5)
