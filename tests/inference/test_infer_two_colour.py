"""``infer --registration``: split-view and two-camera movies localized channel by channel, channel 2 mapped onto
channel 1, against the simulated truth; ratiometric dyes named by their ratio; what a two-colour run refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from decode_mem.infer.__main__ import main
from decode_mem.io.localizations import read_localizations
from decode_mem.register.core import register_beads
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.colours import TwoColourConfig
from decode_mem.simulate.two_colour import simulate_bead_slide, simulate_two_colour

CFG = SimulationConfig(frame_size=(40, 40), density=0.4, photons_mean=6000, photons_std=800, bg=20)
FRAMES = 24


def _setup(tmp, layout: str, dyes: str):
    tc = TwoColourConfig(layout=layout, dyes=dyes, distortion_nm=250)
    g = np.linspace(5, 34, 4)
    gx, gy = np.meshgrid(g, g)
    jitter = np.random.default_rng(3).uniform(-0.7, 0.7, (2, 16))
    beads = simulate_bead_slide(CFG, tc, tmp / "beads.tif", positions=(gx.ravel() + jitter[0], gy.ravel() + jitter[1]),
                                frames=2)
    reg = register_beads([str(p) for p in beads.movies], split=None if layout == "two-files" else layout)
    reg.save(tmp / "reg.json")
    movie = simulate_two_colour(CFG, tc, FRAMES, tmp / "movie.tif", tmp / "gt.csv", seed=9)
    return movie


def _matched(locs, truth, radius: float = 1.5):
    """(index into locs, index into truth) of the per-frame optimal matches closer than ``radius`` px."""
    a, b = [], []
    for f in np.unique(truth["frame"]):
        i, j = np.nonzero(locs["frame"] == f)[0], np.nonzero(truth["frame"] == f)[0]
        if len(i) == 0:
            continue
        d = np.hypot(locs["x"][i, None] - truth["x"][None, j], locs["y"][i, None] - truth["y"][None, j])
        r, c = linear_sum_assignment(d)
        ok = d[r, c] < radius
        a += list(i[r[ok]])
        b += list(j[c[ok]])
    return np.array(a, int), np.array(b, int)


@pytest.mark.parametrize("layout", ["left-right", "two-files"])
def test_each_channel_lands_on_the_truth_in_channel_1s_pixels(tmp_path, layout):
    movie = _setup(tmp_path, layout, "red=0,far_red=1")
    out = tmp_path / "locs"
    assert main([*map(str, movie.movies), "--registration", str(tmp_path / "reg.json"), "--out", str(out),
                 "--format", "csv,picasso", "--device", "cpu", "--engine", "torch", "--quiet"]) == 0
    stem = "movie" if layout == "left-right" else "movie_ch1"
    locs = read_localizations(out / f"{stem}.csv", pixel_size=100)
    truth = read_localizations(movie.truth["truth"], pixel_size=100)
    for channel in (1, 2):
        mine = locs.select(locs["channel"] == channel)
        assert (mine["dye"] == channel).all()
        t = truth.select(truth["dye"] == channel)
        i, j = _matched(mine, t)
        assert len(i) > 0.7 * len(t)
        err = np.hypot(mine["x"][i] - t["x"][j], mine["y"][i] - t["y"][j]) * 100
        assert np.sqrt((err**2).mean()) < 25  # nm: channel 2 too, through the map (its raw pixels are ~250 nm off)
    assert (out / f"{stem}_ch1.hdf5").is_file() and (out / f"{stem}_ch2.yaml").is_file()
    record = json.loads((out / f"{stem}.json").read_text())
    assert record["two_colour"]["dyes"]["dyes"] == {"channel 1": int((locs["channel"] == 1).sum()),
                                                     "channel 2": int((locs["channel"] == 2).sum())}


def test_ratiometric_dyes_are_named_by_their_ratio(tmp_path):
    movie = _setup(tmp_path, "top-bottom", "A=0.25,B=0.5,C=0.75")
    out = tmp_path / "locs"
    assert main([str(movie.movies[0]), "--registration", str(tmp_path / "reg.json"), "--dyes", "A=0.25,B=0.5,C=0.75",
                 "--out", str(out), "--device", "cpu", "--engine", "torch", "--quiet"]) == 0
    locs = read_localizations(out / "movie.csv", pixel_size=100)
    truth = read_localizations(movie.truth["truth"], pixel_size=100)
    inside = (truth["x"] > 3) & (truth["x"] < 36) & (truth["y"] > 3) & (truth["y"] < 36) & (truth["photons"] > 2000)
    truth = truth.select(inside)
    i, j = _matched(locs, truth)
    assert len(i) > 0.8 * len(truth)
    dye, true = locs["dye"][i], truth["dye"][j]
    assert (dye > 0).mean() > 0.85
    assert (dye[dye > 0] == true[dye > 0]).mean() > 0.97
    report = (out / "report.html").read_text()
    assert "dyes of movie" in report and "estimated crosstalk" in report


def test_two_colour_refusals_are_one_line(tmp_path, capsys):
    movie = _setup(tmp_path, "two-files", "a=0,b=1")
    reg = str(tmp_path / "reg.json")
    cases = [([str(movie.movies[0]), "--registration", reg], "in pairs"),
             ([*map(str, movie.movies), "--registration", reg, "--follow"], "follow"),
             ([*map(str, movie.movies), "--dyes", "a=0.2"], "--registration"),
             ([*map(str, movie.movies), "--registration", str(tmp_path / "nope.json")], "no such registration"),
             ([str(movie.movies[0]), str(tmp_path / "beads_ch2.tif"), "--registration", reg], "frames")]
    for argv, needle in cases:
        assert main([*argv, "--out", str(tmp_path / "x"), "--device", "cpu"]) == 2, needle
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (needle, err)
        assert not (tmp_path / "x").exists()
