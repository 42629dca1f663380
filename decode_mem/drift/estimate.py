"""Drift from the localizations themselves: render time segments, cross-correlate, interpolate per frame.

Each time segment (about equal numbers of localizations) is rendered as a histogram image, Gaussian-blurred in
Fourier space and registered to a reference by the peak of their cross-correlation (real FFTs, float32),
refined to a fraction of a pixel by a Gaussian through the peak. Two references:

* ``loo`` — the sum of every *other* segment, corrected by the current estimate, iterated, starting from a
  coarse RCC (below) of at most 20 merged segments on 4× coarser pixels (an uncorrected sum is smeared along a
  long drift, which leaves the first correlation ambiguous along it). A segment never registers to itself, so
  nothing pulls its estimate towards zero.
* ``rcc`` — every pair of segments (redundant cross-correlation); the per-segment drift solves the pairwise
  shifts by least squares, dropping inconsistent pairs (Wang et al. 2014; at most 40 segments).

The per-segment drifts are placed at each segment's mean frame and interpolated per frame with a cubic spline.
Memory: the localizations as float32/int32 (12 bytes each) and a few images of at most ``max_image``² pixels;
every segment's spectrum is held when they fit in 256 MiB (``CACHE_BYTES``), else rendered again when needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import fft
from scipy.interpolate import CubicSpline

from decode_mem.drift.config import DriftConfig
from decode_mem.errors import StackError

Progress = Callable[[str, int, int], None]  # (stage, done, total)
CACHE_BYTES = 256 << 20
CHUNK = 1 << 20  # localizations binned at a time
COARSE = 4  # the starting RCC of leave-one-out renders on COARSE x bigger pixels
INIT_SEGMENTS = 20  # ... of at most this many merged segments
# a segment's correlation peak, in standard deviations of the correlation map, below which it registers on noise:
# uniformly scattered emitters, each seen once, give 4-5 (the largest of ~10^5 correlated noise values); repeatedly
# blinking rings gave 31-72 (tests/drift/test_drift.py's rings, checked when this was set)
MIN_PEAK = 8.0


@dataclass(frozen=True)
class DriftEstimate:
    """The drift per frame: ``dxdy[i]`` (nm) is subtracted from the positions in frame ``frames[i]``.

    ``dxdy`` is zero at the first frame. ``centers``/``segment_dxdy``: each time segment's mean frame and its
    estimated drift (the points the per-frame curve interpolates).
    """

    frames: np.ndarray
    dxdy: np.ndarray
    centers: np.ndarray
    segment_dxdy: np.ndarray
    method: str

    def at(self, frames: np.ndarray) -> np.ndarray:
        """(n, 2) drift at 0-based ``frames`` (clamped to the estimated range)."""
        idx = np.clip(np.asarray(frames, dtype=np.int64) - self.frames[0], 0, len(self.frames) - 1)
        return self.dxdy[idx]


@dataclass(frozen=True)
class _Window:
    """The region rendered: origin (nm), physical size (nm)."""

    x0: float
    y0: float
    width: float
    height: float

    def shape(self, px: float) -> tuple[int, int]:
        return int(np.ceil(self.height / px)), int(np.ceil(self.width / px))


def estimate_drift(frame: np.ndarray, x: np.ndarray, y: np.ndarray, config: DriftConfig | None = None, *,
                   n_frames: int | None = None, progress: Progress | None = None) -> DriftEstimate:
    """Estimate the stage drift from localizations (``x``, ``y`` in nm, ``frame`` 0-based) over ``n_frames``."""
    cfg = config or DriftConfig()
    frame = np.asarray(frame, dtype=np.int32)
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
    if np.any(frame[1:] < frame[:-1]):  # files written frame by frame are sorted already: no copies then
        order = np.argsort(frame, kind="stable")
        frame, x, y = frame[order], x[order], y[order]
        del order
    if len(frame) < 100:
        raise StackError(f"drift: {len(frame)} localizations are too few to estimate a drift from")
    first = int(frame[0])
    last = int(frame[-1]) if n_frames is None else int(n_frames) - 1
    k = cfg.n_segments(len(frame), last - first + 1)
    bounds = _segment_bounds(frame, k)
    k = len(bounds) - 1
    if k < 2:
        raise StackError("drift: the localizations span a single frame; nothing to correct")
    centers = np.array([frame[bounds[i]:bounds[i + 1]].mean() for i in range(k)])
    window = _window(x, y, cfg)
    all_frames = np.arange(first, last + 1)
    seg = np.zeros((k, 2))
    curve = np.zeros((len(all_frames), 2))
    segments = _Segments(frame, x, y, bounds, window, first)
    if cfg.method == "rcc":  # as published: every pair of (at most 40) segments, solved by least squares
        seg = _rcc(segments, cfg.render_px, cfg.blur, progress)
        curve = _interpolate(centers, seg, all_frames)
    else:  # a coarse RCC of a few merged segments to start from, then leave-one-out passes on every segment
        merged = bounds[np.unique(np.linspace(0, k, min(k, INIT_SEGMENTS) + 1).round().astype(np.int64))]
        start = _Segments(frame, x, y, merged, window, first)
        start_centers = np.array([frame[merged[i]:merged[i + 1]].mean() for i in range(len(merged) - 1)])
        seg0 = _rcc(start, cfg.render_px * COARSE, cfg.blur * COARSE, progress)
        curve = _interpolate(start_centers, seg0, all_frames)
        seg = _interpolate(start_centers, seg0, centers)
        for it in range(cfg.iterations):
            residual = _leave_one_out(segments, curve, cfg.render_px, cfg.blur, progress,
                                      f"pass {it + 1}/{cfg.iterations}")
            seg = seg + residual
            curve = _interpolate(centers, seg, all_frames)
    anchor = curve[0].copy()
    return DriftEstimate(all_frames, curve - anchor, centers, seg - anchor, cfg.method)


def _segment_bounds(frame: np.ndarray, k: int) -> np.ndarray:
    """Indices into the frame-sorted localizations that cut them into ``k`` segments of about equal size,
    never inside a frame."""
    cuts = frame[np.linspace(0, len(frame) - 1, k + 1).astype(np.int64)[1:-1]]
    idx = np.searchsorted(frame, cuts, side="left")
    return np.unique(np.concatenate([[0], idx, [len(frame)]]))


def _window(x: np.ndarray, y: np.ndarray, cfg: DriftConfig) -> _Window:
    """The localizations' extent plus a margin, or its densest ``max_image``² (render pixels) part."""
    margin = 50 * cfg.render_px
    x0, x1 = float(x.min()) - margin, float(x.max()) + margin
    y0, y1 = float(y.min()) - margin, float(y.max()) + margin
    side = cfg.max_image * cfg.render_px
    if x1 - x0 <= side and y1 - y0 <= side:
        return _Window(x0, y0, x1 - x0, y1 - y0)
    bins = side / 8  # a coarse histogram; the window is the 8x8-bin block holding the most localizations
    nx, ny = max(int(np.ceil((x1 - x0) / bins)), 8), max(int(np.ceil((y1 - y0) / bins)), 8)
    h = np.zeros(ny * nx, np.int64)
    for start in range(0, len(x), CHUNK):  # in chunks: no temporaries the size of all localizations
        ix = np.clip(((x[start:start + CHUNK] - x0) / bins).astype(np.int64), 0, nx - 1)
        iy = np.clip(((y[start:start + CHUNK] - y0) / bins).astype(np.int64), 0, ny - 1)
        h += np.bincount(iy * nx + ix, minlength=ny * nx)
    h = h.reshape(ny, nx)
    sums = np.lib.stride_tricks.sliding_window_view(h, (8, 8)).sum(axis=(-1, -2))
    iy, ix = np.unravel_index(int(np.argmax(sums)), sums.shape)
    return _Window(x0 + ix * bins, y0 + iy * bins, side, side)


