"""The cubic-spline PSF: fitted to an analytic PSF it reproduces it, it is smooth in z, files round-trip, and a
SMAP calibration (MATLAB v5 and v7.3) imports to the same spline."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.io
import torch
from psf_helpers import analytic_patches, analytic_volume, sigmas

from decode_mem.errors import ConfigError
from decode_mem.io.psf_file import read_psf, write_psf
from decode_mem.psf import spline_from_smap, spline_from_volume
from decode_mem.psf.smap import layout_to_smap
from decode_mem.simulate.spline import SplinePSF

DZ = 40.0
Z = np.arange(-800.0, 800.0 + DZ, DZ)


def _spline(upsample: int = 2, half: int = 12):
    vol = analytic_volume(Z, half * upsample, upsample)
    return spline_from_volume(vol, dz=DZ, z0=float(np.flatnonzero(Z == 0)[0]), upsample=upsample,
                              z_range=(-700.0, 700.0), pixel_size=100.0, source="analytic")


def _emitters(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(10, 20, n), rng.uniform(10, 20, n), rng.uniform(-700, 700, n)


def _render(spline, x, y, z, size=17) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = [torch.as_tensor(a, dtype=torch.float32) for a in (x, y, z)]
    p, col0, row0 = SplinePSF(spline).patches(*t, size)
    return p.numpy().astype(np.float64), col0.numpy(), row0.numpy()


@pytest.mark.parametrize("upsample, tolerance", [(2, 0.002), (3, 0.001)])
def test_spline_reproduces_the_analytic_psf_it_was_fitted_to(upsample: int, tolerance: float) -> None:
    """Off the nodes (random sub-pixel x, y and z between planes), the spline matches the analytic pixel values
    to a fraction of the peak well below 1 %; the photons are conserved."""
    spline = _spline(upsample)
    x, y, z = _emitters()
    got, col0, _ = _render(spline, x, y, z)
    want = analytic_patches(x, y, z, 17)
    assert (col0 == np.round(x) - 8).all()
    err = np.abs(got - want).max(axis=(1, 2)) / want.max(axis=(1, 2))
    assert err.max() < tolerance, err.max()
    # the focal plane sums to 1; at other z the patch holds all but the tail beyond it
    assert np.allclose(got.sum(axis=(1, 2)), want.sum(axis=(1, 2)), atol=2e-3)


def test_camera_pixel_sampling_is_within_one_and_a_half_percent() -> None:
    """At SMAP's sampling (one node per camera pixel) the sharpest planes (σ = 1 px) are the worst case."""
    x, y, z = _emitters()
    got, _, _ = _render(_spline(1), x, y, z)
    err = np.abs(got - analytic_patches(x, y, z, 17)).max(axis=(1, 2))
    assert np.median(err / got.max(axis=(1, 2))) < 0.005
    assert (err / got.max(axis=(1, 2))).max() < 0.015


def test_spline_is_smooth_in_z() -> None:
    """Value and z-derivative are continuous across the z planes (C²), and the width changes smoothly."""
    spline = _spline(2)
    eps = 0.01 * DZ
    for node in (-320.0, 0.0, 240.0):  # planes of the spline (multiples of DZ)
        z = node + eps * np.array([-3.0, -1.0, 1.0, 3.0])
        p, _, _ = _render(spline, np.full(4, 15.3), np.full(4, 14.8), z)
        d1, d2, d3 = np.diff(p, axis=0)
        scale = np.abs(d1).max()
        assert scale > 0
        assert np.abs(d2 - (d1 + d3) / 2).max() < 0.02 * scale  # no jump at the plane
        assert np.abs(d3 - d1).max() < 0.05 * scale  # no kink: the z-derivative is continuous
    # the RMS width of the rendered spot follows the analytic σ(z) at 41 z between the planes
    zf = np.linspace(-600, 600, 41) + DZ / 3
    p, col0, _ = _render(spline, np.full(zf.size, 15.0), np.full(zf.size, 15.0), zf, size=25)
    prof = p.sum(axis=1)
    pos = np.arange(25) + col0[:, None] - 15.0
    width = np.sqrt((prof * pos**2).sum(1) / prof.sum(1))
    want = analytic_patches(np.full(zf.size, 15.0), np.full(zf.size, 15.0), zf, 25).sum(axis=1)
    want_w = np.sqrt((want * pos**2).sum(1) / want.sum(1))
    assert np.abs(width / want_w - 1).max() < 0.01
    assert np.abs(np.diff(width, 2)).max() < 0.05  # no jumps between neighbouring z


