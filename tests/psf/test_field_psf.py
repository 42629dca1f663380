"""A PSF that changes across the field: exact at the beads, chosen only where the beads show a change, bad bead
sets refused in one line, the file format, and the renderer a training window and a whole movie share."""

from __future__ import annotations

import numpy as np
import pytest
import tifffile
import torch
from psf_helpers import CAL, analytic_volume

from decode_mem.io.camera import Camera
from decode_mem.io.field_psf_file import FieldPsfData, field_header, read_field_psf, write_field_psf
from decode_mem.io.psf_file import SplineData, read_psf, write_psf
from decode_mem.psf.__main__ import main
from decode_mem.psf.beads import BeadSettings, calibrate_beads, gather_beads
from decode_mem.psf.field import calibrate_field
from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.beads import simulate_bead_stack
from decode_mem.simulate.field_spline import FieldSplinePSF, ThinPlate
from decode_mem.simulate.spline import SplinePSF
from decode_mem.simulate.spline_fit import spline_coefficients

Z = np.arange(-800.0, 801.0, 40.0)
FIELD = (300, 400)


def _field_data(seed: int = 0, k: int = 2) -> FieldPsfData:
    """A field-dependent PSF made up from an astigmatic Gaussian: mean, k components, 9 beads."""
    rng = np.random.default_rng(seed)
    mean = analytic_volume(Z, 8, upsample=2)
    comps = np.stack([np.gradient(mean, axis=a) for a in (1, 2)][:k])
    xy = np.column_stack([rng.uniform(0, FIELD[1] - 1, 9), rng.uniform(0, FIELD[0] - 1, 9)])
    return FieldPsfData(field_shape=FIELD, mean=mean, components=comps, bead_xy=xy,
                        bead_weights=rng.normal(0, 0.5, (9, k)), bead_shift=rng.normal(0, 80.0, 9), x0=16.0, y0=16.0,
                        z0=20.0, dz=40.0, upsample=2, z_range=(-500.0, 500.0), shape_range=(-700.0, 700.0),
                        pixel_size=100.0)


def test_thin_plate_interpolation_is_exact_at_every_bead_and_smooth_between() -> None:
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 1000, (12, 2))
    values = rng.normal(size=(12, 3))
    tp = ThinPlate(xy, values, 1000.0)
    assert np.abs(tp(xy) - values).max() < 1e-8
    t = tp.torch_at(torch.tensor(xy[:, 0]), torch.tensor(xy[:, 1])).numpy()
    assert np.abs(t - values).max() < 1e-8
    with pytest.raises(ValueError, match="one line"):
        ThinPlate(np.column_stack([np.arange(5.0), np.arange(5.0)]), np.zeros((5, 1)), 10.0)(xy)


def test_the_field_psf_at_a_bead_is_that_beads_psf_exactly() -> None:
    data = _field_data()
    psf = FieldSplinePSF(data)
    bx, by = (torch.tensor(data.bead_xy[:, i]) for i in (0, 1))
    w, shift = psf.weights(bx, by)
    assert np.abs(w.numpy() - data.bead_weights).max() < 1e-5
    assert np.abs(shift.numpy() - data.bead_shift).max() < 1e-3
    # the rendered patches at a bead: the bead's own spline (mean + its weights, moved by its focal shift)
    b = 3
    own = SplineData(coeff=spline_coefficients(data.mean + np.tensordot(data.bead_weights[b], data.components, axes=1)),
                     x0=data.x0, y0=data.y0, z0=data.z0 - data.bead_shift[b] / data.dz, dz=data.dz,
                     z_range=(-400.0, 400.0), upsample=2)
    z = torch.linspace(-400, 400, 9)
    x, y = torch.full((9,), 50.3), torch.full((9,), 60.7)
    bead = (torch.full((9,), float(data.bead_xy[b, 0]), dtype=torch.float64),
            torch.full((9,), float(data.bead_xy[b, 1]), dtype=torch.float64))
    got = psf.patches(x, y, z, 11, *bead)[0]
    want = SplinePSF(own).patches(x, y, z, 11)[0]
    assert (got - want).abs().max() <= 1e-5 * float(want.abs().max())
    # and at() gives that spline as one object
    at = SplinePSF(psf.at(float(data.bead_xy[b, 0]), float(data.bead_xy[b, 1])))
    assert (at.patches(x, y, z, 11)[0] - want).abs().max() <= 1e-5 * float(want.abs().max())


