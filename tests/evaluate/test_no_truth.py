"""Precision and resolution without ground truth: NeNA on draws of a known precision (independent and correlated
errors), FRC of identical halves and of independent noise, the --no_truth CLI and its bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from decode_mem.evaluate.__main__ import main
from decode_mem.evaluate.no_truth import assess_file, frc_curve, frc_resolution, smoothed
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import INDEPENDENT, ErrorCorrelation

PX = 100.0
SIGMA_NM = 8.0


def blinking_draws(rho: float, seed: int = 0, n_sites: int = 1500, frames_on: int = 6) -> EmitterTable:
    """Sites 1 µm apart on a grid in a 40 x 40 px field, each on for ``frames_on`` consecutive frames at a random
    start, its localizations' errors N(0, SIGMA_NM) per axis, correlated ``rho`` between consecutive frames
    (an AR(1) series, so the lag-2 correlation is ``rho²``); each row states its σ."""
    rng = np.random.default_rng(seed)
    side = 40
    sx, sy = rng.uniform(1, side - 1, n_sites), rng.uniform(1, side - 1, n_sites)
    start = rng.integers(0, 3000, n_sites)
    err = np.empty((n_sites, frames_on, 2))
    err[:, 0] = rng.normal(0, 1, (n_sites, 2))
    for k in range(1, frames_on):
        err[:, k] = rho * err[:, k - 1] + np.sqrt(1 - rho**2) * rng.normal(0, 1, (n_sites, 2))
    err *= SIGMA_NM / PX
    frame = (start[:, None] + np.arange(frames_on)[None, :]).ravel()
    x = (sx[:, None] + err[:, :, 0]).ravel()
    y = (sy[:, None] + err[:, :, 1]).ravel()
    n = len(frame)
    t = EmitterTable.from_arrays(frame=frame, x=x, y=y, photons=np.full(n, 2000.0),
                                 sigma_x=np.full(n, SIGMA_NM / PX), sigma_y=np.full(n, SIGMA_NM / PX))
    return t.sorted_by_frame()


def with_gross_errors(t: EmitterTable, share: float, times: float, seed: int) -> tuple[EmitterTable, float]:
    """``share`` of the localizations moved by an independent error that makes theirs ``times`` SIGMA_NM per axis
    in all (a gross error next to good positions); the table and its true per-axis RMSE (nm)."""
    rng = np.random.default_rng(seed)
    gross = rng.random(len(t)) < share
    extra = rng.normal(0, 1, (len(t), 2)) * np.sqrt(times**2 - 1) * SIGMA_NM / PX * gross[:, None]
    moved = EmitterTable({**t.columns, "x": t["x"] + extra[:, 0], "y": t["y"] + extra[:, 1]})
    return moved, SIGMA_NM * float(np.sqrt(1 - share + share * times**2))


@pytest.mark.parametrize("rho", [0.0, 0.7])
def test_nena_of_linked_molecules_recovers_a_known_precision_and_picasso_reads_low(tmp_path: Path,
                                                                                   rho: float) -> None:
    path = tmp_path / "draws.parquet"
    write_localizations(blinking_draws(rho), path, pixel_size=PX, width=40, height=40)
    correlation = ErrorCorrelation((rho, rho**2), 0.0) if rho else INDEPENDENT
    r = assess_file(path, correlation=correlation, radius=60.0)
    assert r.nena.value == pytest.approx(SIGMA_NM, rel=0.06)
    assert 0 < r.nena.uncertainty < 0.05 * SIGMA_NM
    assert abs(r.nena.value - SIGMA_NM) < 4 * r.nena.uncertainty + 0.02 * SIGMA_NM
    # Picasso's NeNA sees only the consecutive difference: σ √(1 - ρ)
    assert r.nena_picasso.value == pytest.approx(SIGMA_NM * np.sqrt(1 - rho), rel=0.08)
    assert r.sigma_precision == pytest.approx(SIGMA_NM, rel=1e-4)  # the RMS σ
    assert r.sigma_scale == pytest.approx(1.0, abs=0.05) and 0 < r.sigma_scale_uncertainty < 0.03
    assert r.precision == pytest.approx(SIGMA_NM, rel=0.05)  # the stated precision: RMS σ x σ scale
    assert r.sigma_check == pytest.approx(1.0, abs=0.06)
    if rho:  # ignoring the correlation would understate the precision by √(1 - ρ)
        naive = assess_file(path, correlation=INDEPENDENT, radius=60.0)
        assert naive.nena.value == pytest.approx(SIGMA_NM * np.sqrt(1 - rho), rel=0.08)
        assert naive.sigma_check < 0.7


def test_stated_precision_follows_errors_the_sigma_do_not_predict(tmp_path: Path) -> None:
    """5 % of the localizations err 3x more than their σ say (independently, within the link radius): the RMS σ
    reads low against the true RMSE, the σ scale (RMS of the consecutive differences / predicted) brings the
    stated precision to it."""
    t, true_rmse = with_gross_errors(blinking_draws(0.0, seed=4), share=0.05, times=3.0, seed=5)
    path = tmp_path / "tails.parquet"
    write_localizations(t, path, pixel_size=PX, width=40, height=40)
    r = assess_file(path, correlation=INDEPENDENT, radius=100.0)
    assert r.sigma_precision == pytest.approx(SIGMA_NM, rel=1e-4)
    assert r.precision == pytest.approx(true_rmse, rel=0.06)
    assert r.sigma_check == pytest.approx(1.0, abs=0.08)  # the core still agrees with σ


def test_a_jump_counts_in_the_sigma_scale_as_independent_errors() -> None:
    """u beyond JUMP of what σ and ρ predict is divided by sqrt(σ_a² + σ_b²) instead; within it, and for ρ = 0,
    u is the σ check's own."""
    from decode_mem.evaluate.no_truth import JUMP, normalized_difference, scale_difference

    s = np.full(4, 1.0)
    d = np.array([0.5, 0.7 * JUMP * np.sqrt(0.6), 1.2 * JUMP * np.sqrt(0.6), -3.0 * JUMP])
    plain = normalized_difference(d, s, s, 0.7)
    u = scale_difference(d, s, s, 0.7)
    assert np.array_equal(u[:2], plain[:2])
    assert np.allclose(u[2:], d[2:] / np.sqrt(2.0))
    assert np.array_equal(scale_difference(d, s, s, 0.0), normalized_difference(d, s, s, 0.0))


