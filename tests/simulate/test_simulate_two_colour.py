"""Two-colour simulation: the truth of each channel is the sample's through the true mapping, photons are shared by the
dyes' ratios, the files hold the halves where the layout says, and blocks change nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decode_mem.errors import ConfigError
from decode_mem.io.channels import parse_dyes, preset_regions
from decode_mem.io.localizations import read_localizations
from decode_mem.io.stack import open_stack
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.colours import ChannelMapping, TwoColourConfig
from decode_mem.simulate.two_colour import bead_slide, simulate_bead_slide, simulate_two_colour

CFG = SimulationConfig(frame_size=(40, 48), density=0.6, photons_mean=4000, photons_std=800, bg=20)


def test_mapping_field_reaches_the_distortion_asked_for():
    m = ChannelMapping.draw((128, 96), 100.0, TwoColourConfig(distortion_nm=300))
    fx, fy = m.field(*m.grid(65))
    assert np.hypot(fx, fy).max() * 100 == pytest.approx(300, rel=1e-9)
    again = ChannelMapping.from_dict(json.loads(json.dumps(m.to_dict())))
    x, y = np.array([3.3, 50.0]), np.array([7.1, 90.0])
    assert np.allclose(again(x, y), m(x, y), rtol=0, atol=1e-12)


def test_split_view_truth_follows_the_mapping_and_ratios(tmp_path):
    tc = TwoColourConfig(layout="left-right", dyes="A=0.3,B=0.5,C=0.7")
    res = simulate_two_colour(CFG, tc, 12, tmp_path / "m.tif", tmp_path / "gt.csv", seed=4)
    with open_stack(res.movies[0]) as s:
        assert s.shape == (12, 40, 96)
    truth = read_localizations(res.truth["truth"], pixel_size=100)
    ch1 = read_localizations(res.truth["ch1"], pixel_size=100)
    ch2 = read_localizations(res.truth["ch2"], pixel_size=100)
    assert set(np.unique(truth["dye"]).astype(int)) == {1, 2, 3}
    ratios = np.array([0.3, 0.5, 0.7])
    # channel 1 shows every emitter of the sample at its place with (1 - ratio) of the photons
    assert len(ch1) == len(truth)
    r = ratios[truth["dye"].astype(int) - 1]
    assert np.allclose(ch1["photons"], truth["photons"] * (1 - r), rtol=1e-3, atol=0.05)
    # channel 2: the mapped positions of those inside its frame, ratio of the photons (and emitters from the margin
    # around channel 1's frame that the shift brings into channel 2's)
    mx, my = res.mapping(truth["x"], truth["y"])
    inside = (mx >= -0.5) & (mx < 47.5) & (my >= -0.5) & (my < 39.5)
    assert len(ch2) >= inside.sum() > 0.8 * len(truth)
    for t, x, y, p in zip(truth["frame"][inside], mx[inside], my[inside], (truth["photons"] * r)[inside], strict=True):
        same = (ch2["frame"] == t) & (np.abs(ch2["x"] - x) < 2e-3) & (np.abs(ch2["y"] - y) < 2e-3)
        assert same.sum() == 1 and ch2["photons"][same][0] == pytest.approx(p, rel=1e-3, abs=0.05)


def test_each_molecule_keeps_its_dye_and_blocks_change_nothing(tmp_path):
    tc = TwoColourConfig(layout="two-files", dyes="A=0.2,B=0.8")
    cfg = SimulationConfig(frame_size=(32, 32), density=0.5, structure={"kind": "grids", "off_time": 5},
                           photons_mean=3000)
    one = simulate_two_colour(cfg, tc, 20, tmp_path / "a.tif", tmp_path / "a.csv", seed=2, block=20)
    two = simulate_two_colour(cfg, tc, 20, tmp_path / "b.tif", tmp_path / "b.csv", seed=2, block=3)
    assert [p.name for p in one.movies] == ["a_ch1.tif", "a_ch2.tif"]
    for p, q in zip(one.movies, two.movies, strict=True):
        with open_stack(p) as s, open_stack(q) as t:
            assert np.array_equal(s[:], t[:])
    truth = read_localizations(one.truth["truth"], pixel_size=100)
    sites = {}
    for x, y, d in zip(np.round(truth["x"], 3), np.round(truth["y"], 3), truth["dye"], strict=True):
        sites.setdefault((x, y), set()).add(d)
    assert len(sites) < len(truth)  # sites blink more than once
    assert all(len(d) == 1 for d in sites.values())


def test_split_file_holds_each_channel_in_its_half(tmp_path):
    tc = TwoColourConfig(layout="bottom-top", dyes="A=0,B=1")
    cfg = SimulationConfig(frame_size=(24, 20), density=0.3, photons_mean=20000, photons_std=1, bg=0.0)
    res = simulate_two_colour(cfg, tc, 4, tmp_path / "m.tif", tmp_path / "gt.csv")
    with open_stack(res.movies[0]) as s:
        frames = s[:].astype(float)
    r1, r2 = preset_regions("bottom-top", (48, 20))
    assert (r1.y0, r2.y0) == (24, 0)  # channel 1 at the bottom
    ch1 = read_localizations(res.truth["ch1"], pixel_size=100)
    ch2 = read_localizations(res.truth["ch2"], pixel_size=100)
    # dye A only lights channel 1 and B only channel 2
    assert set(ch1["dye"].astype(int)) <= {1} and set(ch2["dye"].astype(int)) <= {2}
    half1 = frames[:, r1.y0:r1.y1] - 100  # EMCCD baseline
    for t, x, y in zip(ch1["frame"], ch1["x"], ch1["y"], strict=True):
        assert half1[t, round(y), round(x)] > 50


def test_bead_z_stack_focus_moves_by_the_axial_offset(tmp_path):
    cfg = SimulationConfig(frame_size=(48, 48), psf="astig3d", bg=0.0)
    tc = TwoColourConfig(layout="two-files", axial_offset=200)
    z = np.arange(-600, 601, 50.0)
    slide = bead_slide(cfg, tc, n_beads=4, z=z, photons=50000)
    focus = []
    for adu, xs, ys in ((slide.adu1, slide.x, slide.y), (slide.adu2, slide.x2, slide.y2)):
        spread = np.zeros(len(z))  # σx² + σy² of the spots (second moments): a parabola in z, least in focus
        for x, y in zip(xs, ys, strict=True):
            r, c = round(y), round(x)
            win = adu[:, r - 6:r + 7, c - 6:c + 7].astype(float) - 100  # EMCCD baseline
            k = np.arange(-6, 7)
            mass = win.sum(axis=(1, 2))
            mx = (win.sum(axis=1) * (c + k)).sum(axis=1) / mass
            my = (win.sum(axis=2) * (r + k)).sum(axis=1) / mass
            spread += ((win.sum(axis=1) * ((c + k)[None] - mx[:, None]) ** 2).sum(axis=1)
                       + (win.sum(axis=2) * ((r + k)[None] - my[:, None]) ** 2).sum(axis=1)) / mass
        near = np.abs(z - z[np.argmin(spread)]) <= 300
        a, b, _ = np.polyfit(z[near], spread[near], 2)
        focus.append(-b / (2 * a))
    # channel 2 sees depth z + 200: its sharpest plane is 200 nm lower on the stage
    assert focus[0] - focus[1] == pytest.approx(200, abs=15)
    res = simulate_bead_slide(cfg, tc, tmp_path / "b.tif", tmp_path / "b.csv", n_beads=4, z=z)
    assert len(read_localizations(res.truth["ch2"], pixel_size=100)) == 4 * len(z)
    with pytest.raises(ConfigError, match="3-D PSF"):
        bead_slide(CFG, tc, n_beads=3, z=z)


def test_dyes_and_layout_are_checked():
    assert [d.ratio for d in parse_dyes("0.2,0.5")] == [0.2, 0.5]
    assert parse_dyes("AF647=0.2,CF680=0.45")[1].name == "CF680"
    for bad in ("A=1.5", "A=x", "A=0.2,A=0.3", ""):
        with pytest.raises(ConfigError, match="dyes"):
            parse_dyes(bad)
    with pytest.raises(ConfigError, match="layout"):
        TwoColourConfig(layout="sideways")


def test_a_two_colour_bead_slide_takes_its_places_from_bead_xy(tmp_path):
    """``simulate --two_colour ... --bead_xy CSV``: channel 1's beads at the CSV's places (the flag was once taken
    and ignored: the beads fell on a grid of their own); both --beads and --bead_xy are refused in one line."""
    from decode_mem.simulate.__main__ import main

    (tmp_path / "places.csv").write_text("x,y\n10.25,12.5\n30,20.75\n17.5,33\n")
    base = ["--two_colour", "two-files", "--frame_size", "48", "48", "--frames", "2", "--out",
            str(tmp_path / "s.tif"), "--gt", str(tmp_path / "s.csv")]
    assert main([*base, "--bead_xy", str(tmp_path / "places.csv"), "--quiet"]) == 0
    truth = read_localizations(tmp_path / "s_ch1.csv", pixel_size=100)
    got = sorted(zip(np.round(truth["x"], 3)[truth["frame"] == 0], np.round(truth["y"], 3)[truth["frame"] == 0],
                     strict=True))
    assert got == [(10.25, 12.5), (17.5, 33.0), (30.0, 20.75)]
    assert main([*base, "--bead_xy", str(tmp_path / "places.csv"), "--beads", "3"]) == 2
