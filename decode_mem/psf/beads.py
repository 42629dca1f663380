"""Beads in z-stacks -> one averaged, registered PSF volume -> a spline PSF.

Frame k of a bead stack is at ``z = z_start + k·z_step`` nm (a negative step: recorded top-down; the stack is
reversed so that z increases). Steps, each bounded in memory by the beads' regions, never the whole stack:

1. find: the maximum over frames (one pass, frame by frame) is smoothed; local maxima brighter than the
   median by ``threshold`` robust standard deviations, at least half a region apart and moved to the centroid of
   their light, are candidates. A bead's light is the connected patch of the projection around it more than
   ``LIGHT_SIGMAS`` robust standard deviations above the median (every z's spot, defocused wings included).
   A candidate is dropped when it is saturated (a pixel of its region at ``saturation`` ADU), its region
   leaves the frame, its region (or the px around it) holds light of another bead at least a fifth as bright
   (two beads whose light touches are both dropped), or its focus (the frame of its brightest smoothed pixel)
   is within ``edge_frames`` of the stack's ends (the stack does not cover its PSF). So beads closer than
   their box but with their light apart are kept with a smaller box: ``roi=None`` (the default) takes the
   odd region of 7 to ``ROI_MAX`` px that keeps the most beads, each with its own light inside its region
   (a px to spare) and no other bead's (``best_roi``); a given ``roi`` that drops beads as overlapping makes
   the error name the ``--roi`` that would keep them.
2. cut: a second pass reads each frame once and cuts every bead's ``roi × roi`` region (photons); each bead's
   background (the median of its regions' border pixels over all frames) is subtracted and each bead is scaled
   to a mean of 1 photon per frame.
3. register: each bead's sub-voxel 3-D shift to a reference (the brightest bead, then the first average) by
   upsampled cross-correlation (``skimage.registration.phase_cross_correlation``); beads are moved by Fourier
   shifts (``scipy.ndimage.fourier_shift``, padded against wrap-around) and averaged; the mean shift is kept, so
   z stays the stacks' own axis, and the average is centred laterally on its centroid.
4. the average's planes are scaled to sum 1 (bleaching during the stack does not dim the PSF), upsampled
   laterally ``upsample``× by Fourier interpolation (the PSF is band-limited, pixels sample it near Nyquist) and
   interpolated by the cubic spline (``spline_fit``); residual per bead = RMS(bead − fitted model)/RMS(bead).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from decode_mem.errors import ConfigError
from decode_mem.io.camera import Camera
from decode_mem.io.psf_file import SplineData
from decode_mem.simulate.spline_fit import spline_from_volume


@dataclass(frozen=True)
class BeadSettings:
    """How beads are found and averaged (module docstring)."""

    z_step: float
    z_start: float | None = None
    roi: int | None = None
    min_beads: int = 3
    threshold: float = 10.0
    saturation: float | None = None
    edge_frames: int = 2
    upsample: int = 2
    iterations: int = 2

    def __post_init__(self) -> None:
        if not np.isfinite(self.z_step) or self.z_step == 0:
            raise ConfigError(f"--z_step must be a non-zero number of nm, got {self.z_step!r}")
        if self.roi is not None and (self.roi < 7 or self.roi % 2 == 0):
            raise ConfigError(f"--roi must be an odd number of px >= 7, got {self.roi!r}")
        if self.min_beads < 1:
            raise ConfigError(f"--min_beads must be >= 1, got {self.min_beads!r}")
        if self.upsample not in (1, 2, 3, 4):
            raise ConfigError(f"--upsample must be 1, 2, 3 or 4, got {self.upsample!r}")
        if not self.threshold > 0:
            raise ConfigError(f"--threshold must be > 0, got {self.threshold!r}")


@dataclass
class BeadCalibration:
    """The result: the spline, the averaged volume (1 node per px) and what happened to every bead."""

    spline: SplineData
    volume: np.ndarray
    z: np.ndarray
    beads: list[dict] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    roi: int = 0
    roi_auto: bool = False
    shifts: np.ndarray | None = None  # each bead's registration shift (z, y, x) to the average (``register_beads``)
    centre: tuple[float, float] = (0.0, 0.0)  # the average's lateral centre (px, ``centre_volume``)


def _saturation_level(dtype: np.dtype, settings: BeadSettings) -> float:
    if settings.saturation is not None:
        return float(settings.saturation)
    return float(np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else np.inf


ROI_MAX = 25  # px: the largest region the automatic choice takes (the former fixed default)
LIGHT_SIGMAS = 3.0  # a bead's light: projection pixels this many robust standard deviations above the median
REASONS = ("focus outside the stack", "overlapping", "too close to the edge", "saturated",
           "light wider than the region")


@dataclass
class Candidates:
    """The bead candidates of one stack: what the keep/drop rules need for any region size."""

    centres: np.ndarray  # (n, 2) row, col
    focus: np.ndarray  # (n,) frame of the brightest smoothed pixel
    touching: np.ndarray  # (n,) bool: its light touches the light of a bead at least a fifth as bright
    clear: np.ndarray  # (n,) px: Chebyshev distance to the nearest light of another such bead (large: none)
    extent: np.ndarray  # (n,) px: Chebyshev reach of its own light from its centre
    edge: np.ndarray  # (n,) px: distance to the frame's nearest edge
    saturated_within: np.ndarray  # (n,) px: half-size from which its region holds a saturated pixel (large: never)
    frames: int


def bead_candidates(stack, settings: BeadSettings) -> Candidates:
    """One pass over ``stack``: the candidates and their light (module docstring, step 1)."""
    from skimage.feature import peak_local_max

    t, h, w = stack.shape
    proj = np.full((h, w), -np.inf, np.float32)
    brightest = np.zeros((h, w), np.int32)
    raw_max = np.full((h, w), -np.inf, np.float32)
    for k in range(t):
        frame = np.asarray(stack[k], dtype=np.float32)
        raw_max = np.maximum(raw_max, frame)
        smooth = ndimage.gaussian_filter(frame, 1.0)
        higher = smooth > proj
        brightest[higher] = k
        proj = np.maximum(proj, smooth)
    med = float(np.median(proj))
    noise = 1.4826 * float(np.median(np.abs(proj - med))) or 1e-6
    floor = med + settings.threshold * noise
    half = (settings.roi or ROI_MAX) // 2
    # one peak per bead: a PSF with several lobes (a double helix) has a maximum per lobe, up to half a region
    # apart; each bead is then centred on the centroid of its light in the projection
    peaks = peak_local_max(proj, min_distance=max(3, half), threshold_abs=floor, exclude_border=False)
    labels, _ = ndimage.label(proj > med + LIGHT_SIGMAS * noise)
    boxes = ndimage.find_objects(labels)
    own = labels[peaks[:, 0], peaks[:, 1]] if len(peaks) else np.zeros(0, np.int64)
    peaks = np.array([_centroid(proj - med, int(r), int(c), half, labels == lab if lab else None)
                      for (r, c), lab in zip(peaks, own, strict=True)], dtype=np.int64).reshape(-1, 2)
    n = len(peaks)
    height = proj[peaks[:, 0], peaks[:, 1]] - med if n else np.zeros(0)
    far = 10 * (h + w)
    touching, clear, extent = np.zeros(n, bool), np.full(n, far), np.zeros(n, np.int64)
    level = _saturation_level(stack.dtype, settings)
    sat_rows, sat_cols = np.nonzero(raw_max >= level)
    saturated_within = np.full(n, far)
    for i, (r, c) in enumerate(peaks):
        if own[i]:
            rows, cols = np.nonzero(labels[boxes[own[i] - 1]] == own[i])
            sl = boxes[own[i] - 1]
            extent[i] = max(np.abs(rows + sl[0].start - r).max(), np.abs(cols + sl[1].start - c).max())
        if len(sat_rows):
            saturated_within[i] = np.maximum(np.abs(sat_rows - r), np.abs(sat_cols - c)).min()
        for j in range(n):
            if j == i or not height[j] > 0.2 * height[i]:
                continue
            if own[j] and own[j] == own[i]:
                touching[i] = True
                continue
            if not own[j]:
                d = max(abs(int(peaks[j, 0]) - r), abs(int(peaks[j, 1]) - c))
            else:
                sl = boxes[own[j] - 1]
                lo = max(max(sl[0].start - r, r - sl[0].stop + 1, 0), max(sl[1].start - c, c - sl[1].stop + 1, 0))
                if lo >= clear[i]:
                    continue
                rows, cols = np.nonzero(labels[sl] == own[j])
                d = np.maximum(np.abs(rows + sl[0].start - r), np.abs(cols + sl[1].start - c)).min()
            clear[i] = min(clear[i], int(d))
    edge = (np.minimum.reduce([peaks[:, 0], peaks[:, 1], h - 1 - peaks[:, 0], w - 1 - peaks[:, 1]])
            if n else np.zeros(0, np.int64))
    return Candidates(centres=peaks, focus=brightest[peaks[:, 0], peaks[:, 1]] if n else np.zeros(0, np.int32),
                      touching=touching, clear=clear, extent=extent, edge=edge,
                      saturated_within=saturated_within, frames=t)


def select_beads(cands: Candidates, roi: int, settings: BeadSettings,
                 light_inside: bool) -> tuple[list[tuple[int, int, int]], dict[str, int]]:
    """The candidates kept with regions of ``roi`` px, and how many were dropped per reason (``light_inside``:
    a bead whose own light reaches the region's border row is dropped too)."""
    half = roi // 2
    rejected = dict.fromkeys(REASONS, 0)
    kept = []
    t = cands.frames
    for i, (r, c) in enumerate(cands.centres):
        if not settings.edge_frames <= cands.focus[i] < t - settings.edge_frames:
            rejected["focus outside the stack"] += 1  # first: such a bead is defocused, wide, in every frame
        elif cands.touching[i] or cands.clear[i] <= half + 1:  # another bead's light within a px of the region
            rejected["overlapping"] += 1
        elif cands.edge[i] < half:
            rejected["too close to the edge"] += 1
        elif cands.saturated_within[i] <= half:
            rejected["saturated"] += 1
        elif light_inside and cands.extent[i] >= half:
            rejected["light wider than the region"] += 1
        else:
            kept.append((int(r), int(c), int(cands.focus[i])))
    return kept, rejected


def best_roi(candidates: list[Candidates], settings: BeadSettings, largest: int = ROI_MAX) -> tuple[int, int]:
    """(roi, beads kept): the odd region of 7 to ``largest`` px that keeps the most beads of all stacks, each
    with its own light inside and no other bead's; the largest such region on a tie."""
    best = (largest - 1 + largest % 2, -1)
    for roi in range(largest - 1 + largest % 2, 6, -2):
        n = sum(len(select_beads(c, roi, settings, light_inside=True)[0]) for c in candidates)
        if n > best[1]:
            best = (roi, n)
    return best


def find_beads(stack, settings: BeadSettings) -> tuple[list[tuple[int, int, int]], dict[str, int]]:
    """Bead candidates ``(row, col, focus frame)`` of one stack and how many were dropped per reason (the
    region: ``settings.roi``, or the automatic choice for this stack alone)."""
    cands = bead_candidates(stack, settings)
    roi = settings.roi if settings.roi is not None else best_roi([cands], settings)[0]
    return select_beads(cands, roi, settings, light_inside=settings.roi is None)


def _centroid(image: np.ndarray, r: int, c: int, half: int, light: np.ndarray | None = None) -> tuple[int, int]:
    """The pixel nearest the centroid of the positive ``image`` within ``half`` px of (r, c) (twice), of the
    pixels of ``light`` only where given (a bead's own light, not its neighbour's)."""
    h, w = image.shape
    for _ in range(2):
        r0, r1, c0, c1 = max(0, r - half), min(h, r + half + 1), max(0, c - half), min(w, c + half + 1)
        win = np.clip(image[r0:r1, c0:c1], 0, None)
        if light is not None:
            win = win * light[r0:r1, c0:c1]
        total = win.sum()
        if not total > 0:
            break
        rows, cols = np.mgrid[r0:r1, c0:c1]
        r, c = round(float((win * rows).sum() / total)), round(float((win * cols).sum() / total))
    return r, c


def _cut(stack, centres: list[tuple[int, int, int]], roi: int, camera: Camera) -> np.ndarray:
    """(beads, T, roi, roi) photons of the regions around ``centres`` (one read per frame)."""
    half = roi // 2
    out = np.empty((len(centres), stack.shape[0], roi, roi), np.float32)
    for k in range(stack.shape[0]):
        frame = camera.to_photons(np.asarray(stack[k]))
        for b, (r, c, _) in enumerate(centres):
            out[b, k] = frame[r - half:r + half + 1, c - half:c + half + 1]
    return out


def _prepare(rois: np.ndarray) -> np.ndarray:
    """Subtract each bead's background (median border pixel over all frames), scale to a mean of 1 per frame."""
    border = np.concatenate([rois[:, :, 0, :], rois[:, :, -1, :], rois[:, :, 1:-1, 0], rois[:, :, 1:-1, -1]], axis=2)
    bg = np.median(border.reshape(len(rois), -1), axis=1)
    out = rois - bg[:, None, None, None]
    totals = out.sum(axis=(2, 3)).mean(axis=1)
    if (totals <= 0).any():
        raise ConfigError("a bead has no light above its background: raise --threshold")
    return out / totals[:, None, None, None]


def shift_volume(volume: np.ndarray, shift: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """``volume`` moved by ``shift`` voxels (sub-voxel; Fourier shift on an edge-padded copy, no wrap-around)."""
    pad = [(int(np.ceil(abs(s))) + 2,) * 2 for s in shift]
    padded = np.pad(volume, pad, mode="edge")
    moved = np.fft.ifftn(ndimage.fourier_shift(np.fft.fftn(padded), shift)).real
    return moved[tuple(slice(p[0], p[0] + n) for p, n in zip(pad, volume.shape, strict=True))]


def register_beads(beads: np.ndarray, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """(average (T, R, R), shifts (beads, 3)) with the mean shift removed (module docstring)."""
    from skimage.registration import phase_cross_correlation

    ref = beads[int(np.argmax(beads.max(axis=(1, 2, 3))))]
    shifts = np.zeros((len(beads), 3))
    for _ in range(max(1, iterations)):
        for b, bead in enumerate(beads):
            shifts[b] = phase_cross_correlation(ref, bead, upsample_factor=20, normalization=None)[0]
        shifts -= shifts.mean(axis=0)
        ref = np.mean([shift_volume(bead, s) for bead, s in zip(beads, shifts, strict=True)], axis=0)
    return ref, shifts


def centre_volume(volume: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """The volume moved laterally so that the centroid of its z-sum sits on the middle pixel."""
    img = np.clip(volume.sum(axis=0), 0, None)
    n = img.shape[0]
    pos = np.arange(n) - (n - 1) / 2
    cy = float((img.sum(1) * pos).sum() / img.sum())
    cx = float((img.sum(0) * pos).sum() / img.sum())
    return shift_volume(volume, (0.0, -cy, -cx)), (cy, cx)


def fourier_upsample(volume: np.ndarray, factor: int) -> np.ndarray:
    """(T, R, R) -> (T, factor·(R−1)+1, …): band-limited interpolation onto a grid ``1/factor`` px apart that
    keeps the original pixels as every ``factor``-th node."""
    if factor == 1:
        return volume
    t, r, c = volume.shape
    out = np.empty((t, factor * r, factor * c))
    for i in range(factor):
        for j in range(factor):
            out[:, i::factor, j::factor] = shift_volume(volume, (0.0, -i / factor, -j / factor))
    return out[:, :factor * (r - 1) + 1, :factor * (c - 1) + 1]


@dataclass
class BeadSet:
    """The usable beads of some stacks, cut, background-subtracted and scaled (module docstring, steps 1-2):
    ``beads`` (B, T, roi, roi) with z increasing along T (``z`` nm), ``centres`` (row, col, focus frame) and
    ``files`` per bead, what was dropped, the region size and each stack's frame shape."""

    beads: np.ndarray
    z: np.ndarray
    centres: list[tuple[int, int, int]]
    files: list[str]
    rejected: dict[str, int]
    roi: int
    roi_auto: bool
    paths: list[str]
    frame_shapes: list[tuple[int, int]]


def gather_beads(paths: list[str | os.PathLike], camera: Camera, settings: BeadSettings) -> BeadSet:
    """Find and cut the beads of ``paths`` (steps 1-2). Every stack is opened and checked (same number of frames,
    enough usable beads) before any fitting; too few beads is a ConfigError that says how many were dropped
    and why."""
    from decode_mem.io.stack import open_stack

    stacks = [open_stack(p) for p in paths]
    lengths = {s.shape[0] for s in stacks}
    if len(lengths) != 1:
        raise ConfigError(f"bead stacks must have the same number of frames, got {sorted(lengths)} "
                          f"({', '.join(str(p) for p in paths)})")
    t = lengths.pop()
    if t < 2 * settings.edge_frames + 4:
        raise ConfigError(f"{paths[0]}: {t} frames is too few for a bead z-stack "
                          f"(need >= {2 * settings.edge_frames + 4})")
    cands = [bead_candidates(stack, settings) for stack in stacks]
    auto = settings.roi is None
    roi = best_roi(cands, settings)[0] if auto else settings.roi
    found, rejected = [], dict.fromkeys(REASONS, 0)
    for c in cands:
        kept, dropped = select_beads(c, roi, settings, light_inside=auto)
        found.append(kept)
        for k, v in dropped.items():
            rejected[k] += v
    n = sum(len(f) for f in found)
    if n < settings.min_beads:
        reasons = ", ".join(f"{v} {k}" for k, v in rejected.items() if v) or "no bright spots found"
        names = ", ".join(str(p) for p in paths)
        hint = ""
        if not auto and rejected["overlapping"]:  # found again as the default finds them (no region given)
            again = [bead_candidates(stack, dataclasses.replace(settings, roi=None)) for stack in stacks]
            better, m = best_roi(again, settings, largest=max(settings.roi, ROI_MAX))
            if m > n:
                hint = f"; --roi {better} keeps {m} (their light stays apart in a {better}x{better} px region)"
        raise ConfigError(f"{names}: {n} usable bead(s), need at least {settings.min_beads} ({roi}x{roi} px "
                          f"regions; dropped: {reasons}){hint}")
    rois = np.concatenate([_cut(s, f, roi, camera) for s, f in zip(stacks, found, strict=True) if f])
    shapes = [tuple(int(v) for v in s.shape[1:3]) for s in stacks]
    for s in stacks:
        s.close()
    z_start = settings.z_start if settings.z_start is not None else -(t - 1) / 2 * settings.z_step
    z = z_start + np.arange(t) * float(settings.z_step)
    if settings.z_step < 0:  # recorded top-down: make z increase along the first axis
        rois, z = rois[:, ::-1].copy(), z[::-1].copy()
    return BeadSet(beads=_prepare(rois), z=z, centres=[c for f in found for c in f],
                   files=[str(p) for p, f in zip(paths, found, strict=True) for _ in f], rejected=rejected, roi=roi,
                   roi_auto=auto, paths=[str(p) for p in paths], frame_shapes=shapes)


def calibrate_beads(paths: list[str | os.PathLike], camera: Camera, settings: BeadSettings,
                    found: BeadSet | None = None) -> BeadCalibration:
    """Find, register and average the beads of ``paths`` and fit the spline PSF (module docstring); ``found``:
    the beads already gathered (``gather_beads``) from these paths."""
    bs = gather_beads(paths, camera, settings) if found is None else found
    beads, z, t = bs.beads, bs.z, len(bs.z)
    n = len(beads)
    step = abs(float(settings.z_step))
    average, shifts = register_beads(beads, settings.iterations)
    average, (cy, cx) = centre_volume(average)
    planes = average.sum(axis=(1, 2))
    if (planes <= 0).any():
        raise ConfigError(f"{paths[0]}: the averaged PSF has no light in some planes (beads too dim?)")
    average = average / planes[:, None, None]
    margin = settings.edge_frames + int(np.ceil(np.abs(shifts[:, 0]).max()))
    z_range = (float(z[margin]), float(z[t - 1 - margin]))
    spline = spline_from_volume(fourier_upsample(average, settings.upsample), dz=step, z0=float(-z[0] / step),
                                upsample=settings.upsample, z_range=z_range, pixel_size=camera.pixel_size,
                                source=f"{n} beads in {len(paths)} stack(s), z step {settings.z_step:g} nm")
    info = []
    for b, bead in enumerate(beads):
        model = shift_volume(average * planes[:, None, None], -shifts[b] + np.array([0.0, cy, cx]))
        model *= (bead * model).sum() / max((model * model).sum(), 1e-30)
        res = float(np.sqrt(((bead - model) ** 2).mean()) / np.sqrt((bead**2).mean()))
        info.append({"file": bs.files[b], "row": bs.centres[b][0], "col": bs.centres[b][1],
                     "shift_z_nm": shifts[b, 0] * step, "shift_y_px": shifts[b, 1], "shift_x_px": shifts[b, 2],
                     "residual": res})
    return BeadCalibration(spline=spline, volume=average, z=z, beads=info, rejected=bs.rejected,
                           files=[str(p) for p in paths], roi=bs.roi, roi_auto=bs.roi_auto, shifts=shifts,
                           centre=(float(cy), float(cx)))
