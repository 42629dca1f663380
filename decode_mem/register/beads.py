"""Beads of one channel: found and fitted frame by frame, followed over the frames, averaged into one position each.

Each frame (photons, its median as the background) is searched for spots (``calibrate.spots.find_candidates``,
``DETECTION_SIGMAS`` above the noise) and each spot fitted with a pixel-integrated Gaussian by least squares
(``calibrate.spots.fit_spots``; its σ is fitted too). A bead is a spot found again within ``LINK_PX`` of where it
was in the frames before; a bead seen in fewer than half the frames it could be seen in is dropped (noise, a bead
near the edge), and so are two beads closer than their window and ``CLEAR_SIGMAS`` PSF σ. Memory: one frame and
the fits.

Its position is the mean of its fits, its precision the standard error of that mean. In a z-stack (``z``: the depth
of each frame) the bead's focus is the vertex of a parabola fitted to its σ² against z around the sharpest plane
(σ² of a defocused spot grows as z² near focus; for an astigmatic PSF the symmetric σ is smallest midway between
the two foci), and its position the mean of the fits within ``FOCUS_WINDOW`` nm of that focus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decode_mem.calibrate.spots import Candidates, find_candidates, fit_spots, windows

DETECTION_SIGMAS = 12.0  # candidates: smoothed peak over the frame's smoothed noise
LINK_PX = 1.5  # a spot within this of a bead's position is that bead again
FOCUS_WINDOW = 150.0  # nm around a bead's focus whose fits make its position (z-stacks)
FOCUS_FIT = 400.0  # nm around the sharpest plane whose σ² the focus parabola is fitted to
RADIUS_2D, RADIUS_3D = 5, 7  # fit windows (2r + 1 px): in focus; through a z-stack (wide defocused spots)
CLEAR_PX, CLEAR_SIGMAS = 2, 3.0  # beyond a bead's window no other bead within this (px; PSF σ, the larger)


@dataclass(frozen=True)
class Beads:
    """Beads of one channel (arrays of length n): ``x``, ``y`` px of the channel's own frame, their standard error
    ``sem`` px (NaN from one frame), ``photons`` per frame, ``frames`` fitted, ``focus`` nm (NaN without z)."""

    x: np.ndarray
    y: np.ndarray
    sem: np.ndarray
    photons: np.ndarray
    frames: np.ndarray
    focus: np.ndarray

    def __len__(self) -> int:
        return len(self.x)

    @property
    def xy(self) -> np.ndarray:
        return np.column_stack([self.x, self.y])

    def select(self, index: np.ndarray) -> Beads:
        return Beads(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def fit_frames(stack: object, to_photons: object, radius: int) -> tuple[np.ndarray, ...]:
    """Every spot of every frame: (frame, x, y, sigma, photons) arrays; ``to_photons(frame) -> photons``."""
    out: list[list[np.ndarray]] = [[], [], [], [], []]
    n = stack.shape[0]  # type: ignore[attr-defined]
    for t in range(n):
        frame = np.asarray(to_photons(np.asarray(stack[t], np.float64)), np.float64)  # type: ignore[index, operator]
        signal = frame - np.median(frame)
        cands = find_candidates(signal[None].astype(np.float32), 1.0, DETECTION_SIGMAS)
        if len(cands) == 0:
            continue
        cands = Candidates(np.zeros(len(cands), np.int64), cands.row, cands.col, cands.score)
        values, valid = windows(frame[None], cands, radius)
        fits = fit_spots(values, valid, 1.3)
        ok = fits.ok
        out[0].append(np.full(int(ok.sum()), t))
        out[1].append(cands.col[ok] + fits.x[ok])
        out[2].append(cands.row[ok] + fits.y[ok])
        out[3].append(fits.sigma[ok])
        out[4].append(fits.photons[ok])
    return tuple(np.concatenate(c) if c else np.zeros(0) for c in out)  # type: ignore[return-value]


def link(frame: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A bead label per spot: each spot joins the bead whose first position is within ``LINK_PX``, frame by frame
    (a bead is found once per frame at most), else starts a new one."""
    label = np.full(len(x), -1)
    first: list[tuple[float, float]] = []
    for t in np.unique(frame):
        idx = np.nonzero(frame == t)[0]
        taken: set[int] = set()
        for i in idx:
            if first:
                d = np.hypot(np.array([p[0] for p in first]) - x[i], np.array([p[1] for p in first]) - y[i])
                j = int(np.argmin(d))
                if d[j] <= LINK_PX and j not in taken:
                    label[i] = j
                    taken.add(j)
                    continue
            first.append((float(x[i]), float(y[i])))
            label[i] = len(first) - 1
            taken.add(label[i])
    return label


def focus_of(z: np.ndarray, sigma: np.ndarray) -> float:
    """The vertex of the parabola fitted to σ² against z within ``FOCUS_FIT`` nm of the sharpest plane (NaN: no
    minimum inside the planes)."""
    if len(z) < 3:
        return float("nan")
    near = np.abs(z - z[np.argmin(sigma)]) <= FOCUS_FIT
    if near.sum() < 3:
        return float("nan")
    c2, c1, _ = np.polyfit(z[near], sigma[near] ** 2, 2)
    vertex = -c1 / (2 * c2) if c2 > 0 else float("nan")
    return float(vertex) if z.min() <= vertex <= z.max() else float("nan")


def localize_beads(stack: object, to_photons: object, z: np.ndarray | None = None) -> Beads:
    """The beads of one channel (module docstring); ``z``: the depth of each frame (nm) of a z-stack."""
    radius = RADIUS_2D if z is None else RADIUS_3D
    frame, x, y, sigma, photons = fit_frames(stack, to_photons, radius)
    n_frames = stack.shape[0]  # type: ignore[attr-defined]
    label = link(frame.astype(np.int64), x, y) if len(x) else np.zeros(0, np.int64)
    rows = []
    for b in range(int(label.max()) + 1 if len(label) else 0):
        mine = label == b
        f = frame[mine].astype(np.int64)
        focus = float("nan")
        use = np.ones(int(mine.sum()), bool)
        if z is not None:
            zb = np.asarray(z, np.float64)[f]
            focus = focus_of(zb, sigma[mine])
            if not np.isfinite(focus):
                continue
            use = np.abs(zb - focus) <= FOCUS_WINDOW
            if use.sum() < 2:
                continue
        elif mine.sum() < max(1, n_frames // 2):
            continue  # seen in fewer than half the frames: not a bead
        bx, by = x[mine][use], y[mine][use]
        sem = (np.hypot(bx.std(ddof=1), by.std(ddof=1)) / np.sqrt(2 * len(bx))) if len(bx) > 1 else float("nan")
        rows.append((bx.mean(), by.mean(), sem, float(np.median(photons[mine][use])), len(bx), focus))
    arr = np.array(rows, np.float64).reshape(-1, 6)
    beads = Beads(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4].astype(np.int64), arr[:, 5])
    if len(beads) > 1:  # another bead's light in a bead's window: both dropped (each fit saw the other's light)
        d = np.hypot(beads.x[:, None] - beads.x[None], beads.y[:, None] - beads.y[None])
        np.fill_diagonal(d, np.inf)
        clear = radius + max(CLEAR_PX, CLEAR_SIGMAS * float(np.median(sigma)))
        beads = beads.select(d.min(axis=1) > clear)
    return beads