def test_a_window_renders_like_its_place_in_the_whole_field() -> None:
    """Training windows (field position = window origin + x) and movies (the frame is the field) share one PSF."""
    psf = FieldSplinePSF(_field_data(seed=2))
    rng = np.random.default_rng(3)
    n = 40
    x, y = (torch.tensor(rng.uniform(100, 160, n), dtype=torch.float32) for _ in range(2))
    z = torch.tensor(rng.uniform(-400, 400, n), dtype=torch.float32)
    ph = torch.full((n,), 1000.0)
    frame = torch.zeros(n, dtype=torch.long)
    whole = psf.render_spots(torch.zeros((1, *FIELD)), frame, x, y, z, ph, size=11)
    oy, ox = 90, 95
    window = psf.render_spots(torch.zeros((1, 80, 80)), frame, x - ox, y - oy, z, ph, size=11, fx=x, fy=y)
    assert torch.allclose(window[0], whole[0, oy:oy + 80, ox:ox + 80], atol=1e-4)
    # the place matters: the same window rendered as if it sat at the field's origin differs
    elsewhere = psf.render_spots(torch.zeros((1, 80, 80)), frame, x - ox, y - oy, z, ph, size=11)
    assert (window - elsewhere).abs().max() > 1.0


def test_the_file_keeps_the_field_and_single_psf_files_stay_as_they_were(tmp_path) -> None:
    data = _field_data()
    centre = FieldSplinePSF(data).data
    write_field_psf(tmp_path / "field.h5", centre, data)
    back = read_field_psf(tmp_path / "field.h5")
    assert back is not None and back.field_shape == FIELD and back.n_components == 2
    assert np.array_equal(back.components, data.components) and np.array_equal(back.bead_shift, data.bead_shift)
    assert field_header(tmp_path / "field.h5")["beads"] == 9
    assert read_psf(tmp_path / "field.h5").shape == centre.shape  # a single-PSF reader reads the centre's PSF
    write_psf(tmp_path / "single.h5", centre)
    assert read_field_psf(tmp_path / "single.h5") is None and field_header(tmp_path / "single.h5") is None
    cfg = SimulationConfig.from_dict({"psf": "spline", "psf_file": str(tmp_path / "field.h5"),
                                      "z_range": [-400, 400], "frame_size": [40, 40]})
    assert cfg.field_shape == FIELD and isinstance(cfg.field_psf(), FieldSplinePSF)
    assert SimulationConfig.from_dict({"psf": "spline", "psf_file": str(tmp_path / "single.h5"),
                                       "z_range": [-400, 400]}).field_psf() is None


def _bead_set(seed: int, n_side: int = 4) -> tuple[np.ndarray, np.ndarray, SimulationConfig, np.random.Generator]:
    """Bead positions on a jittered n_side² grid over a 200x260 px field, the astigmatic Gaussian's config."""
    rng = np.random.default_rng(seed)
    gx, gy = np.meshgrid(np.linspace(20, 240, n_side), np.linspace(20, 180, n_side))
    x, y = gx.ravel() + rng.uniform(-1, 1, gx.size), gy.ravel() + rng.uniform(-1, 1, gx.size)
    cfg = SimulationConfig.from_dict({"frame_size": (200, 260), "psf": "astig3d", "astigmatism": CAL.to_dict(),
                                      "z_range": (-1500.0, 1500.0)})
    return x, y, cfg, rng


def _stack(tmp_path, shift, seed: int = 0, name: str = "beads.tif", n_side: int = 4) -> str:
    """A bead z-stack whose beads sit at z + shift(x, y) nm."""
    x, y, cfg, _ = _bead_set(seed, n_side)
    adu = simulate_bead_stack(cfg, x, y, Z, photons=40000.0, bg=20.0, offset=shift(x, y), seed=seed + 1)
    tifffile.imwrite(tmp_path / name, adu)
    return str(tmp_path / name)


def _calibrate(path: str, mode: str = "auto"):
    s = BeadSettings(z_step=40.0, roi=17)
    cam = Camera.emccd()
    found = gather_beads([path], cam, s)
    return calibrate_field(found, calibrate_beads([path], cam, s, found=found), s, 100.0, mode)