class _Segments:
    """Renders time segment ``i`` (corrected by a per-frame drift curve) and returns its blurred spectrum."""

    def __init__(self, frame: np.ndarray, x: np.ndarray, y: np.ndarray, bounds: np.ndarray, window: _Window,
                 first: int) -> None:
        self.frame, self.x, self.y, self.bounds, self.window, self.first = frame, x, y, bounds, window, first

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def spectrum(self, i: int, curve: np.ndarray, px: float, blur: float) -> np.ndarray:
        s = slice(self.bounds[i], self.bounds[i + 1])
        d = curve[self.frame[s] - self.first]
        ny, nx = self.window.shape(px)
        ix = np.floor((self.x[s] - d[:, 0] - self.window.x0) / px).astype(np.int64)
        iy = np.floor((self.y[s] - d[:, 1] - self.window.y0) / px).astype(np.int64)
        keep = (ix >= 0) & (ix < nx) & (iy >= 0) & (iy < ny)
        image = np.bincount(iy[keep] * nx + ix[keep], minlength=nx * ny).reshape(ny, nx).astype(np.float32)
        spec = fft.rfft2(image, workers=-1)
        sigma = blur / px
        fy, fx = fft.fftfreq(ny)[:, None], fft.rfftfreq(nx)[None, :]
        spec *= np.exp(-2 * np.pi**2 * sigma**2 * (fx**2 + fy**2)).astype(np.float32)
        return spec


