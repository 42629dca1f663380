"""Cubic-spline PSF rendering (SMAP/DECODE cspline layout, see ``decode_mem.io.psf_file``), batched on any device.

An emitter's patch is ``size × size`` px around its centre pixel. All its pixels share the same fractional
position inside their spline voxel, so the 64 monomials ``w^i·v^j·u^k`` are computed once per emitter and the
patch is one gather of the voxels' coefficients and one product: ``(n, size, size, 64) · (n, 64)``. Emitters go
in chunks that bound the gathered coefficients to ~16 MB (the fused kernel below keeps no gathered copy: its chunks
hold ``_FUSED_CHUNK_PIXELS`` pixels). Pixels outside the spline get 0; z outside the
spline's voxels is clamped to its first or last z plane (the simulation config keeps z inside the valid range).

The gather and the product are one kernel through ``torch.compile`` on a CPU where a call renders at least
``FUSED_MIN_PIXELS`` pixels (training batches): torch's gather copies 64 floats per pixel before the product reads
them again: the fused loop renders a training batch 1.5-3x faster than the two-step path in its small chunks,
and one large call 5-9x faster (benchmarks/results/spline_render.md; the same numbers to float rounding,
``tests/simulate/test_spline_fused.py``). Smaller calls, other devices, or a compiler that fails
(once: said in a warning) take the two-step path.
"""

from __future__ import annotations

import functools
import warnings

import torch

from decode_mem.io.psf_file import SplineData

_CHUNK_ELEMENTS = 1 << 22  # gathered coefficients per chunk of the two-step path (float32: 16 MB)
_FUSED_CHUNK_PIXELS = 1 << 22  # pixels per chunk of the fused path (no gathered copy: ~16 bytes a pixel)
FUSED_MIN_PIXELS = 1 << 18  # a CPU call rendering at least this many pixels gathers and multiplies in one kernel


def _gather_dot(flat: torch.Tensor, index: torch.Tensor, pz: torch.Tensor, pv: torch.Tensor,
                pu: torch.Tensor) -> torch.Tensor:
    """Spline values at voxel ``index`` (N, R, C) of ``flat`` (voxels, 64) with monomials ``pz`` (N, 4),
    ``pv`` (N, R|1, 4), ``pu`` (N, C|1, 4): sum over i, j, k of coeff[16i + 4j + k]·pz_i·pv_j·pu_k."""
    n, r, c = index.shape
    coeff = flat[index].view(n, r, c, 4, 4, 4)
    mono = pz[:, None, None, :, None, None] * pv[:, :, None, None, :, None] * pu[:, None, :, None, None, :]
    return (coeff * mono).sum((-3, -2, -1))


class _Fused:
    """``_gather_dot`` through torch.compile, made on first use (``fused_kernel``); ``failed`` once it raised."""

    def __init__(self) -> None:
        self.fn = torch.compile(_gather_dot, dynamic=True)
        self.failed = False

    def __call__(self, *args: torch.Tensor) -> torch.Tensor | None:
        """The fused values, or None where compiling failed (now or before: warned once)."""
        if self.failed:
            return None
        try:
            return self.fn(*args)
        except Exception as e:  # no C++ compiler, an unsupported platform: the caller's path
            self.failed = True
            warnings.warn(f"spline rendering: torch.compile failed ({type(e).__name__}: {e}); rendering unfused "
                          "(slower)", RuntimeWarning, stacklevel=3)
            return None


@functools.cache
def fused_kernel() -> _Fused:
    """The process's fused spline kernel (torch.compile keeps its graphs on it: made once)."""
    return _Fused()


def use_fused(device: torch.device, pixels: int, fused: bool | None) -> bool:
    """Whether a call rendering ``pixels`` pixels on ``device`` takes the fused kernel (``fused`` None: a CPU
    call of at least ``FUSED_MIN_PIXELS``)."""
    return (device.type == "cpu" and pixels >= FUSED_MIN_PIXELS) if fused is None else bool(fused)