def test_psf_file_round_trips(tmp_path) -> None:
    spline = _spline(2)
    write_psf(tmp_path / "psf.h5", spline)
    back = read_psf(tmp_path / "psf.h5")
    assert np.array_equal(back.coeff, spline.coeff)
    assert (back.x0, back.y0, back.z0, back.dz, back.z_range, back.upsample) == (
        spline.x0, spline.y0, spline.z0, spline.dz, spline.z_range, 2)
    assert np.allclose(back.width_x, spline.width_x)
    sx, _ = sigmas(back.width_z)  # node widths: the pixelated PSF's RMS width, sqrt(σ² + 1/12) for a Gaussian
    assert np.abs(back.width_x / np.sqrt(sx**2 + 1 / 12) - 1).max() < 0.02
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    with pytest.raises(ConfigError, match=r"bad\.h5"):
        read_psf(tmp_path / "bad.h5")


def _decode_reference(smap_coeff: np.ndarray, x0: float, z0: float, dz: float, row: float, col: float,
                      z: float) -> float:
    """One pixel the way DECODE's spline_psf.c evaluates a SMAP spline: its x is the coefficient array's first
    axis (image rows), coordinate ``x0 − 1 + (pixel − emitter)``, z voxel ``z/dz + z0``, and coefficient
    ``i·16 + j·4 + k`` times ``dz^i·dy^j·dx^k`` (dy along the second axis)."""
    cx, cy, cz = x0 - 1 + row, x0 - 1 + col, z / dz + z0
    ix, iy, iz = int(np.floor(cx)), int(np.floor(cy)), int(np.floor(cz))
    fx, fy, fz = cx - ix, cy - iy, cz - iz
    c = smap_coeff[ix, iy, iz]
    return float(sum(c[i * 16 + j * 4 + k] * fz**i * fy**j * fx**k
                     for i in range(4) for j in range(4) for k in range(4)))


def _smap_file(tmp_path, version: str) -> tuple[str, np.ndarray]:
    """A SMAP-format 3dcal.mat of the analytic PSF (one node per pixel), written as MATLAB would."""
    ref = _spline(1)
    smap = layout_to_smap(ref.coeff)
    x0 = ref.x0 + 1  # 1-based
    cspline = {"coeff": smap, "x0": x0, "z0": ref.z0, "dz": ref.dz}
    path = tmp_path / f"3dcal_{version}.mat"
    if version == "v5":
        scipy.io.savemat(path, {"SXY": {"cspline": cspline}})
    else:  # v7.3: HDF5 with a 512-byte MATLAB header, arrays stored transposed (column-major)
        with h5py.File(path, "w", userblock_size=512) as f:
            g = f.create_group("SXY").create_group("cspline")
            for k, v in cspline.items():
                g.create_dataset(k, data=np.asarray(v, np.float64 if k != "coeff" else np.float32).T
                                 if np.ndim(v) else np.full((1, 1), v))
        with open(path, "r+b") as fh:
            fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: test HDF5 schema 1.00 .".ljust(116))
    return str(path), smap


@pytest.mark.parametrize("version", ["v5", "v73"])
def test_smap_calibration_imports_as_decode_reads_it(tmp_path, version: str) -> None:
    path, smap = _smap_file(tmp_path, version)
    spline = spline_from_smap(path)
    ref = _spline(1)
    assert spline.coeff.shape == ref.coeff.shape and spline.z0 == ref.z0 and spline.dz == DZ
    assert spline.z_range == (-spline.z0 * DZ, (spline.coeff.shape[0] - spline.z0) * DZ)
    x, y, z = _emitters(40, seed=1)
    got, col0, row0 = _render(spline, x, y, z)
    assert np.allclose(got, _render(ref, x, y, z)[0], atol=1e-6)
    # pixel by pixel against DECODE's formula on the raw SMAP coefficients (rows are DECODE's x)
    for n in range(5):
        for r, c in ((8, 8), (6, 9), (10, 7)):
            want = _decode_reference(smap, ref.x0 + 1, ref.z0, DZ, row0[n] + r - y[n], col0[n] + c - x[n], z[n])
            assert got[n, r, c] == pytest.approx(want, rel=1e-4, abs=1e-7)


def test_not_a_smap_file_is_an_error_naming_it(tmp_path) -> None:
    path = tmp_path / "other.mat"
    scipy.io.savemat(path, {"PSF": np.zeros((3, 3))})
    with pytest.raises(ConfigError, match=r"other\.mat: no SXY"):
        spline_from_smap(path)


def test_smap_import_refuses_bead_and_camera_flags_it_would_ignore(tmp_path, capsys) -> None:
    """An import has no beads to find or camera to apply: such flags are one error line, exit 2, no file."""
    from decode_mem.psf.__main__ import main

    path, _ = _smap_file(tmp_path, "v5")
    out = tmp_path / "psf.h5"
    for extra in (["--roi", "21"], ["--camera", "emccd"], ["--em_gain", "100"], ["--png", str(tmp_path / "f.png")]):
        assert main(["--from_smap", path, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and extra[0] in err and "would do nothing" in err
        assert not out.exists()
    assert main(["--from_smap", path, "--out", str(out), "--pixel_size", "100", "--quiet"]) == 0
    assert out.exists()
