"""Camera noise matches theory (mean, variance, EM excess noise); backgrounds."""

from __future__ import annotations

import pytest
import torch

from decode_mem.io.camera import Camera
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.noise import background, camera_adu, emccd_adu, scmos_adu, sensor_maps

N_PIX = 200_000


@pytest.mark.parametrize("photons", [2.0, 50.0])
def test_emccd_mean_and_variance_with_excess_noise(photons: float) -> None:
    cam = Camera.emccd()
    gen = torch.Generator().manual_seed(0)
    adu = emccd_adu(torch.full((N_PIX,), photons), cam, gen).double()
    mean = cam.baseline + photons * cam.qe * cam.em_gain / cam.e_per_adu
    var = (2 * cam.em_gain**2 * cam.qe * photons + cam.read_noise**2) / cam.e_per_adu**2 + 1 / 12
    assert float(adu.mean()) == pytest.approx(mean, abs=4 * (var / N_PIX) ** 0.5)
    assert float(adu.var()) == pytest.approx(var, rel=0.03)
    assert float(cam.to_photons(adu).mean()) == pytest.approx(photons, rel=0.02)
    # the excess-noise factor: the variance of the amplified signal is ~2x the Poisson-only variance
    poisson_only = cam.em_gain**2 * cam.qe * photons / cam.e_per_adu**2
    read = cam.read_noise**2 / cam.e_per_adu**2 + 1 / 12
    assert float(adu.var() - read) / poisson_only == pytest.approx(2.0, rel=0.04)


def test_emccd_dark_frames_are_baseline_plus_read_noise() -> None:
    cam = Camera.emccd()
    adu = emccd_adu(torch.zeros(N_PIX), cam, torch.Generator().manual_seed(1)).double()
    assert float(adu.mean()) == pytest.approx(cam.baseline, abs=0.05)
    assert float(adu.var()) == pytest.approx((cam.read_noise / cam.e_per_adu) ** 2 + 1 / 12, rel=0.03)


def test_scmos_mean_and_variance() -> None:
    cam = Camera.scmos()
    photons = 20.0
    adu = scmos_adu(torch.full((N_PIX,), photons), cam, torch.Generator().manual_seed(2)).double()
    mean = cam.baseline + photons * cam.qe / cam.e_per_adu
    var = (cam.qe * photons + cam.read_noise**2) / cam.e_per_adu**2 + 1 / 12
    assert float(adu.mean()) == pytest.approx(mean, abs=4 * (var / N_PIX) ** 0.5)
    assert float(adu.var()) == pytest.approx(var, rel=0.03)
    assert camera_adu(torch.full((4,), 20.0), cam, torch.Generator().manual_seed(2)).shape == (4,)


def test_scmos_per_pixel_maps_are_applied() -> None:
    cam = Camera.scmos()
    gen = torch.Generator().manual_seed(3)
    maps = sensor_maps(cam, (2, 3), 0.2, gen)
    assert maps.baseline.shape == (2, 3) and not torch.allclose(maps.baseline, torch.full((2, 3), cam.baseline))
    adu = scmos_adu(torch.full((20_000, 2, 3), 50.0), cam, gen, maps).double()
    expected = maps.baseline + 50.0 * cam.qe / maps.e_per_adu
    torch.testing.assert_close(adu.mean(0), expected.double(), atol=0.5, rtol=0.0)


def test_counts_are_integers_clipped_to_uint16() -> None:
    adu = emccd_adu(torch.tensor([0.0, 10.0, 1e7]), Camera.emccd(), torch.Generator().manual_seed(4))
    assert torch.equal(adu, adu.round())
    assert float(adu.min()) >= 0 and float(adu[2]) == 65535.0


def test_uniform_background_levels_lie_in_the_range() -> None:
    cfg = SimulationConfig(frame_size=(8, 12), bg=(90, 150))
    bg = background(cfg, 500, torch.Generator().manual_seed(5))
    assert bg.shape == (500, 8, 12)
    assert torch.all(bg == bg[:, :1, :1])  # flat per sample
    assert float(bg.min()) >= 90 and float(bg.max()) <= 150 and float(bg.std()) > 10


def test_smooth_background_is_nonnegative_and_low_frequency() -> None:
    cfg = SimulationConfig(frame_size=(64, 64), bg=100, bg_mode="smooth", bg_smooth_amplitude=1.0,
                           bg_smooth_scale=16)
    bg = background(cfg, 20, torch.Generator().manual_seed(6))
    assert float(bg.min()) >= 0 and float(bg.max()) <= 200 + 1e-3
    assert float(bg.std(dim=(1, 2)).mean()) > 5  # it does vary
    step = (bg[:, :, 1:] - bg[:, :, :-1]).abs().max()
    assert float(step) < 0.2 * 100  # ... slowly: no pixel-to-pixel jumps
