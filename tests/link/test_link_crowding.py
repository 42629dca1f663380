"""The chance-neighbour rate (link.crowding): exact against a brute-force count, right for a Poisson field, and
what link and --no_truth do with it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from decode_mem.io.localizations import open_writer
from decode_mem.io.table import EmitterTable
from decode_mem.link.crowding import DENSE, EVERY, LAG, MERGE_GOAL, ChanceNeighbours, Crowding


def brute_force(x: np.ndarray, y: np.ndarray, f: np.ndarray, radius: float, lag: int, every: int) -> tuple[int, int]:
    """Queries and hits as the module docstring defines them, one row at a time."""
    queries = hits = 0
    first = f.min()
    for i in range(len(f)):
        back = f[i] - lag
        if back % every or back < first:
            continue
        queries += 1
        ref = f == back
        hits += bool(np.any((x[ref] - x[i]) ** 2 + (y[ref] - y[i]) ** 2 <= radius ** 2))
    return queries, hits


def clustered(frames: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Localizations near 20 fixed sites (every one of them with neighbours at some lag) plus uniform ones."""
    rng = np.random.default_rng(seed)
    sites = rng.uniform(0, 40, (20, 2))
    n = rng.poisson(12, frames)
    f = np.repeat(np.arange(frames), n)
    pick = rng.integers(0, 20, len(f))
    xy = sites[pick] + rng.normal(0, 0.4, (len(f), 2))
    uniform = rng.random(len(f)) < 0.3
    xy[uniform] = rng.uniform(0, 40, (uniform.sum(), 2))
    return xy[:, 0], xy[:, 1], f + 3  # the movie's first localization in frame 3


@pytest.mark.parametrize("chunk", [1, 7, 50, 10_000])
def test_counts_equal_a_brute_force_count_whatever_the_chunks(chunk: int) -> None:
    x, y, f = clustered(260, seed=chunk)
    rng = np.random.default_rng(0)
    c = ChanceNeighbours(1.0, 100.0, 1, lag=20, every=5)
    for s in range(0, len(f), chunk):  # chunks split frames; rows shuffled within a chunk
        sl = np.arange(s, min(s + chunk, len(f)))
        sl = sl[rng.permutation(len(sl))]
        c.add(x[sl], y[sl], f[sl])
    assert (c.queries, c.hits) == brute_force(x, y, f, 1.0, 20, 5)
    assert c.hits > 20 and c.queries - c.hits > 20  # both outcomes occur
    assert len(c._refs) <= 20 // 5 + 1  # memory: the frames of one lag


def test_a_poisson_field_gives_the_probability_of_a_point_within_the_radius() -> None:
    rng = np.random.default_rng(1)
    side, radius, per_frame = 400.0, 3.0, 200
    lam = per_frame / side ** 2
    c = ChanceNeighbours(radius, radius, 1)
    frames = LAG + 20 * EVERY * 10
    for fr in range(frames):
        xy = rng.uniform(0, side, (rng.poisson(per_frame), 2))
        c.add(xy[:, 0], xy[:, 1], np.full(len(xy), fr))
    r = c.result()
    expected = 1 - np.exp(-lam * np.pi * radius ** 2)  # the field's edges (radius / side < 1 %) left out
    assert r.queries > 10_000
    assert abs(r.rate - expected) < 4 * r.uncertainty  # binomial: about 3 % of the rate here
    assert r.joinable == pytest.approx(1 - (1 - r.rate) ** 4)


def test_too_short_a_movie_is_n_a_and_never_crowded() -> None:
    c = ChanceNeighbours(1.0, 1.0, 1)
    x, y, f = clustered(LAG, seed=3)  # no frame LAG after a reference frame
    c.add(x, y, f)
    r = c.result()
    assert r.rate is None and r.joinable is None and not r.crowded
    assert r.as_dict()["chance_neighbour_rate"] is None


def test_crowded_when_joinable_exceeds_the_merge_goal() -> None:
    below = Crowding(0.004, 10_000, LAG, 10.0, 1)
    above = Crowding(0.006, 10_000, LAG, 10.0, 1)
    assert below.joinable < MERGE_GOAL < above.joinable
    assert not below.crowded and above.crowded
    assert "crowded for linking" in above.warning("m.csv") and "m.csv" in above.warning("m.csv")


def write_table(path: Path, x: np.ndarray, y: np.ndarray, f: np.ndarray) -> None:
    n = len(f)
    t = EmitterTable({"frame": f, "x": x, "y": y, "z": np.zeros(n), "photons": np.full(n, 1000.0),
                      "bg": np.full(n, 10.0), "prob": np.ones(n), "sigma_x": np.full(n, 0.1),
                      "sigma_y": np.full(n, 0.1)})
    with open_writer(path, pixel_size=100.0, width=64, height=64, frames=int(f.max()) + 1) as w:
        w.write(t)