def _shift(reference: np.ndarray, moving: np.ndarray, shape: tuple[int, int],
           peaks: list[float] | None = None) -> np.ndarray:
    """(dx, dy) in pixels by which ``moving``'s content is displaced relative to ``reference``'s: the peak of
    their cross-correlation, refined to a fraction of a pixel by a Gaussian through the peak and its neighbours
    along each axis (the blurred correlation peak is close to a Gaussian). ``peaks`` gets the peak's height in
    standard deviations of the correlation map (``MIN_PEAK``)."""
    cc = fft.irfft2(np.conj(reference) * moving, s=shape, workers=-1)
    iy, ix = np.unravel_index(int(np.argmax(cc)), cc.shape)
    if peaks is not None:
        sd = float(cc.std())
        peaks.append((float(cc[iy, ix]) - float(cc.mean())) / sd if sd > 0 else 0.0)
    ny, nx = shape
    out = []
    for pos, n, line in ((ix, nx, cc[iy, [(ix - 1) % nx, ix, (ix + 1) % nx]]),
                         (iy, ny, cc[[(iy - 1) % ny, iy, (iy + 1) % ny], ix])):
        lm, l0, lp = np.log(np.maximum(line.astype(np.float64), l0_floor(line)))
        denom = lm - 2 * l0 + lp
        frac = 0.5 * (lm - lp) / denom if denom < 0 else 0.0
        signed = pos if pos <= n // 2 else pos - n  # circular lag -> signed shift
        out.append(signed + float(np.clip(frac, -0.5, 0.5)))
    return np.array(out)


def l0_floor(line: np.ndarray) -> float:
    """A positive floor for the log of correlation values (the peak's neighbours can round to <= 0)."""
    return max(float(np.max(line)) * 1e-6, 1e-12)


