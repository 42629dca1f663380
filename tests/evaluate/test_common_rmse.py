"""common_rmse_lat: the RMSE of each localizer on the ground-truth emitters that all of them found, so that a
localizer that also finds dim emitters (larger errors) is compared like for like with one that misses them."""

from __future__ import annotations

import math

import numpy as np

from decode_mem.evaluate import common_rmse_lat, evaluate
from decode_mem.io.table import EmitterTable


def _table(frame: np.ndarray, x: np.ndarray, y: np.ndarray) -> EmitterTable:
    n = len(frame)
    return EmitterTable({"frame": frame, "x": x, "y": y, "z": np.zeros(n), "photons": np.full(n, 1000.0),
                         "bg": np.zeros(n)})


def test_a_localizer_that_also_finds_dim_emitters_is_the_more_precise_on_the_emitters_both_found() -> None:
    rng = np.random.default_rng(0)
    n = 400  # one emitter per frame, 200 bright then 200 dim; pixels of 100 nm
    frame = np.arange(n)
    gx, gy = rng.uniform(5, 60, n), rng.uniform(5, 60, n)
    gt = _table(frame, gx, gy)
    bright = np.arange(200)
    # A finds all: 0.1 px off on the bright ones (10 nm), 0.4 px (40 nm) on the dim ones; B only the bright ones,
    # 0.15 px off (15 nm); errors along x, so each RMSE is that offset exactly
    a = _table(frame, gx + np.where(frame < 200, 0.1, 0.4), gy)
    b = _table(bright, gx[bright] + 0.15, gy[bright])
    own_a, own_b = evaluate(a, gt, pixel_size=100.0).rmse_lat, evaluate(b, gt, pixel_size=100.0).rmse_lat
    assert own_a > own_b  # over their own matches A looks the less precise
    n_common, (rmse_a, rmse_b) = common_rmse_lat([a, b], gt, pixel_size=100.0)
    assert n_common == 200
    assert math.isclose(rmse_a, 10.0, rel_tol=1e-6) and math.isclose(rmse_b, 15.0, rel_tol=1e-6)


def test_nothing_in_common_gives_nan_not_zero() -> None:
    gt = _table(np.array([0, 1]), np.array([10.0, 20.0]), np.array([10.0, 20.0]))
    a = _table(np.array([0]), np.array([10.1]), np.array([10.0]))
    b = _table(np.array([1]), np.array([20.1]), np.array([20.0]))
    n_common, rmses = common_rmse_lat([a, b], gt, pixel_size=100.0)
    assert n_common == 0 and all(math.isnan(v) for v in rmses)
