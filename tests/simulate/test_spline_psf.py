"""The simulator renders a spline PSF file (``psf: spline``) in movies and training windows, device-agnostic."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from decode_mem.errors import ConfigError
from decode_mem.io.psf_file import write_psf
from decode_mem.psf import spline_from_volume
from decode_mem.simulate import SimulationConfig, simulate_movie
from decode_mem.simulate.spline import SplinePSF

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import analytic_volume

DZ = 50.0
Z = np.arange(-750.0, 750.0 + DZ, DZ)


@pytest.fixture(scope="module")
def psf_file(tmp_path_factory) -> str:
    spline = spline_from_volume(analytic_volume(Z, 20, 2), dz=DZ, z0=float(np.flatnonzero(Z == 0)[0]), upsample=2,
                                z_range=(-700.0, 700.0), pixel_size=100.0)
    path = tmp_path_factory.mktemp("psf") / "psf.h5"
    write_psf(path, spline)
    return str(path)


def _config(psf_file: str, **kw) -> SimulationConfig:
    params = {"frame_size": (24, 24), "psf": "spline", "psf_file": psf_file, "z_range": (-600.0, 600.0),
              "density": 2.0, "bg": 10.0, **kw}
    return SimulationConfig.from_dict(params)


def test_config_reads_the_file_and_checks_the_z_range(psf_file: str, tmp_path) -> None:
    cfg = _config(psf_file)
    assert cfg.is_3d and cfg.psf_file == psf_file
    lo, hi = cfg.sigma_range()
    assert 0.9 < lo < 1.2 and 2.0 < hi < 3.5  # RMS widths of the pixelated astigmatic PSF over ±600 nm
    assert cfg.patch_size <= 2 * 9 + 1  # inside the spline (20 nodes = 10 px each side)
    with pytest.raises(ConfigError, match="outside the range"):
        _config(psf_file, z_range=(-900.0, 600.0))
    with pytest.raises(ConfigError, match=r"needs simulation\.psf_file"):
        SimulationConfig(psf="spline")
    with pytest.raises(ConfigError, match=r"nope\.h5: PSF file not found"):
        _config(str(tmp_path / "nope.h5"))
    with pytest.raises(ConfigError, match="psf_file is for psf 'spline'"):
        SimulationConfig(psf="astig3d", psf_file=psf_file)


def test_movie_with_the_spline_psf_has_z_and_conserves_photons(psf_file: str) -> None:
    cfg = _config(psf_file, bg=0.0, camera={"kind": "emccd", "em_gain": 1.0, "e_per_adu": 1.0, "baseline": 0.0,
                                            "read_noise": 0.0, "qe": 1.0})
    adu, gt, _ = simulate_movie(cfg, 20, seed=1)
    z = np.asarray(gt["z"])
    assert len(z) > 20 and z.min() >= -600 and z.max() <= 600 and z.std() > 200
    # noise-free photons: the frames hold the emitters' light (less what falls outside the frame / margin)
    assert adu.sum() > 0.5 * float(np.asarray(gt["photons"]).sum())


def test_training_windows_match_the_gaussian_the_spline_was_made_from(psf_file: str) -> None:
    """The spline made from the astigmatic Gaussian renders (noise-free) what ``psf: astig3d`` renders for the
    same draws: the same emitters, z in the same range, the same light to 1 % of the brightest pixel."""
    from psf_helpers import CAL

    from decode_mem.simulate.dataset import simulate_windows

    spline = simulate_windows(_config(psf_file), 4, torch.Generator().manual_seed(0))
    gauss_cfg = SimulationConfig.from_dict({"frame_size": (24, 24), "psf": "astig3d", "z_range": (-600.0, 600.0),
                                            "density": 2.0, "bg": 10.0, "astigmatism": CAL.to_dict()})
    gauss = simulate_windows(gauss_cfg, 4, torch.Generator().manual_seed(0))
    assert torch.equal(spline.em, gauss.em) and spline.mask.sum() > 4
    assert spline.em[..., 2][spline.mask].abs().max() <= 600
    diff = (spline.expected - gauss.expected).abs().max()
    assert diff < 0.01 * (gauss.expected - 10.0).max()


def test_chunked_scatter_equals_the_patches_and_width_one_equals_none(psf_file: str) -> None:
    from decode_mem.io.psf_file import read_psf

    spline = SplinePSF(read_psf(psf_file))
    g = torch.Generator().manual_seed(3)
    n = 700  # more than one chunk of the scatter loop
    x, y = torch.rand(n, generator=g) * 40 + 4, torch.rand(n, generator=g) * 40 + 4
    z = (torch.rand(n, generator=g) - 0.5) * 1200
    frame = torch.randint(0, 5, (n,), generator=g)
    photons = torch.rand(n, generator=g) * 1000 + 100
    canvas = spline.render_spots(torch.zeros(5, 48, 48), frame, x, y, z, photons, size=15)
    patches, col0, row0 = spline.patches(x, y, z, 15)
    want = torch.zeros(5, 64, 64)
    for i in range(n):  # one emitter at a time, on a canvas with room for every patch
        want[frame[i], row0[i] + 8:row0[i] + 23, col0[i] + 8:col0[i] + 23] += patches[i] * photons[i]
    assert torch.allclose(canvas, want[:, 8:56, 8:56], rtol=1e-4, atol=1e-3)
    wide, _, _ = spline.patches(x, y, z, 15, width=torch.ones(n))
    assert torch.allclose(wide, patches, atol=1e-6)


def test_a_scaled_width_equals_the_tricubic_polynomial_at_each_pixel(psf_file: str) -> None:
    """``width`` != 1: pixel (r, c) of an emitter's patch is the spline's polynomial at the voxel and fraction of
    (row0 + r - y) / width, (col0 + c - x) / width px from the centre, over width²: evaluated here one pixel at
    a time from the coefficients (c[16i + 4j + k] w^i v^j u^k)."""
    from decode_mem.io.psf_file import read_psf

    d = read_psf(psf_file)
    spline = SplinePSF(d)
    g = torch.Generator().manual_seed(5)
    n, size = 6, 11
    x, y = torch.rand(n, generator=g) * 3 + 10, torch.rand(n, generator=g) * 3 + 10
    z = (torch.rand(n, generator=g) - 0.5) * 1000
    width = 0.8 + 0.5 * torch.rand(n, generator=g)
    got, col0, row0 = spline.patches(x, y, z, size, width)
    coeff = d.coeff.astype(np.float64).reshape(*d.coeff.shape[:3], 4, 4, 4)
    nz, ny, nx = d.coeff.shape[:3]
    for e in range(n):
        wz = min(max(float(z[e]) / d.dz + d.z0, 0.0), nz - 1e-4)
        iz, fz = int(np.floor(wz)), wz - np.floor(wz)
        for r in range(size):
            for c in range(size):
                v = d.y0 + (int(row0[e]) + r - float(y[e])) * d.upsample / float(width[e])
                u = d.x0 + (int(col0[e]) + c - float(x[e])) * d.upsample / float(width[e])
                iv, iu = int(np.floor(v)), int(np.floor(u))
                if not (0 <= iv < ny and 0 <= iu < nx):
                    assert got[e, r, c] == 0
                    continue
                fv, fu = v - iv, u - iu
                want = np.einsum("ijk,i,j,k->", coeff[iz, iv, iu], fz ** np.arange(4), fv ** np.arange(4),
                                 fu ** np.arange(4)) / float(width[e]) ** 2
                assert abs(float(got[e, r, c]) - want) <= 1e-5 * max(1.0, abs(want)), (e, r, c)


@pytest.mark.gpu
def test_cuda_renders_what_the_cpu_renders(psf_file: str) -> None:
    cfg = _config(psf_file)
    spline = cfg.spline_psf()
    g = torch.Generator().manual_seed(4)
    x, y = torch.rand(300, generator=g) * 20 + 2, torch.rand(300, generator=g) * 20 + 2
    z = (torch.rand(300, generator=g) - 0.5) * 1200
    frame = torch.randint(0, 3, (300,), generator=g)
    photons = torch.full((300,), 1000.0)
    cpu = spline.render_spots(torch.zeros(3, 24, 24), frame, x, y, z, photons)
    gpu = spline.render_spots(torch.zeros(3, 24, 24, device="cuda"), *(t.cuda() for t in (frame, x, y, z, photons)))
    assert torch.allclose(cpu, gpu.cpu(), rtol=1e-4, atol=1e-2)


def test_pupil_psf_is_astigmatic_and_not_gaussian() -> None:
    """The pupil model's foci in x and y sit on opposite sides of z = 0, and its defocused spots are far from a
    Gaussian (rings), unlike the astigmatic Gaussian made into a spline."""
    from scipy.optimize import curve_fit

    from decode_mem.simulate.config import PupilConfig
    from decode_mem.simulate.pupil import pupil_volume

    cfg = SimulationConfig.from_dict({"psf": "pupil", "pupil": {"astigmatism": 0.1, "spherical": 0.04, "coma": 0.02},
                                      "z_range": (-400.0, 400.0)})
    d = cfg.spline_psf().data
    inside = (d.width_z >= -400) & (d.width_z <= 400)
    zx, zy = d.width_z[inside][np.argmin(d.width_x[inside])], d.width_z[inside][np.argmin(d.width_y[inside])]
    assert zx * zy < 0 and abs(zx - zy) > 200
    assert cfg.is_3d and 1 < cfg.sigma_range()[1] < 6

    def misfit(profile: np.ndarray) -> float:
        pos = np.arange(len(profile), dtype=float)
        gauss = lambda p, a, m, s, o: a * np.exp(-0.5 * ((p - m) / s) ** 2) + o  # noqa: E731
        popt = curve_fit(gauss, pos, profile, p0=(profile.max(), pos.mean(), 3.0, 0.0))[0]
        return float(np.sqrt(np.mean((gauss(pos, *popt) - profile) ** 2)) / profile.max())

    pupil = pupil_volume(PupilConfig(astigmatism=0.1, spherical=0.04, coma=0.02), np.array([350.0]), 100.0, 10)[0]
    gauss = analytic_volume(np.array([350.0]), 20, 2)[0]
    assert misfit(pupil.sum(axis=1)) > 3 * misfit(gauss.sum(axis=1))


def test_double_helix_pupil_turns_its_lobes_with_z() -> None:
    from decode_mem.simulate.config import PupilConfig
    from decode_mem.simulate.pupil import pupil_volume

    vol = pupil_volume(PupilConfig(astigmatism=0.0, helix_zones=4), np.array([-400.0, 0.0, 400.0]), 100.0, 8)
    n = vol.shape[1]
    yy, xx = np.mgrid[:n, :n] - n // 2
    angles = []
    for p in vol:
        w = p / p.sum()
        cxx, cyy, cxy = (w * xx * xx).sum(), (w * yy * yy).sum(), (w * xx * yy).sum()
        angles.append(np.degrees(0.5 * np.arctan2(2 * cxy, cxx - cyy)))
        small, large = np.linalg.eigvalsh([[cxx, cxy], [cxy, cyy]])
        assert large > 2 * small  # two lobes: elongated
    turn = np.diff(np.unwrap(np.radians(2 * np.array(angles))) / 2)
    assert (np.abs(np.degrees(turn)) > 25).all() and np.sign(turn[0]) == np.sign(turn[1])  # one way round


def test_simulate_cli_renders_a_psf_file(psf_file: str, tmp_path) -> None:
    import tifffile

    from decode_mem.io.localizations import read_localizations
    from decode_mem.simulate.__main__ import main

    out, gt = tmp_path / "m.tif", tmp_path / "gt.csv"
    assert main(["--frames", "5", "--size", "24", "24", "--psf", "spline", "--psf_file", psf_file, "--z_range",
                 "-500", "500", "--out", str(out), "--gt", str(gt), "--quiet"]) == 0
    assert tifffile.imread(out).shape == (5, 24, 24)
    assert np.ptp(read_localizations(gt, pixel_size=100.0)["z"]) > 100


def test_window_terms_are_the_patches_and_their_derivatives(psf_file: str) -> None:
    """What the domain check's PSF fit uses: the PSF on a window centred on pixel 0 (the patch of an emitter within
    half a pixel of it; shifted with the emitter otherwise) and its x, y, z derivatives (central differences)."""
    from decode_mem.io.psf_file import read_psf

    spline = SplinePSF(read_psf(psf_file))
    g = torch.Generator().manual_seed(5)
    x, y = torch.rand(40, generator=g) - 0.5, torch.rand(40, generator=g) - 0.5
    z = (torch.rand(40, generator=g) - 0.5) * 1000
    terms = spline.window_terms(x, y, z, 11)
    # the same voxels and monomials, summed by matrix products of different shapes (bmm with 4 columns against 1):
    # equal to rounding, not bit for bit on every BLAS (AMX, AVX-512, CUDA)
    torch.testing.assert_close(terms[:, 0], spline.patches(x, y, z, 11)[0], rtol=1e-5, atol=1e-8)
    shifted = spline.window_terms(x + 2.0, y, z, 11)[:, 0]
    assert torch.allclose(shifted[:, :, 2:], spline.patches(x + 2.0, y, z, 11)[0][:, :, :-2], atol=1e-7)
    for k, (dx, dy, dz) in enumerate([(1e-2, 0, 0), (0, 1e-2, 0), (0, 0, 1.0)]):
        plus = spline.window_terms(x + dx, y + dy, z + dz, 11)[:, 0]
        minus = spline.window_terms(x - dx, y - dy, z - dz, 11)[:, 0]
        numeric = (plus - minus) / (2 * (dx + dy + dz))
        assert torch.allclose(terms[:, k + 1], numeric, atol=2e-3 * terms[:, k + 1].abs().max())


def test_config_copies_share_one_spline_until_the_file_changes(psf_file: str, tmp_path) -> None:
    """Training copies its config per batch (the size jitter): the copies share the spline read once (reading the
    coefficients per batch made the quick start's training peak at 2.1 GB RssAnon); a rewritten file is read anew."""
    import shutil
    from dataclasses import replace

    cfg = _config(psf_file)
    assert replace(cfg, frame_size=(20, 22)).spline_psf() is cfg.spline_psf()
    copy = tmp_path / "psf.h5"
    shutil.copy(psf_file, copy)
    first = _config(str(copy)).spline_psf()
    assert _config(str(copy)).spline_psf() is first
    from decode_mem.io.psf_file import read_psf

    data = read_psf(copy)
    write_psf(copy, replace(data, coeff=data.coeff * 2.0))
    assert torch.allclose(_config(str(copy)).spline_psf().coeff, first.coeff * 2.0)


@pytest.mark.gpu
def test_cuda_window_terms_equal_the_cpus(psf_file: str) -> None:
    """The PSF fit's terms (domain check) on CUDA: the same values and derivatives as on the CPU."""
    spline = _config(psf_file).spline_psf()
    g = torch.Generator().manual_seed(6)
    x, y = torch.rand(50, generator=g) - 0.5, torch.rand(50, generator=g) - 0.5
    z = (torch.rand(50, generator=g) - 0.5) * 1000
    cpu = spline.window_terms(x, y, z, 9)
    gpu = spline.to("cuda").window_terms(x.cuda(), y.cuda(), z.cuda(), 9).cpu()
    assert torch.allclose(cpu, gpu, rtol=1e-4, atol=1e-6 * float(cpu.abs().max()))