def test_stated_precision_of_correlated_errors_with_jumps_is_the_true_rmse(tmp_path: Path) -> None:
    """Errors correlated 0.7 from frame to frame and 2 % of the localizations 10x off on their own (a gross error
    next to good ones: a jump): the stated precision (factor 1) is near the true RMSE, where dividing the jumps by
    ρ's prediction too would read it high."""
    rho = ErrorCorrelation(by_lag=(0.7, 0.49), beyond=0.34)
    t, true_rmse = with_gross_errors(blinking_draws(0.7, seed=6), share=0.02, times=10.0, seed=7)
    path = tmp_path / "jumps.parquet"
    write_localizations(t, path, pixel_size=PX, width=40, height=40)
    r = assess_file(path, correlation=rho, radius=300.0)  # wide enough to link the jumps (80 nm per axis)
    assert r.precision == pytest.approx(true_rmse, rel=0.1), (r.precision, true_rmse)


def test_the_stated_precision_carries_the_localizers_unseen_error_factor(tmp_path: Path) -> None:
    """RMS σ x σ scale x the factor of the error model it was given: the same file with a factor of 1.3 states
    1.3x the precision; the shipped models carry theirs (measured on simulations), independent fits none; a factor
    that is not a positive number is refused; the JSON and the report's rows show it."""
    from decode_mem.errors import ConfigError
    from decode_mem.evaluate.no_truth import quality_rows
    from decode_mem.link.correlation import CORRELATIONS

    path = tmp_path / "draws.parquet"
    write_localizations(blinking_draws(0.0, seed=7), path, pixel_size=PX, width=40, height=40)
    plain = assess_file(path, correlation=INDEPENDENT, radius=60.0)
    wider = assess_file(path, correlation=ErrorCorrelation(unseen_error_factor=1.3), radius=60.0)
    assert plain.sigma_scale == wider.sigma_scale and plain.sigma_precision == wider.sigma_precision
    assert plain.precision == pytest.approx(plain.sigma_precision * plain.sigma_scale, rel=1e-12)
    assert wider.precision == pytest.approx(1.3 * plain.precision, rel=1e-12)
    d = wider.as_dict()
    assert d["unseen_error_factor"] == 1.3 and d["error_correlation"]["unseen_error_factor"] == 1.3
    rows = dict(quality_rows(d))
    assert any("unseen-error factor" in k and v == "1.30" for k, v in rows.items())
    assert CORRELATIONS["none"].unseen_error_factor == 1.0
    assert min(CORRELATIONS[m].unseen_error_factor for m in ("decode_mem", "decode_mem_wide")) > 1
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="unseen-error factor"):
            ErrorCorrelation(unseen_error_factor=bad)


