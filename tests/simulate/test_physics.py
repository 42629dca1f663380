"""Per-movie physics: ranges are drawn per movie and land where they should; fixed configs draw nothing;
cell-like backgrounds, bleaching, camera kinds with maps and the training envelope."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from decode_mem.errors import ConfigError
from decode_mem.simulate import SimulationConfig, simulate_windows
from decode_mem.simulate.emitters import seeded_generator
from decode_mem.simulate.movie import MovieSimulator
from decode_mem.simulate.noise import background, cell_field
from decode_mem.simulate.physics import EMCCD_GAIN, SCMOS_E_PER_ADU, draw_physics

WIDE = SimulationConfig(frame_size=(40, 40), density_range=(0.2, 2.0), pixel_size_range=(65.0, 160.0),
                        psf_sigma_range=(0.7, 1.8), on_time_range=(1.0, 5.0), photons_dist="loguniform",
                        photons_range=(500.0, 20000.0), bg=(5.0, 1000.0), bg_dist="loguniform", bg_mode="mixed",
                        camera_kinds=("emccd", "scmos"), sensor_variation=0.1, maps_known=0.5, margin=6.0)


def test_fixed_physics_draws_nothing_from_the_generator() -> None:
    gen = seeded_generator(0, 1)
    before = gen.get_state().clone()
    physics = draw_physics(SimulationConfig(), 8, gen)
    assert torch.equal(gen.get_state(), before)
    assert torch.all(physics.sigma0 == 1.0) and len(set(physics.cameras)) == 1


def test_ranges_are_drawn_per_movie_inside_their_bounds() -> None:
    p = draw_physics(WIDE, 400, seeded_generator(1, 2))
    assert float(p.sigma0.min()) >= 0.7 and float(p.sigma0.max()) <= 1.8
    assert torch.equal(p.sigma0[:, 0], p.sigma0[:, 1])
    lo = 0.2 * (65 / 1000) ** 2
    hi = 2.0 * (160 / 1000) ** 2
    assert lo <= float(p.density_px.min()) and float(p.density_px.max()) <= hi
    assert float(p.on_time.min()) >= 1.0 and float(p.on_time.max()) <= 5.0
    kinds = [c.kind for c in p.cameras]
    assert 120 < kinds.count("scmos") < 280  # both kinds, about half each
    for c in p.cameras:
        if c.kind == "emccd":
            assert EMCCD_GAIN[0] <= c.em_gain <= EMCCD_GAIN[1]
        else:
            assert SCMOS_E_PER_ADU[0] <= c.e_per_adu <= SCMOS_E_PER_ADU[1] and c.em_gain == 1
    assert 0.35 < float(p.maps_known.float().mean()) < 0.65


def test_density_dist_sets_how_the_density_range_is_drawn() -> None:
    # on (0.05, 2): log-uniform puts about 19 % of the movies above 1/µm², uniform about 49 %
    fixed_pixel = replace(WIDE, density_range=(0.05, 2.0), pixel_size_range=(100.0, 100.0))
    share = {}
    for dist in ("loguniform", "uniform"):
        p = draw_physics(replace(fixed_pixel, density_dist=dist), 2000, seeded_generator(7, 8))
        density = p.density_px / 0.1**2
        assert float(density.min()) >= 0.05 and float(density.max()) <= 2.0
        share[dist] = float((density > 1.0).double().mean())
    assert 0.15 < share["loguniform"] < 0.23 and 0.45 < share["uniform"] < 0.53


def test_windows_hold_the_drawn_density_and_psf_width() -> None:
    batch = simulate_windows(WIDE, 256, seeded_generator(3, 4))
    counts = batch.mask.sum(1).double()
    expected = batch.physics.density_px * 40 * 40
    # Poisson counts: the total is within 5 standard deviations of its expectation
    assert abs(float(counts.sum() - expected.sum())) < 5 * math.sqrt(float(expected.sum()))
    # a single bright emitter is rendered with its movie's σ0 × its own width: check by second moments
    cfg = SimulationConfig(frame_size=(31, 31), psf_sigma_range=(1.5, 1.5), psf_sigma_jitter=0.2, margin=0.0)
    from decode_mem.simulate.psf import render_emitters
    width = torch.tensor([0.8, 1.25])
    canvas = torch.zeros(2, 31, 31)
    render_emitters(cfg, canvas, torch.tensor([0, 1]), torch.tensor([15.0, 15.0]), torch.tensor([15.0, 15.0]),
                    torch.zeros(2), torch.tensor([1e4, 1e4]), torch.tensor([[1.5, 1.5]] * 2), width)
    coords = torch.arange(31.0) - 15.0
    var_x = (canvas.sum(1) * coords**2).sum(1) / canvas.sum((1, 2))
    expected_var = (1.5 * width) ** 2 + 1 / 12  # pixel integration adds the uniform pixel's variance
    torch.testing.assert_close(var_x, expected_var, rtol=0.02, atol=0.0)


def test_training_samples_report_their_read_noise_variance() -> None:
    batch = simulate_windows(WIDE, 64, seeded_generator(5, 6))
    for i, cam in enumerate(batch.physics.cameras):
        rv = batch.read_var[i]
        known_maps = cam.kind == "scmos" and bool(batch.physics.maps_known[i])
        if known_maps:
            assert float(rv.std()) > 0  # the per-pixel map
        else:
            torch.testing.assert_close(rv, torch.full_like(rv, cam.read_variance_photons))


def test_sensor_variation_range_draws_a_spread_per_window_down_to_a_uniform_sensor() -> None:
    # no emitters, a uniform background: what varies between a window's pixels beyond shot and read noise is
    # the sensor's fixed pattern, which grows with the window's drawn spread (converted with the scalars)
    cfg = SimulationConfig(frame_size=(40, 40), density=0.0, bg=(100.0, 100.0), camera="scmos",
                           sensor_variation_range=(0.0, 0.3), maps_known=0.0)
    batch = simulate_windows(cfg, 64, seeded_generator(11, 12))
    spread = batch.physics.sensor_variation
    assert float(spread.min()) >= 0.0 and float(spread.max()) <= 0.3
    assert float(spread.min()) < 0.03 and float(spread.max()) > 0.27  # nearly uniform sensors and varied ones
    pixel_var = batch.adu.flatten(1).var(1).double()  # shot + read noise, plus the fixed pattern
    ranks = torch.stack([spread.argsort().argsort(), pixel_var.argsort().argsort()]).double()
    assert float(torch.corrcoef(ranks)[0, 1]) > 0.95  # rank correlation: the pattern grows with the spread
    known = simulate_windows(replace(cfg, maps_known=1.0), 64, seeded_generator(11, 12))
    for s, rv in zip(known.physics.sensor_variation.tolist(), known.read_var, strict=True):
        assert (float(rv.std()) > 0) == (s > 0)  # converted with the window's own maps, none at spread 0


def test_cell_background_has_median_level_and_several_fold_contrast() -> None:
    cfg = SimulationConfig(frame_size=(128, 128), bg=(200.0, 200.0), bg_mode="cell", bg_smooth_scale=32.0)
    gen = seeded_generator(7, 8)

    def contrast(config: SimulationConfig) -> float:
        ratios = []
        for _ in range(20):
            f = cell_field(config, gen)
            assert float(f.min()) > 0
            assert float(f.median()) == pytest.approx(1.0, abs=1e-6)
            ratios.append(float(torch.quantile(f.flatten(), 0.95) / torch.quantile(f.flatten(), 0.05)))
        return float(np.median(ratios))

    assert contrast(cfg) > 1.8  # the 95th percentile pixel about twice the 5th: a cell on glass
    assert contrast(replace(cfg, bg_smooth_amplitude=1.0)) > 2.5  # brighter nuclei: several-fold
    fields = background(cfg, 3, gen)
    torch.testing.assert_close(fields.flatten(1).median(1).values, torch.full((3,), 200.0), rtol=1e-5, atol=0)


def test_mixed_backgrounds_include_uniform_fields_and_loguniform_levels() -> None:
    cfg = SimulationConfig(frame_size=(24, 24), bg=(5.0, 1000.0), bg_dist="loguniform", bg_mode="mixed")
    fields = background(cfg, 400, seeded_generator(9, 10))
    flat = fields.flatten(1)
    uniform = (flat.max(1).values - flat.min(1).values) < 1e-3 * flat.max(1).values
    assert 60 < int(uniform.sum()) < 140  # a quarter of the fields
    levels = flat[uniform, 0]
    assert float(levels.min()) >= 5.0 * 0.999 and float(levels.max()) <= 1000.0 * 1.001
    # log-uniform: about as many levels below the geometric middle (~70) as above
    assert 0.3 < float((levels < math.sqrt(5000.0)).float().mean()) < 0.7


def test_movie_background_bleaches_and_cameras_and_maps_are_drawn() -> None:
    cfg = SimulationConfig(frame_size=(16, 16), density=0.0, bg=(100.0, 100.0), bg_bleach=0.5,
                           camera_kinds=("scmos",), sensor_variation=0.1)
    sim = MovieSimulator(cfg, seed=3)
    assert sim.camera.kind == "scmos" and sim.sensor is not None
    first, late = sim.block(0, 2), sim.block(2000, 2002)
    # half of the background is lost per 1000 frames: after 2000 frames a quarter is left
    ratio = float(late.expected.mean() / first.expected.mean())
    assert ratio == pytest.approx(0.25, rel=1e-3)


def test_envelope_lists_the_ranges_a_config_covers() -> None:
    env = WIDE.envelope()
    assert env["psf_sigma_px"] == [0.7, 1.8] and env["pixel_size_nm"] == [65.0, 160.0]
    assert env["photons"] == [500.0, 20000.0] and env["background_photons"] == [5.0, 1000.0]
    assert env["camera_kinds"] == ["emccd", "scmos"] and env["background_kinds"] == ["uniform", "smooth", "cell"]
    fixed = SimulationConfig().envelope()
    assert fixed["psf_sigma_px"] == [1.0, 1.0] and fixed["camera_kinds"] == ["emccd"]
    assert fixed["photons"] == [2000.0, 8000.0]  # mean ± 2 std


@pytest.mark.parametrize(("params", "key"), [
    ({"psf_sigma_range": (2.0, 1.0)}, "psf_sigma_range"),
    ({"density_range": (0.0, 1.0)}, "density_range"),
    ({"camera_kinds": ("ccd",)}, "camera_kinds"),
    ({"bg_dist": "normal"}, "bg_dist"),
    ({"density_dist": "normal"}, "density_dist"),
    ({"bg": (0.0, 10.0), "bg_dist": "loguniform"}, "bg"),
    ({"maps_known": 1.5}, "maps_known"),
    ({"sensor_variation_range": (0.2, 0.1)}, "sensor_variation_range"),
    ({"sensor_variation_range": (0.0, 1.0)}, "sensor_variation_range"),
    ({"bg_bleach": 1.0}, "bg_bleach"),
])
def test_bad_ranges_name_the_key(params: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        replace(SimulationConfig(), **params)
