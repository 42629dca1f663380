"""Dyes of two-channel localizations: pairs made within the radius and frame, each ratio's dye by its window, nothing
dropped, and a crosstalk estimate that agrees with the crosstalk of known ratio spreads."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

from decode_mem.errors import ConfigError
from decode_mem.io.channels import parse_dyes
from decode_mem.io.table import EmitterTable
from decode_mem.register.dyes import DyeAssigner, default_window

DYES = parse_dyes("A=0.3,B=0.5,C=0.7")


def _tables(ratios: np.ndarray, rng: np.random.Generator, photons: float = 4000.0):
    n = len(ratios)
    frame = np.repeat(np.arange(n // 10 + 1), 10)[:n]
    x, y = rng.uniform(0, 200, n), rng.uniform(0, 200, n)
    t1 = EmitterTable.from_arrays(frame=frame, x=x, y=y, photons=photons * (1 - ratios), sigma_x=np.full(n, 0.1),
                                  sigma_y=np.full(n, 0.1))
    t2 = EmitterTable.from_arrays(frame=frame, x=x + 0.05, y=y - 0.05, photons=photons * ratios,
                                  sigma_x=np.full(n, 0.3), sigma_y=np.full(n, 0.3))
    return t1, t2


def test_each_ratio_names_the_dye_whose_window_holds_it():
    a = DyeAssigner(DYES, radius=1.0)
    assert a.window == pytest.approx(default_window(DYES)) == pytest.approx(0.07)
    r = np.array([0.30, 0.36, 0.38, 0.45, 0.5, 0.69, 0.78, 0.1, 0.9])
    assert a.assign(r).tolist() == [1, 1, 0, 2, 2, 3, 0, 0, 0]
    with pytest.raises(ConfigError, match="window"):
        DyeAssigner(DYES, radius=1.0, window=0.7)


def test_pairs_are_merged_by_precision_and_unpaired_are_kept():
    rng = np.random.default_rng(0)
    ratios = np.array([0.3, 0.5, 0.7, 0.31, 0.49])
    t1, t2 = _tables(ratios, rng)
    lone = EmitterTable.from_arrays(frame=np.array([0]), x=np.array([500.0]), y=np.array([5.0]),
                                    photons=np.array([900.0]), sigma_x=np.array([0.2]), sigma_y=np.array([0.2]))
    t1 = EmitterTable.concat([t1, lone])
    a = DyeAssigner(DYES, radius=1.0)
    out = a.block(t1, t2)
    assert len(out) == 6  # five pairs, one localization of channel 1 alone
    paired = out.select(out["channel"] == 0)
    assert np.allclose(np.sort(paired["ratio"]), np.sort(ratios), atol=1e-6)
    assert np.allclose(paired["photons"], 4000, rtol=1e-6)
    # channel 1's precision (0.1 px) weighs 9x channel 2's (0.3 px): the position is 9/10 of the way to channel 1's
    i = np.argsort(paired["ratio"])[0]
    j = np.argmin(np.abs(t1["photons"] - 4000 * 0.7))
    assert paired["x"][i] == pytest.approx(t1["x"][j] + 0.05 * 0.1, abs=1e-5)
    assert paired["sigma_x"][i] == pytest.approx(1 / np.sqrt(100 + 1 / 0.09), rel=1e-5)
    alone = out.select(out["channel"] == 1)
    assert alone["dye"].tolist() == [0] and np.isnan(alone["ratio"]).all()
    s = a.summary()
    assert s["dyes"] == {"A": 2, "B": 2, "C": 1} and s["unassigned"] == 1 and s["unpaired"] == 1


def test_a_pair_farther_apart_than_its_precisions_is_unassigned():
    t1 = EmitterTable.from_arrays(frame=np.array([0, 0]), x=np.array([10.0, 30.0]), y=np.array([10.0, 10.0]),
                                  photons=np.array([700.0, 700.0]), sigma_x=np.full(2, 0.05), sigma_y=np.full(2, 0.05))
    t2 = EmitterTable.from_arrays(frame=np.array([0, 0]), x=np.array([10.1, 30.5]), y=np.array([10.0, 10.0]),
                                  photons=np.array([300.0, 300.0]), sigma_x=np.full(2, 0.05), sigma_y=np.full(2, 0.05))
    a = DyeAssigner(DYES, radius=1.0)
    out = a.block(t1, t2)
    # 0.1 px apart is 1.4 sigma of the difference; 0.5 px is 7: two emitters, whatever their ratio says
    assert out["dye"].tolist() == [1, 0] and np.allclose(out["ratio"], 0.3)
    assert a.summary()["inconsistent_pairs"] == 1
    wide = DyeAssigner(DYES, radius=1.0, registration_error=0.3).block(t1, t2)  # a map that poor: both one emitter
    assert wide["dye"].tolist() == [1, 1]


def test_pairs_stay_within_their_frame_and_radius():
    t1 = EmitterTable.from_arrays(frame=np.array([0, 1]), x=np.array([10.0, 30.0]), y=np.array([10.0, 10.0]),
                                  photons=np.array([1000.0, 1000.0]))
    t2 = EmitterTable.from_arrays(frame=np.array([1, 1]), x=np.array([10.0, 31.5]), y=np.array([10.0, 10.0]),
                                  photons=np.array([1000.0, 1000.0]))
    out = DyeAssigner(DYES, radius=1.0).block(t1, t2)
    assert (out["channel"] == 0).sum() == 0 and len(out) == 4  # same place, other frame; same frame, 1.5 px apart
    out = DyeAssigner(DYES, radius=2.0).block(t1, t2)
    assert (out["channel"] == 0).sum() == 1


def test_one_dye_per_channel_keeps_every_localization_with_its_channel():
    rng = np.random.default_rng(1)
    t1, t2 = _tables(np.full(30, 0.5), rng)
    a = DyeAssigner(None, radius=1.0)
    out = a.block(t1, t2)
    assert len(out) == 60 and (out["dye"] == out["channel"]).all() and "ratio" not in out
    assert a.summary()["overlap"]["channel1_with_partner"] == 1.0


def test_crosstalk_estimate_matches_the_crosstalk_of_known_spreads():
    rng = np.random.default_rng(2)
    sigma = 0.045  # wide: the windows (0.07) leave a few percent of each dye in its neighbour's
    true = rng.integers(0, 3, 30_000)
    ratios = np.array([0.3, 0.5, 0.7])[true] + rng.normal(0, sigma, len(true))
    t1, t2 = _tables(ratios, rng)
    a = DyeAssigner(DYES, radius=0.5)
    out = a.block(t1, t2)
    dye = out["dye"][np.argsort(out["ratio"])]
    truth = true[np.argsort(ratios)] + 1
    assigned = dye > 0
    measured = float((dye[assigned] != truth[assigned]).mean())
    # the expected crosstalk of these Gaussians and windows
    inside = [ndtr((0.07 - d) / sigma) - ndtr((-0.07 - d) / sigma) for d in (0.0, 0.2, 0.4)]
    expected = (4 * inside[1] + 2 * inside[2]) / (3 * inside[0] + 4 * inside[1] + 2 * inside[2])
    est = a.summary()["crosstalk"]
    assert measured == pytest.approx(expected, rel=0.25)
    assert est["overall"] == pytest.approx(expected, rel=0.25)
    assert est["fit"]["B"]["sigma"] == pytest.approx(sigma, rel=0.05)
