"""The maps between channels: exact for a map of their own kind, leave-one-out error as large as the noise says,
the kind chosen by it, and what the registration file keeps maps the same points the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.register.transform import (
    MIN_BEADS,
    Transform,
    choose_transform,
    fit_polynomial,
    fit_tps,
    leave_one_out,
    monomials,
)

RNG = np.random.default_rng(75)
SRC = RNG.uniform(0, 200, (60, 2))
CENTRE, SCALE = (100.0, 100.0), 100.0
CUBIC = RNG.normal(0, 0.5, (10, 2))


def _affine(p: np.ndarray) -> np.ndarray:
    return p @ np.array([[1.003, 0.006], [-0.007, 0.998]]).T + np.array([3.2, -1.7])


def _cubic(p: np.ndarray) -> np.ndarray:
    u = (p - CENTRE) / SCALE
    return _affine(p) + monomials(u[:, 0], u[:, 1], 3) @ CUBIC


@pytest.mark.parametrize("degree,truth", [(1, _affine), (3, _cubic)])
def test_a_polynomial_reproduces_a_map_of_its_degree_exactly(degree, truth):
    dst = truth(SRC)
    t = fit_polynomial(SRC, dst, degree, CENTRE, SCALE)
    fresh = RNG.uniform(0, 200, (500, 2))
    mx, my = t(fresh[:, 0], fresh[:, 1])
    assert np.abs(np.column_stack([mx, my]) - truth(fresh)).max() < 1e-9  # rounding only
    if degree == 3:  # one degree short is not exact: the test can fail
        t2 = fit_polynomial(SRC, dst, 2, CENTRE, SCALE)
        assert np.abs(np.column_stack(t2(fresh[:, 0], fresh[:, 1])) - truth(fresh)).max() > 1e-3


def test_thin_plate_spline_reproduces_an_affine_map_and_interpolates_its_points():
    t = fit_tps(SRC, _affine(SRC), 0.0, CENTRE, SCALE)
    fresh = RNG.uniform(0, 200, (500, 2))
    assert np.abs(np.column_stack(t(fresh[:, 0], fresh[:, 1])) - _affine(fresh)).max() < 1e-8
    wavy = _affine(SRC) + np.column_stack([np.sin(SRC[:, 0] / 30), np.cos(SRC[:, 1] / 40)])
    t = fit_tps(SRC, wavy, 0.0, CENTRE, SCALE)
    assert np.abs(np.column_stack(t(SRC[:, 0], SRC[:, 1])) - wavy).max() < 1e-8


def test_the_file_keeps_every_number_of_the_map():
    wavy = _affine(SRC) + np.column_stack([np.sin(SRC[:, 0] / 30), np.cos(SRC[:, 1] / 40)])
    for t in (fit_tps(SRC, wavy, 1e-4, CENTRE, SCALE), fit_polynomial(SRC, wavy, 3, CENTRE, SCALE)):
        back = Transform.from_dict(json.loads(json.dumps(t.to_dict())))
        x, y = RNG.uniform(-20, 220, (2, 100))
        assert np.array_equal(np.column_stack(back(x, y)), np.column_stack(t(x, y)))
    bad = fit_polynomial(SRC, wavy, 3, CENTRE, SCALE).to_dict()
    bad["degree"] = 2
    with pytest.raises(ConfigError, match="shapes"):
        Transform.from_dict(bad)


def test_leave_one_out_error_is_what_a_bead_left_out_shows():
    sigma = 0.02  # px of noise on each coordinate
    dst = _affine(SRC) + RNG.normal(0, sigma, SRC.shape)
    fit = lambda s, d: fit_polynomial(s, d, 1, CENTRE, SCALE)  # noqa: E731
    loo = leave_one_out(fit, SRC, dst)
    # bead 7 by hand: the map fitted without it, applied to it
    t = fit(np.delete(SRC, 7, 0), np.delete(dst, 7, 0))
    assert np.allclose(loo[7], dst[7] - np.column_stack(t(SRC[7:8, 0], SRC[7:8, 1]))[0])
    # an affine fit of 60 beads: a new bead is off by its own noise and the fit's (3 of 60 coefficients' worth)
    rms = np.sqrt((loo**2).sum(axis=1).mean())
    assert rms == pytest.approx(sigma * np.sqrt(2 * (1 + 3 / 60)), rel=0.2)
    inside = dst - np.column_stack(fit(SRC, dst)(SRC[:, 0], SRC[:, 1]))
    assert np.sqrt((inside**2).sum(axis=1).mean()) < rms  # the beads the map saw look better than new ones


def test_the_kind_with_the_smallest_leave_one_out_error_is_chosen():
    wavy = _affine(SRC) + 2 * np.column_stack([np.sin(SRC[:, 0] / 25), np.cos(SRC[:, 1] / 35)])
    _, best, tried = choose_transform(SRC, wavy, CENTRE, SCALE)
    assert best.rms == min(c.rms for c in tried)
    assert {c.name for c in tried} >= {"affine", "polynomial 2", "tps (smoothing 0)"}
    assert next(c for c in tried if c.name == "affine").rms > 10 * best.rms
    t_aff, best_aff, _ = choose_transform(SRC, wavy, CENTRE, SCALE, kind="affine")
    assert t_aff.name == "affine" and best_aff.rms > best.rms
    with pytest.raises(ConfigError, match="at least"):
        choose_transform(SRC[:MIN_BEADS - 1], wavy[:MIN_BEADS - 1], CENTRE, SCALE)
