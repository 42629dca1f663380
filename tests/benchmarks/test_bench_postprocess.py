"""bench_postprocess's no-truth error model: errors drawn as a predicted σ times a normalized linked difference
have the RMSE of the errors they come from (their σ mix and their tails), on a table whose errors are known."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _table(gross: float, seed: int = 0):
    """Emitters 2 µm apart, each on 6 consecutive frames, errors N(0, σ) with σ 0.05 or 0.1 px per emitter
    (100 nm px), a fraction ``gross`` of localizations moved by 8 σ more; the true per-axis RMSE."""
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(seed)
    n_em, on = 4000, 6
    start = rng.integers(0, 200, n_em)
    pos = rng.uniform(0, 20, (n_em, 2)) + 20 * np.stack([np.arange(n_em) % 50, np.arange(n_em) // 50], 1)
    sigma = np.where(rng.random(n_em) < 0.5, 0.05, 0.1)
    em = np.repeat(np.arange(n_em), on)
    frame = start[em] + np.tile(np.arange(on), n_em)
    err = rng.normal(0, 1, (len(em), 2)) * sigma[em, None]
    far = rng.random(len(em)) < gross
    err[far] += 8 * sigma[em[far], None] * rng.choice([-1, 1], (int(far.sum()), 2))
    order = np.argsort(frame, kind="stable")
    cols = {"frame": frame, "x": pos[em, 0] + err[:, 0], "y": pos[em, 1] + err[:, 1], "sigma_x": sigma[em],
            "sigma_y": sigma[em], "photons": np.full(len(em), 5000.0), "z": np.zeros(len(em)),
            "bg": np.full(len(em), 100.0)}
    table = EmitterTable({k: np.asarray(v)[order] for k, v in cols.items()})
    return table, float(np.sqrt(np.mean(err ** 2))) * 100


@pytest.mark.parametrize("gross", [0.0, 0.05])
def test_the_error_model_has_the_true_rmse_of_independent_errors(gross):
    from bench_postprocess import error_model_errors

    from decode_mem.link import INDEPENDENT

    table, rmse = _table(gross)
    ex, ey = error_model_errors(table, 1.5, 100.0, INDEPENDENT, 200_000, seed=1)
    model = float(np.sqrt(np.mean(np.concatenate([ex, ey]) ** 2)))
    assert model == pytest.approx(rmse, rel=0.05)
    single = float(np.sqrt(np.mean(table["sigma_x"] ** 2))) * 100  # one Gaussian of the RMS σ: no tails, one width
    kurtosis = float(np.mean(ex ** 4) / np.mean(ex ** 2) ** 2)
    assert kurtosis > 3.5  # a mixture of two widths (and tails), not one Gaussian (3)
    if gross:
        assert model > 1.5 * single  # the tails the σ do not predict are in it


def test_each_calibrated_sigma_blurs_with_its_own_width():
    """The reference 'truth blurred with each calibrated σ': Gaussian errors whose width is one localization's σ
    times the σ check: their RMS is the RMS σ times the check, and two widths mixed have a kurtosis above a
    Gaussian's 3 (a single Gaussian of the RMS width would not)."""
    from bench_postprocess import calibrated_sigma_errors

    table, _ = _table(0.0)
    ex, ey = calibrated_sigma_errors(table, 100.0, 1.2, 200_000, seed=2)
    rms_sigma = float(np.sqrt(np.mean(table["sigma_x"] ** 2))) * 100
    for e in (ex, ey):
        assert float(np.sqrt(np.mean(e ** 2))) == pytest.approx(1.2 * rms_sigma, rel=0.02)
        assert float(np.mean(e ** 4) / np.mean(e ** 2) ** 2) > 3.5  # 0.05 and 0.1 px mixed: 3 * 1.36