def test_beads_with_a_curved_focal_plane_give_a_field_psf_and_beads_without_one_psf(tmp_path) -> None:
    curved = _calibrate(_stack(tmp_path, lambda x, y: 250.0 * (((x - 130) / 130) ** 2 + ((y - 100) / 100) ** 2) / 2,
                               name="curved.tif"))
    assert curved.chosen and curved.p_value < 0.01
    assert np.median(curved.field_error) < 0.7 * np.median(curved.single_error)
    # a bead at z + offset looks like the PSF of a place whose focus lies offset lower: focal shift = −offset
    truth = -250.0 * (((curved.bead_xy[:, 0] - 130) / 130) ** 2 + ((curved.bead_xy[:, 1] - 100) / 100) ** 2) / 2
    assert np.abs((curved.shift_nm - curved.shift_nm.mean()) - (truth - truth.mean())).max() < 15.0
    # the file's PSF at a bead: exactly that bead's weights and focal shift
    psf = FieldSplinePSF(curved.data)
    w, s = psf.weights_np(curved.bead_xy[:, 0], curved.bead_xy[:, 1])
    assert np.abs(s - curved.shift_nm).max() < 1e-6 and np.allclose(w, curved.weights, atol=1e-6)
    flat = _calibrate(_stack(tmp_path, lambda x, y: np.zeros_like(x), name="flat.tif", seed=5))
    assert not flat.chosen and "no change across the field beyond their noise" in flat.reason


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err.strip()


def test_bad_bead_sets_are_one_line_exit_2_and_nothing_written(tmp_path, capsys) -> None:
    out = tmp_path / "psf.h5"
    few = _stack(tmp_path, lambda x, y: np.zeros_like(x), name="few.tif", n_side=2)  # 4 beads
    code, err = _run(capsys, [few, "--z_step", "40", "--roi", "17", "--field", "yes", "--out", str(out)])
    assert code == 2 and len(err.splitlines()) == 1 and "4 usable beads" in err and "at least 8" in err
    assert not out.exists() and not out.with_suffix(".png").exists()
    # beads on one line
    x = np.linspace(20, 240, 9)
    cfg = SimulationConfig.from_dict({"frame_size": (60, 260), "psf": "astig3d", "astigmatism": CAL.to_dict(),
                                      "z_range": (-1500.0, 1500.0)})
    tifffile.imwrite(tmp_path / "line.tif", simulate_bead_stack(cfg, x, np.full(9, 30.0), Z, photons=40000.0,
                                                                bg=20.0, seed=2))
    code, err = _run(capsys, [str(tmp_path / "line.tif"), "--z_step", "40", "--roi", "17", "--field", "yes",
                              "--out", str(out)])
    assert code == 2 and len(err.splitlines()) == 1 and "one line" in err and not out.exists()
    # stacks of different frame sizes are not one field
    code, err = _run(capsys, [few, str(tmp_path / "line.tif"), "--z_step", "40", "--roi", "17", "--field", "yes",
                              "--out", str(out)])
    assert code == 2 and len(err.splitlines()) == 1 and "different frame sizes" in err and not out.exists()
    # --field auto keeps one PSF for them, as before
    code, _ = _run(capsys, [few, str(tmp_path / "line.tif"), "--z_step", "40", "--roi", "17", "--out", str(out)])
    assert code == 0 and read_field_psf(out) is None


def test_the_cli_writes_a_field_psf_its_figure_and_warns_where_beads_leave_the_field_uncovered(tmp_path, capsys) \
        -> None:
    _, _, cfg, rng = _bead_set(0)
    gx, gy = np.meshgrid(np.linspace(20, 140, 4), np.linspace(20, 110, 3))  # beads in the top-left part only
    xs, ys = gx.ravel() + rng.uniform(-1, 1, 12), gy.ravel() + rng.uniform(-1, 1, 12)
    tifffile.imwrite(tmp_path / "part.tif", simulate_bead_stack(cfg, xs, ys, Z, photons=40000.0, bg=20.0,
                                                                offset=1.5 * (xs + ys), seed=4))
    out = tmp_path / "psf.h5"
    code = main([str(tmp_path / "part.tif"), "--z_step", "40", "--roi", "13", "--out", str(out)])
    io = capsys.readouterr()
    assert code == 0 and read_field_psf(out) is not None, io.err + io.out
    assert "a PSF that changes across the field" in io.out
    assert "uncovered" in io.err and "bottom-right" in io.err and len(io.err.strip().splitlines()) == 1
    assert (tmp_path / "psf_field.png").stat().st_size > 10_000
