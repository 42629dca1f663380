"""Spot detection and batched least-squares fits of a pixel-integrated Gaussian PSF.

Detection: local maxima of the background-subtracted frame smoothed by a Gaussian of 0.7 PSF widths, above
a multiple of the smoothed noise (MAD of the smoothed frame). Fits: ``photons·Ex(x, σ)·Ey(y, σ) + b`` on a
``(2r+1)²`` window, ``Ex`` the Gaussian integrated over each pixel (erf model, pixel centres at integers),
by Levenberg–Marquardt run on many spots at once (numpy: one 5×5 solve per spot and iteration). Spots
closer than ~3.5σ are never fitted at once: they are coloured apart and fitted colour after colour on the
frame minus the others' fitted light (Gauss–Seidel), two sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage, special

SIGMA_BOUNDS = (0.3, 5.0)  # px; a fit that ends at a bound is not trusted
FIT_BATCH = 4096  # spots fitted at once (~30 MB of Jacobian for 13 x 13 windows)
DETECTION_SMOOTHING = 0.7  # × σ: narrower than the matched filter, so that spots ~3σ apart stay two maxima
_SQRT_2PI = float(np.sqrt(2 * np.pi))


@dataclass(frozen=True)
class Candidates:
    """Local maxima of one block of frames: ``frame`` (index in the block), ``row``, ``col``, ``score``
    (smoothed peak over the frame's smoothed noise)."""

    frame: np.ndarray
    row: np.ndarray
    col: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.frame)

    def select(self, keep: np.ndarray) -> Candidates:
        return Candidates(self.frame[keep], self.row[keep], self.col[keep], self.score[keep])


def find_candidates(signal: np.ndarray, sigma: float, threshold: float) -> Candidates:
    """Local maxima of ``signal`` (n, H, W; photons above background) smoothed by a Gaussian of ``sigma`` px
    whose height is at least ``threshold`` times that frame's smoothed noise (1.4826·MAD)."""
    smooth = ndimage.gaussian_filter(signal.astype(np.float32, copy=False), (0, sigma, sigma), mode="nearest")
    flat = smooth.reshape(len(smooth), -1)
    med = np.median(flat, axis=1)
    noise = 1.4826 * np.median(np.abs(flat - med[:, None]), axis=1)
    noise = np.maximum(noise, 1e-6)[:, None, None]
    size = max(3, 2 * int(np.ceil(sigma)) + 1)
    peaks = (smooth == ndimage.maximum_filter(smooth, size=(1, size, size), mode="nearest"))
    score = (smooth - med[:, None, None]) / noise
    f, r, c = np.nonzero(peaks & (score >= threshold))
    return Candidates(f, r, c, score[f, r, c])


def isolated(cands: Candidates, others: Candidates, distance: float) -> np.ndarray:
    """True where a candidate has no candidate of ``others`` (same frame, itself excluded) within ``distance`` px."""
    from scipy.spatial import cKDTree

    out = np.ones(len(cands), dtype=bool)
    for f in np.unique(cands.frame):
        mine = np.nonzero(cands.frame == f)[0]
        theirs = others.frame == f
        pts = np.column_stack([others.row[theirs], others.col[theirs]]).astype(float)
        if len(pts) < 2:
            continue
        tree = cKDTree(pts)
        counts = tree.query_ball_point(np.column_stack([cands.row[mine], cands.col[mine]]).astype(float),
                                       distance, return_length=True)
        out[mine] = counts <= 1  # itself
    return out


def windows(frames: np.ndarray, cands: Candidates, radius: int) -> tuple[np.ndarray, np.ndarray]:
    """``(2r+1)²`` windows around each candidate: ``(values, valid)``, pixels outside the frame invalid (0)."""
    _, h, w = frames.shape
    k = np.arange(-radius, radius + 1)
    rows = cands.row[:, None] + k[None, :]
    cols = cands.col[:, None] + k[None, :]
    valid = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
    rr = np.clip(rows, 0, h - 1)[:, :, None]
    cc = np.clip(cols, 0, w - 1)[:, None, :]
    values = frames[cands.frame[:, None, None], rr, cc].astype(np.float64)
    return np.where(valid, values, 0.0), valid


