"""The fused spline kernel (torch.compile's gather and product in one loop) renders what the two-step path renders,
and a compiler that fails leaves the two-step path with one warning."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from decode_mem.psf import spline_from_volume
from decode_mem.simulate import spline as spline_module
from decode_mem.simulate.spline import FUSED_MIN_PIXELS, SplinePSF, use_fused

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "psf"))
from psf_helpers import analytic_volume

DZ = 50.0
Z = np.arange(-750.0, 750.0 + DZ, DZ)


@pytest.fixture(scope="module")
def psf() -> SplinePSF:
    return SplinePSF(spline_from_volume(analytic_volume(Z, 20, 2), dz=DZ, z0=float(np.flatnonzero(Z == 0)[0]),
                                        upsample=2, z_range=(-700.0, 700.0), pixel_size=100.0))


def _emitters(n: int = 300, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, generator=g) * 30, torch.rand(n, generator=g) * 30
    z = (torch.rand(n, generator=g) - 0.5) * 1400  # up to the spline's ends (clamped there)
    width = 1 + 0.1 * torch.randn(n, generator=g)
    return x, y, z, width


@pytest.mark.parametrize("with_width", [False, True])
def test_fused_equals_two_step(psf: SplinePSF, with_width: bool) -> None:
    x, y, z, width = _emitters()
    w = width if with_width else None
    size = psf.patch_size
    plain, col0, row0 = psf.patches(x, y, z, size, w, fused=False)
    fused, col1, row1 = psf.patches(x, y, z, size, w, fused=True)
    assert not spline_module.fused_kernel().failed  # the compiled kernel computed them, not the fallback
    assert torch.equal(col0, col1) and torch.equal(row0, row1)
    assert plain.abs().max() > 0.01  # real spots, not an all-zero comparison
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-7)


def test_a_failing_compiler_warns_once_and_renders_unfused(psf: SplinePSF, monkeypatch) -> None:
    kernel = spline_module._Fused.__new__(spline_module._Fused)
    kernel.failed = False

    def broken(*args):
        raise RuntimeError("no C++ compiler")

    kernel.fn = broken
    monkeypatch.setattr(spline_module, "fused_kernel", lambda: kernel)
    x, y, z, _ = _emitters(50)
    plain = psf.patches(x, y, z, psf.patch_size, fused=False)[0]
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*no C\\+\\+ compiler"):
        first = psf.patches(x, y, z, psf.patch_size, fused=True)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call says nothing
        second = psf.patches(x, y, z, psf.patch_size, fused=True)[0]
    assert torch.equal(first, plain) and torch.equal(second, plain)


def test_only_large_cpu_calls_fuse_by_default() -> None:
    cpu = torch.device("cpu")
    assert use_fused(cpu, FUSED_MIN_PIXELS, None)
    assert not use_fused(cpu, FUSED_MIN_PIXELS - 1, None)
    assert not use_fused(torch.device("cuda", 0), 10 * FUSED_MIN_PIXELS, None)
    assert use_fused(cpu, 1, True) and not use_fused(cpu, 10 * FUSED_MIN_PIXELS, False)


def test_render_spots_takes_the_fused_kernel_for_a_large_call(psf: SplinePSF, monkeypatch) -> None:
    """A call of at least ``FUSED_MIN_PIXELS`` pixels in all goes through the fused kernel (its chunks are not cut
    below the threshold) and renders the two-step path's frames."""
    n = FUSED_MIN_PIXELS // psf.patch_size ** 2 + 50
    x, y, z, width = _emitters(n, seed=3)
    frame = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(1))
    photons = torch.full((n,), 1000.0)
    calls: list[int] = []
    real = spline_module.fused_kernel()

    def counted(*args):
        calls.append(args[1].shape[0])
        return real(*args)

    monkeypatch.setattr(spline_module, "fused_kernel", lambda: counted)
    fused = psf.render_spots(torch.zeros(4, 32, 32), frame, x, y, z, photons, width)
    assert sum(calls) == n  # every emitter through the fused kernel
    monkeypatch.undo()
    plain = psf.render_spots(torch.zeros(4, 32, 32), frame, x, y, z, photons, width, fused=False)
    assert plain.sum() > 1000.0
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-3)
