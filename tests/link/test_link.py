"""Linking: hand-built tables whose links are known, the streamed result equal to a plain greedy over the whole
table, the combined precision against its double sum, file round trips and the CLI's bad inputs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.localizations import read_localizations, write_localizations
from decode_mem.io.table import EmitterTable
from decode_mem.link import DECODE_MEM, INDEPENDENT, ErrorCorrelation, Linker, link_file, link_table
from decode_mem.link.__main__ import main

PX = 100.0


def table(frame, x, y, photons=None, sigma=None) -> EmitterTable:
    n = len(frame)
    cols = {"frame": np.asarray(frame), "x": np.asarray(x, float), "y": np.asarray(y, float),
            "photons": np.full(n, 1000.0) if photons is None else np.asarray(photons, float)}
    if sigma is not None:
        cols["sigma_x"] = cols["sigma_y"] = np.broadcast_to(np.asarray(sigma, float), (n,))
    return EmitterTable.from_arrays(**cols)


def test_dark_frames_up_to_max_dark_are_bridged_and_one_more_splits() -> None:
    t = table([0, 1, 2, 4, 7], [5, 5.01, 5.02, 5.0, 5.01], [5] * 5)  # dark frame 3 (one), frames 5-6 (two)
    group, mol = link_table(t, radius=0.1, max_dark=1)
    assert list(group) == [0, 0, 0, 0, 1]
    assert list(mol.n) == [4, 1] and list(mol.length) == [5, 1]
    group, _ = link_table(t, radius=0.1, max_dark=2)
    assert list(group) == [0, 0, 0, 0, 0]
    group, _ = link_table(t, radius=0.1, max_dark=0)
    assert list(group) == [0, 0, 0, 1, 2]


def test_a_gap_at_the_radius_links_and_just_beyond_it_does_not() -> None:
    t = table([0, 1, 2, 5, 6], [0.0, 0.25, 0.5 + 1e-6, 3.0, 3.0], [0, 0, 0, 0, 0.25])  # exact in float32
    group, _ = link_table(t, radius=0.25, max_dark=1)
    assert list(group) == [0, 0, 1, 2, 2]  # 0.25 apart: linked; 0.250001: not (frame 0 is 0.5 away); along y too


def test_neighbouring_emitters_keep_their_identity_across_a_dark_frame() -> None:
    # A (x = 0) and B (x = 0.2) are closer than the radius; B comes first in each frame and A is dark in frame 1.
    # Picasso's rule (link to the first free localization within the radius, in file order) would link A0 to B1;
    # shortest gap, then shortest distance links B0-B1 first and A0 on to A2 across the dark frame.
    frames = [0, 0, 1, 2, 2, 3, 3]
    x = [0.2, 0.0, 0.2, 0.2, 0.0, 0.21, 0.01]
    group, mol = link_table(table(frames, x, np.zeros(7)), radius=0.25, max_dark=1)
    assert list(group) == [0, 1, 0, 0, 1, 0, 1]
    assert list(mol.n) == [4, 3] and list(mol.length) == [4, 4]


def test_molecule_position_photons_and_counts() -> None:
    t = table([3, 4, 5], [1.0, 1.1, 1.3], [2.0, 2.0, 2.3], photons=[100, 300, 600])
    _, mol = link_table(t, radius=0.5, max_dark=0)
    m = mol.table
    assert len(mol) == 1 and m["frame"][0] == 3 and mol.n[0] == 3 and mol.length[0] == 3
    assert m["photons"][0] == pytest.approx(1000.0)
    assert m["x"][0] == pytest.approx((100 * 1.0 + 300 * 1.1 + 600 * 1.3) / 1000, rel=1e-6)
    assert m["y"][0] == pytest.approx((100 * 2.0 + 300 * 2.0 + 600 * 2.3) / 1000, rel=1e-6)


def double_sum(frames: np.ndarray, w: np.ndarray, s: np.ndarray, rho: ErrorCorrelation) -> float:
    """sqrt(sum_ij w_i w_j s_i s_j rho(|f_i - f_j|)) / sum w: the combined σ written out."""
    lag = np.abs(frames[:, None] - frames[None, :])
    corr = np.where(lag == 0, 1.0, rho.at(np.maximum(lag, 1)))
    return float(np.sqrt(np.sum(np.outer(w * s, w * s) * corr)) / w.sum())


@pytest.mark.parametrize("rho", [DECODE_MEM, INDEPENDENT, ErrorCorrelation((0.5,), 0.1)])
def test_combined_precision_is_the_double_sum_over_the_frames_correlation(rho: ErrorCorrelation) -> None:
    frames = np.array([10, 11, 12, 14, 15, 17, 18, 19, 20, 21])  # dark frames at 13, 16
    rng = np.random.default_rng(1)
    photons = rng.uniform(200, 5000, len(frames))
    sigma = rng.uniform(0.02, 0.1, len(frames))
    t = EmitterTable.from_arrays(frame=frames, x=np.full(len(frames), 3.0), y=np.full(len(frames), 4.0),
                                 photons=photons, sigma_x=sigma, sigma_y=sigma * 2)
    linker = Linker(0.1, max_dark=1, correlation=rho)
    steps = [*linker.feed(t.select(slice(0, 4))), *linker.feed(t.select(slice(4, None))), linker.finish()]
    mols = [s.molecules for s in steps if len(s.molecules)]
    assert len(mols) == 1 and mols[0].n[0] == len(frames)
    m = mols[0].table
    assert m["sigma_x"][0] == pytest.approx(double_sum(frames, photons, sigma, rho), rel=1e-5)
    assert m["sigma_y"][0] == pytest.approx(double_sum(frames, photons, sigma * 2, rho), rel=1e-5)
    if rho is INDEPENDENT:  # independent, equal errors: the familiar 1/√n
        eq = table(frames, np.full(10, 3.0), np.full(10, 4.0), sigma=0.05)
        _, mol = link_table(eq, 0.1, 1, INDEPENDENT)
        assert mol.table["sigma_x"][0] == pytest.approx(0.05 / np.sqrt(10), rel=1e-5)


def greedy_reference(t: EmitterTable, radius: float, max_dark: int, gate: float = 0.0,
                     reach: float = 0.0) -> np.ndarray:
    """The links written plainly: every candidate pair, shortest gap then distance first, each localization one
    successor and one predecessor; molecules numbered by their first localization in frame order. With a
    ``gate``: pairs up to ``reach`` apart within ``gate`` combined σ link too, nearest in combined σ first."""
    f, x, y = t["frame"], t["x"].astype(float), t["y"].astype(float)
    pairs = []
    for i, j in itertools.combinations(range(len(t)), 2):
        a, b = (i, j) if f[i] < f[j] else (j, i)
        d2 = (x[a] - x[b]) ** 2 + (y[a] - y[b]) ** 2
        if not 1 <= f[b] - f[a] <= max_dark + 1:
            continue
        if gate:
            z2 = ((x[a] - x[b]) ** 2 / (t["sigma_x"][a] ** 2 + t["sigma_x"][b] ** 2)
                  + (y[a] - y[b]) ** 2 / (t["sigma_y"][a] ** 2 + t["sigma_y"][b] ** 2))
            if d2 <= radius**2 or (z2 <= gate**2 and d2 <= reach**2):
                pairs.append((f[b] - f[a], z2, a, b))
        elif d2 <= radius**2:
            pairs.append((f[b] - f[a], d2, a, b))
    succ, pred = {}, {}
    for _, _, a, b in sorted(pairs):
        if a not in succ and b not in pred:
            succ[a], pred[b] = b, a
    group = np.full(len(t), -1)
    next_id = 0
    for i in np.argsort(f, kind="stable"):
        if i not in pred:
            k = i
            while True:
                group[k] = next_id
                if k not in succ:
                    break
                k = succ[k]
            next_id += 1
    return group


def test_streamed_links_equal_a_plain_greedy_over_the_whole_table() -> None:
    rng = np.random.default_rng(7)
    n_events = 120
    start = rng.integers(0, 60, n_events)
    length = rng.integers(1, 6, n_events)
    ex, ey = rng.uniform(0, 4, n_events), rng.uniform(0, 4, n_events)  # dense: many candidates compete
    idx = np.repeat(np.arange(n_events), length)
    frames = start[idx] + (np.arange(len(idx)) - np.repeat(np.cumsum(length) - length, length))
    keep = rng.random(len(idx)) > 0.15  # some frames missed
    t = table(frames[keep], ex[idx][keep] + rng.normal(0, 0.05, keep.sum()),
              ey[idx][keep] + rng.normal(0, 0.05, keep.sum())).sorted_by_frame()
    expected = greedy_reference(t, 0.3, 1)
    group, _ = link_table(t, 0.3, 1)
    np.testing.assert_array_equal(group, expected)
    linker = Linker(0.3, 1)  # fed in small, uneven chunks, a frame split between two of them
    steps = [s for a, b in [(0, 7), (7, 50), (50, 51), (51, 200), (200, len(t))]
             for s in linker.feed(t.select(slice(a, b)))] + [linker.finish()]
    np.testing.assert_array_equal(np.concatenate([s.group for s in steps]), expected)
    assert sum(len(s.molecules) for s in steps) == expected.max() + 1
    assert all(s.pairs is not None for s in steps)
    lean = Linker(0.3, 1, pairs=False)  # what link_file uses: the same links, no pairs kept
    lean_steps = [*lean.feed(t), lean.finish()]
    np.testing.assert_array_equal(np.concatenate([s.group for s in lean_steps]), expected)
    assert all(s.pairs is None for s in lean_steps)


def test_the_sigma_gate_links_uncertain_localizations_beyond_the_radius_and_no_precise_ones() -> None:
    # frame 0 -> 1, radius 0.3 px, gate 4 combined σ, reach 1.2 px
    gated = {"sigma_gate": 4.0, "reach": 1.2}
    # 0.35 px apart: an uncertain end (σ 0.1: 3.5 combined σ) links, two precise ends (σ 0.01: 25) do not
    uncertain = table([0, 1], [0.0, 0.35], [0.0, 0.0], sigma=[0.01, 0.1])
    precise = table([0, 1], [0.0, 0.35], [0.0, 0.0], sigma=0.01)
    assert len(set(link_table(uncertain, 0.3, 1, **gated)[0])) == 1
    assert len(set(link_table(uncertain, 0.3, 1)[0])) == 2  # no gate: the radius alone
    assert len(set(link_table(precise, 0.3, 1, **gated)[0])) == 2
    # beyond the reach nothing links, however uncertain
    far = table([0, 1], [0.0, 1.3], [0.0, 0.0], sigma=1.0)
    assert len(set(link_table(far, 0.3, 1, **gated)[0])) == 2
    # within the radius a pair links whatever its σ say
    near = table([0, 1], [0.0, 0.25], [0.0, 0.0], sigma=0.01)
    assert len(set(link_table(near, 0.3, 1, **gated)[0])) == 1
    # the order: of two successors within the radius, the one nearer in combined σ (0.25 px at σ 0.2), not the
    # nearer in nm (0.2 px at σ 0.01: 14 σ)
    t = table([0, 1, 1], [0.0, 0.2, 0.25], [0.0, 0.0, 0.0], sigma=[0.01, 0.01, 0.2])
    group, _ = link_table(t, 0.3, 1, **gated)
    assert group[0] == group[2] != group[1]
    assert link_table(t, 0.3, 1)[0][1] == 0  # without the gate the nearer in nm
    with pytest.raises(ConfigError, match="sigma gate"):
        Linker(0.3, 1, sigma_gate=-1.0)
    with pytest.raises(ConfigError, match="reach"):
        Linker(0.3, 1, sigma_gate=4.0, reach=0.2)


def test_the_sigma_gate_treats_a_missing_or_unusable_sigma_as_the_radius_alone() -> None:
    gated = {"sigma_gate": 4.0, "reach": 1.2}
    for sigmas in ([0.1, np.nan], [0.1, np.inf], [0.0, 0.0]):  # no combined variance that is finite and > 0
        beyond = table([0, 1], [0.0, 0.35], [0.0, 0.0], sigma=sigmas)  # 0.35 px: beyond the 0.3 radius
        within = table([0, 1], [0.0, 0.25], [0.0, 0.0], sigma=sigmas)
        bad = sigmas
        assert len(set(link_table(beyond, 0.3, 1, **gated)[0])) == 2, bad
        assert len(set(link_table(within, 0.3, 1, **gated)[0])) == 1, bad
    # without σ columns at all: the radius alone, ordered by distance
    t = table([0, 1, 1], [0.0, 0.2, 0.25], [0.0, 0.0, 0.0])
    group, _ = link_table(t, 0.3, 1, **gated)
    assert group[0] == group[1] != group[2]


def test_link_file_says_which_gate_it_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "l.parquet"
    write_localizations(blinking(), src, pixel_size=PX)
    auto = link_file(src, tmp_path / "a", radius="auto")
    assert auto.sigma_gate == 4.0 and auto.reach_nm == pytest.approx(2 * auto.radius_nm)
    given = link_file(src, tmp_path / "g", radius=20.0)
    assert given.sigma_gate == 0.0 and given.reach_nm == 20.0  # a radius in nm: the radius alone
    both = link_file(src, tmp_path / "b", radius=20.0, sigma_gate=3.0)
    assert both.sigma_gate == 3.0 and both.reach_nm == pytest.approx(40.0)
    no_sigma = tmp_path / "no_sigma.parquet"
    write_localizations(table([0, 1], [1, 1], [1, 1]), no_sigma, pixel_size=PX)
    assert link_file(no_sigma, tmp_path / "n", radius=20.0).sigma_gate == 0.0
    out = tmp_path / "refused"
    assert main([str(no_sigma), "--out", str(out), "--radius", "20", "--sigma_gate", "4"]) == 2
    _one_error_line(capsys, "sigma gate needs")
    assert not out.exists() or not any(out.iterdir())


def test_streamed_gated_links_equal_a_plain_greedy_over_the_whole_table() -> None:
    rng = np.random.default_rng(11)
    n_events = 100
    start = rng.integers(0, 50, n_events)
    length = rng.integers(1, 6, n_events)
    ex, ey = rng.uniform(0, 4, n_events), rng.uniform(0, 4, n_events)
    idx = np.repeat(np.arange(n_events), length)
    frames = start[idx] + (np.arange(len(idx)) - np.repeat(np.cumsum(length) - length, length))
    sigma = rng.choice([0.02, 0.05, 0.15], len(idx))  # mixed precision: some pairs beyond the radius link
    t = table(frames, ex[idx] + rng.normal(0, 1, len(idx)) * sigma, ey[idx] + rng.normal(0, 1, len(idx)) * sigma,
              sigma=sigma).sorted_by_frame()
    expected = greedy_reference(t, 0.2, 1, gate=4.0, reach=0.8)
    assert not np.array_equal(expected, greedy_reference(t, 0.2, 1))  # the gate changes links here
    np.testing.assert_array_equal(link_table(t, 0.2, 1, sigma_gate=4.0, reach=0.8)[0], expected)
    linker = Linker(0.2, 1, sigma_gate=4.0, reach=0.8)
    steps = [s for a, b in [(0, 9), (9, 60), (60, 61), (61, len(t))]
             for s in linker.feed(t.select(slice(a, b)))] + [linker.finish()]
    np.testing.assert_array_equal(np.concatenate([s.group for s in steps]), expected)


def test_localizations_out_of_frame_order_across_chunks_are_an_error() -> None:
    linker = Linker(0.3, 1)
    list(linker.feed(table([5, 6, 7], [0, 0, 0], [0, 0, 0])))
    with pytest.raises(StackError, match="not in frame order"):
        list(linker.feed(table([2, 3], [0, 0], [0, 0])))


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Linker(0.0)
    with pytest.raises(ConfigError):
        Linker(0.1, max_dark=-1)


def blinking(seed: int = 0) -> EmitterTable:
    rng = np.random.default_rng(seed)
    frames = np.repeat(np.arange(40), 3)
    x = np.tile([10.0, 20.0, 30.0], 40) + rng.normal(0, 0.03, 120)
    y = np.tile([10.0, 12.0, 30.0], 40) + rng.normal(0, 0.03, 120)
    return EmitterTable.from_arrays(frame=frames, x=x, y=y, photons=np.full(120, 1000.0),
                                    sigma_x=np.full(120, 0.03), sigma_y=np.full(120, 0.03), prob=np.ones(120))


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".hdf5"])
def test_files_in_every_format_hold_molecules_and_every_localizations_group(tmp_path: Path, suffix: str) -> None:
    t = blinking()
    src = tmp_path / f"locs{suffix}"
    write_localizations(t, src, pixel_size=PX, width=40, height=40, frames=40)
    res = link_file(src, tmp_path / "out", radius=20.0, max_dark=1, pixel_size=PX)
    assert res.localizations == 120 and res.molecules == 3
    mols = read_localizations(res.molecules_path, pixel_size=PX)
    assert sorted(np.round(mols["x"]).astype(int)) == [10, 20, 30]
    assert np.allclose(mols["photons"], 40_000)
    locs = read_localizations(res.groups_path, pixel_size=PX)
    assert len(locs) == 120
    if suffix == ".hdf5":
        import h5py

        with h5py.File(res.molecules_path) as f:
            rec = f["locs"][()]
        assert {"len", "n", "lpx", "lpy", "group", "photon_rate"} <= set(rec.dtype.names)
        assert list(rec["n"]) == [40, 40, 40] and list(rec["len"]) == [40, 40, 40]
        with h5py.File(res.groups_path) as f:
            assert sorted(set(f["locs"]["group"])) == [0, 1, 2]
    else:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        read = pacsv.read_csv if suffix == ".csv" else pq.read_table
        mol = read(res.molecules_path).to_pydict()
        assert mol["n"] == [40, 40, 40] and mol["len"] == [40, 40, 40] and sorted(mol["group"]) == [0, 1, 2]
        assert sorted(set(read(res.groups_path).to_pydict()["group"])) == [0, 1, 2]


def test_auto_radius_is_a_multiple_of_the_median_precision(tmp_path: Path) -> None:
    src = tmp_path / "l.parquet"
    write_localizations(blinking(), src, pixel_size=PX)
    res = link_file(src, tmp_path / "o", radius="auto")
    assert res.radius_nm == pytest.approx(4.0 * 0.03 * PX, rel=1e-4) and res.molecules == 3
    assert "4 combined σ" in res.radius_source


def _one_error_line(capsys: pytest.CaptureFixture[str], needle: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_cli_bad_inputs_are_one_line_exit_2_and_nothing_written(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    no_frame = tmp_path / "no_frame.csv"
    no_frame.write_text('"id","x [nm]","y [nm]"\n1,10,20\n')
    assert main([str(no_frame), "--out", str(out), "--radius", "20"]) == 2
    _one_error_line(capsys, "frame")
    empty = tmp_path / "empty.parquet"
    write_localizations(EmitterTable.empty(), empty, pixel_size=PX)
    assert main([str(empty), "--out", str(out), "--radius", "20"]) == 2
    _one_error_line(capsys, "no localizations")
    good = tmp_path / "good.parquet"
    write_localizations(blinking(), good, pixel_size=PX)
    for radius in ("0", "-5", "nan", "wide"):
        assert main([str(good), "--out", str(out), "--radius", radius]) == 2
        _one_error_line(capsys, "radius")
    for gate in ("-1", "nan"):
        assert main([str(good), "--out", str(out), "--sigma_gate", gate]) == 2
        _one_error_line(capsys, "--sigma_gate")
    no_sigma = tmp_path / "no_sigma.parquet"
    write_localizations(table([0, 1], [1, 1], [1, 1]), no_sigma, pixel_size=PX)
    assert main([str(no_sigma), "--out", str(out)]) == 2
    _one_error_line(capsys, "--radius")
    assert not out.exists() or not any(out.iterdir())
    assert main([str(good), "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["good_group.parquet", "good_link.parquet"]


@pytest.mark.parametrize("max_dark", [0, 1, 2])
def test_fast_paths_equal_the_plain_greedy_and_the_sums_written_out(max_dark: int) -> None:
    """The compiled search (x strips of a frame window), the isolated-pair shortcut of the greedy and the running
    sums give what the plain greedy and per-molecule sums give, on a random table with dense and sparse parts, fed in
    uneven chunks."""
    rng = np.random.default_rng(11 + max_dark)
    n_events = 500
    start = rng.integers(0, 150, n_events)
    length = rng.geometric(1 / 3, n_events)
    dense = rng.random(n_events) < 0.4  # 40 % of the events crowd a 2 x 2 px corner
    ex = np.where(dense, rng.uniform(0, 2, n_events), rng.uniform(-20, 40, n_events))
    ey = np.where(dense, rng.uniform(0, 2, n_events), rng.uniform(-20, 40, n_events))
    idx = np.repeat(np.arange(n_events), length)
    frames = start[idx] + (np.arange(len(idx)) - np.repeat(np.cumsum(length) - length, length))
    keep = rng.random(len(idx)) > 0.2
    idx, frames = idx[keep], frames[keep]
    n = len(idx)
    t = EmitterTable.from_arrays(frame=frames, x=ex[idx] + rng.normal(0, 0.08, n),
                                 y=ey[idx] + rng.normal(0, 0.08, n), photons=rng.uniform(100, 5000, n),
                                 sigma_x=rng.uniform(0.02, 0.1, n), sigma_y=rng.uniform(0.02, 0.1, n)).sorted_by_frame()
    expected = greedy_reference(t, 0.3, max_dark)
    linker = Linker(0.3, max_dark, DECODE_MEM)
    cuts = np.sort(rng.choice(np.arange(1, len(t)), 6, replace=False))
    bounds = [0, *cuts.tolist(), len(t)]
    steps = [s for a, b in itertools.pairwise(bounds) for s in linker.feed(t.select(slice(a, b)))]
    steps.append(linker.finish())
    group = np.concatenate([s.group for s in steps])
    np.testing.assert_array_equal(group, expected)
    mol_group = np.concatenate([s.molecules.group for s in steps])
    order = np.argsort(mol_group)
    assert np.array_equal(mol_group[order], np.arange(expected.max() + 1))
    mol = EmitterTable.concat([s.molecules.table for s in steps]).select(order)
    n_of = np.concatenate([s.molecules.n for s in steps])[order]
    len_of = np.concatenate([s.molecules.length for s in steps])[order]
    w = np.maximum(t["photons"].astype(float), 1.0)
    for g in range(expected.max() + 1):
        k = np.nonzero(expected == g)[0]
        f = t["frame"][k]
        assert n_of[g] == len(k) and len_of[g] == f.max() - f.min() + 1 and mol["frame"][g] == f.min()
        assert mol["x"][g] == pytest.approx(np.sum(w[k] * t["x"][k]) / w[k].sum(), rel=1e-6, abs=1e-9)
        assert mol["y"][g] == pytest.approx(np.sum(w[k] * t["y"][k]) / w[k].sum(), rel=1e-6, abs=1e-9)
        assert mol["photons"][g] == pytest.approx(t["photons"][k].sum(), rel=1e-6)
        assert mol["sigma_x"][g] == pytest.approx(double_sum(f, w[k], t["sigma_x"][k].astype(float), DECODE_MEM),
                                                  rel=1e-5)


@pytest.mark.parametrize("where", ["writer", "reader"])
def test_a_failure_mid_file_is_raised_and_leaves_no_linked_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                where: str) -> None:
    """Reading, linking and writing run on three threads: an error in the writer's thread (a full disk) or the
    reader's (a damaged chunk) after the first chunks still reaches the caller, and neither file appears."""
    import decode_mem.link.core as core
    import decode_mem.link.files as files

    monkeypatch.setattr(core, "WORK_ROWS", 16)
    monkeypatch.setattr(files, "WORK_ROWS", 16)
    src = tmp_path / "l.parquet"
    write_localizations(blinking(), src, pixel_size=PX)
    if where == "writer":
        real = files.open_writer_with_columns

        def failing(path, more, **options):
            writer = real(path, more, **options)
            calls = itertools.count()
            original = writer.write

            def write(table, columns):
                if next(calls) == 2:
                    raise OSError("No space left on device")
                original(table, columns)

            writer.write = write
            return writer

        monkeypatch.setattr(files, "open_writer_with_columns", failing)
        expected: type[Exception] = OSError
    else:
        real_iter = files.iter_localizations

        def damaged(*args, **kwargs):
            for k, chunk in enumerate(real_iter(*args, **kwargs)):
                if k == 3:
                    raise StackError("damaged chunk")
                yield chunk

        monkeypatch.setattr(files, "iter_localizations", damaged)
        expected = StackError
    with pytest.raises(expected):
        link_file(src, tmp_path / "out", radius=20.0)
    assert not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("per_frame", "side", "radius", "window"), [(300, 128.0, 0.3, 2), (50, 8.0, 1.0, 2),
                                                                    (40, 32.0, 2.5, 4)])
