"""Smooth stage drift: where the sample has moved to in frame ``t``, in nm (x, y), for any ``t``.

``d(t) = A·[u·t/T + w(t) − w(0)]`` with ``A = drift_nm``, ``T = drift_frames``, ``u`` a random unit vector and
``w`` a sum of three random sinusoids per axis (0.5–2 cycles per ``T``, amplitudes ~N(0, 0.2²)): a steady
creep of about ``A`` every ``T`` frames with a gentle wander on top, and ``d(0) = 0``. It is defined for every
frame without knowing the movie's length, from a handful of numbers drawn from the movie's seed, so the first
``n`` frames of a longer movie drift exactly like the movie of ``n`` frames. Computed in numpy float64: the
same on every device.

The simulator adds ``d(t)`` to every emitter's position in frame ``t`` (the background stays put); the
ground truth lists the drifted positions, and ``<gt stem>_drift.csv`` the drift itself
(``decode_mem.io.drift``): subtracting it gives the positions in the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_WAVES = 3
WAVE_CYCLES = (0.5, 2.0)  # cycles per drift_frames
WAVE_AMPLITUDE = 0.2  # std of each sinusoid's amplitude, relative to drift_nm


@dataclass(frozen=True)
class StageDrift:
    """One movie's drift curve (see the module docstring); ``amplitude`` nm per ``timescale`` frames."""

    amplitude: float
    timescale: float
    direction: np.ndarray  # (2,) unit vector
    cycles: np.ndarray  # (2, N_WAVES) per timescale
    weights: np.ndarray  # (2, N_WAVES), relative to amplitude
    phases: np.ndarray  # (2, N_WAVES)

    @classmethod
    def draw(cls, amplitude: float, timescale: float, seed: int, *keys: int) -> StageDrift:
        """The drift of the movie seeded ``(seed, *keys)``."""
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), *map(int, keys)]))
        angle = rng.uniform(0.0, 2 * np.pi)
        return cls(float(amplitude), float(timescale), np.array([np.cos(angle), np.sin(angle)]),
                   rng.uniform(*WAVE_CYCLES, (2, N_WAVES)), rng.normal(0.0, WAVE_AMPLITUDE, (2, N_WAVES)),
                   rng.uniform(0.0, 2 * np.pi, (2, N_WAVES)))

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """(n, 2) drift in nm (dx, dy) at the 0-based ``frames``."""
        s = np.asarray(frames, dtype=np.float64).reshape(-1, 1) / self.timescale  # (n, 1)
        out = np.empty((s.shape[0], 2))
        for axis in range(2):
            arg = 2 * np.pi * self.cycles[axis] * s + self.phases[axis]
            waves = (self.weights[axis] * (np.sin(arg) - np.sin(self.phases[axis]))).sum(axis=1)
            out[:, axis] = self.amplitude * (self.direction[axis] * s[:, 0] + waves)
        return out