@dataclass(frozen=True)
class SpotFits:
    """Fitted spots (arrays of length n): centre ``x``, ``y`` in frame px, ``photons``, ``bg`` (photons/px),
    ``sigma`` (px), ``ok`` (converged, inside the window, σ not at a bound, photons > 0)."""

    x: np.ndarray
    y: np.ndarray
    photons: np.ndarray
    bg: np.ndarray
    sigma: np.ndarray
    ok: np.ndarray

    @classmethod
    def empty(cls) -> SpotFits:
        z = np.zeros(0)
        return cls(z, z, z, z, z, np.zeros(0, dtype=bool))


def _edges(centre: np.ndarray, sigma: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(n, K+1): the edges ``k ± 0.5`` of pixels ``k`` (consecutive integers) relative to ``centre``, in σ. A
    pixel's upper edge is the next one's lower edge: each is computed (and integrated) once, not twice."""
    return (np.append(k - 0.5, k[-1] + 0.5)[None, :] - centre[:, None]) / sigma[:, None]


def _axis_integrals(centre: np.ndarray, sigma: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Pixel integrals E of a 1-D Gaussian over pixels ``k`` (what ``_axis_terms`` gives first, alone)."""
    cdf = special.ndtr(_edges(centre, sigma, k))
    return cdf[:, 1:] - cdf[:, :-1]


def _axis_terms(centre: np.ndarray, sigma: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, ...]:
    """Pixel integrals E of a 1-D Gaussian over pixels ``k`` and their derivatives by centre and σ."""
    edges = _edges(centre, sigma, k)
    density = np.exp(-0.5 * edges * edges) / _SQRT_2PI
    cdf = special.ndtr(edges)
    a, c, pa, pc = edges[:, 1:], edges[:, :-1], density[:, 1:], density[:, :-1]  # upper and lower edges
    e = cdf[:, 1:] - cdf[:, :-1]
    d_centre = -(pa - pc) / sigma[:, None]
    d_sigma = -(a * pa - c * pc) / sigma[:, None]
    return e, d_centre, d_sigma


def gaussian_model(x: np.ndarray, y: np.ndarray, photons: np.ndarray, sigma: np.ndarray, radius: int) -> np.ndarray:
    """(n, 2r+1, 2r+1) pixel-integrated Gaussians (no background); x, y relative to the window's centre pixel."""
    k = np.arange(-radius, radius + 1, dtype=np.float64)
    ex = _axis_integrals(x, sigma, k)
    ey = _axis_integrals(y, sigma, k)
    return photons[:, None, None] * ey[:, :, None] * ex[:, None, :]


def _model(p: np.ndarray, radius: int) -> np.ndarray:
    """The model alone, for parameter rows (x, y, photons, bg, σ): a trial step needs no Jacobian."""
    x, y, n, b, s = p.T
    return gaussian_model(x, y, n, s, radius) + b[:, None, None]


def _model_and_jacobian(p: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y, n, b, s = p.T
    ex, dex, dsx = _axis_terms(x, s, k)
    ey, dey, dsy = _axis_terms(y, s, k)
    n3 = n[:, None, None]
    jac = np.empty((len(p), 5, len(k), len(k)))  # each term computed into its place (no stacked copy)
    g = np.multiply(ey[:, :, None], ex[:, None, :], out=jac[:, 2])
    model = n3 * g + b[:, None, None]
    np.multiply(n3 * ey[:, :, None], dex[:, None, :], out=jac[:, 0])
    np.multiply(n3 * dey[:, :, None], ex[:, None, :], out=jac[:, 1])
    jac[:, 3] = 1.0
    np.multiply(n3, dsy[:, :, None] * ex[:, None, :] + ey[:, :, None] * dsx[:, None, :], out=jac[:, 4])
    return model, jac.reshape(len(p), 5, -1)


def fit_spots(values: np.ndarray, valid: np.ndarray, sigma0: float, *, start: SpotFits | None = None,
              iterations: int = 40) -> SpotFits:
    """Least-squares fits of ``photons·G(σ) + bg`` to windows (n, K, K) of photons, valid pixels only.

    Returns centres relative to the window's centre pixel; ``ok`` marks fits to trust. ``start``: earlier
    fits of the same windows; their ``ok`` ones are the starting point (a refit then takes a few steps).
    """
    n_spots, size, _ = values.shape
    if n_spots > FIT_BATCH:  # the Jacobian is (n, 5, K²) float64: bound the memory by fitting in batches
        parts = [fit_spots(values[i:i + FIT_BATCH], valid[i:i + FIT_BATCH], sigma0, iterations=iterations,
                           start=None if start is None else _take(start, np.arange(i, min(i + FIT_BATCH, n_spots))))
                 for i in range(0, n_spots, FIT_BATCH)]
        return SpotFits(*(np.concatenate([getattr(p, n) for p in parts]) for n in SpotFits.__dataclass_fields__))
    radius = size // 2
    k = np.arange(-radius, radius + 1, dtype=np.float64)
    if n_spots == 0:
        return SpotFits.empty()
    w = valid.reshape(n_spots, -1).astype(np.float64)
    data = values.reshape(n_spots, -1)
    # start: background from the window's border, photons above it, centre at the brightest 3x3 centroid
    border = np.concatenate([values[:, 0], values[:, -1], values[:, 1:-1, 0], values[:, 1:-1, -1]], axis=1)
    bmask = np.concatenate([valid[:, 0], valid[:, -1], valid[:, 1:-1, 0], valid[:, 1:-1, -1]], axis=1)
    with np.errstate(all="ignore"):
        b0 = np.nan_to_num(np.nanmedian(np.where(bmask, border, np.nan), axis=1)) if border.size else np.zeros(0)
    core = np.clip(values[:, radius - 1:radius + 2, radius - 1:radius + 2] - b0[:, None, None], 0, None)
    core = core * valid[:, radius - 1:radius + 2, radius - 1:radius + 2]
    mass = core.sum(axis=(1, 2)) + 1e-9
    x0 = (core.sum(axis=1) * k[None, radius - 1:radius + 2]).sum(axis=1) / mass
    y0 = (core.sum(axis=2) * k[None, radius - 1:radius + 2]).sum(axis=1) / mass
    n0 = np.maximum((np.clip(values - b0[:, None, None], 0, None) * valid).sum(axis=(1, 2)), 1.0)
    p = np.column_stack([x0, y0, n0, b0, np.full(n_spots, float(sigma0))])
    if start is not None:
        warm = start.ok
        p[warm] = np.column_stack([start.x, start.y, start.photons, start.bg, start.sigma])[warm]
    lam = np.full(n_spots, 1e-3)

    cost = (w * (data - _model(p, radius).reshape(n_spots, -1)) ** 2).sum(axis=1)
    active = np.ones(n_spots, dtype=bool)  # a spot stops when its step is tiny or no damping helps any more
    for it in range(iterations):
        idx = np.nonzero(active)[0]
        # the last few slow spots keep their best parameters so far: iterating on for them costs more
        # (per-call overhead) than the rest of the fit
        if len(idx) == 0 or (it >= 10 and len(idx) < 0.02 * n_spots):
            break
        model, jac = _model_and_jacobian(p[idx], k)
        wi = w[idx]
        r = (data[idx] - model.reshape(len(idx), -1)) * wi
        jtj = np.einsum("npk,nqk->npq", jac * wi[:, None, :], jac)
        jtr = np.einsum("npk,nk->np", jac, r)
        diag = np.diagonal(jtj, axis1=1, axis2=2)
        damp = jtj + (lam[idx, None] * diag + 1e-9)[:, :, None] * np.eye(5)
        step = np.linalg.solve(damp, jtr[..., None])[..., 0]
        # trust region: at most 1 px of movement and a third of σ per iteration (no jumps to another basin)
        limit = np.maximum(np.abs(step[:, :2]).max(axis=1), 3 * np.abs(step[:, 4]) / p[idx, 4])
        step *= (1.0 / np.maximum(limit, 1.0))[:, None]
        trial = p[idx] + step
        trial[:, 2] = np.maximum(trial[:, 2], 1e-3)
        trial[:, 4] = np.clip(trial[:, 4], *SIGMA_BOUNDS)
        trial[:, :2] = np.clip(trial[:, :2], -radius, radius)
        model = _model(trial, radius).reshape(len(idx), -1)
        new_cost = (wi * (data[idx] - model) ** 2).sum(axis=1)
        better = new_cost <= cost[idx]
        p[idx[better]] = trial[better]
        cost[idx[better]] = new_cost[better]
        lam[idx] = np.where(better, lam[idx] / 3, lam[idx] * 4)
        small = (np.abs(step[:, :2]).max(axis=1) < 1e-3) & (np.abs(step[:, 4]) < 1e-3 * trial[:, 4])
        done = (better & small) | (lam[idx] > 1e6)
        active[idx[done]] = False
    x, y, photons, bg, sigma = p.T
    ok = (np.isfinite(p).all(axis=1) & (np.abs(x) < radius - 0.5) & (np.abs(y) < radius - 0.5) & (photons > 1)
          & (sigma > SIGMA_BOUNDS[0] * 1.01) & (sigma < SIGMA_BOUNDS[1] * 0.99))
    return SpotFits(x, y, photons, bg, sigma, ok)


def subtract_spots(frames: np.ndarray, cands: Candidates, fits: SpotFits, radius: int) -> None:
    """Subtract the fitted Gaussians (without their background) of the ``ok`` fits from ``frames`` in place."""
    keep = np.nonzero(fits.ok)[0]
    if len(keep) == 0:
        return
    model = gaussian_model(fits.x[keep], fits.y[keep], fits.photons[keep], fits.sigma[keep], radius)
    _, h, w = frames.shape
    k = np.arange(-radius, radius + 1)
    rows = cands.row[keep][:, None, None] + k[None, :, None]
    cols = cands.col[keep][:, None, None] + k[None, None, :]
    rows, cols = np.broadcast_arrays(rows, cols)
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    f = np.broadcast_to(cands.frame[keep][:, None, None], inside.shape)
    np.subtract.at(frames, (f[inside], rows[inside], cols[inside]), model[inside].astype(frames.dtype))


@dataclass(frozen=True)
class Localized:
    """All spots of a block: their candidates (``frame`` in the block, ``row``, ``col``), fits, and the block
    with every trusted fit's Gaussian subtracted (``residual``, photons)."""

    cands: Candidates
    fits: SpotFits
    residual: np.ndarray


def concat(a: Candidates | SpotFits, b: Candidates | SpotFits) -> Candidates | SpotFits:
    """Two Candidates (or two SpotFits) as one."""
    names = a.__dataclass_fields__
    return type(a)(*(np.concatenate([getattr(a, n), getattr(b, n)]) for n in names))


def _far_from(new: Candidates, old: Candidates, distance: float) -> np.ndarray:
    """True where a new candidate is more than ``distance`` px from every old candidate of its frame."""
    from scipy.spatial import cKDTree

    keep = np.ones(len(new), dtype=bool)
    for f in np.unique(new.frame):
        theirs = old.frame == f
        if not theirs.any():
            continue
        mine = np.nonzero(new.frame == f)[0]
        d, _ = cKDTree(np.column_stack([old.row[theirs], old.col[theirs]])).query(
            np.column_stack([new.row[mine], new.col[mine]]))
        keep[mine] = d > distance
    return keep


def colors(cands: Candidates, distance: float) -> np.ndarray:
    """Greedy colouring, brightest first: candidates of one colour are more than ``distance`` px apart in
    their frame, so their windows can be fitted at once without one spot's light biasing the other's fit."""
    from scipy.spatial import cKDTree

    out = np.full(len(cands), -1)
    for f in np.unique(cands.frame):
        mine = np.nonzero(cands.frame == f)[0]
        mine = mine[np.argsort(-cands.score[mine], kind="stable")]
        pts = np.column_stack([cands.row[mine], cands.col[mine]]).astype(float)
        neighbours = cKDTree(pts).query_ball_point(pts, distance)
        local = np.full(len(mine), -1)
        for i, near in enumerate(neighbours):
            used = {local[j] for j in near if local[j] >= 0}
            local[i] = next(c for c in range(len(near) + 1) if c not in used)
        out[mine] = local
    return out


def _take(fits: SpotFits, idx: np.ndarray) -> SpotFits:
    return SpotFits(*(getattr(fits, n)[idx] for n in fits.__dataclass_fields__))


def _put(fits: SpotFits, idx: np.ndarray, part: SpotFits) -> None:
    for n in fits.__dataclass_fields__:
        getattr(fits, n)[idx] = getattr(part, n)


def _sweep(residual: np.ndarray, cands: Candidates, fits: SpotFits, sigma: float, radius: int,
           distance: float) -> None:
    """One Gauss–Seidel pass: colour by colour, refit each spot on the residual plus its own current model
    and swap the old model for the new one in ``residual`` (``fits`` is updated in place)."""
    col = colors(cands, distance)
    for c in range(col.max() + 1 if len(col) else 0):
        idx = np.nonzero(col == c)[0]
        sub, old = cands.select(idx), _take(fits, idx)
        values, valid = windows(residual, sub, radius)
        safe = np.where(old.ok, old.sigma, 1.0)  # spots without a trusted fit have no model yet
        own = np.where(old.ok[:, None, None], gaussian_model(old.x, old.y, old.photons, safe, radius), 0.0)
        new = fit_spots(values + own * valid, valid, sigma, start=old)
        subtract_spots(residual, sub, SpotFits(old.x, old.y, -old.photons, old.bg, old.sigma, old.ok), radius)
        subtract_spots(residual, sub, new, radius)
        _put(fits, idx, new)


def localize_block(photons: np.ndarray, background: np.ndarray, *, sigma: float, threshold: float,
                   radius: int, rounds: int = 2, sweeps: int = 2) -> Localized:
    """Detect, fit and subtract spots in ``rounds`` passes (each finds spots hidden by brighter neighbours),
    then refit every spot ``sweeps`` times with its neighbours' fitted light removed (crowded fields:
    overlapping spots would otherwise widen each other's fits and bias σ and the photons). Spots closer
    than ~3.5σ are fitted one after the other (``colors``), never at once.

    ``photons``: (n, H, W) frames in photons; ``background``: (H, W) or (n, H, W) for detection only (the
    fits have their own constant background).
    """
    residual = photons.astype(np.float64, copy=True)
    distance = 3.5 * sigma + 1.0
    none = np.zeros(0, dtype=np.int64)
    cands, fits = Candidates(none, none, none, np.zeros(0)), SpotFits.empty()
    for _ in range(rounds):
        new = find_candidates(residual - background, DETECTION_SMOOTHING * sigma, threshold)
        new = new.select(_far_from(new, cands, 1.5))
        if len(new) == 0:
            break
        zero = np.zeros(len(new))
        new_fits = SpotFits(zero.copy(), zero.copy(), zero.copy(), zero.copy(), zero + sigma, zero.astype(bool))
        _sweep(residual, new, new_fits, sigma, radius, distance)
        cands, fits = concat(cands, new), concat(fits, new_fits)
    for _ in range(sweeps):
        _sweep(residual, cands, fits, sigma, radius, distance)
    return Localized(cands, fits, residual)