def test_candidate_pairs_are_every_pair_within_the_radius_once(per_frame, side, radius, window) -> None:
    """The search against all pairs by brute force: every pair within ``radius`` whose frames differ by 1 to
    ``window``, none twice, none from one frame, beyond the window or beyond the radius (dense fields included,
    where a strip holds many rows within the window); a row with a NaN coordinate in none."""
    from decode_mem.link.core import candidate_pairs

    rng = np.random.default_rng(per_frame)
    frame = np.repeat(np.arange(8), per_frame)
    x, y = rng.uniform(0, side, len(frame)), rng.uniform(0, side, len(frame))
    follow = rng.random(len(frame) - per_frame) < 0.5  # half the emitters stay on into the next frame
    x[per_frame:] = np.where(follow, x[:-per_frame] + rng.normal(0, radius / 4, len(follow)), x[per_frame:])
    y[per_frame:] = np.where(follow, y[:-per_frame] + rng.normal(0, radius / 4, len(follow)), y[per_frame:])
    x[5], y[per_frame + 7] = np.nan, np.nan
    a, b = candidate_pairs(x, y, frame, radius, window)
    found = list(zip(a.tolist(), b.tolist(), strict=True))
    assert len(found) == len(set(found))
    i, j = np.triu_indices(len(frame), 1)
    with np.errstate(invalid="ignore"):
        near = ((frame[j] - frame[i] >= 1) & (frame[j] - frame[i] <= window)
                & ((x[i] - x[j]) ** 2 + (y[i] - y[j]) ** 2 <= radius ** 2))
    truth = set(zip(i[near].tolist(), j[near].tolist(), strict=True))
    assert truth and truth == set(found)


