"""Structures (rings, grids, filaments of blinking sites) and stage drift, measured from the ground truth."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree
from skimage.registration import phase_cross_correlation

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.drift import read_drift_csv, write_drift_csv
from decode_mem.io.localizations import read_localizations
from decode_mem.simulate import MovieSimulator, SimulationConfig, simulate_movie, simulate_stack
from decode_mem.simulate.emitters import seeded_generator
from decode_mem.simulate.sites import make_sites
from decode_mem.simulate.stage_drift import StageDrift
from decode_mem.simulate.structures import StructureConfig

PX = 100.0  # nm, the default camera pixel


def _config(kind: str, **kw: object) -> SimulationConfig:
    structure = {"kind": kind, "off_time": kw.pop("off_time", 6.0), **kw.pop("structure", {})}  # type: ignore[dict-item]
    return SimulationConfig(frame_size=kw.pop("frame_size", (40, 40)), structure=structure, **kw)  # type: ignore[arg-type]


def _sample_positions(tmp_path: Path, config: SimulationConfig, frames: int, seed: int = 0) -> np.ndarray:
    """(n, 2) nm: the distinct positions in the sample, from the written ground truth minus the written drift."""
    result = simulate_stack(config, frames, tmp_path / "s.tif", tmp_path / "gt.csv", seed=seed, block=17)
    gt = read_localizations(result.gt, pixel_size=PX)
    xy = np.column_stack([gt["x"], gt["y"]]).astype(np.float64) * PX
    if result.drift is not None:
        frame, dxdy = read_drift_csv(result.drift)
        assert np.array_equal(frame, np.arange(frames))
        xy -= dxdy[gt["frame"]]
    return _distinct(xy, 0.5)


def _labels(xy: np.ndarray, link: float) -> np.ndarray:
    """Single-linkage clusters: points closer than ``link`` (directly or through others) share a label."""
    pairs = cKDTree(xy).query_pairs(link, output_type="ndarray")
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(xy), len(xy)))
    return connected_components(graph, directed=False)[1]


def _distinct(xy: np.ndarray, tol: float) -> np.ndarray:
    """One point per group of points closer than ``tol`` (their mean)."""
    labels = _labels(xy, tol)
    counts = np.bincount(labels)
    return np.column_stack([np.bincount(labels, xy[:, i]) / counts for i in range(2)])


def _groups(xy: np.ndarray, link: float) -> list[np.ndarray]:
    labels = _labels(xy, link)
    return [xy[labels == k] for k in np.unique(labels)]


def test_ring_diameter_and_eightfold_symmetry(tmp_path: Path) -> None:
    sites = _sample_positions(tmp_path, _config("rings", drift_nm=150.0, drift_frames=100.0), 120)
    rings = [g for g in _groups(sites, 60.0) if len(g) == 8]  # complete rings (all 8 sites seen, in the frame)
    assert len(rings) >= 5
    for ring in rings:
        r = np.linalg.norm(ring - ring.mean(0), axis=1)
        np.testing.assert_allclose(2 * r, 107.0, atol=0.5)  # the ring's diameter, from drift-corrected positions
        angles = np.sort(np.arctan2(*(ring - ring.mean(0)).T[::-1]))
        np.testing.assert_allclose(np.diff(angles), 2 * np.pi / 8, atol=0.01)


def test_grid_spacing_and_shape(tmp_path: Path) -> None:
    sites = _sample_positions(tmp_path, _config("grids", structure={"grid_shape": [3, 4]}, drift_nm=80.0), 120)
    grids = [g for g in _groups(sites, 25.0) if len(g) == 12]
    assert len(grids) >= 5
    for grid in grids:
        d, _ = cKDTree(grid).query(grid, k=2)
        np.testing.assert_allclose(d[:, 1], 20.0, atol=0.5)  # nearest neighbour: the 20 nm spacing
        # a centred 3 x 4 grid along its own axes: sum of squares 3·(1.5² + 0.5² + 0.5² + 1.5²)·s² = 15 s²
        # across the 4 columns and 4·(1² + 0 + 1²)·s² = 8 s² across the 3 rows, whatever the rotation
        spread = np.sort(np.linalg.svd(grid - grid.mean(0), compute_uv=False))
        np.testing.assert_allclose(spread, [math.sqrt(8) * 20.0, math.sqrt(15) * 20.0], atol=0.5)


def test_filaments_are_smooth_chains_of_sites() -> None:
    cfg = StructureConfig(kind="filaments", density=0.2, filament_spacing=5.0, filament_persistence=2000.0)
    sites = make_sites(cfg, ((0.0, 100.0), (0.0, 100.0)), PX, None, seeded_generator(3, 0))
    assert len(sites) > 1000
    for k in torch.unique(sites.structure).tolist()[:5]:
        xy = torch.stack([sites.x, sites.y], 1)[sites.structure == k].numpy() * PX
        step = np.diff(xy, axis=0)
        inside_runs = np.linalg.norm(step, axis=1) < 6.0  # consecutive sites (a filament may leave and re-enter)
        np.testing.assert_allclose(np.linalg.norm(step[inside_runs], axis=1), 5.0, atol=1e-6)
        turn = np.diff(np.unwrap(np.arctan2(step[:, 1], step[:, 0])))[inside_runs[1:] & inside_runs[:-1]]
        assert np.abs(turn).max() < 6 * math.sqrt(5.0 / 2000.0)  # smooth: no kinks


def test_filament_sites_in_the_ground_truth_are_continuous(tmp_path: Path) -> None:
    cfg = _config("filaments", frame_size=(24, 24), off_time=2.0, structure={"density": 1.0})
    sites = _sample_positions(tmp_path, cfg, 40)
    d, _ = cKDTree(sites).query(sites, k=2)
    assert np.median(d[:, 1]) == pytest.approx(5.0, abs=0.1)  # a site every 5 nm along the curve
    assert len(sites) > 500


def test_sites_blink_again_and_again() -> None:
    on, off, frames = 2.0, 20.0, 400
    cfg = _config("rings", frame_size=(32, 32), off_time=off, on_time=on)
    _, gt, _ = simulate_movie(cfg, frames, seed=4)
    key = np.round(np.column_stack([gt["x"], gt["y"]]).astype(np.float64), 4)
    _, site, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    site = site.reshape(-1)
    blinks = np.zeros(len(counts))
    for s in range(len(counts)):
        f = np.sort(gt["frame"][site == s])
        blinks[s] = 1 + np.count_nonzero(np.diff(f) > 1)  # runs of consecutive frames
    expected = frames / (on + off)  # renewal rate of an on-off cycle
    assert np.mean(blinks >= 2) > 0.95
    assert 0.7 * expected < blinks.mean() < 1.1 * expected  # runs merge when a dark time spans no frame


def test_drift_moves_the_frames_and_the_ground_truth() -> None:
    cfg = _config("grids", frame_size=(48, 48), off_time=0.2, on_time=50.0, photons_std=0.0, drift_nm=300.0,
                  drift_frames=60.0, structure={"density": 2.0})
    sim = MovieSimulator(cfg, seed=2)
    first, last = sim.block(0, 1), sim.block(59, 60)
    drift = sim.drift_nm(0, 60)
    assert first.drift is not None and np.array_equal(last.drift, drift[-1:])
    np.testing.assert_array_equal(drift[0], 0.0)
    moved = (drift[-1] - drift[0]) / PX
    assert np.linalg.norm(moved) > 2.0
    shift, _, _ = phase_cross_correlation((last.expected[0] - sim.bg).numpy(), (first.expected[0] - sim.bg).numpy(),
                                          upsample_factor=20)
    # (row, col) -> (x, y); blinks and the structures entering or leaving at the edges differ a little
    np.testing.assert_allclose(shift[::-1], moved, atol=0.5)


def test_ground_truth_of_a_drifting_movie_is_shifted_by_the_drift() -> None:
    base = SimulationConfig(frame_size=(24, 24), density=2.0)
    still = MovieSimulator(base, seed=9).block(0, 30).gt
    moving_sim = MovieSimulator(replace(base, drift_nm=60.0, drift_frames=30.0), seed=9)
    moving = moving_sim.block(0, 30).gt
    drift = moving_sim.drift_nm(0, 30) / PX
    # the same emitters (uniform placement does not depend on the drift): match rows by frame and photons
    key = lambda t: [(int(f), float(p)) for f, p in zip(t["frame"], t["photons"], strict=True)]  # noqa: E731
    where = {k: i for i, k in enumerate(key(still))}
    pairs = np.array([(where[k], j) for j, k in enumerate(key(moving)) if k in where])
    assert len(pairs) > 0.8 * len(moving)
    f = moving["frame"][pairs[:, 1]]
    for axis, name in enumerate("xy"):
        np.testing.assert_allclose(moving[name][pairs[:, 1]] - still[name][pairs[:, 0]], drift[f, axis], atol=1e-4)


def test_structured_movie_is_deterministic_and_block_independent(tmp_path: Path) -> None:
    cfg = _config("rings", frame_size=(24, 28), drift_nm=50.0)
    a, gta, _ = simulate_movie(cfg, 45, seed=3, block=45)
    b, gtb, _ = simulate_movie(cfg, 45, seed=3, block=4)
    prefix, gtp, _ = simulate_movie(cfg, 20, seed=3, block=7)
    other, _, _ = simulate_movie(cfg, 45, seed=4)
    assert np.array_equal(a, b) and np.array_equal(prefix, a[:20]) and not np.array_equal(a, other)
    for name in gta.names:
        np.testing.assert_array_equal(gta[name], gtb[name])
    np.testing.assert_array_equal(gtp["x"], gta["x"][gta["frame"] < 20])
    d1 = simulate_stack(cfg, 45, tmp_path / "a.tif", tmp_path / "a.csv", seed=3, block=45).drift
    d2 = simulate_stack(cfg, 45, tmp_path / "b.tif", tmp_path / "b.csv", seed=3, block=4).drift
    assert d1 == tmp_path / "a_drift.csv" and d1.read_bytes() == d2.read_bytes()


def test_stage_drift_is_smooth_and_about_the_requested_size() -> None:
    sizes = []
    for seed in range(20):
        d = StageDrift.draw(100.0, 1000.0, seed, 8)(np.arange(1001))
        assert np.array_equal(d[0], [0.0, 0.0])
        assert np.abs(np.diff(d, 2, axis=0)).max() < 0.05  # nm per frame²: smooth, no jumps
        sizes.append(np.linalg.norm(d[-1]))
    assert 50 < np.median(sizes) < 150


def test_no_drift_file_without_drift_and_none_structure_unchanged(tmp_path: Path) -> None:
    result = simulate_stack(SimulationConfig(frame_size=(16, 16)), 5, tmp_path / "s.tif", tmp_path / "gt.csv")
    assert result.drift is None and not (tmp_path / "gt_drift.csv").exists()
    assert SimulationConfig().structure == StructureConfig()  # the default: uniform emitters


def test_structure_config_forms_and_errors() -> None:
    assert SimulationConfig.from_dict({"structure": "rings"}).structure.kind == "rings"
    cfg = SimulationConfig.from_dict({"structure": {"kind": "grids", "grid_shape": [4, 5]}, "drift_nm": 100})
    assert cfg.structure.grid_shape == (4, 5) and cfg.structure.density == 0.5
    assert SimulationConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="ring_diameter"):
        SimulationConfig.from_dict({"structure": {"kind": "rings", "ring_diametr": 100}})
    with pytest.raises(ConfigError, match="kind"):
        SimulationConfig.from_dict({"structure": "pores"})
    with pytest.raises(ConfigError, match="drift_nm"):
        SimulationConfig(drift_nm=-1.0)


def test_drift_table_round_trip_and_bad_file(tmp_path: Path) -> None:
    dxdy = np.array([[0.0, 0.0], [1.25, -3.5], [2.0, -7.125]])
    path = write_drift_csv(tmp_path / "d.csv", np.arange(3), dxdy)
    assert path.read_text().splitlines()[:2] == ['"frame","dx [nm]","dy [nm]"', "1,0.0000,0.0000"]
    frames, back = read_drift_csv(path)
    assert np.array_equal(frames, [0, 1, 2]) and np.array_equal(back, dxdy)
    (tmp_path / "bad.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(StackError, match="not a drift table"):
        read_drift_csv(tmp_path / "bad.csv")
