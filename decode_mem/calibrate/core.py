"""``calibrate_movie``: the physics of a movie measured from a sample of its frames.

Frames are read in runs of ``RUN_FRAMES`` consecutive frames spread evenly over the movie (consecutive, so
that molecules can be followed from frame to frame), one run at a time: memory is a few runs' worth of
frames whatever the movie's length. Per run: convert to photons, detect and fit spots (``spots``) on the frames
minus the run's background map (each pixel's median over its samples away from spots: a cell-like background
that rises several-fold within a window would otherwise widen the fits and bias the photons), mask them
and add the quiet pixels to the background and noise statistics (``background``, ``noise``). Then: background
map and level, camera check, PSF width, photons, tracks, on-time and density.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np

from decode_mem.calibrate.background import (
    BackgroundEstimate,
    QuietStats,
    block_background,
    estimate_background,
    fixed_pattern,
    spot_mask,
)
from decode_mem.calibrate.blinking import link, on_time
from decode_mem.calibrate.camera_check import check_camera, expected_slope, read_variance
from decode_mem.calibrate.cumulants import LIGHT_FRAMES, light_cumulants
from decode_mem.calibrate.noise import SpatialNoiseStats, choose
from decode_mem.calibrate.result import Calibration, Diagnostics, Estimate
from decode_mem.calibrate.sampling import DEFAULT_FRAMES, sample_runs
from decode_mem.calibrate.spots import concat, find_candidates, gaussian_model, isolated, localize_block, windows
from decode_mem.errors import StackError
from decode_mem.io.camera import Camera
from decode_mem.io.metadata import MovieMetadata, read_metadata, resolve_camera

THRESHOLD = 5.0  # detection: smoothed peak over the smoothed noise
MASK_THRESHOLD = 3.0  # spots masked out of the background statistics: down to this
SIGMA_START = 1.2  # px: detection filter and first guess before the PSF is measured
PILOT_FRAMES = 20  # frames of the first block that give the first PSF width
SWEEPS = 2  # refits of every spot with its neighbours' fitted light removed (``spots.localize_block``)
ISOLATION = 4.0  # a PSF spot has no other candidate within this many σ
PROFILE_STEP = 0.25  # px: radial bins of the mean PSF profile
MAX_PROFILE_SPOTS = 5000
BOOTSTRAP = 200
PIXEL_BUDGET = 1 << 24  # pixels sampled at most (frames x H x W): large frames use fewer frames
BLOCK_PIXELS = 1 << 22  # pixels processed at once (float64 working copies of ~32 MB)
MAX_BLOCK_FRAMES = 100  # frames processed at once (fewer, larger fit batches: less per-call overhead)
BOOTSTRAP_MAX = 20_000


def calibrate_movie(movie: Any, camera: Camera | None = None, *, frames: int = DEFAULT_FRAMES, seed: int = 0,
                    camera_sources: Mapping[str, str] | None = None, metadata: MovieMetadata | None = None,
                    pilot_frames: int = PILOT_FRAMES, sweeps: int = SWEEPS,
                    light_frames: int = LIGHT_FRAMES) -> Calibration:
    """Measure PSF width, background, photons, density and on-time of ``movie`` (a path, a ``Stack`` or a
    (T, H, W) array of camera counts) from at most ``frames`` frames (fewer for frames so large that
    ``frames`` of them exceed ``PIXEL_BUDGET`` pixels; at least 8), and the pixels' cumulants from
    ``light_frames`` more, single frames spread over the movie.

    ``camera``: None reads the file's metadata and fills the rest with defaults (``resolve_camera``);
    ``camera_sources``/``metadata`` record where a given camera's fields came from. ``seed`` fixes the
    bootstrap of the uncertainties. ``pilot_frames`` (frames that give the first PSF width) and ``sweeps``
    (refits of every spot with its neighbours' light removed) trade precision for time: a quick check (the
    ``infer`` domain check) takes fewer. ``light_frames``: how many (``cumulants.light_cumulants``: the
    emitters' light for a crowded or 3-D movie; 0: not measured).
    """
    is_path = isinstance(movie, (str, os.PathLike))
    if camera is None:
        file = movie if is_path else getattr(movie, "path", None)  # a path, or a Stack's file
        metadata = metadata or (read_metadata(file) if file is not None else MovieMetadata())
        camera, camera_sources = resolve_camera(metadata)
    metadata = metadata or MovieMetadata()
    sources = dict(camera_sources or dict.fromkeys(camera.to_dict(), "given"))
    if is_path:
        from decode_mem.io import open_stack

        context = open_stack(movie)
        name = str(movie)
    else:
        context, name = nullcontext(movie), getattr(movie, "path", "<array>")
    with context as stack:
        if len(stack.shape) != 3:
            raise StackError(f"{name}: expected a (T, H, W) movie, got shape {tuple(stack.shape)}")
        result = _measure(stack, camera, frames, pilot_frames, sweeps)
        result["light"] = light_cumulants(stack, camera, frames=light_frames) if light_frames else None
    return _summarize(result, name=str(name), camera=camera, sources=sources, metadata=metadata, seed=seed)


def _pilot_sigma(photons: np.ndarray, pilot_frames: int = PILOT_FRAMES) -> float:
    """A first PSF width from the first frames, to size the detection filter and the fit windows."""
    # the map from as many frames as a full pilot, whatever it fits
    back = block_background(photons[:PILOT_FRAMES], SIGMA_START, MASK_THRESHOLD)
    photons = photons[:max(1, pilot_frames)]
    loc = localize_block(photons - back, 0.0, sigma=SIGMA_START, threshold=THRESHOLD, radius=5,
                         rounds=1, sweeps=1)
    good = loc.fits.ok & isolated(loc.cands, loc.cands, ISOLATION * SIGMA_START)
    return float(np.median(loc.fits.sigma[good])) if good.sum() >= 10 else SIGMA_START


def _measure(stack: Any, camera: Camera, frames: int, pilot_frames: int = PILOT_FRAMES,
             sweeps: int = SWEEPS) -> dict[str, Any]:
    n_frames, h, w = (int(v) for v in stack.shape)
    if n_frames == 0 or h < 8 or w < 8:
        raise StackError(f"{getattr(stack, 'path', '<array>')}: too small to calibrate, shape {tuple(stack.shape)}")
    maps = camera.load_maps((h, w))
    baseline = camera.baseline if maps is None else maps.baseline
    frames = min(frames, max(8, PIXEL_BUDGET // (h * w)))
    block = max(3, min(MAX_BLOCK_FRAMES, BLOCK_PIXELS // (h * w)))
    runs = [(b0, min(b0 + block, t1)) for t0, t1 in _coalesce(sample_runs(n_frames, frames))
            for b0 in range(t0, t1, block)]
    quiet, spatial = QuietStats((h, w)), SpatialNoiseStats((h, w))
    rows: list[dict[str, np.ndarray]] = []
    sampled, zero_frames, below, pixels = [], 0, 0, 0
    sigma = radius = None
    profile = np.zeros((2, 64))  # sums of measured and model values per radial bin, and their counts
    profile_n = np.zeros(64)
    profile_spots = 0
    for t0, t1 in runs:
        adu = np.asarray(stack[t0:t1], dtype=np.float32)
        blank = (adu == 0).reshape(len(adu), -1).all(axis=1)
        zero_frames += int(blank.sum())
        keep = np.nonzero(~blank)[0]
        sampled.extend(t0 + keep)
        if len(keep) == 0:
            continue
        adu = adu[keep]
        below += int((adu < baseline).sum())
        pixels += adu.size
        photons = np.asarray(camera.to_photons(adu, maps), dtype=np.float64)
        if sigma is None:
            sigma = _pilot_sigma(photons, pilot_frames)
            radius = int(np.clip(math.ceil(3 * sigma) + 1, 4, 8))
        # spots are fitted on the frames minus the block's background map, each with a constant background
        # of its own for what the map misses
        back = block_background(photons, sigma, MASK_THRESHOLD)
        loc = localize_block(photons - back, 0.0, sigma=sigma, threshold=THRESHOLD, radius=radius, sweeps=sweeps)
        faint = find_candidates(loc.residual, sigma, MASK_THRESHOLD)
        masked = spot_mask(photons.shape, np.concatenate([loc.cands.frame, faint.frame]),
                           np.concatenate([loc.cands.row, faint.row]), np.concatenate([loc.cands.col, faint.col]),
                           radius=max(2, math.ceil(3 * sigma)))
        quiet.add(photons, ~masked)
        spatial.add(photons, ~masked)
        c, f = loc.cands, loc.fits
        iso = isolated(c, concat(c, faint), ISOLATION * sigma)
        inner = (c.row >= radius) & (c.row < h - radius) & (c.col >= radius) & (c.col < w - radius)
        x, y = c.col + f.x, c.row + f.y
        inside = (x >= -0.5) & (x < w - 0.5) & (y >= -0.5) & (y < h - 0.5)
        # photometry: spots away from the frame edge (an emitter just outside leaks part of its light in) and
        # without a close neighbour (a pair 1–2σ apart shares its light unevenly between the two fits)
        margin = max(1.5, 2 * sigma)
        clear = (x >= margin - 0.5) & (x < w - 0.5 - margin) & (y >= margin - 0.5) & (y < h - 0.5 - margin)
        rows.append({"frame": t0 + keep[c.frame], "x": x, "y": y, "photons": f.photons, "bg": f.bg + back[c.row, c.col],
                     "sigma": f.sigma, "ok": f.ok & inside, "psf": f.ok & iso & inner,
                     "photometry": f.ok & clear & isolated(c, c, 2 * sigma)})
        if profile_spots < MAX_PROFILE_SPOTS:
            sel = np.nonzero(f.ok & iso & inner)[0][: MAX_PROFILE_SPOTS - profile_spots]
            profile_spots += len(sel)
            _add_profile(profile, profile_n, loc.residual, c.select(sel), f, sel, radius)
    table = {k: np.concatenate([r[k] for r in rows]) if rows else np.zeros(0) for k in
             ("frame", "x", "y", "photons", "bg", "sigma", "ok", "psf", "photometry")}
    return {"shape": (n_frames, h, w), "table": table, "quiet": quiet, "spatial": spatial,
            "sampled": np.asarray(sampled, dtype=np.int64),
            "zero_frames": zero_frames, "below": below / pixels if pixels else float("nan"),
            "frames_sampled": sum(t1 - t0 for t0, t1 in runs), "profile": (profile, profile_n), "radius": radius or 0,
            "read_var": read_variance(camera, maps)}


def _coalesce(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent runs joined into one."""
    out: list[tuple[int, int]] = []
    for t0, t1 in runs:
        if out and out[-1][1] == t0:
            out[-1] = (out[-1][0], t1)
        else:
            out.append((t0, t1))
    return out


def _add_profile(sums: np.ndarray, counts: np.ndarray, residual: np.ndarray, cands: Any, fits: Any,
                 sel: np.ndarray, radius: int) -> None:
    """Add the radial profiles (per photon, background removed) of the selected spots and of their models."""
    if len(sel) == 0:
        return
    values, valid = windows(residual, cands, radius)
    model = gaussian_model(fits.x[sel], fits.y[sel], fits.photons[sel], fits.sigma[sel], radius)
    values = values + model - fits.bg[sel][:, None, None]  # the spot itself, on the neighbours-free residual
    k = np.arange(-radius, radius + 1)
    r = np.hypot(k[None, None, :] - fits.x[sel][:, None, None], k[None, :, None] - fits.y[sel][:, None, None])
    bins = np.minimum((r / PROFILE_STEP).astype(int), sums.shape[1] - 1)
    norm = fits.photons[sel][:, None, None]
    for row, data in enumerate((values / norm, model / norm)):
        np.add.at(sums[row], bins[valid], data[valid])
    np.add.at(counts, bins[valid], 1)


def _median_se(values: np.ndarray, rng: np.random.Generator) -> float | None:
    """Bootstrap standard error of the median (None for fewer than 5 values); more than ``BOOTSTRAP_MAX``
    values: bootstrapped on a random subset, scaled by √(subset / n)."""
    n = len(values)
    if n < 5:
        return None
    sub = values if n <= BOOTSTRAP_MAX else rng.choice(values, BOOTSTRAP_MAX, replace=False)
    idx = rng.integers(0, len(sub), size=(BOOTSTRAP, len(sub)))
    return float(np.std(np.median(sub[idx], axis=1), ddof=1) * np.sqrt(len(sub) / n))


def _summarize(m: dict[str, Any], *, name: str, camera: Camera, sources: dict[str, str], metadata: MovieMetadata,
               seed: int) -> Calibration:
    rng = np.random.default_rng(seed)
    t = m["table"]
    n_frames, h, w = m["shape"]
    ok, psf = t["ok"].astype(bool), t["psf"].astype(bool)
    bg: BackgroundEstimate = estimate_background(m["quiet"])
    noise = choose(m["quiet"], m["spatial"], expected_slope(camera), m["read_var"])
    check = check_camera(camera, frames=m["frames_sampled"], zero_frames=m["zero_frames"], below_baseline=m["below"],
                         level=bg.smoothed, noise=noise)
    sig = t["sigma"][psf]
    sigma = float(np.median(sig)) if len(sig) else float("nan")
    # SE of a median: 1.2533·σ/√n, with σ from the MAD (robust to the few bad fits)
    sigma_se = float(1.2533 * 1.4826 * np.median(np.abs(sig - sigma)) / np.sqrt(len(sig))) if len(sig) >= 5 else None
    phot = t["photometry"].astype(bool)
    photons = t["photons"][phot]
    tracks = link(t["frame"][ok], t["x"][ok], t["y"][ok], m["sampled"], n_frames)
    on = on_time(tracks)
    flux = t["photons"][ok][tracks.interior & phot[ok]]
    log_flux = np.log(flux[flux > 0]) if len(flux) else np.zeros(0)
    frames_used = len(m["sampled"])
    area_um2 = h * w * (camera.pixel_size / 1000.0) ** 2
    per_frame = np.bincount(np.searchsorted(m["sampled"], t["frame"][ok]), minlength=frames_used)
    density = per_frame.mean() / area_um2 if frames_used else float("nan")
    density_se = per_frame.std(ddof=1) / np.sqrt(frames_used) / area_um2 if frames_used > 1 else None
    nan = float("nan")
    estimates = {
        "psf_sigma_px": Estimate(sigma, sigma_se),
        "psf_sigma_nm": Estimate(sigma * camera.pixel_size, None if sigma_se is None else sigma_se * camera.pixel_size),
        "background_photons": Estimate(bg.level, bg.level_se),
        "background_spread": Estimate(bg.spread),
        "background_time_ratio": Estimate(bg.time_ratio),
        "sensor_pattern_photons": Estimate(fixed_pattern(m["quiet"])),
        "photons_median": Estimate(float(np.median(photons)) if len(photons) else nan, _median_se(photons, rng)),
        "flux_median": Estimate(float(np.exp(np.median(log_flux))) if len(log_flux) else nan,
                                _median_se(flux, rng)),
        "flux_log_sd": Estimate(float(np.subtract(*np.percentile(log_flux, [75, 25])) / 1.349)
                                if len(log_flux) >= 10 else nan),
        "density_per_um2": Estimate(float(density), None if density_se is None else float(density_se)),
        "on_time_frames": Estimate(on.frames, on.se),
    }
    light = m["light"]
    if light is not None:  # the emitters' light beyond the camera's noise (``cumulants``), for ``crowding``
        estimates.update({"pixel_light_photons": Estimate(light.mean),
                          "emitter_light_variance": Estimate(light.variance, light.variance_se),
                          "emitter_light_third": Estimate(light.third, light.third_se)})
    profile, counts = m["profile"]
    used = (counts > 0) & ((np.arange(len(counts)) + 0.5) * PROFILE_STEP <= m["radius"])
    with np.errstate(invalid="ignore", divide="ignore"):
        prof = profile / counts
    diagnostics = Diagnostics(bg.map, bg.smoothed, photons.astype(np.float32), flux.astype(np.float32),
                              sig.astype(np.float32), (np.nonzero(used)[0] + 0.5) * PROFILE_STEP, prof[0][used],
                              prof[1][used], t)
    counts_out = {"localizations": int(ok.sum()), "psf_spots": int(psf.sum()), "photometry_spots": int(phot.sum()),
                  "tracks": on.tracks,
                  "track_ends": on.ends, "full_frame_localizations": len(flux)}
    return Calibration(name, (n_frames, h, w), frames_used, camera, sources, metadata, estimates, check, counts_out,
                       diagnostics)

