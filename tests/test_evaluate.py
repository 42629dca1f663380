"""Matching and metrics (SMLM challenge 2016 conventions), and the evaluate CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from decode_mem.errors import ConfigError
from decode_mem.evaluate import (
    Metrics,
    StreamingMetrics,
    efficiency,
    evaluate,
    match_emitters,
)
from decode_mem.evaluate.__main__ import main
from decode_mem.io.localizations import write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.io.thunderstorm import write_thunderstorm_csv

PX = 100.0


def table(frame, x, y, z=None) -> EmitterTable:
    x = np.asarray(x, np.float64)
    return EmitterTable.from_arrays(frame=np.broadcast_to(frame, x.shape), x=x, y=np.broadcast_to(y, x.shape),
                                    z=np.zeros_like(x) if z is None else np.broadcast_to(z, x.shape),
                                    photons=np.ones_like(x))


def random_table(rng: np.random.Generator, n: int, frames: int, size: float = 20.0) -> EmitterTable:
    return table(rng.integers(0, frames, n), rng.uniform(0, size, n), rng.uniform(0, size, n),
                 rng.uniform(-600, 600, n))


def test_perfect_match() -> None:
    gt = table([0, 0, 1, 5], [1.0, 5.0, 3.0, 7.5], [2.0, 2.0, 9.0, 0.5], [0.0, 100.0, -50.0, 10.0])
    m = evaluate(gt, gt, pixel_size=PX)
    assert (m.tp, m.fp, m.fn) == (4, 0, 0)
    assert m.jaccard == m.recall == m.precision == m.f1 == 1.0
    assert m.rmse_lat == m.rmse_ax == m.rmse_vol == 0.0
    assert m.efficiency_lat == m.efficiency_ax == m.efficiency_vol == 100.0


def test_known_shifts_give_known_errors() -> None:
    gt = table(np.arange(10) % 3, np.arange(10) * 3.0, 5.0, 0.0)
    pred = table(gt["frame"], gt["x"] + 0.3, gt["y"] + 0.4, 20.0)  # +30, +40 nm, +20 nm in z
    m = evaluate(pred, gt, pixel_size=PX)
    assert m.tp == 10
    assert m.rmse_lat == pytest.approx(50.0, rel=1e-5)
    assert m.rmse_ax == pytest.approx(20.0, rel=1e-5)
    assert m.rmse_vol == pytest.approx(math.sqrt(50**2 + 20**2), rel=1e-5)
    assert (m.bias_x, m.bias_y, m.bias_z) == pytest.approx((30.0, 40.0, 20.0), rel=1e-5)


def test_lateral_and_axial_tolerance_edges() -> None:
    gt = table(0, [0.0], [0.0])
    assert match_emitters(table(0, [2.49], [0.0]), gt, pixel_size=PX).tp == 1  # 249 nm
    assert match_emitters(table(0, [2.51], [0.0]), gt, pixel_size=PX).tp == 0  # 251 nm
    assert match_emitters(table(0, [1.5], [1.9]), gt, pixel_size=PX).tp == 1  # 242 nm diagonally
    assert match_emitters(table(0, [1.8], [1.8]), gt, pixel_size=PX).tp == 0  # 255 nm diagonally
    assert match_emitters(table(0, [0.0], [0.0], 499.0), gt, pixel_size=PX).tp == 1
    assert match_emitters(table(0, [0.0], [0.0], -501.0), gt, pixel_size=PX).tp == 0
    assert match_emitters(table(0, [2.51], [0.0]), gt, pixel_size=PX, tolerance_lat=260.0).tp == 1
    assert match_emitters(table(0, [0.0], [0.0], 501.0), gt, pixel_size=PX, tolerance_ax=600.0).tp == 1


def _greedy_count(pred: EmitterTable, gt: EmitterTable, tol: float) -> int:
    d = np.hypot(pred["x"][:, None] - gt["x"][None], pred["y"][:, None] - gt["y"][None]) * PX
    d[d > tol] = np.inf
    count = 0
    while np.isfinite(d).any():
        r, c = np.unravel_index(np.argmin(d), d.shape)
        d[r, :], d[:, c] = np.inf, np.inf
        count += 1
    return count


def test_optimal_assignment_beats_greedy() -> None:
    gt = table(0, [0.0, 2.1], 0.0)  # g1 at 0 nm, g2 at 210 nm
    pred = table(0, [2.0, 4.0], 0.0)  # p1 at 200 nm (10 from g2, 200 from g1), p2 at 400 nm (only near g2)
    assert _greedy_count(pred, gt, 250.0) == 1  # greedy takes p1-g2 first and strands p2
    m = match_emitters(pred, gt, pixel_size=PX)
    assert m.tp == 2
    np.testing.assert_array_equal(m.pred_index, [0, 1])
    np.testing.assert_array_equal(m.gt_index, [0, 1])
    np.testing.assert_allclose(m.dx, [200.0, 190.0], rtol=1e-5)


def test_equal_cardinality_prefers_the_smaller_total_distance() -> None:
    gt = table(0, [0.0, 1.0], 0.0)
    pred = table(0, [1.1, 0.1], 0.0)
    m = match_emitters(pred, gt, pixel_size=PX)
    np.testing.assert_array_equal(m.gt_index, [1, 0])
    np.testing.assert_allclose(m.dx, [10.0, 10.0], rtol=1e-4)


def test_frames_are_matched_separately() -> None:
    pred = table([0, 1], [3.0, 3.0], 4.0)
    gt = table([1, 2], [3.0, 3.0], 4.0)
    m = match_emitters(pred, gt, pixel_size=PX)
    assert (m.tp, m.fp, m.fn) == (1, 1, 1)
    assert (m.pred_index[0], m.gt_index[0]) == (1, 0)


def test_empty_tables() -> None:
    gt = table([0, 1], [3.0, 3.0], 4.0)
    none = EmitterTable.empty()
    m = evaluate(none, gt, pixel_size=PX)
    assert (m.tp, m.fp, m.fn, m.jaccard, m.recall) == (0, 0, 2, 0.0, 0.0)
    assert math.isnan(m.precision) and math.isnan(m.rmse_lat) and math.isnan(m.efficiency_lat)
    m = evaluate(gt, none, pixel_size=PX)
    assert (m.tp, m.fp, m.fn, m.jaccard, m.precision) == (0, 2, 0, 0.0, 0.0)
    m = evaluate(none, none, pixel_size=PX)
    assert (m.tp, m.fp, m.fn) == (0, 0, 0) and math.isnan(m.jaccard)
    assert "n/a" in m.table()


def test_efficiency_formula_on_a_hand_computed_case() -> None:
    assert efficiency(0.8, 10.0, 1.0) == pytest.approx(100 - math.sqrt(20**2 + 10**2))  # 77.639
    # JI = 4 / (4 + 1 + 0) = 0.8; every pair off by 10 nm laterally and 40 nm axially
    gt = table(0, [0.0, 5.0, 10.0, 15.0], 0.0, 0.0)
    pred = table(0, [0.1, 5.1, 10.1, 15.1, 30.0], 0.0, 40.0)
    m = evaluate(pred, gt, pixel_size=PX)
    assert m.jaccard == pytest.approx(0.8)
    assert m.efficiency_lat == pytest.approx(77.6393, abs=1e-3)
    assert m.efficiency_ax == pytest.approx(100 - math.sqrt(800), abs=1e-3)  # alpha_ax 0.5: (0.5 * 40)^2 = 400
    assert m.efficiency_vol == pytest.approx((m.efficiency_lat + m.efficiency_ax) / 2)


def _reference_tp_and_cost(pred: EmitterTable, gt: EmitterTable) -> tuple[int, float]:
    """Per frame: the maximum number of allowed pairs, and the least total 3-D distance with that many."""
    tp, cost = 0, 0.0
    for f in np.union1d(pred["frame"], gt["frame"]):
        p, g = pred.select(pred["frame"] == f), gt.select(gt["frame"] == f)
        if not len(p) or not len(g):
            continue
        dx = (p["x"][:, None].astype(float) - g["x"][None]) * PX
        dy = (p["y"][:, None].astype(float) - g["y"][None]) * PX
        dz = p["z"][:, None].astype(float) - g["z"][None]
        ok = (dx**2 + dy**2 <= 250.0**2) & (np.abs(dz) <= 500.0)
        n = maximum_bipartite_matching(csr_matrix(ok.astype(np.int8)), perm_type="column")
        tp += int((n >= 0).sum())
        d = np.where(ok, np.sqrt(dx**2 + dy**2 + dz**2), 1e9)
        r, c = linear_sum_assignment(d)
        cost += float(d[r, c][ok[r, c]].sum())
    return tp, cost


@pytest.mark.parametrize("seed", range(4))
def test_matching_is_maximal_and_minimal_on_random_crowded_frames(seed: int) -> None:
    rng = np.random.default_rng(seed)
    gt = random_table(rng, 400, 6, size=12.0)
    pred = random_table(rng, 380, 6, size=12.0)
    m = match_emitters(pred, gt, pixel_size=PX)
    tp, cost = _reference_tp_and_cost(pred, gt)
    assert m.tp == tp
    assert np.sqrt(m.dx**2 + m.dy**2 + m.dz**2).sum() == pytest.approx(cost, rel=1e-9)
    assert len(np.unique(m.pred_index)) == len(np.unique(m.gt_index)) == m.tp
    np.testing.assert_array_equal(pred["frame"][m.pred_index], gt["frame"][m.gt_index])
    assert np.all(m.dx**2 + m.dy**2 <= 250.0**2) and np.all(np.abs(m.dz) <= 500.0)


def test_streaming_equals_batch() -> None:
    rng = np.random.default_rng(11)
    gt = random_table(rng, 3000, 50)
    pred = random_table(rng, 2800, 50)
    whole = evaluate(pred, gt, pixel_size=PX)
    blocked = evaluate(pred, gt, pixel_size=PX, block_emitters=37)
    acc = StreamingMetrics(PX)
    for f in range(50):
        acc.update(pred.select(pred["frame"] == f), gt.select(gt["frame"] == f))
    half1, half2 = StreamingMetrics(PX), StreamingMetrics(PX)
    half1.update(pred.select(pred["frame"] < 20), gt.select(gt["frame"] < 20))
    half2.update(pred.select(pred["frame"] >= 20), gt.select(gt["frame"] >= 20))
    half1.merge(half2)
    assert whole.tp > 1000
    for other in (blocked, acc.result(), half1.result()):
        a, b = whole.as_dict(), other.as_dict()
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-9), k


def test_metrics_dict_and_table() -> None:
    gt = table(0, [0.0, 5.0], 0.0)
    m = evaluate(table(0, [0.1], 0.0), gt, pixel_size=PX)
    assert isinstance(m, Metrics)
    d = m.as_dict()
    assert d["tp"] == 1 and d["fn"] == 1 and d["jaccard"] == 0.5 and d["tolerance_lat"] == 250.0
    assert all(type(v) in (int, float) for v in d.values())
    text = m.table()
    assert "Jaccard" in text and "0.5000" in text and "efficiency" in text


def test_invalid_settings() -> None:
    gt = table(0, [0.0], 0.0)
    with pytest.raises(ConfigError, match="pixel_size"):
        match_emitters(gt, gt, pixel_size=0.0)
    with pytest.raises(ConfigError, match="tolerance_lat"):
        evaluate(gt, gt, pixel_size=PX, tolerance_lat=-1.0)


def test_non_finite_coordinates_never_match() -> None:
    gt = table(0, [0.0, 3.0], 0.0)
    pred = table(0, [np.nan, 3.0], 0.0)
    m = match_emitters(pred, gt, pixel_size=PX)
    assert (m.tp, m.fp, m.fn) == (1, 1, 1)


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys) -> None:
    gt = table([0, 0, 3], [1.0, 8.0, 4.0], [1.0, 2.0, 6.0], [0.0, 50.0, -20.0])
    pred = table([0, 3, 3], [1.2, 4.0, 9.0], [1.0, 6.1, 9.0], [10.0, -20.0, 0.0])
    write_thunderstorm_csv(gt, tmp_path / "gt.csv", PX)
    write_thunderstorm_csv(pred, tmp_path / "pred.csv", PX)
    out = tmp_path / "sub" / "metrics.json"
    argv = [str(tmp_path / "pred.csv"), str(tmp_path / "gt.csv"), "--tolerance-lat", "250",
            "--tolerance-ax", "500", "--pixel_size", "100", "--json", str(out)]
    assert main(argv) == 0
    assert "Jaccard" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert (data["tp"], data["fp"], data["fn"]) == (2, 1, 1)
    assert data["jaccard"] == pytest.approx(0.5)
    assert data["rmse_lat"] == pytest.approx(math.sqrt((20**2 + 10**2) / 2), rel=1e-4)
    assert not list(tmp_path.glob("sub/*.partial"))


def test_cli_missing_file_returns_2(tmp_path, capsys) -> None:
    write_thunderstorm_csv(table(0, [1.0], 1.0), tmp_path / "gt.csv", PX)
    missing = tmp_path / "no_such_pred.csv"
    assert main([str(missing), str(tmp_path / "gt.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no_such_pred.csv" in err
    assert main([str(tmp_path / "locs.hdf5"), str(tmp_path / "gt.csv")]) == 2
    assert "locs.hdf5" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".hdf5", ".parquet"])
def test_cli_reads_picasso_hdf5_and_parquet(tmp_path, capsys, suffix) -> None:
    gt = table([0, 0, 3], [1.0, 8.0, 4.0], [1.0, 2.0, 6.0])
    pred = table([0, 3, 3], [1.2, 4.0, 9.0], [1.0, 6.1, 9.0])
    write_thunderstorm_csv(gt, tmp_path / "gt.csv", PX)
    write_localizations(pred, tmp_path / f"pred{suffix}", pixel_size=PX, width=16, height=16)
    out = tmp_path / "m.json"
    assert main([str(tmp_path / f"pred{suffix}"), str(tmp_path / "gt.csv"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["tp"], data["fp"], data["fn"]) == (2, 1, 1)
    assert data["rmse_lat"] == pytest.approx(math.sqrt((20**2 + 10**2) / 2), rel=1e-3)


def test_cli_converts_a_picasso_file_in_other_pixels(tmp_path) -> None:
    gt = table([0, 2], [1.0, 8.0], [3.0, 5.0])  # px of 100 nm
    # the same positions in 160 nm pixels: nm from the corner are (x + 0.5) * pixel size
    in_160 = table([0, 2], (gt["x"] + 0.5) * PX / 160 - 0.5, (gt["y"] + 0.5) * PX / 160 - 0.5)
    write_thunderstorm_csv(gt, tmp_path / "gt.csv", PX)
    write_localizations(in_160, tmp_path / "pred.hdf5", pixel_size=160.0, width=8, height=8)
    out = tmp_path / "m.json"
    assert main([str(tmp_path / "pred.hdf5"), str(tmp_path / "gt.csv"), "--pixel-size", "100", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["tp"] == 2 and data["rmse_lat"] == pytest.approx(0.0, abs=1e-3)
