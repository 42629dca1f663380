"""Training windows simulated in vectorised blocks have the distribution of the per-window generator they replace.

The reference is the simulator at ba2ec79: one ``simulate_windows`` call per window, each from its own generator,
with the per-window camera loop below (``camera_adu``/``sensor_maps``, which movies still use unchanged). The
backgrounds and physics of one window are drawn exactly as before (checked against ba2ec79 when they were
batched), so the reference differs from the new path only in what was batched.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from scipy.stats import ks_2samp

from decode_mem.simulate import SimulationConfig, simulate_windows
from decode_mem.simulate import dataset as dataset_module
from decode_mem.simulate.emitters import seeded_generator
from decode_mem.simulate.noise import camera_adu, sensor_maps

# the shipped generalist's training physics (pipelines/train_generalist_2d.yaml): every per-window branch
GENERALIST = SimulationConfig(frame_size=(40, 40), density_range=(0.05, 2.0), pixel_size_range=(65.0, 160.0),
                              photons_dist="loguniform", photons_range=(400.0, 25000.0), on_time_range=(1.0, 5.0),
                              bg=(3.0, 1500.0), bg_dist="loguniform", bg_mode="mixed", bg_smooth_scale=16.0,
                              psf_sigma_range=(0.6, 2.0), psf_sigma_jitter=0.05, margin=6.0,
                              camera_kinds=("emccd", "scmos"), sensor_variation=0.1, maps_known=0.5)
FIXED = SimulationConfig(frame_size=(32, 32), density=1.5, bg=(80.0, 80.0))  # one EMCCD, uniform background


def per_window_noise(config, physics, expected, generator):
    """``dataset._camera_noise`` at ba2ec79: one camera call per window."""
    b, _, h, w = expected.shape
    camera = physics.cameras[0]
    with_maps = bool((physics.sensor_variation > 0).any()) and any(c.kind == "scmos" for c in physics.cameras)
    if not with_maps and all(c == camera for c in physics.cameras):
        adu = camera_adu(expected, camera, generator)
        return adu, camera.to_photons(adu).float(), torch.full((b, h, w), camera.read_variance_photons)
    adu, frames, read_var = torch.empty_like(expected), torch.empty_like(expected), torch.empty((b, h, w))
    for i, (cam, spread) in enumerate(zip(physics.cameras, physics.sensor_variation.tolist(), strict=True)):
        maps = sensor_maps(cam, (h, w), spread, generator) if cam.kind == "scmos" and spread > 0 else None
        adu[i] = camera_adu(expected[i], cam, generator, maps)
        known = maps if bool(physics.maps_known[i]) else None
        frames[i] = cam.to_photons(adu[i], known)
        read_var[i] = cam.read_variance(known) if known is not None else cam.read_variance_photons
    return adu, frames, read_var


def reference_windows(config: SimulationConfig, n: int, monkeypatch) -> list:
    with monkeypatch.context() as m:
        m.setattr(dataset_module, "_camera_noise", per_window_noise)
        return [simulate_windows(config, 1, seeded_generator(1, i)) for i in range(n)]


def batched_windows(config: SimulationConfig, n: int, block: int = 64) -> list:
    return [simulate_windows(config, block, seeded_generator(2, j)) for j in range(n // block)]


def summaries(windows: list) -> dict[str, torch.Tensor]:
    """Per-window statistics (independent between windows, so two-sample tests apply) and per-emitter photons."""
    cat = {name: torch.cat([getattr(w, name) for w in windows]) for name in ("frames", "adu", "bg", "read_var",
                                                                              "em", "mask")}
    frames = cat["frames"].flatten(1).double()
    return {"emitters": cat["mask"].sum(1).double(), "photons": cat["em"][..., 3][cat["mask"]].double(),
            "bg_mean": cat["bg"].flatten(1).mean(1).double(), "bg_contrast": _contrast(cat["bg"]),
            "frame_mean": frames.mean(1), "frame_std": frames.std(1),
            "frame_p99": frames.quantile(0.99, dim=1), "adu_mean": cat["adu"].flatten(1).double().mean(1),
            "read_var": cat["read_var"].flatten(1).double().mean(1)}


def _contrast(bg: torch.Tensor) -> torch.Tensor:
    flat = bg.flatten(1).double()
    return flat.quantile(0.95, dim=1) / flat.quantile(0.05, dim=1)


@pytest.mark.parametrize("config", [GENERALIST, FIXED], ids=["generalist", "fixed"])
def test_blocks_have_the_distribution_of_the_per_window_generator(config: SimulationConfig, monkeypatch) -> None:
    n = 256
    old, new = summaries(reference_windows(config, n, monkeypatch)), summaries(batched_windows(config, n))
    assert len(new["emitters"]) == n
    for name in old:
        if config is FIXED and name in ("bg_mean", "bg_contrast", "read_var"):  # constants: equal exactly
            torch.testing.assert_close(new[name], old[name][:len(new[name])], rtol=1e-6, atol=0)
            continue
        p = ks_2samp(old[name].numpy(), new[name].numpy()).pvalue
        assert p > 1e-3, f"{name}: two-sample KS p = {p:.2g} (means {old[name].mean():.4g} vs {new[name].mean():.4g})"
    # and the means agree within 4 standard errors (the KS test is weak in the tails)
    for name in ("emitters", "photons", "frame_mean", "frame_std"):
        a, b = old[name], new[name]
        se = math.sqrt(float(a.var()) / len(a) + float(b.var()) / len(b))
        assert abs(float(a.mean() - b.mean())) < 4 * se + 1e-9, name


def test_fixed_physics_pixel_values_match_the_per_window_generator(monkeypatch) -> None:
    # one camera, one background level: the pooled pixel values of many windows, quantile by quantile
    old = torch.cat([w.frames.flatten() for w in reference_windows(FIXED, 128, monkeypatch)])
    new = torch.cat([w.frames.flatten() for w in batched_windows(FIXED, 128)])
    q = torch.tensor([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99])
    qo, qn = torch.quantile(old[::7], q), torch.quantile(new[::7], q)
    assert float((qo - qn).abs().max()) < 0.01 * float(qo[-1] - qo[0]), (qo, qn)


def test_each_window_in_a_block_gets_its_own_camera(monkeypatch) -> None:
    # counts are the window's own camera applied to its expected photons: the mean count matches that camera's
    # gain and baseline, and windows converted without maps are converted with exactly that camera's scalars
    batch = simulate_windows(replace(GENERALIST, bg=(200.0, 200.0)), 64, seeded_generator(3, 4))
    for i, cam in enumerate(batch.physics.cameras):
        expected_adu = cam.to_adu(batch.expected[i]).double().mean()
        assert abs(float(batch.adu[i].double().mean() - expected_adu)) < 0.03 * float(expected_adu - cam.baseline)
        if not (cam.kind == "scmos" and bool(batch.physics.maps_known[i]) and float(batch.physics.sensor_variation[i])):
            torch.testing.assert_close(batch.frames[i], cam.to_photons(batch.adu[i]).float(), rtol=1e-5, atol=1e-3)


def test_a_block_is_a_pure_function_of_its_generator() -> None:
    a = simulate_windows(GENERALIST, 16, seeded_generator(5, 6))
    b = simulate_windows(GENERALIST, 16, seeded_generator(5, 6))
    c = simulate_windows(GENERALIST, 16, seeded_generator(5, 7))
    for name in ("frames", "adu", "bg", "read_var", "em", "mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.frames, c.frames)
