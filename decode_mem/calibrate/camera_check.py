"""Camera sanity: do the camera settings explain the movie's pixel values and their noise?

In photons (``Camera.to_photons``) a background pixel of mean ``m`` has the noise variance
``slope·m + read`` with ``slope = F²/qe`` (F² = 2: the EMCCD excess-noise factor; 1 for sCMOS) and ``read``
the read noise plus the ADU rounding (1/12 ADU²), both in photons². A wrong ``e_per_adu``/``em_gain`` scales
``m`` and the variance differently, a wrong baseline shifts ``m``: both show as a ``noise_ratio``
(measured variance over predicted) away from 1. Across pixels of different background the variance is a
line in the mean; when the background varies enough to fit that line, its slope checks the gain and the
point where it meets the read noise checks the baseline separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from decode_mem.calibrate.noise import NoiseEstimate
from decode_mem.io.camera import Camera, preset

NOISE_RATIO_OK = (2 / 3, 3 / 2)  # measured/predicted noise variance inside this range: the camera is plausible
SLOPE_MAX_REL_SE = 0.15  # the variance-vs-mean line is used when its slope is known to 15 %
BINS = 10
MIN_LEVEL_RANGE = 0.25  # the line is fitted when the binned background levels span 25 % of their median
# e-/ADU a camera can have: sCMOS ~0.2-2, EMCCDs a few to ~20 by pre-amp setting, 12-bit high-well modes ~7.5
# (io/camera_table.yaml's sources); a fix outside this is not offered
E_PER_ADU = (0.05, 100.0)


def expected_slope(camera: Camera) -> float:
    """Noise variance per photon of signal, in photons² per photon: F²/qe."""
    return (2.0 if camera.kind == "emccd" else 1.0) / camera.qe


def read_variance(camera: Camera, maps: Any = None) -> float:
    """Read noise plus ADU rounding, in photons²: the camera's scalar settings, or the mean over the pixels of its
    per-pixel ``maps`` (``Camera.load_maps``, or a crop of them) where given."""
    read = camera.read_variance_photons if maps is None else float(np.mean(camera.read_variance(maps)))
    return read + 1.0 / (12.0 * camera.adu_per_photon**2)


@dataclass(frozen=True)
class CameraCheck:
    """What the camera check measured, and ``warnings`` (empty when the camera looks right).

    ``noise_ratio``: mean measured / predicted noise variance of background pixels (1 = consistent);
    ``slope_ratio`` and ``zero_signal_adu``: from the variance-vs-mean line when the background varies
    enough (else None): its slope over the predicted one, and the ADU at which it meets the read noise
    (the true baseline if the line is straight); ``implied_baseline_adu``: the baseline that makes the
    noise consistent if the gain is right; ``implied_e_per_adu``: the e-/ADU that does so if the baseline
    is right; ``predicted_slope``/``read_variance``: the camera settings' noise line (photons², per photon).
    Shares are of the sampled pixels (``below_baseline``) and frames (``zero_frames``).
    """

    frames: int
    zero_frames: int
    below_baseline: float
    below_baseline_expected: float
    noise_ratio: float
    slope_ratio: float | None
    slope_ratio_se: float | None
    zero_signal_adu: float | None
    implied_baseline_adu: float
    implied_e_per_adu: float
    predicted_slope: float
    read_variance: float
    curve: dict[str, list[float]] = field(default_factory=dict)  # binned mean vs variance (photons), for the plot
    warnings: tuple[str, ...] = ()
    noise_method: str = "temporal"  # how the noise was measured (``calibrate.noise``)
    quiet_ratio: float = float("nan")  # the quiet pixels' variance over time / predicted: with dim emitters' light

    @property
    def ok(self) -> bool:
        return not self.warnings

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "suspect"

    def to_dict(self) -> dict[str, object]:
        keys = ("frames", "zero_frames", "below_baseline", "below_baseline_expected", "noise_ratio", "slope_ratio",
                "slope_ratio_se", "zero_signal_adu", "implied_baseline_adu", "implied_e_per_adu", "predicted_slope",
                "read_variance", "noise_method", "quiet_ratio")
        out: dict[str, object] = {"verdict": self.verdict}
        out.update({k: _plain(getattr(self, k)) for k in keys})
        out["warnings"] = list(self.warnings)
        return out


def _plain(v: object) -> object:
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    return int(v) if isinstance(v, (np.integer,)) else v


def check_camera(camera: Camera, *, frames: int, zero_frames: int, below_baseline: float,
                 level: np.ndarray, noise: NoiseEstimate) -> CameraCheck:
    """Judge the camera from per-pixel background statistics in photons.

    ``level``: each pixel's smoothed background (bins pixels without using the pixel's own noise); ``noise``:
    each pixel's light and noise variance (``calibrate.noise.choose``).
    """
    mean, variance = noise.mean, noise.variance
    s0, rv, apu = expected_slope(camera), read_variance(camera), camera.adu_per_photon
    good = np.isfinite(variance) & np.isfinite(mean) & np.isfinite(level)
    m = float(np.mean(mean[good])) if good.any() else np.nan
    v = float(np.mean(variance[good])) if good.any() else np.nan
    noise_ratio = (v - rv) / (s0 * m) if m > 0 else np.nan
    implied_baseline = camera.baseline + apu * (m - (v - rv) / s0)
    implied_e = camera.e_per_adu / noise_ratio if noise_ratio > 0 else np.nan
    slope_ratio = slope_se = zero_adu = None
    curve: dict[str, list[float]] = {}
    if good.sum() >= 20 * BINS:
        edges = np.quantile(level[good], np.linspace(0, 1, BINS + 1))
        which = np.clip(np.searchsorted(edges, level[good], side="right") - 1, 0, BINS - 1)
        xs, ys, ws = [], [], []
        for b in range(BINS):
            sel = which == b
            if sel.sum() < 10:
                continue
            xs.append(mean[good][sel].mean())
            ys.append(variance[good][sel].mean())
            ws.append(sel.sum() / max(variance[good][sel].var(), 1e-12))
        curve = {"mean": [float(x) for x in xs], "variance": [float(y) for y in ys]}
        # the line needs a real range of backgrounds: with a uniform one, faint light left in the quiet
        # samples (not camera noise) is what varies from pixel to pixel
        if len(xs) >= 3 and np.ptp(xs) >= MIN_LEVEL_RANGE * np.median(np.abs(xs)):
            x, y, w = np.asarray(xs), np.asarray(ys), np.asarray(ws)
            a = np.column_stack([x, np.ones_like(x)])
            cov = np.linalg.inv(a.T @ (a * w[:, None]))
            slope, icpt = cov @ (a.T @ (w * y))
            dof = max(len(x) - 2, 1)
            chi2 = float(np.sum(w * (y - a @ np.array([slope, icpt])) ** 2)) / dof
            se = float(np.sqrt(cov[0, 0] * max(chi2, 1.0)))
            if slope > 0 and se / slope < SLOPE_MAX_REL_SE:
                slope_ratio, slope_se = float(slope / s0), float(se / s0)
                zero_adu = float(camera.baseline + apu * (rv - icpt) / slope)
    expected_below = _expected_below(level, s0, rv)
    other = preset("scmos" if camera.kind == "emccd" else "emccd")
    warnings = _warnings(camera, frames=frames, zero_frames=zero_frames, below=below_baseline,
                         expected_below=expected_below, level=float(np.nanmedian(level)), noise_ratio=noise_ratio,
                         slope_ratio=slope_ratio, zero_adu=zero_adu, implied_baseline=implied_baseline,
                         implied_e=implied_e, measured_variance=v, read_var=rv,
                         other_kind=(other.kind, noise_ratio_as(other, camera, m, v)))
    return CameraCheck(frames, zero_frames, float(below_baseline), expected_below, float(noise_ratio), slope_ratio,
                       slope_se, zero_adu, float(implied_baseline), float(implied_e), s0, rv, curve, tuple(warnings),
                       noise.method, noise.quiet_ratio)


def noise_ratio_as(other: Camera, camera: Camera, mean: float, variance: float) -> float:
    """The noise ratio the same pixels would have read with ``other`` (their mean and variance in photons as read
    with ``camera``, taken back to ADU): how well another camera kind explains the noise."""
    adu_mean = camera.baseline + camera.adu_per_photon * mean
    mean_b = (adu_mean - other.baseline) / other.adu_per_photon
    variance_b = variance * (camera.adu_per_photon / other.adu_per_photon) ** 2
    return float((variance_b - read_variance(other)) / (expected_slope(other) * mean_b)) if mean_b > 0 else np.nan


def _expected_below(level: np.ndarray, s0: float, rv: float) -> float:
    """Share of pixel values below the baseline that noise alone gives (Gaussian approximation)."""
    bg = np.clip(level[np.isfinite(level)], 0, None)
    if bg.size == 0:
        return float("nan")
    return float(np.mean(special.ndtr(-bg / np.sqrt(s0 * bg + rv + 1e-12))))


def _warnings(camera: Camera, *, frames: int, zero_frames: int, below: float, expected_below: float, level: float,
              noise_ratio: float, slope_ratio: float | None, zero_adu: float | None, implied_baseline: float,
              implied_e: float, measured_variance: float = np.nan, read_var: float = np.nan,
              other_kind: tuple[str, float] | None = None) -> list[str]:
    out = []
    if zero_frames:
        out.append(f"{zero_frames} of {frames} sampled frames are all zero (dropped or blank frames)")
    if level <= 0 or below > max(2 * expected_below, expected_below + 0.01):
        maps = " (or it differs from pixel to pixel: give the sCMOS offset_map)" if camera.kind == "scmos" else ""
        out.append(f"{100 * below:.1f} % of the pixels are below the camera baseline {camera.baseline:g} ADU "
                   f"(noise alone explains ~{100 * expected_below:.1f} %): the baseline is too high{maps}; the "
                   f"noise suggests ~{implied_baseline:.0f} ADU")
    lo, hi = NOISE_RATIO_OK
    if np.isfinite(noise_ratio) and noise_ratio <= 0 and level > 0:  # less noise than the read noise alone
        at_most = np.sqrt(max(measured_variance, 0.0)) * camera.qe * camera.em_gain
        out.append(f"the pixels are less noisy than the camera's read noise alone predicts (read noise "
                   f"{camera.read_noise:g} e- gives {read_var:.3g} photons² of variance, the background pixels have "
                   f"{measured_variance:.3g} photons² in all): the read noise is set too high (these pixels allow at "
                   f"most ~{at_most:.3g} e-; check --read_noise, or em_gain / e_per_adu / the camera kind)")
    elif np.isfinite(noise_ratio) and not lo <= noise_ratio <= hi and level > 0:
        gain_ok = slope_ratio is not None and lo <= slope_ratio <= hi
        if gain_ok and zero_adu is not None:
            out.append(f"the pixel noise is {noise_ratio:.2f}x what the camera settings predict, while its growth "
                       f"with the background fits the gain: the baseline looks wrong (given {camera.baseline:g} "
                       f"ADU, the data suggest ~{zero_adu:.0f} ADU)")
        else:
            detail = (f"; the variance-vs-mean slope is {slope_ratio:.2f}x the predicted one" if slope_ratio is not None
                      else "")
            # each fix a camera can have, the smaller change first (a baseline below 0 ADU or above the background's
            # level, or a conversion no camera has, is not offered)
            fixes = []
            if other_kind is not None and lo <= other_kind[1] <= hi:  # the other kind's preset explains it as it is
                fixes.append((0.0, f"a camera of kind {other_kind[0]} fits this noise: --camera {other_kind[0]}"))
            if E_PER_ADU[0] <= implied_e <= E_PER_ADU[1]:
                fixes.append((abs(np.log(implied_e / camera.e_per_adu)),
                              f"with the baseline right e_per_adu would be ~{implied_e:.3g}, not {camera.e_per_adu:g}"))
            background_adu = camera.baseline + camera.adu_per_photon * level
            if 0 <= implied_baseline <= background_adu:
                shift = abs(implied_baseline - camera.baseline) / max(background_adu - min(implied_baseline,
                                                                                           camera.baseline), 1.0)
                fixes.append((shift, f"with the gain right the baseline would be ~{implied_baseline:.0f} ADU, not "
                                     f"{camera.baseline:g}"))
            said = "; or ".join(text for _, text in sorted(fixes)) or "no single setting explains it"
            out.append(f"the pixel noise is {noise_ratio:.2f}x what the camera settings predict{detail}: the camera "
                       f"settings do not fit this movie ({said}; check the camera kind ({camera.kind}) too)")
    elif slope_ratio is not None and not lo <= slope_ratio <= hi:
        out.append(f"the variance-vs-mean slope is {slope_ratio:.2f}x what the camera settings predict: "
                   f"e_per_adu / em_gain look wrong")
    return out