def test_the_frc_images_pixel_is_half_the_median_sigma_within_its_bounds(tmp_path: Path) -> None:
    """A 5 nm pixel cannot show a resolution below 10 nm: precise localizations get a finer one."""
    from decode_mem.evaluate.no_truth import FRC_PIXEL

    t = blinking_draws(0.0, n_sites=300)  # a 4000 nm field: pixels of 1.95 nm at the finest (MAX_FRC_SIDE)
    for sigma_nm, pixel in ((4.0, 2.0), (20.0, FRC_PIXEL)):
        s = np.full(len(t), sigma_nm / PX)
        path = tmp_path / f"s{sigma_nm:g}.parquet"
        write_localizations(EmitterTable({**t.columns, "sigma_x": s, "sigma_y": s}), path, pixel_size=PX,
                            width=40, height=40)
        r = assess_file(path, correlation=INDEPENDENT, radius=60.0)
        assert r.frc_molecules is not None and r.frc_molecules.pixel == pytest.approx(pixel)
    assert assess_file(path, correlation=INDEPENDENT, radius=60.0, frc_pixel=3.0).frc_molecules.pixel == 3.0
    # a field too large for MAX_FRC_SIDE pixels of that size gets coarser ones
    big = tmp_path / "big.parquet"
    write_localizations(EmitterTable({**t.columns, "sigma_x": np.full(len(t), 0.04),
                                      "sigma_y": np.full(len(t), 0.04)}), big, pixel_size=PX, width=400, height=400)
    from decode_mem.evaluate.no_truth import MAX_FRC_SIDE

    assert assess_file(big, correlation=INDEPENDENT, radius=60.0).frc_molecules.pixel == pytest.approx(
        400 * PX / MAX_FRC_SIDE)


def test_frc_of_identical_halves_never_falls_and_of_independent_noise_falls_at_once() -> None:
    rng = np.random.default_rng(3)
    image = rng.poisson(2.0, (128, 128)).astype(np.float32)
    freq, curve = frc_curve(image, image, pixel=5.0)
    assert np.allclose(curve[1:], 1.0, atol=1e-5)
    assert frc_resolution(freq, curve) is None
    assert freq[-1] == pytest.approx(1 / 10.0)  # Nyquist of 5 nm pixels
    other = rng.poisson(2.0, (128, 128)).astype(np.float32)
    freq, curve = frc_curve(image, other, pixel=5.0)
    assert abs(np.mean(curve[1:])) < 0.03
    assert frc_resolution(freq, smoothed(curve)) > 100.0  # below 1/7 from the first rings on


def test_frc_resolution_interpolates_the_last_threshold_crossing() -> None:
    freq = np.array([0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    curve = np.array([1.0, 0.5, 0.1, 0.3, 0.2, 0.1])  # a dip at 0.02 (a spectral zero), the last fall after 0.04
    t = (0.2 - 1 / 7) / (0.2 - 0.1)
    assert frc_resolution(freq, curve) == pytest.approx(1 / (0.04 + t * 0.01))
    assert np.allclose(smoothed(np.ones(20)), 1.0) and smoothed(np.arange(9.0))[4] == pytest.approx(4.0)


def test_cli_writes_json_and_png_and_refuses_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "draws.hdf5"
    write_localizations(blinking_draws(0.0, n_sites=300), path, pixel_size=PX, width=40, height=40)
    out = tmp_path / "q"
    assert main([str(path), "--no_truth", "--out", str(out), "--correlation", "none", "--quiet"]) == 0
    data = json.loads((out / "draws_quality.json").read_text())
    assert data["sigma_precision_nm"] == pytest.approx(SIGMA_NM, rel=1e-3) and data["nena_nm"] > 0
    assert data["precision_nm"] == pytest.approx(SIGMA_NM * data["sigma_scale"], rel=1e-3)
    assert (out / "draws_quality.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    bad = tmp_path / "bad"
    no_frame = tmp_path / "no_frame.csv"
    no_frame.write_text('"id","x [nm]","y [nm]"\n1,10,20\n')
    empty = tmp_path / "empty.parquet"
    write_localizations(EmitterTable.empty(), empty, pixel_size=PX)
    for argv, needle in (([str(no_frame), "--no_truth"], "frame"), ([str(empty), "--no_truth"], "no localizations"),
                         ([str(path), "--no_truth", "--radius", "0"], "radius"),
                         ([str(path)], "ground truth")):
        assert main([*argv, "--out", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
    assert not bad.exists() or not any(bad.iterdir())