def test_the_window_search_leaves_out_pairs_ending_before_the_new_rows() -> None:
    """``window_pairs(first_b=k)``: only pairs whose later row is one of the rows from ``k`` on (the linker's new
    rows; the tail's rows were linked before)."""
    from decode_mem.link.kernels import window_pairs

    frame = np.array([0, 0, 1, 1, 2, 2])
    x = np.array([0.0, 5.0, 0.1, 5.1, 0.2, 5.2])
    a, b = window_pairs(x, np.zeros(6), frame, 0.5, 2, 0)
    assert sorted(zip(a.tolist(), b.tolist(), strict=True)) == [(0, 2), (0, 4), (1, 3), (1, 5), (2, 4), (3, 5)]
    a, b = window_pairs(x, np.zeros(6), frame, 0.5, 2, 4)
    assert sorted(zip(a.tolist(), b.tolist(), strict=True)) == [(0, 4), (1, 5), (2, 4), (3, 5)]


def test_a_localization_without_sigma_leaves_other_molecules_precision_alone() -> None:
    """Only a molecule with a localization without σ gets a NaN σ. The numpy sums took the first working row's σ
    as the 'predecessor' of every row without one (times a zero weight): a NaN σ there made NaN the σ of every
    molecule starting in that block, linked or not."""
    t = table([0, 0, 1, 2], [0.0, 10.0, 20.0, 30.0], [0.0, 0.0, 0.0, 0.0], sigma=[np.nan, 0.1, 0.1, 0.1])
    _, molecules = link_table(t, 0.3, 1, DECODE_MEM)
    sigma = molecules.table["sigma_x"]
    assert np.isnan(sigma[0]) and np.all(np.isfinite(sigma[1:])), sigma
    np.testing.assert_allclose(sigma[1:], 0.1, rtol=1e-6)
    linked = table([0, 0, 1, 1], [0.0, 10.0, 0.0, 10.0], [0.0] * 4, sigma=[np.nan, 0.1, 0.1, 0.1])
    group, molecules = link_table(linked, 0.3, 1, DECODE_MEM)
    assert group.tolist() == [0, 1, 0, 1] and np.isnan(molecules.table["sigma_x"][0])
    assert np.isfinite(molecules.table["sigma_x"][1])