class SplinePSF:
    """A spline PSF's coefficients on one device; ``to(device)`` returns a copy there (cached per device)."""

    def __init__(self, data: SplineData, device: torch.device | str = "cpu") -> None:
        self.data = data
        self.device = torch.device(device)
        self.coeff = torch.as_tensor(data.coeff, dtype=torch.float32, device=self.device)
        self.shape = data.shape
        self._copies: dict[torch.device, SplinePSF] = {self.device: self}

    def to(self, device: torch.device | str) -> SplinePSF:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._copies:
            copy = SplinePSF.__new__(SplinePSF)
            copy.data, copy.device, copy.shape, copy._copies = self.data, device, self.shape, self._copies
            copy.coeff = self.coeff.to(device)
            self._copies[device] = copy
        return self._copies[device]

    @functools.cached_property
    def _z_last(self) -> torch.Tensor:
        """The coefficients with the z power innermost, ``(voxels, 64)`` at index 16j + 4k + i for w^i v^j u^k:
        a patch whose pixels have their own v, u monomials sums the z power first, in one batched product."""
        return self.coeff.view(-1, 4, 4, 4).permute(0, 2, 3, 1).reshape(-1, 64).contiguous()

    @property
    def patch_size(self) -> int:
        """The largest odd patch that stays inside the spline around any sub-pixel position."""
        return 2 * self.data.half_width() + 1

    def __getstate__(self) -> dict:
        return {"data": self.data}  # tensors are rebuilt on the CPU on unpickling

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["data"])

    def patches(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, size: int,
                width: torch.Tensor | None = None,
                fused: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit-flux spline patches: ``(patches (N, size, size), col0 (N,), row0 (N,))`` as ``gaussian_patches``.

        ``x``, ``y`` px, ``z`` nm; ``width`` (N,) optional relative lateral scale (1 = the PSF as measured;
        a pixel at offset d from the emitter takes the spline value at d/width, renormalised by 1/width²);
        ``fused``: gather and multiply in one compiled kernel (None: ``use_fused``; module docstring).
        """
        d = self.data
        nz, ny, nx = self.shape
        dtype = self.coeff.dtype
        x, y, z = x.to(dtype), y.to(dtype), z.to(dtype)
        half = size // 2
        col0 = torch.round(x).long() - half
        row0 = torch.round(y).long() - half
        offs = torch.arange(size, device=x.device, dtype=dtype)
        step = d.upsample  # voxels per camera pixel
        w = (z / d.dz + d.z0).clamp(0.0, nz - 1e-4)
        iz = w.floor()
        fz = w - iz
        if width is None:
            # all pixels of a patch share the fractional position: one set of monomials per emitter
            u0 = d.x0 + (col0.to(dtype) - x) * step
            v0 = d.y0 + (row0.to(dtype) - y) * step
            iu0, iv0 = u0.floor(), v0.floor()
            fu, fv = (u0 - iu0)[:, None, None], (v0 - iv0)[:, None, None]
            iu = (iu0[:, None] + offs * step).long()  # (N, size): voxel column of each patch column
            iv = (iv0[:, None] + offs * step).long()
            scale = None
        else:
            wd = width.to(dtype)
            u = d.x0 + (col0.to(dtype)[:, None] + offs - x[:, None]) * step / wd[:, None]  # (N, size)
            v = d.y0 + (row0.to(dtype)[:, None] + offs - y[:, None]) * step / wd[:, None]
            iu_, iv_ = u.floor(), v.floor()
            fu, fv = (u - iu_)[:, None, :], (v - iv_)[:, :, None]
            iu, iv = iu_.long(), iv_.long()
            scale = 1.0 / (wd * wd)
        # rows and columns separately (N, size), combined once into the (N, size, size) voxel index
        inside = ((iv >= 0) & (iv < ny))[:, :, None] & ((iu >= 0) & (iu < nx))[:, None, :]
        row_index = (iz.long()[:, None] * ny + iv.clamp(0, ny - 1)) * nx  # (N, size)
        index = row_index[:, :, None] + iu.clamp(0, nx - 1)[:, None, :]
        powers = torch.arange(4, device=x.device, dtype=dtype)
        pz = fz[:, None] ** powers  # (N, 4)
        pv = fv.unsqueeze(-1) ** powers  # (N, size|1, 1, 4)
        pu = fu.unsqueeze(-1) ** powers  # (N, 1, size|1, 4)
        n = x.shape[0]
        values = (fused_kernel()(self.coeff.view(-1, 64), index, pz, pv.reshape(n, -1, 4), pu.reshape(n, -1, 4))
                  if use_fused(self.coeff.device, n * size * size, fused) else None)  # None: the two steps below
        if values is None and scale is None:  # one set of monomials per emitter: a batched matrix-vector product
            # monomial w^i v^j u^k at index 16i + 4j + k
            mono = (pz[:, None, None, :, None, None] * pv[..., None, :, None] * pu[..., None, None, :])
            gathered = self.coeff.view(-1, 64).index_select(0, index.reshape(-1)).view(n, size * size, 64)
            values = torch.bmm(gathered, mono.reshape(n, 64, 1)).view(n, size, size)
        elif values is None:  # per row and column monomials: z (shared by the patch) first, then rows, then columns
            gathered = self._z_last.index_select(0, index.reshape(-1)).view(n, size * size * 16, 4)
            by_row_col = torch.bmm(gathered, pz[:, :, None]).view(n, size, size, 4, 4)  # (.., v power, u power)
            by_col = (by_row_col * pv[:, :, :, None, :].transpose(-1, -2)).sum(-2)  # (N, size, size, 4)
            values = (by_col * pu).sum(-1)
        values = values.masked_fill(~inside, 0.0)
        if scale is not None:
            values = values * scale[:, None, None]
        return values, col0, row0

    def window_terms(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, size: int) -> torch.Tensor:
        """Unit-flux PSF on ``size × size`` windows centred on pixel (0, 0), for emitters at ``x``, ``y`` px from
        that centre and ``z`` nm, with its derivatives: ``(N, 4, size, size)`` = value, d/dx, d/dy, d/dz (per px,
        per px, per nm). What a least-squares fit of the PSF needs, for the price of one ``patches`` call (the
        derivatives share the gathered coefficients). Pixels outside the spline are 0; z is clamped to the
        spline's voxels (d/dz is then that of the clamped z)."""
        d = self.data
        nz, ny, nx = self.shape
        dtype = self.coeff.dtype
        x, y, z = x.to(dtype), y.to(dtype), z.to(dtype)
        n, half, step = x.shape[0], size // 2, d.upsample
        offs = torch.arange(size, device=x.device, dtype=dtype) * step
        w = (z / d.dz + d.z0).clamp(0.0, nz - 1e-4)
        u0 = d.x0 - (half + x) * step
        v0 = d.y0 - (half + y) * step
        iz, iu0, iv0 = w.floor(), u0.floor(), v0.floor()
        fz, fu, fv = w - iz, u0 - iu0, v0 - iv0
        iu = (iu0[:, None] + offs).long()
        iv = (iv0[:, None] + offs).long()
        inside = ((iv >= 0) & (iv < ny))[:, :, None] & ((iu >= 0) & (iu < nx))[:, None, :]
        index = ((iz.long()[:, None] * ny + iv.clamp(0, ny - 1)) * nx)[:, :, None] + iu.clamp(0, nx - 1)[:, None, :]
        powers = torch.arange(4, device=x.device, dtype=dtype)

        def monomials(f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            p = f[:, None] ** powers  # (N, 4): 1, f, f², f³ and their derivatives 0, 1, 2f, 3f²
            dp = torch.cat([torch.zeros_like(p[:, :1]), p[:, :3] * powers[1:]], dim=1)
            return p, dp

        (pz, dpz), (pv, dpv), (pu, dpu) = monomials(fz), monomials(fv), monomials(fu)

        def outer(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:  # index 16i + 4j + k
            return (a[:, :, None, None] * b[:, None, :, None] * c[:, None, None, :]).reshape(n, 64)

        # d/dx = d/du · du/dx with du/dx = −step (the window is fixed, the emitter moves); likewise y; dw/dz = 1/dz
        mono = torch.stack([outer(pz, pv, pu), outer(pz, pv, dpu) * -step, outer(pz, dpv, pu) * -step,
                            outer(dpz, pv, pu) / d.dz], dim=2)  # (N, 64, 4)
        gathered = self.coeff.view(-1, 64).index_select(0, index.reshape(-1)).view(n, size * size, 64)
        values = torch.bmm(gathered, mono).view(n, size, size, 4).permute(0, 3, 1, 2)
        return values.masked_fill(~inside[:, None], 0.0)

    def render_spots(self, canvas: torch.Tensor, frame: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                     z: torch.Tensor, photons: torch.Tensor, width: torch.Tensor | None = None,
                     size: int | None = None, fused: bool | None = None) -> torch.Tensor:
        """Add spline spots into ``canvas`` (T, H, W) in place and return it (``psf.render_spots`` semantics);
        ``fused``: as ``patches``, decided once for the whole call (None: ``use_fused`` of all its pixels)."""
        if canvas.dim() != 3:
            raise ValueError(f"render_spots: canvas must be (T, H, W), got shape {tuple(canvas.shape)}")
        n = frame.numel()
        if n == 0:
            return canvas
        psf = self.to(canvas.device)
        size = psf.patch_size if size is None else size
        fused = use_fused(psf.coeff.device, n * size * size, fused)
        # chunks bound the two-step path's gathered coefficients; the fused kernel keeps none, so it takes larger ones
        step = max(1, (_FUSED_CHUNK_PIXELS if fused else _CHUNK_ELEMENTS // 64) // (size * size))
        for s in range(0, n, step):
            sl = slice(s, min(n, s + step))
            patches, col0, row0 = psf.patches(x[sl], y[sl], z[sl], size, None if width is None else width[sl],
                                              fused=fused)
            scatter_patches(canvas, frame[sl], patches * photons[sl].to(patches.dtype)[:, None, None], col0, row0)
        return canvas


def scatter_patches(canvas: torch.Tensor, frame: torch.Tensor, values: torch.Tensor, col0: torch.Tensor,
                    row0: torch.Tensor) -> torch.Tensor:
    """Add patches ``values`` (N, size, size) whose pixel [0, 0] is frame pixel (row0, col0) into ``canvas``
    (T, H, W) in place; the parts outside the canvas are dropped (masked to index 0 with value 0: no sync)."""
    t, h, w = canvas.shape
    size = values.shape[-1]
    offs = torch.arange(size, device=canvas.device)
    values = values.to(canvas.dtype)
    cols = col0[:, None] + offs
    rows = row0[:, None] + offs
    f = frame.long()
    valid = (((cols >= 0) & (cols < w))[:, None, :] & ((rows >= 0) & (rows < h))[:, :, None]
             & ((f >= 0) & (f < t))[:, None, None])
    index = (f[:, None, None] * h + rows[:, :, None]) * w + cols[:, None, :]
    invalid = ~valid
    index.masked_fill_(invalid, 0)
    values = values.masked_fill(invalid, 0.0)
    canvas.view(-1).index_add_(0, index.reshape(-1), values.reshape(-1))
    return canvas
