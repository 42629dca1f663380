"""Bead calibration: simulated bead z-stacks -> the PSF they were made with, and clear errors for bad beads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile
from psf_helpers import CAL, analytic_volume

from decode_mem.io.psf_file import read_psf
from decode_mem.psf.__main__ import main
from decode_mem.psf.beads import BeadSettings, calibrate_beads
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.beads import simulate_bead_stack
from decode_mem.simulate.spline_fit import gauss_widths

Z = np.arange(-800.0, 801.0, 40.0)
ROI = 21


def _config(**kw) -> SimulationConfig:
    return SimulationConfig.from_dict({"frame_size": (96, 128), "psf": "astig3d", "astigmatism": CAL.to_dict(),
                                       "z_range": (-1500.0, 1500.0), **kw})


def _beads(path, n: int = 10, seed: int = 0, photons: float = 20000.0, offset: float = 15.0, z=Z) -> str:
    rng = np.random.default_rng(seed)
    gx, gy = np.meshgrid(np.arange(5) * 24 + 16, np.arange(2) * 36 + 24)
    x = gx.ravel()[:n] + rng.uniform(-0.5, 0.5, n)
    y = gy.ravel()[:n] + rng.uniform(-0.5, 0.5, n)
    adu = simulate_bead_stack(_config(), x, y, z, photons=photons, bg=20.0,
                              offset=rng.normal(offset if abs(offset) > 100 else 0.0, 15.0, n), seed=seed + 1)
    tifffile.imwrite(path, adu)
    return str(path)


def test_ten_beads_recover_the_psf_width_within_5_percent_at_every_z(tmp_path) -> None:
    stack = _beads(tmp_path / "beads.tif")
    cal = calibrate_beads([stack], _config().camera, BeadSettings(z_step=40.0, roi=ROI))
    assert len(cal.beads) == 10 and not any(cal.rejected.values())
    lo, hi = cal.spline.z_range
    inside = (cal.z >= lo) & (cal.z <= hi)
    assert inside.sum() >= 30  # the valid range spans most of the stack
    true_x, true_y = gauss_widths(analytic_volume(cal.z, ROI // 2))
    got_x, got_y = gauss_widths(cal.volume)
    assert np.abs(got_x / true_x - 1)[inside].max() < 0.05
    assert np.abs(got_y / true_y - 1)[inside].max() < 0.05
    # the spline's own width curves (2 nodes per px) agree with the truth too
    s = cal.spline
    keep = (s.width_z >= lo) & (s.width_z <= hi)
    tx, ty = gauss_widths(analytic_volume(s.width_z[keep], ROI // 2))
    assert np.abs(s.width_x[keep] / tx - 1).max() < 0.05 and np.abs(s.width_y[keep] / ty - 1).max() < 0.05
    assert max(b["residual"] for b in cal.beads) < 0.2


def test_cli_writes_the_psf_and_figure_and_a_top_down_stack_gives_the_same_psf(tmp_path, capsys) -> None:
    stack = _beads(tmp_path / "beads.tif")
    assert main([stack, "--z_step", "40", "--roi", str(ROI), "--out", str(tmp_path / "psf.h5")]) == 0
    assert (tmp_path / "psf.png").stat().st_size > 10_000
    up = read_psf(tmp_path / "psf.h5")
    assert up.z_range[0] < -600 and up.z_range[1] > 600 and up.upsample == 2
    assert "10 beads" in capsys.readouterr().out
    tifffile.imwrite(tmp_path / "down.tif", tifffile.imread(stack)[::-1])
    assert main([str(tmp_path / "down.tif"), "--z_step", "-40", "--roi", str(ROI), "--out",
                 str(tmp_path / "down.h5"), "--quiet"]) == 0
    down = read_psf(tmp_path / "down.h5")
    assert down.z0 == pytest.approx(up.z0) and down.z_range == up.z_range
    assert np.allclose(down.width_x, up.width_x, rtol=0.02, atol=0.02)


@pytest.mark.parametrize("case, message", [
    ("few", r"2 usable bead\(s\), need at least 3"),
    ("saturated", r"saturated"),
    ("out_of_range", r"focus outside the stack"),
])
def test_bad_beads_are_one_line_errors_exit_2_nothing_written(tmp_path, capsys, case: str, message: str) -> None:
    kw = {"few": {"n": 2}, "saturated": {"photons": 3e6}, "out_of_range": {"offset": 1400.0}}[case]
    stack = _beads(tmp_path / f"{case}.tif", **kw)
    out = tmp_path / "psf.h5"
    assert main([stack, "--z_step", "40", "--roi", str(ROI), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{case}.tif" in err
    import re

    assert re.search(message, err), err
    assert not out.exists() and not (tmp_path / "psf.png").exists()


def test_settings_errors_exit_2(tmp_path, capsys) -> None:
    assert main(["nope.tif", "--z_step", "40", "--out", str(tmp_path / "p.h5")]) == 2
    assert "nope.tif: bead stack not found" in capsys.readouterr().err
    assert main(["nope.tif", "--out", str(tmp_path / "p.h5")]) == 2
    assert "--z_step" in capsys.readouterr().err
    assert main(["nope.tif", "--z_step", "40", "--out", str(tmp_path / "p.tif")]) == 2


def test_the_3d_quick_starts_own_bead_stack_works_with_the_default_region(tmp_path, capsys) -> None:
    """Issue 46: its beads (20 px apart) all were 'overlapping' with the fixed 25 px region; their light is apart."""
    from decode_mem.pipeline.config import load_pipeline
    from decode_mem.pipeline.runner import _psf

    config = load_pipeline(Path(__file__).resolve().parents[2] / "pipelines" / "astig3d.yaml", quick=True,
                           out=tmp_path / "run")
    config.out.mkdir(parents=True)
    _psf(config, lambda line: None, {})
    beads = str(config.out / "beads.tif")
    assert main([beads, "--z_step", str(config.psf.z_step), "--out", str(tmp_path / "psf.h5")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{config.psf.n_beads} beads in ") and "(chosen; --roi sets it)" in out
    assert "(dropped: none)" in out
    # a region that does hold the neighbours' light: exit 2, and the message names the --roi that keeps them
    assert main([beads, "--z_step", str(config.psf.z_step), "--roi", "31", "--out", str(tmp_path / "p.h5")]) == 2
    err = capsys.readouterr().err
    import re

    found = re.search(r"overlapping\); --roi (\d+) keeps (\d+) ", err)
    assert found, err
    assert int(found.group(2)) == config.psf.n_beads
    assert main([beads, "--z_step", str(config.psf.z_step), "--roi", found.group(1), "--out",
                 str(tmp_path / "p.h5")]) == 0
    assert capsys.readouterr().out.startswith(f"{config.psf.n_beads} beads in {found.group(1)}x{found.group(1)} px")
    # a pipeline's psf step on these beads with no roi in its YAML chooses the regions as the CLI does
    from dataclasses import replace

    own = replace(config, psf=replace(config.psf, beads=(beads,), roi=None), out=tmp_path / "own")
    own.out.mkdir()
    parts: dict = {}
    _psf(own, lambda line: None, parts)
    assert parts["psf"].startswith(f"{config.psf.n_beads} beads, ")


def _pair_and_two_alone(path, gap: float) -> np.ndarray:
    x, y = np.array([14.0, 14.0 + gap, 50.0, 74.0]), np.array([14.0, 14.0, 44.0, 20.0])
    return simulate_bead_stack(_config(frame_size=(64, 96)), x, y, Z, photons=20000.0, bg=20.0, offset=np.zeros(4),
                               seed=1)


@pytest.mark.parametrize("gap", [14, 24])
def test_beads_are_kept_when_their_light_is_apart_not_their_box(tmp_path, gap: float) -> None:
    from decode_mem.psf.beads import bead_candidates, find_beads

    stack = _pair_and_two_alone(tmp_path, gap)
    settings = BeadSettings(z_step=40.0)
    cands = bead_candidates(stack, settings)
    pair = cands.centres[:, 0] < 30
    pair &= cands.centres[:, 1] < 60
    kept, rejected = find_beads(stack, settings)
    alone = sorted((r, c) for r, c, _ in kept if not (r < 30 and c < 60))
    assert alone == [(20, 74), (44, 50)]
    if gap == 14:  # their light touches: both dropped, whatever the region
        assert pair.sum() == 2 and cands.touching[pair].all()
        assert len(kept) == 2 and sum(rejected.values()) == 2
    else:  # 24 px apart, less than the fixed 25 px region of old (which dropped both): their light is apart
        assert not cands.touching.any()
        assert sorted(c for r, c, _ in kept if r < 30 and c < 60) == [14, 38]
        assert not any(rejected.values())