def test_ties_are_broken_by_row_order_so_any_chunking_gives_the_same_links() -> None:
    """Whole-number positions: many pairs tie in x and in distance. The links of the whole table, fed frame by
    frame and in 7-frame chunks, are the same (an unstable sort by x made them depend on the chunking)."""
    rng = np.random.default_rng(5)
    frame = np.repeat(np.arange(60), 200)
    t = table(frame, rng.integers(0, 15, len(frame)).astype(float), rng.integers(0, 15, len(frame)).astype(float))
    whole, _ = link_table(t, 1.0, 1)
    for size in (1, 7):
        linker = Linker(1.0, 1)
        steps = [s for f0 in range(0, 60, size) for s in linker.feed(t.select((frame >= f0) & (frame < f0 + size)))]
        steps.append(linker.finish())
        np.testing.assert_array_equal(np.concatenate([s.group for s in steps]), whole)


def test_a_pair_exactly_at_the_radius_is_found_wherever_its_x_lies() -> None:
    """The x strip is decided on dx² as the distance is: a pair at the radius (up to rounding) is a candidate
    whether its x difference is exact or rounds (-1e-20 and 0.3: x - radius rounds to 0.0)."""
    from decode_mem.link.kernels import window_pairs

    for x in ([0.0, 0.3], [-1e-20, 0.3], [0.3, 0.0], [0.3, -1e-20]):
        a, b = window_pairs(np.array(x), np.zeros(2), np.array([0, 1]), 0.3, 1, 0)
        assert (a.tolist(), b.tolist()) == ([0], [1]), x