def _leave_one_out(segments: _Segments, curve: np.ndarray, px: float, blur: float,
                   progress: Progress | None, stage: str) -> np.ndarray:
    """Residual drift (nm) of each segment against the sum of all the others, all corrected by ``curve``."""
    k = len(segments)
    ny, nx = segments.window.shape(px)
    keep = k * ny * (nx // 2 + 1) * 8 <= CACHE_BYTES  # hold every spectrum, or render each twice
    kept, total = [], None
    for i in range(k):
        spec = segments.spectrum(i, curve, px, blur)
        total = spec if total is None else total + spec
        kept.append(spec if keep else None)
        if progress:
            progress(f"{stage}: reference", i + 1, k)
    residual = np.zeros((k, 2))
    peaks: list[float] = []
    for i in range(k):
        spec = kept[i] if keep else segments.spectrum(i, curve, px, blur)
        residual[i] = _shift(total - spec, spec, (ny, nx), peaks) * px
        if progress:
            progress(f"{stage}: segments", i + 1, k)
    _check_structure(peaks)
    return residual - residual.mean(axis=0)


def _check_structure(peaks: list[float]) -> None:
    """A StackError where the segments' correlation peaks are no higher than the noise of a correlation map: the
    localizations hold no structure that one time segment shares with the others (each emitter seen once, or
    too few of them), so any 'drift' would be noise."""
    typical = float(np.median(peaks)) if peaks else 0.0
    if typical < MIN_PEAK:
        raise StackError(f"drift: the time segments share no structure to register (their correlation peaks are "
                         f"{typical:.1f} standard deviations of the correlation map, {MIN_PEAK:g} needed: emitters "
                         "each seen in one segment only, or too few localizations); no drift can be estimated from "
                         "them, nothing corrected")


def _rcc(segments: _Segments, px: float, blur: float, progress: Progress | None) -> np.ndarray:
    """Per-segment drift (nm) from the shifts between every pair of segments, by least squares."""
    k = len(segments)
    zero = np.zeros((int(segments.frame[-1]) - segments.first + 1, 2))
    ny, nx = segments.window.shape(px)
    cache = k * ny * (nx // 2 + 1) * 8 <= CACHE_BYTES
    specs = [segments.spectrum(i, zero, px, blur) for i in range(k)] if cache else None
    rows, shifts, peaks = [], [], []
    n_pairs, done = k * (k - 1) // 2, 0
    for i in range(k - 1):
        a = specs[i] if cache else segments.spectrum(i, zero, px, blur)
        for j in range(i + 1, k):
            b = specs[j] if cache else segments.spectrum(j, zero, px, blur)
            rows.append((i, j))
            shifts.append(_shift(a, b, (ny, nx), peaks) * px)
            done += 1
            if progress:
                progress("rcc: pairs", done, n_pairs)
    _check_structure(peaks)
    pairs, shifts = np.array(rows), np.array(shifts)
    keep = np.ones(len(pairs), dtype=bool)
    for _ in range(3):  # drop pairs inconsistent with the solution (failed correlations), re-solve
        d = _solve_pairs(pairs[keep], shifts[keep], k)
        err = np.linalg.norm(d[pairs[:, 1]] - d[pairs[:, 0]] - shifts, axis=1)
        limit = max(3.0 * float(np.median(err[keep])), px)
        new_keep = err <= limit
        if new_keep.sum() < k - 1 or np.array_equal(new_keep, keep):
            break
        keep = new_keep
    return _solve_pairs(pairs[keep], shifts[keep], k)


def _solve_pairs(pairs: np.ndarray, shifts: np.ndarray, k: int) -> np.ndarray:
    """Least-squares drifts ``d`` (mean zero) with ``d[j] - d[i] ≈ shift`` for every pair ``(i, j)``."""
    a = np.zeros((len(pairs) + 1, k))
    a[np.arange(len(pairs)), pairs[:, 1]] = 1.0
    a[np.arange(len(pairs)), pairs[:, 0]] = -1.0
    a[-1] = 1.0  # gauge: mean zero
    b = np.vstack([shifts, np.zeros((1, 2))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


def _interpolate(centers: np.ndarray, seg: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """Per-frame drift from the per-segment drifts at their mean frames (cubic spline; linear for 2-3 points)."""
    if len(centers) < 4:
        return np.column_stack([np.interp(frames, centers, seg[:, a]) for a in range(2)])
    return CubicSpline(centers, seg, axis=0, bc_type="natural", extrapolate=True)(frames)
