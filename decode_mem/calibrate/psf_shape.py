"""Do a movie's spots look like a 3-D model's PSF? Bright isolated spots fitted with that PSF, against their noise.

The domain check's calibration has found and fitted (with a Gaussian) every spot of its frames. Here the
brightest ``MAX_SPOTS`` of them that are well inside the frame, have no other spot within ``ISOLATION`` window
radii and are not brighter than ``BLEND`` times the median one (two emitters at once) are fitted with the model's
spline PSF itself: photons·PSF(x, y, z) + background on a window around each (``window_radius``), z started from
the best of ``Z_STARTS`` planes over the model's z range, then a few batched Levenberg–Marquardt steps (the spline
gives the derivatives, ``SplinePSF.window_terms``). Pixels near other spots are left out of the fit.

Two numbers per spot: its reduced χ² (squared residuals over the noise the camera predicts: shot noise with the
EMCCD's excess factor and read noise, scaled by the noise ratio the camera check measured on the background, plus
``MODEL_ERROR`` of the PSF's own light, as a bead calibration is not exact), and its *misfit*: the residual light
beyond that noise, as an RMS share of the spot's light (√(Σ(r² − noise)) / √(Σ light²); 0 for a spot of this
PSF, whatever its brightness). Simulated at 256² (benchmarks/results/psf_shape.md), against the 3-D quick start's
PSF calibrated from beads: spots of another PSF (a double helix, a 2-D Gaussian, twice the astigmatism) leave a
median misfit of 0.18 and more at 0.5 emitters/µm²; those of the model's PSF 0 from 0.1 to 4 emitters/µm².
The verdict, over at least ``MIN_SPOTS`` spots: the median misfit above ``MISFIT_LIMIT`` with the median χ²
above ``CHI2_SIGNIFICANT`` (more than noise), or more than ``Z_END_LIMIT`` of the spots fitting best at the ends
of the model's z range (a PSF that does not fit pulls z there, and so do emitters beyond the range the model
knows: both are outside its domain).

Not judged: PSFs of several lobes (the brightest pixel more than ``MAX_PEAK_OFFSET`` from the centre at the
median z, e.g. a double helix): the spots are found lobe by lobe and a window around a lobe does not hold the PSF.
What it cannot see: a PSF that equals the model's at another z. A purely astigmatic PSF with the cylindrical lens
turned by 90° (astigmatism of the opposite sign) is the same PSF at −z: its spots match, their z comes out mirrored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from decode_mem.calibrate.camera_check import expected_slope, read_variance
from decode_mem.io.camera import Camera
from decode_mem.simulate.spline import SplinePSF

MAX_SPOTS = 40  # the brightest isolated spots fitted (the cost: a few ms per spot)
MIN_SPOTS = 8  # fewer fitted spots: not judged
ISOLATION = 1.5  # window radii: no other spot within this of a fitted one
BLEND = 1.25  # spots brighter than this many times the median isolated one are left out (two emitters at once)
MASK = 1.5  # Gaussian widths: the pixels this close to another spot are left out of a window
MODEL_ERROR = 0.03  # relative error of the PSF model added to the noise (a bead-calibrated spline is not exact)
Z_STARTS = 9  # z planes tried for the start of each fit
ITERATIONS = 8
MISFIT_LIMIT = 0.15  # median misfit above this (with χ² above CHI2_SIGNIFICANT): the spots are not of this PSF
CHI2_SIGNIFICANT = 1.1
CHI2_BAD = 2.0  # a spot whose χ² is above this fits badly (counted)
Z_END = 0.05  # z within this share of the range from either end counts as "at the end" ...
Z_END_LIMIT = 0.3  # ... and more than this share of the spots there is warned about (2·Z_END for a spread z)
MAX_PEAK_OFFSET = 3.0  # px: a PSF whose brightest pixel lies farther from its centre is not judged (lobes)
MAX_RADIUS = 4  # px: largest fit window radius (larger ones catch more of the neighbours' light: with 5 px, a
# movie of the model's own wide PSF at 3 emitters/µm² was taken for another PSF; benchmarks/results/psf_shape.md)


@dataclass(frozen=True)
class PsfShape:
    """The PSF fits of a movie's spots: ``spots`` fitted, ``chi2_median`` (reduced χ², 1 for spots of this PSF),
    ``bad_share`` (of spots with χ² > ``CHI2_BAD``), ``z_end_share`` (fitted z at the range's ends), ``photons``
    (median photons of the fitted spots), ``radius`` (px of the fit windows), ``misfit`` (median residual light
    beyond the noise, RMS share of the spot's light); ``note`` when not judged."""

    spots: int
    chi2_median: float
    bad_share: float
    z_end_share: float
    photons: float
    radius: int
    misfit: float = math.nan
    isolated: float = math.nan
    z_range: tuple[float, float] = (math.nan, math.nan)
    note: str = ""
    seconds: float | None = None

    @property
    def judged(self) -> bool:
        return self.spots >= MIN_SPOTS

    @property
    def misfits(self) -> bool:
        """The spots leave more light unexplained than spots of this PSF do."""
        return self.judged and self.misfit > MISFIT_LIMIT and self.chi2_median > CHI2_SIGNIFICANT

    @property
    def at_ends(self) -> bool:
        """Many spots fit best at the ends of the model's z range (another PSF, or emitters beyond the range)."""
        return self.judged and self.z_end_share > Z_END_LIMIT

    @property
    def ok(self) -> bool:
        return not (self.misfits or self.at_ends)

    @property
    def verdict(self) -> str:
        """'matches', 'not judged', or what does not match: 'misfit', 'z at the ends' or both."""
        if not self.judged:
            return "not judged"
        found = [n for n, bad in (("misfit", self.misfits), ("z at the ends", self.at_ends)) if bad]
        return ", ".join(found) or "matches"

    def warning(self) -> str | None:
        """One line saying how the spots differ from the PSF, or None when they match (or were not judged)."""
        if self.ok:
            return None
        lo, hi = self.z_range
        found = (f"fitted with it, {self.spots} bright isolated spots leave {self.misfit:.1%} of their light "
                 f"unexplained (median; at most {MISFIT_LIMIT:.0%} for spots of this PSF; reduced chi2 "
                 f"{self.chi2_median:.2f}, 1 expected) and {self.z_end_share:.0%} of them fit best at the ends of "
                 f"the model's z range {lo:g} to {hi:g} nm (about {2 * Z_END:.0%} for emitters spread over it)")
        if self.misfits:
            return f"its spots do not look like the model's PSF (recorded with another PSF?): {found}"
        return ("its spots fit the model's PSF best at the ends of its z range (another PSF, or emitters beyond "
                f"the range the model was trained on?): {found}")

    def as_dict(self) -> dict[str, Any]:
        out = {"spots": self.spots, "misfit_median": _round(self.misfit), "misfit_limit": MISFIT_LIMIT,
               "chi2_median": _round(self.chi2_median), "bad_share": _round(self.bad_share),
               "z_end_share": _round(self.z_end_share), "photons_median": _round(self.photons),
               "window_radius": self.radius, "isolated_share": _round(self.isolated), "ok": self.ok,
               "verdict": self.verdict}
        if self.note:
            out["note"] = self.note
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
        return out


def window_radius(psf: SplinePSF, z_range: tuple[float, float]) -> int:
    """The fit window's radius: twice the PSF's largest RMS width over ``z_range`` (its width curves), within
    [3, ``MAX_RADIUS``] px and inside the spline."""
    d = psf.data
    widest = 2.0
    if d.width_z is not None and d.width_x is not None and d.width_y is not None:
        z = np.asarray(d.width_z, np.float64)
        inside = (z >= z_range[0] - 1e-6) & (z <= z_range[1] + 1e-6)
        if inside.any():
            widest = float(max(np.max(d.width_x[inside]), np.max(d.width_y[inside])))
    return int(max(3, min(MAX_RADIUS, psf.data.half_width(), math.ceil(2.0 * widest))))


def peak_offset(psf: SplinePSF, z_range: tuple[float, float]) -> float:
    """The median over ``z_range`` of the distance (px) between the PSF's centre and its brightest pixel (the
    median: an astigmatic PSF far out of focus may become a ring, a double helix has two lobes at every z)."""
    n = 2 * Z_STARTS + 1
    half = min(psf.data.half_width(), 2 * MAX_RADIUS)
    zero = torch.zeros(n)
    values = psf.window_terms(zero, zero, torch.linspace(float(z_range[0]), float(z_range[1]), n), 2 * half + 1)[:, 0]
    flat = values.reshape(n, -1).argmax(dim=1)
    rows, cols = flat // (2 * half + 1) - half, flat % (2 * half + 1) - half
    return float(torch.hypot(rows.double(), cols.double()).median())


def check_psf_shape(photons: np.ndarray, spots: dict[str, np.ndarray], sigma: float, psf: SplinePSF,
                    z_range: tuple[float, float], camera: Camera, noise_ratio: float | None = None) -> PsfShape:
    """Fit the brightest isolated spots of ``photons`` (n, H, W frames in photons, scalar camera) with ``psf``.

    ``spots``: the calibration's localizations (``frame`` index into ``photons``, ``x``, ``y`` px, ``photons``,
    ``ok``); ``sigma``: their Gaussian width (px; pixels within ``MASK`` widths of other spots are left out);
    the spots' share with no other spot within ``ISOLATION`` window radii is recorded (``isolated``);
    ``z_range``: nm, the model's; ``noise_ratio``: the variance over time of the background pixels where no spot
    was found over the camera's prediction (``CameraCheck.quiet_ratio``), scales the noise: it holds the light of
    emitters too dim to be found, which the fit windows hold too (with the camera's noise alone, dense movies of
    the model's own PSF would be judged another PSF: ``tests/calibrate/test_psf_shape.py`` at 3 emitters/µm²).
    """
    radius = window_radius(psf, z_range)
    offset = peak_offset(psf, z_range)
    if offset > MAX_PEAK_OFFSET:
        return PsfShape(0, math.nan, math.nan, math.nan, math.nan, radius,
                        z_range=(float(z_range[0]), float(z_range[1])),
                        note=f"not judged: the PSF's brightest pixel lies {offset:.1f} px from its centre (median over "
                             "z; a PSF of several lobes, e.g. a double helix: its spots are found lobe by lobe, and "
                             "windows around a lobe do not hold the PSF)")
    n_frames, h, w = photons.shape
    frame = np.asarray(spots["frame"], np.int64)
    x, y = np.asarray(spots["x"], np.float64), np.asarray(spots["y"], np.float64)
    bright = np.asarray(spots["photons"], np.float64)
    sigma = float(sigma) if math.isfinite(sigma) and sigma > 0 else 1.0
    col, row = np.round(x).astype(np.int64), np.round(y).astype(np.int64)
    keep = (np.asarray(spots["ok"], bool) & (row >= radius) & (row < h - radius) & (col >= radius)
            & (col < w - radius) & (frame >= 0) & (frame < n_frames))
    clear = _nearest(frame, x, y)
    inner = int(keep.sum())
    keep &= clear > ISOLATION * radius
    isolated = int(keep.sum()) / max(inner, 1)
    if keep.any():
        keep &= bright <= BLEND * np.median(bright[keep])
    chosen = np.nonzero(keep)[0]
    chosen = chosen[np.argsort(-bright[chosen], kind="stable")][:MAX_SPOTS]
    if len(chosen) < MIN_SPOTS:
        return PsfShape(len(chosen), math.nan, math.nan, math.nan, math.nan, radius, isolated=isolated,
                        z_range=(float(z_range[0]), float(z_range[1])),
                        note=f"{len(chosen)} isolated spots, fewer than {MIN_SPOTS}: not judged")
    k = np.arange(-radius, radius + 1)
    rr = row[chosen][:, None, None] + k[None, :, None]
    cc = col[chosen][:, None, None] + k[None, None, :]
    data = photons[frame[chosen][:, None, None], rr, cc].astype(np.float64)
    use = _unmasked(frame, x, y, chosen, rr, cc, MASK * sigma)
    ratio = float(noise_ratio) if noise_ratio is not None and math.isfinite(noise_ratio) else 1.0
    fit = _fit(psf, data, use, x[chosen] - col[chosen], y[chosen] - row[chosen], z_range,
               slope=ratio * expected_slope(camera), read=ratio * read_variance(camera))
    chi2, z, n, energy = fit
    misfit = float(np.median(np.sqrt(np.clip(energy[:, 0], 0.0, None) / np.maximum(energy[:, 1], 1e-12))))
    lo, hi = z_range
    ends = (z <= lo + Z_END * (hi - lo)) | (z >= hi - Z_END * (hi - lo))
    return PsfShape(len(chosen), float(np.median(chi2)), float(np.mean(chi2 > CHI2_BAD)), float(np.mean(ends)),
                    float(np.median(n)), radius, misfit=misfit, isolated=isolated, z_range=(float(lo), float(hi)))


def _nearest(frame: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each spot's distance (px) to the nearest other spot of its frame (infinite when alone)."""
    from scipy.spatial import cKDTree

    out = np.full(len(frame), np.inf)
    for f in np.unique(frame):
        mine = np.nonzero(frame == f)[0]
        if len(mine) < 2:
            continue
        pts = np.column_stack([x[mine], y[mine]])
        out[mine] = cKDTree(pts).query(pts, k=2)[0][:, 1]
    return out


def _unmasked(frame: np.ndarray, x: np.ndarray, y: np.ndarray, chosen: np.ndarray, rr: np.ndarray,
              cc: np.ndarray, distance: float) -> np.ndarray:
    """(n, K, K): the window pixels farther than ``distance`` px from every other spot of their frame."""
    use = np.ones(np.broadcast_shapes(rr.shape, cc.shape), dtype=bool)
    reach = rr.shape[1] // 2 + distance
    for i, s in enumerate(chosen):
        near = np.nonzero((frame == frame[s]) & (np.abs(x - x[s]) < reach) & (np.abs(y - y[s]) < reach))[0]
        for j in near[near != s]:
            use[i] &= np.hypot(cc[i] - x[j], rr[i] - y[j]) > distance
    return use


def _fit(psf: SplinePSF, data: np.ndarray, use: np.ndarray, x0: np.ndarray, y0: np.ndarray,
         z_range: tuple[float, float], *, slope: float,
         read: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least-squares fits of ``photons·PSF + bg`` to the windows; returns (reduced χ², z, photons,
    energy (n, 2): Σ(r² − noise) and Σ light² over the used pixels, the misfit's two sums)."""
    n, size, _ = data.shape
    d = torch.as_tensor(data.reshape(n, -1))
    w = torch.as_tensor(use.reshape(n, -1), dtype=torch.float64)
    x0t, y0t = torch.as_tensor(x0), torch.as_tensor(y0)
    lo, hi = (float(v) for v in z_range)

    def terms(p: torch.Tensor) -> torch.Tensor:  # (n, 4, K²): PSF, d/dx, d/dy, d/dz
        return psf.window_terms(p[:, 0], p[:, 1], p[:, 2], size).reshape(len(p), 4, -1).double()

    def variance(model: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        return slope * model.clamp(min=0.0) + read + (MODEL_ERROR * light) ** 2

    def linear(shape: torch.Tensor, weight: torch.Tensor, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Photons and background of the best fit of ``shape`` (…, K²) to ``data`` at a fixed position."""
        s1, sp, spp = weight.sum(-1), (weight * shape).sum(-1), (weight * shape * shape).sum(-1)
        sd, spd = (weight * data).sum(-1), (weight * shape * data).sum(-1)
        det = (s1 * spp - sp * sp).clamp(min=1e-12)
        photons = ((s1 * spd - sp * sd) / det).clamp(min=1.0)
        return photons, (sd - photons * sp) / s1.clamp(min=1e-12)

    # start: the best of Z_STARTS planes (photons and background solved for each), noise from the data
    zs = torch.linspace(lo, hi, Z_STARTS, dtype=torch.float64)
    grid = torch.stack([x0t.repeat_interleave(Z_STARTS), y0t.repeat_interleave(Z_STARTS), zs.repeat(n)], dim=1)
    shapes = terms(grid)[:, 0].reshape(n, Z_STARTS, -1)
    dg = d[:, None, :]
    weight = w[:, None, :] / (slope * dg.clamp(min=1.0) + read)
    photons, bg = linear(shapes, weight, dg)
    cost = (weight * (dg - photons[..., None] * shapes - bg[..., None]) ** 2).sum(-1)
    best = cost.argmin(dim=1)
    pick = torch.arange(n)
    p = torch.stack([x0t, y0t, zs[best], photons[pick, best], bg[pick, best]], dim=1)

    def evaluate(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t = terms(p)
        light = p[:, 3:4] * t[:, 0]
        model = light + p[:, 4:5]
        var = variance(model, light)
        return (w * (d - model) ** 2 / var).sum(-1), t, var

    cost, t, var = evaluate(p)
    lam = torch.full((n,), 1e-2, dtype=torch.float64)
    eye = torch.eye(5, dtype=torch.float64)
    for _ in range(ITERATIONS):
        jac = torch.cat([p[:, 3:4, None] * t[:, 1:4], t[:, :1], torch.ones_like(t[:, :1])], dim=1)  # (n, 5, K²)
        wt = w / var
        resid = d - (p[:, 3:4] * t[:, 0] + p[:, 4:5])
        jtj = torch.einsum("npk,nqk->npq", jac * wt[:, None], jac)
        jtr = torch.einsum("npk,nk->np", jac * wt[:, None], resid)
        damp = jtj + (lam[:, None] * torch.diagonal(jtj, dim1=1, dim2=2) + 1e-9)[:, :, None] * eye
        step = torch.linalg.solve(damp, jtr)
        # at most 1 px and a tenth of the z range per step
        limit = torch.maximum(step[:, :2].abs().amax(dim=1), step[:, 2].abs() / (0.1 * (hi - lo) + 1e-9))
        step = step / limit.clamp(min=1.0)[:, None]
        trial = p + step
        trial[:, 0:2] = trial[:, 0:2].clamp(-size // 2, size // 2)
        trial[:, 2] = trial[:, 2].clamp(lo, hi)
        trial[:, 3] = trial[:, 3].clamp(min=1.0)
        new_cost, new_t, new_var = evaluate(trial)
        better = new_cost <= cost
        p = torch.where(better[:, None], trial, p)
        cost = torch.where(better, new_cost, cost)
        t = torch.where(better[:, None, None], new_t, t)
        var = torch.where(better[:, None], new_var, var)
        lam = torch.where(better, lam / 3, lam * 4)
    dof = (w.sum(-1) - 5).clamp(min=1.0)
    light = p[:, 3:4] * t[:, 0]
    resid = d - light - p[:, 4:5]
    noise = slope * (light + p[:, 4:5]).clamp(min=0.0) + read
    energy = torch.stack([(w * (resid**2 - noise)).sum(-1), (w * light**2).sum(-1)], dim=1)
    return (cost / dof).numpy(), p[:, 2].numpy(), p[:, 3].numpy(), energy.numpy()


def _round(v: float) -> float | None:
    return round(float(v), 4) if math.isfinite(v) else None