def crowded_and_sparse(frames: int = 800) -> tuple[tuple, tuple]:
    """Localizations of 12 sites 5 px apart that each blink in 1 frame of 5 (crowded at a radius of 1 px: another
    blink of the same site), and of 3 spots per frame that move 1.5 px a frame, 7 frames round (sparse: never
    within 1 px of those 100 frames earlier)."""
    rng = np.random.default_rng(5)
    sites = np.array([[4 + 5 * i, 20.0] for i in range(12)])
    on = rng.random((frames, 12)) < 0.2
    f, s = np.nonzero(on)
    crowded = (sites[s, 0] + rng.normal(0, 0.05, len(f)), sites[s, 1] + rng.normal(0, 0.05, len(f)), f)
    f2 = np.repeat(np.arange(frames), 3)
    sparse = (5 + 15 * np.tile(np.arange(3), frames) + 1.5 * (f2 % 7), np.full(len(f2), 40.0), f2)
    return crowded, sparse


def test_link_and_no_truth_warn_on_a_crowded_movie_and_not_on_a_sparse_one(tmp_path: Path) -> None:
    from decode_mem.evaluate.no_truth import assess_file, quality_rows
    from decode_mem.link import link_file

    (cx, cy, cf), (sx, sy, sf) = crowded_and_sparse()
    write_table(tmp_path / "crowded.parquet", cx, cy, cf)
    write_table(tmp_path / "sparse.parquet", sx, sy, sf)
    for name, crowded in (("crowded", True), ("sparse", False)):
        path = tmp_path / f"{name}.parquet"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = link_file(path, tmp_path / f"out_{name}", radius=100.0)
            q = assess_file(path, radius=100.0)
        said = [str(w.message) for w in caught if "crowded for linking" in str(w.message)]
        assert res.crowding.crowded is crowded and q.crowding.crowded is crowded
        assert len(said) == (2 if crowded else 0), said
        d = json.loads(json.dumps(q.as_dict()))
        assert d["crowded_for_linking"] is crowded
        assert (d["joinable_fraction"] > MERGE_GOAL) is crowded
        row = dict(quality_rows(d))
        assert any(("crowded for linking" in v) is crowded for k, v in row.items() if k.startswith("chance"))


def test_dense_when_most_blinks_have_a_neighbour_a_link_reaches() -> None:
    """joinable = 1 - (1 - rate)^4 for max_dark 1: 0.478 at a rate of 0.15 (crowded, not dense), 0.526 at 0.17."""
    below = Crowding(0.15, 10_000, LAG, 10.0, 1)
    above = Crowding(0.17, 10_000, LAG, 10.0, 1)
    assert below.crowded and above.crowded
    assert below.joinable < DENSE < above.joinable
    assert not below.dense and above.dense
    assert above.as_dict()["dense"] is True and below.as_dict()["dense"] is False
    assert not Crowding(None, 10, LAG, 10.0, 1).dense


def test_no_truth_says_the_frc_is_optimistic_only_where_the_movie_is_dense(tmp_path: Path) -> None:
    """Sites that blink in 1 frame of 5 (joinable about 0.6: dense) against 1 frame of 30 (about 0.13: crowded, not
    dense; 24 sites over 4000 frames) and the sparse table: only the first warns that the FRC reads finer, in the
    warning, the JSON and the report's row."""
    from decode_mem.evaluate.no_truth import assess_file, quality_rows

    (cx, cy, cf), (sx, sy, sf) = crowded_and_sparse()
    rng = np.random.default_rng(6)
    sites = np.array([[4 + 5 * i, 20.0] for i in range(24)])
    f, s = np.nonzero(rng.random((4000, 24)) < 1 / 30)  # enough localizations 100 frames after a reference
    write_table(tmp_path / "dense.parquet", cx, cy, cf)
    write_table(tmp_path / "crowded.parquet", sites[s, 0] + rng.normal(0, 0.05, len(f)),
                sites[s, 1] + rng.normal(0, 0.05, len(f)), f)
    write_table(tmp_path / "sparse.parquet", sx, sy, sf)
    for name, crowded, dense in (("dense", True, True), ("crowded", True, False), ("sparse", False, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            q = assess_file(tmp_path / f"{name}.parquet", radius=100.0)
        said = [str(w.message) for w in caught if "FRC resolution reads finer" in str(w.message)]
        assert q.crowding.crowded is crowded and q.crowding.dense is dense, q.crowding
        assert len(said) == (1 if dense else 0), said
        d = json.loads(json.dumps(q.as_dict()))
        assert d["dense"] is dense
        row = dict(quality_rows(d))
        assert any(("dense: the FRC" in v) is dense for k, v in row.items() if k.startswith("chance"))
