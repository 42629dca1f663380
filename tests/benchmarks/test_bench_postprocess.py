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


def _ground_truth(rows):
    """A ground-truth table from (x px, y px, first frame, last frame) runs, one row per frame on."""
    from decode_mem.io.table import EmitterTable

    xs, ys, fs = [], [], []
    for x, y, first, last in rows:
        for f in range(first, last + 1):
            xs.append(x)
            ys.append(y)
            fs.append(f)
    z = np.zeros(len(xs), np.float32)
    return EmitterTable({"x": np.asarray(xs, np.float32), "y": np.asarray(ys, np.float32),
                         "frame": np.asarray(fs, np.int64), "z": z, "photons": z + 1000, "bg": z})


def test_an_event_is_resolvable_only_without_another_emitter_on_within_the_limit_where_a_link_reaches():
    """Sparrow limit 200 nm (100 nm px): a neighbour 50 nm away on in one of the event's frames, or 100 nm away
    two frames after it ends, makes both events unresolvable; one three frames after it, or 300 nm away, or the
    same site's next blink, does not."""
    from bench_postprocess import resolvable_events, true_events, true_sites

    gt = _ground_truth([
        (10.0, 10.0, 5, 7), (10.5, 10.0, 6, 6),        # 50 nm apart, on together: both blends
        (30.0, 30.0, 5, 7), (31.0, 30.0, 9, 9),        # 100 nm apart, the second on 2 frames after the first ends
        (50.0, 50.0, 5, 7), (51.0, 50.0, 10, 10),      # 100 nm apart, 3 frames after: beyond a link's reach
        (70.0, 70.0, 5, 6), (70.0, 70.0, 8, 9),        # one site blinking twice: its own blinks do not count
        (90.0, 90.0, 5, 7), (93.0, 90.0, 6, 6),        # 300 nm apart: beyond the limit
    ])
    events, sites = true_events(gt), true_sites(gt)
    ok = resolvable_events(gt, events, sites, 200.0, 100.0)

    def of(x, y, frame):
        row = np.nonzero((gt["x"] == x) & (gt["y"] == y) & (gt["frame"] == frame))[0][0]
        return bool(ok[events[row]])

    assert not of(10.0, 10.0, 5) and not of(10.5, 10.0, 6)
    assert not of(30.0, 30.0, 5) and not of(31.0, 30.0, 9)
    assert of(50.0, 50.0, 5) and of(51.0, 50.0, 10)
    assert of(70.0, 70.0, 5) and of(70.0, 70.0, 8)
    assert of(90.0, 90.0, 5) and of(93.0, 90.0, 6)
    assert len(ok) == 10


def test_link_outcome_counts_only_the_events_asked_for_with_molecules_made_of_every_match():
    """Three two-frame events: the first two (two sites) joined in one molecule, the third alone. Counted among
    the third only, nothing is merged; among the first only, it is merged with another emitter though the other
    event is not counted; among none, there is nothing to say (None, not 0)."""
    from types import SimpleNamespace

    from bench_postprocess import link_outcome, true_events, true_sites

    gt = _ground_truth([(10.0, 10.0, 1, 2), (12.0, 10.0, 3, 4), (40.0, 40.0, 1, 2)])
    events, sites = true_events(gt), true_sites(gt)
    matches = SimpleNamespace(gt_index=np.arange(6), pred_index=np.arange(6))
    group = np.where(np.isin(events, events[[4]]), 1, 0)  # the third event its own molecule, the rest one
    third = np.zeros(events.max() + 1, bool)
    third[events[4]] = True
    first = np.zeros_like(third)
    first[events[0]] = True
    everything = link_outcome(group, matches, events, sites)
    assert everything["multi-frame events"] == 3 and everything["merged with another emitter"] == pytest.approx(2 / 3)
    alone = link_outcome(group, matches, events, sites, among=third)
    assert alone["multi-frame events"] == 1 and alone["recovered"] == 1.0 and alone["merged"] == 0.0
    joined = link_outcome(group, matches, events, sites, among=first)
    assert joined["merged with another emitter"] == 1.0 and joined["recovered"] == 1.0
    none = link_outcome(group, matches, events, sites, among=np.zeros_like(third))
    assert none["multi-frame events"] == 0 and none["recovered"] is None


def test_blink_errors_move_each_events_errors_whole_to_an_event_as_long():
    """Errors handed an event at a time: every event gets the whole, ordered error sequence of an event with as many
    matched localizations (itself or another), so the errors' set and their order within a blink are kept."""
    from types import SimpleNamespace

    from bench_postprocess import blink_errors, true_events

    runs = [(10.0 * k, 10.0, 1, 2) for k in range(1, 21)] + [(10.0 * k, 50.0, 1, 3) for k in range(1, 11)]
    gt = _ground_truth(runs)
    events = true_events(gt)
    n = len(gt)
    dx = np.arange(n, dtype=float)
    matches = SimpleNamespace(gt_index=np.arange(n), pred_index=np.arange(n), dx=dx, dy=-dx)
    ex, ey = blink_errors(matches, gt, events, seed=3)
    assert sorted(ex) == sorted(dx) and np.array_equal(ey, -ex)
    moved = 0
    for e in np.unique(events):
        rows = np.nonzero(events == e)[0]
        rows = rows[np.argsort(gt["frame"][rows])]
        got = ex[rows]
        source = np.nonzero(dx == got[0])[0][0]
        src_rows = np.nonzero(events == events[source])[0]
        src_rows = src_rows[np.argsort(gt["frame"][src_rows])]
        assert len(src_rows) == len(rows) and np.array_equal(dx[src_rows], got)
        moved += events[source] != e
    assert moved >= 20  # most events take another's errors (30 events; a fixed point now and then)