def test_the_largest_prob_ignores_a_nan_prob_within_a_block_as_across_blocks() -> None:
    """A molecule over frames 0-2 (prob 0.4, 0.9, NaN) and one far away in frame 3: linked whole, frames 0-2 are
    one block (the numpy sums let the NaN win there); fed frame by frame, each its own (NaN lost across blocks)."""
    t = EmitterTable.from_arrays(frame=np.array([0, 1, 2, 3]), x=np.array([0.0, 0.0, 0.0, 50.0]), y=np.zeros(4),
                                 photons=np.full(4, 1e3), prob=np.array([0.4, 0.9, np.nan, 0.5]))
    _, whole = link_table(t, 0.3, 1)
    linker = Linker(0.3, 1)
    steps = [s for f in range(4) for s in linker.feed(t.select(slice(f, f + 1)))] + [linker.finish()]
    framewise = EmitterTable.concat([s.molecules.table for s in steps])
    assert whole.table["prob"].tolist() == pytest.approx([0.9, 0.5])
    assert framewise["prob"].tolist() == pytest.approx([0.9, 0.5])


def test_a_long_link_hands_the_heaps_free_pages_back_as_it_goes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc keeps the heap the reading, linking and writing threads free in turn; without handing its free pages
    back, a link's RssAnon grew with the table (10^8 rows: 220 -> 475 MB, benchmarks/results/
    postprocess_stream.png at a7ab26b). ``link_file`` hands them back every ``TRIM_EVERY`` linked chunks."""
    import decode_mem.link.files as files
    from decode_mem.link.core import WORK_ROWS

    chunks = 2 * files.TRIM_EVERY + 1
    rng = np.random.default_rng(0)
    n = chunks * WORK_ROWS
    frame = np.arange(n) // 100
    src = tmp_path / "l.parquet"
    write_localizations(table(frame, rng.uniform(0, 500, n), rng.uniform(0, 500, n)), src, pixel_size=PX)
    calls = []
    monkeypatch.setattr(files, "release_free_heap", lambda: calls.append(1) or True)
    res = link_file(src, tmp_path / "out", radius=20.0)
    assert res.localizations == n
    assert len(calls) == 2  # 2 x TRIM_EVERY + 1 chunks linked and the rest: after the TRIM_EVERY-th and its double


def test_without_numba_the_linker_runs_as_plain_python_gives_the_same_links_and_says_so() -> None:
    """numba is a core dependency; where it cannot be imported (a lent GPU machine gets only the wheels it lacks)
    the kernels run as plain Python: the same groups and σ as compiled, and a warning naming numba."""
    import subprocess
    import sys

    code = ("import sys, warnings, json; sys.modules['numba'] = None\n"
            "import numpy as np\n"
            "from decode_mem.io.table import EmitterTable\n"
            "from decode_mem.link import DECODE_MEM, link_table\n"
            "from decode_mem.link.kernels import COMPILED\n"
            "r = np.random.default_rng(3); n = 600\n"
            "t = EmitterTable.from_arrays(frame=np.sort(r.integers(0, 60, n)), x=r.uniform(0, 6, n), "
            "y=r.uniform(0, 6, n), photons=r.uniform(100, 3000, n), sigma_x=r.uniform(0.02, 0.1, n), "
            "sigma_y=r.uniform(0.02, 0.1, n))\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    g, m = link_table(t, 0.3, 1, DECODE_MEM, sigma_gate=4.0, reach=0.6)\n"
            "print(json.dumps({'compiled': COMPILED, 'group': g.tolist(), 'sigma': m.table['sigma_x'].tolist(), "
            "'warned': [str(w.message) for w in seen if 'numba' in str(w.message)][:1]}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    plain = json.loads(done.stdout.splitlines()[-1])
    assert plain["compiled"] is False and "pip install numba" in plain["warned"][0]
    rng = np.random.default_rng(3)
    n = 600
    t = EmitterTable.from_arrays(frame=np.sort(rng.integers(0, 60, n)), x=rng.uniform(0, 6, n),
                                 y=rng.uniform(0, 6, n), photons=rng.uniform(100, 3000, n),
                                 sigma_x=rng.uniform(0.02, 0.1, n), sigma_y=rng.uniform(0.02, 0.1, n))
    group, molecules = link_table(t, 0.3, 1, DECODE_MEM, sigma_gate=4.0, reach=0.6)
    np.testing.assert_array_equal(plain["group"], group)
    np.testing.assert_allclose(plain["sigma"], molecules.table["sigma_x"], rtol=1e-6)
    assert len(set(group.tolist())) < n  # links were made
