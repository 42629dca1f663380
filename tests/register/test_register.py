"""``python -m decode_mem.register`` on simulated bead slides: the map it writes takes channel 2 onto channel 1 as the
truth does, the axial offset of z-stacks is the simulated one, and bad inputs are one line, exit 2, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile

from decode_mem.errors import ConfigError
from decode_mem.register.__main__ import main
from decode_mem.register.core import check_frame, load_registration
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.colours import ChannelMapping, TwoColourConfig
from decode_mem.simulate.two_colour import simulate_bead_slide

CFG = SimulationConfig(frame_size=(64, 64))


def _grid(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    g = np.linspace(lo, hi, n)
    gx, gy = np.meshgrid(g, g)
    jitter = np.random.default_rng(1).uniform(-1, 1, (2, n * n))
    return gx.ravel() + jitter[0], gy.ravel() + jitter[1]


def _field_error(reg, mapping: ChannelMapping) -> np.ndarray:
    """nm between channel 1's points and channel 2's view of them mapped back, over channel 1's field."""
    x1, y1 = mapping.grid(33)
    mx, my, _ = reg.to_channel1(*mapping(x1, y1))
    return np.hypot(mx - x1, my - y1) * reg.pixel_size[0]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_split_view_registration_maps_channel_2_onto_channel_1(tmp_path, capsys):
    tc = TwoColourConfig(layout="right-left", distortion_nm=200)
    res = simulate_bead_slide(CFG, tc, tmp_path / "beads.tif", positions=_grid(5, 6, 57), frames=3)
    out = tmp_path / "reg.json"
    assert main([str(res.movies[0]), "--split", "right-left", "--out", str(out)]) == 0
    assert "25 beads in both channels" in capsys.readouterr().out
    reg = load_registration(out)
    assert reg.split and reg.frame == (64, 128) and reg.regions[0].x0 == 64  # channel 1 the right half
    err = _field_error(reg, res.mapping)
    # 200 nm of distortion beyond the affine map's, taken out to a few nm inside the beads' hull
    hull = np.hypot(*np.meshgrid(np.linspace(-1, 1, 33), np.linspace(-1, 1, 33))).ravel() < 0.8
    assert np.sqrt((err[hull] ** 2).mean()) < 5
    affine = json.loads(out.read_text())["candidates"][0]
    assert affine["map"] == "affine" and affine["leave_one_out_rms_nm"] > 5 * reg.tre["leave_one_out_rms"]
    assert (tmp_path / "reg.png").stat().st_size > 10_000
    # a movie of another camera region is not the one these beads registered: one line naming both frames
    with pytest.raises(ConfigError, match="frames of 64 x 130 px, the registration's split view of 64 x 128"):
        check_frame(reg, (64, 130), "movie.tif")
    assert check_frame(reg, (64, 128), "movie.tif") == reg.regions


def test_two_camera_z_stacks_give_the_axial_offset(tmp_path):
    cfg = SimulationConfig(frame_size=(96, 96), psf="astig3d")
    tc = TwoColourConfig(layout="two-files", axial_offset=200.0, distortion_nm=100)
    z = np.arange(-600, 601, 50.0)
    res = simulate_bead_slide(cfg, tc, tmp_path / "z.tif", positions=_grid(4, 12, 83), z=z)
    out = tmp_path / "reg.json"
    assert main([*map(str, res.movies), "--z_step", "50", "--out", str(out), "--quiet"]) == 0
    reg = load_registration(out)
    assert not reg.split and reg.beads["matched"] == 16
    assert reg.axial_offset == pytest.approx(200, abs=max(15, 4 * reg.tre["axial_offset_sem"]))
    _, _, mz = reg.to_channel1(np.array([10.0]), np.array([20.0]), np.array([150.0]))
    assert mz[0] == pytest.approx(150 - reg.axial_offset)


def test_a_mirrored_camera_is_found(tmp_path):
    tc = TwoColourConfig(layout="two-files", distortion_nm=50)
    res = simulate_bead_slide(CFG, tc, tmp_path / "b.tif", positions=_grid(4, 8, 55), frames=2)
    flipped = tmp_path / "b_ch2_mirror.tif"
    tifffile.imwrite(flipped, tifffile.imread(res.movies[1])[:, :, ::-1])  # camera 2 sees x mirrored
    out = tmp_path / "reg.json"
    assert main([str(res.movies[0]), str(flipped), "--out", str(out), "--quiet"]) == 0
    reg = load_registration(out)
    x1, y1 = res.mapping.grid(9)
    x2, y2 = res.mapping(x1, y1)
    mx, my, _ = reg.to_channel1(63 - x2, y2)
    assert np.hypot(mx - x1, my - y1).max() * 100 < 20


def test_bad_inputs_are_one_line_exit_2_nothing_written(tmp_path, capsys):
    tc = TwoColourConfig(layout="left-right")
    res = simulate_bead_slide(CFG, tc, tmp_path / "b.tif", positions=_grid(4, 8, 55), frames=2)
    frames = tifffile.imread(res.movies[0])
    out = tmp_path / "reg.json"
    one = frames.copy()
    one[:, :, 64:] = 100  # channel 2 dark: the camera's baseline
    tifffile.imwrite(tmp_path / "one.tif", one)
    few = np.full_like(frames, 100)
    few[:, 20:34, 20:34], few[:, 20:34, 84:98] = frames[:, 20:34, 20:34], frames[:, 20:34, 84:98]
    tifffile.imwrite(tmp_path / "few.tif", few)
    cases = {
        "beads in channel 1 only": [str(tmp_path / "one.tif"), "--split", "left-right"],
        "too few beads": [str(tmp_path / "few.tif"), "--split", "left-right"],
        "differ in size": [str(res.movies[0]), "--split", "0:64,0:64;0:64,64:120"],
        "in pairs": [str(res.movies[0])],
        "no such bead file": [str(tmp_path / "missing.tif"), "--split", "left-right"],
    }
    for needle, argv in cases.items():
        assert main([*argv, "--out", str(out)]) == 2
        assert needle in _one_error_line(capsys)
        assert not out.exists() and not out.with_suffix(".png").exists()
