"""Camera noise per pixel, measured so that emitter light does not count as noise.

The camera check compares each pixel's noise variance with what the camera settings predict for its light
(``camera_check``). The plain estimate, each pixel's variance over time where no spot was found (``QuietStats``),
holds the light of emitters too dim or too spread out to be found and masked: out-of-focus and double-helix
spots (3-D), and the overlapping tails of spots at 1-3 emitters/µm². On bright movies it read up to 20x the true
noise and the check blamed a correct camera in 18 of 32 checks (``benchmarks/results/camera_noise.md``).

Emitter light is smooth over a few pixels; camera noise is not. So the noise is also measured from a fourth
difference across pixels (``[1, -4, 6, -4, 1]/sqrt(70)``: unit gain on independent noise, blind to light that varies
as a cubic over five pixels; a second difference lets more of a bright spot's light through, which the reports here
do not measure) of the difference of consecutive frames (which removes what is fixed: the sensor's per-pixel
offsets, a static background). Its expected square is predicted from the light its pixels hold (weighted by the
squared kernel; spots included), so emitter light raises the prediction as it raises the noise, instead of showing
as excess noise.

Real cameras correlate neighbouring pixels along their readout (the real EMCCD movie: +0.16 along rows, +0.01
down columns), which lowers a difference across them: the larger of the two directions is taken. Light can only
raise the temporal estimate and correlation only lower the spatial one, so the smaller of the temporal and the
spatial estimate is used (``choose``), and ``NoiseEstimate.method`` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from decode_mem.calibrate.background import QuietStats

FOURTH_DIFFERENCE = np.array([1.0, -4.0, 6.0, -4.0, 1.0]) / math.sqrt(70.0)  # unit gain on independent noise
AXES = {"vertical": 0, "horizontal": 1}  # the direction of the difference, by frame axis


@dataclass(frozen=True)
class NoiseEstimate:
    """Per-pixel ``mean`` light (photons) and noise ``variance`` (photons²) that the camera check compares, and the
    ``method`` that measured them: ``temporal`` (quiet samples over time), ``vertical`` or ``horizontal`` (the
    fourth difference across pixels)."""

    mean: np.ndarray
    variance: np.ndarray
    method: str
    quiet_ratio: float = float("nan")  # ``excess_ratio`` of the temporal estimate, light of unfound emitters included


class SpatialNoiseStats:
    """Running per-pixel sums, for each direction, of the squared fourth difference of consecutive quiet frames'
    difference (over 2: one frame's noise) and of the light it is predicted from. A pixel counts where it and its
    four neighbours in that direction are quiet in both frames."""

    def __init__(self, shape: tuple[int, int]) -> None:
        self.count = {name: np.zeros(shape, dtype=np.int64) for name in AXES}
        self.light = {name: np.zeros(shape, dtype=np.float64) for name in AXES}
        self.square = {name: np.zeros(shape, dtype=np.float64) for name in AXES}

    def add(self, photons: np.ndarray, quiet: np.ndarray) -> None:
        """Add a block (n, H, W) of consecutive frames; ``quiet`` is True where no spot was found. Frame pair by
        frame pair: the temporaries are a frame's size, whatever the block's."""
        width = len(FOURTH_DIFFERENCE)
        footprints = {name: np.ones((width, 1) if axis == 0 else (1, width), dtype=bool) for name, axis in AXES.items()}
        for t in range(len(photons) - 1):
            first, second = (np.asarray(photons[i], dtype=np.float64) for i in (t, t + 1))
            diff, pair_light = second - first, (first + second) / 2
            pair_quiet = quiet[t] & quiet[t + 1]
            for name, axis in AXES.items():
                usable = ndimage.binary_erosion(pair_quiet, structure=footprints[name], border_value=0)
                fourth = ndimage.correlate1d(diff, FOURTH_DIFFERENCE, axis=axis, mode="nearest")
                light = ndimage.correlate1d(pair_light, FOURTH_DIFFERENCE**2, axis=axis, mode="nearest")
                self.count[name] += usable
                self.square[name] += np.where(usable, fourth * fourth / 2, 0.0)
                self.light[name] += np.where(usable, light, 0.0)

    def estimate(self, name: str) -> NoiseEstimate:
        count = self.count[name]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean, variance = self.light[name] / count, self.square[name] / count
        variance[count == 0] = np.nan
        return NoiseEstimate(mean, variance, name)


def excess_ratio(estimate: NoiseEstimate, slope: float, read_var: float) -> float:
    """Pooled measured noise above the read noise over the predicted shot noise (1: as the camera predicts)."""
    good = np.isfinite(estimate.variance) & np.isfinite(estimate.mean)
    if not good.any():
        return float("nan")
    light = float(np.mean(estimate.mean[good]))
    return (float(np.mean(estimate.variance[good])) - read_var) / (slope * light) if light > 0 else float("nan")


def choose(quiet: QuietStats, spatial: SpatialNoiseStats, slope: float, read_var: float) -> NoiseEstimate:
    """The estimate the camera check uses: the temporal one unless the larger spatial one is lower (see the module
    docstring). Temporal too where either cannot be judged (no light above the baseline, no usable pixels)."""
    temporal = NoiseEstimate(quiet.mean(), quiet.variance(), "temporal")
    r_temporal = excess_ratio(temporal, slope, read_var)
    temporal = replace(temporal, quiet_ratio=r_temporal)
    across = [spatial.estimate(name) for name in AXES]
    ratios = [excess_ratio(e, slope, read_var) for e in across]
    if not all(math.isfinite(r) for r in ratios) or not math.isfinite(r_temporal) or max(ratios) >= r_temporal:
        return temporal
    return replace(across[int(np.argmax(ratios))], quiet_ratio=r_temporal)
