"""Network output -> emitter table (DECODE-style spatial integration, re-implemented from its description).

The network predicts, per pixel, ``OUTPUT_CHANNELS`` in physical units (``p_logit`` is the logit of the
detection probability ``p``; ``dx``/``dy`` are offsets in px from the pixel centre, so ``x = col + dx`` and
``y = row + dy`` with pixel centres at integer coordinates, DESIGN.md §3).

Detection (:func:`output_to_emitters`), per frame:

1. *raw threshold*: pixels with ``p > raw_threshold`` are candidates for local maxima;
2. *local maxima*: a candidate whose ``p`` is the maximum of its 3×3 neighbourhood (ties: all tied pixels
   are maxima);
3. *split rule* (DECODE's second pass, meant for two emitters in adjacent pixels): any pixel that is not a
   local maximum but has ``p > split_threshold`` is a detection as well — typically the runner-up next to a
   maximum. DECODE applies no other condition (in particular it does not require the pixel to be away
   from a maximum: adjacent is exactly the case it is for), and neither do we;
4. *summed probability*: each detection's probability is ``p`` summed over the pixel and its 4 edge
   neighbours (the emitter's probability mass is spread over a few pixels), clamped to 1 unless
   ``clamp=False``;
5. *final threshold*: detections with summed probability ``>= threshold`` are kept.

Photons, offsets, z, σ's and background are read at the detected pixel itself, as DECODE does (no
averaging over the neighbourhood). ``PostprocessConfig(threshold=t, raw_threshold=t)`` reproduces DECODE's
``SpatialIntegration(raw_th=t)`` (which uses one value for both thresholds; its split threshold is 0.6).

Two implementation choices keep the result independent of how a frame is cut into tiles, bit for bit:
comparisons and the 3×3 maximum are done on the logits (``sigmoid`` is monotone, and comparing logits involves
no rounding), and the summed probability is computed in float64 only at the few candidate pixels, in a fixed
order. ``p`` itself is never materialised for the whole frame.

Device and host: :func:`detect_candidates` does steps 1-3 where the output is (a GPU) and packs each candidate
into one row of a small tensor (its 5 logits, the channels at its pixel, frame, row and column); only those
rows leave the device, so a caller can collect a whole block of tiles and copy it once
(``infer.predict_stack`` does). :func:`candidates_to_emitters` does steps 4-5 on the host, in float64.
Candidates whose float32 summed probability on the device is more than ``PREFILTER_MARGIN`` below the threshold
are dropped there: float32 rounding moves that sum by < 1e-6, so step 5 on the host keeps exactly the same
detections. :func:`output_to_emitters` is the two in a row.

Tiling: a detection at pixel (i, j) depends only on the logits in the 3×3 neighbourhood of (i, j) and on the
other channels at (i, j). So a tile gives exactly the whole-frame detections inside its ``core`` when the array
passed in holds exact network output for the core plus ``MARGIN`` px on every side that is not the frame's
outer edge (at the outer edge no margin is needed: the array ends where the frame ends).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from decode_mem.errors import ConfigError
from decode_mem.io.table import EmitterTable
from decode_mem.model.arrays import expit
from decode_mem.model.config import OUTPUT_CHANNELS

if TYPE_CHECKING:
    import torch

MARGIN = 1
"""Px of exact output needed around a tile's core for its detections to equal the whole frame's."""

# EmitterTable column <- output channel, for everything read at the detected pixel
_READ = {
    "photons": OUTPUT_CHANNELS.index("photons"),
    "z": OUTPUT_CHANNELS.index("z"),
    "bg": OUTPUT_CHANNELS.index("bg"),
    "sigma_x": OUTPUT_CHANNELS.index("sigma_x"),
    "sigma_y": OUTPUT_CHANNELS.index("sigma_y"),
    "sigma_z": OUTPUT_CHANNELS.index("sigma_z"),
    "sigma_photons": OUTPUT_CHANNELS.index("sigma_photons"),
}
_P, _DX, _DY = OUTPUT_CHANNELS.index("p_logit"), OUTPUT_CHANNELS.index("dx"), OUTPUT_CHANNELS.index("dy")
_COLUMNS = ("frame", "x", "y", "z", "photons", "bg", "prob", "sigma_x", "sigma_y", "sigma_z", "sigma_photons")
PREFILTER_MARGIN = 1e-3
"""Candidates summing to less than ``threshold - PREFILTER_MARGIN`` in float32 stay on the device."""
_N_CROSS = 5
CANDIDATE_WIDTH = _N_CROSS + len(OUTPUT_CHANNELS) + 3
"""Float32 values per candidate row: 5 logits, the output channels, then frame, row, col (int32 bits)."""
# the pixel itself first, then its 4 edge neighbours: the summation order is fixed
_CROSS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))


@dataclass(frozen=True)
class PostprocessConfig:
    """Thresholds of the detection (see the module docstring for the exact rule).

    ``threshold``: final detection threshold on the summed probability (``>=``). 0.4 gave the best Jaccard of
    0.3 / 0.4 / 0.5 / 0.6 for the shipped model on simulated validation sets at 0.2, 1 and 2 emitters/µm²
    (separate from the benchmark's test frames).
    ``raw_threshold``: ``p`` must exceed it for a pixel to be a local maximum.
    ``split_threshold``: a non-maximal pixel with ``p`` above it is a detection too (DECODE: 0.6).
    ``clamp``: clamp the summed probability to 1 (DECODE's default ``norm_sum``).
    """

    threshold: float = 0.4
    raw_threshold: float = 0.1
    split_threshold: float = 0.6
    clamp: bool = True

    def __post_init__(self) -> None:
        for name in ("threshold", "raw_threshold", "split_threshold"):
            value = getattr(self, name)
            try:
                ok = 0.0 <= float(value) <= 1.0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ConfigError(f"postprocess.{name} must be a probability in [0, 1], got {value!r}")


def _logit(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


def _as_tensor(output: torch.Tensor | np.ndarray) -> torch.Tensor:
    import torch

    if isinstance(output, torch.Tensor):
        out = output.detach()
        return out if out.dtype == torch.float32 else out.float()
    return torch.from_numpy(np.asarray(output, dtype=np.float32))


def _core_bounds(core: tuple[slice, slice] | None, h: int, w: int) -> tuple[int, int, int, int]:
    if core is None:
        return 0, h, 0, w
    if len(core) != 2 or not all(isinstance(s, slice) for s in core):
        raise ValueError(f"core must be a (slice_y, slice_x) pair, got {core!r}")
    (y0, y1, sy), (x0, x1, sx) = core[0].indices(h), core[1].indices(w)
    if sy != 1 or sx != 1:
        raise ValueError(f"core slices must have step 1, got {core!r}")
    return y0, max(y0, y1), x0, max(x0, x1)


def output_to_emitters(
    output: torch.Tensor | np.ndarray,
    frames: int | Sequence[int] | np.ndarray,
    *,
    config: PostprocessConfig,
    offset: tuple[int, int] = (0, 0),
    core: tuple[slice, slice] | None = None,
    frame_shape: tuple[int, int] | None = None,
) -> EmitterTable:
    """Detect emitters in network output ``(N, 10, H, W)`` or ``(10, H, W)`` (channels ``OUTPUT_CHANNELS``).

    ``frames``: the 0-based frame index of each of the N items, or an int ``t0`` meaning ``t0, t0+1, ...``.
    ``offset=(y0, x0)``: the global position of the array's pixel (0, 0), added to the coordinates.
    ``core=(slice_y, slice_x)``: keep only detections whose pixel lies in this region of the array (see
    ``MARGIN``). ``frame_shape=(H, W)``: drop detections whose position lies outside the frame (x outside
    ``[-0.5, W - 0.5)`` or y outside ``[-0.5, H - 0.5)``: emitters just beyond the edge, which the network can
    see by their light; ground truth and users count only emitters in the image). Works on numpy arrays and
    tensors on any device (computed there; only the candidates are
    copied to the host). Temporary memory is a few boolean/float masks of size N·H·W. Rows come out in
    (item, row, column) order. Returns an EmitterTable with the columns
    ``frame, x, y, z, photons, bg, prob, sigma_x, sigma_y, sigma_z, sigma_photons`` (x, y, σx, σy in px).
    """
    candidates = detect_candidates(output, frames, config=config, offset=offset, core=core)
    if not isinstance(candidates, np.ndarray):
        candidates = candidates.cpu()
    return candidates_to_emitters(candidates, config=config, frame_shape=frame_shape)


def detect_candidates(
    output: torch.Tensor | np.ndarray,
    frames: int | Sequence[int] | np.ndarray,
    *,
    config: PostprocessConfig,
    offset: tuple[int, int] = (0, 0),
    core: tuple[slice, slice] | None = None,
) -> torch.Tensor:
    """Steps 1-3 where ``output`` is: a ``(K, CANDIDATE_WIDTH)`` float32 tensor on its device, one row per
    candidate in (item, row, column) order (arguments as :func:`output_to_emitters`); for a numpy array, an array
    of the same rows, computed with numpy (a CPU runtime's output). Rows of several calls can be concatenated and
    copied to the host at once for :func:`candidates_to_emitters`."""
    if isinstance(output, np.ndarray):
        return _detect_in_array(output, frames, config, offset, core)
    import torch
    import torch.nn.functional as F

    out = _batch(_as_tensor(output))
    n, _, h, w = out.shape
    frames_arr, (cy0, cy1, cx0, cx1), empty = _layout(out, frames, core)
    y0, x0 = (int(v) for v in offset)
    if empty:
        return torch.zeros((0, CANDIDATE_WIDTH), dtype=torch.float32, device=out.device)

    with torch.no_grad():
        logit = out[:, _P]  # (N, H, W) view
        above = logit > _logit(config.raw_threshold)
        clipped = torch.where(above, logit, torch.full((), -math.inf, device=logit.device))
        pooled = F.max_pool2d(clipped[:, None], kernel_size=3, stride=1, padding=1)[:, 0]  # pads with -inf
        del clipped
        is_max = above & (logit == pooled)
        del above, pooled
        cand = is_max | (logit > _logit(config.split_threshold))
        del is_max
        idx = torch.nonzero(cand[:, cy0:cy1, cx0:cx1])  # (K, 3): item, row, col (core-relative)
        del cand
        b, i, j = idx[:, 0], idx[:, 1] + cy0, idx[:, 2] + cx0
        # logits of the pixel and its 4 neighbours (-inf, i.e. p = 0, outside the array)
        cross = []
        for di, dj in _CROSS:
            ii, jj = i + di, j + dj
            inside = (ii >= 0) & (ii < h) & (jj >= 0) & (jj < w)
            vals = logit[b, ii.clamp(0, h - 1), jj.clamp(0, w - 1)]
            cross.append(torch.where(inside, vals, torch.full((), -math.inf, device=vals.device)))
        cross_l = torch.stack(cross, dim=1)
        lower = float(config.threshold) - PREFILTER_MARGIN
        if lower > 0:  # far below the threshold even with float32 rounding: no need to copy them
            near = torch.nonzero(torch.sigmoid(cross_l).sum(dim=1) >= lower)[:, 0]  # one sync, then gathers
            b, i, j, cross_l = b[near], i[near], j[near], cross_l[near]
        if np.array_equal(frames_arr, np.arange(frames_arr[0], frames_arr[0] + n)):
            frame = b + int(frames_arr[0])
        else:
            frame = torch.as_tensor(frames_arr, device=b.device)[b]
        where = torch.stack([frame, i + y0, j + x0], dim=1).to(torch.int32).view(torch.float32)
        return torch.cat([cross_l, out[b, :, i, j], where], dim=1)


def _detect_in_array(output: np.ndarray, frames: int | Sequence[int] | np.ndarray, config: PostprocessConfig,
                     offset: tuple[int, int], core: tuple[slice, slice] | None) -> np.ndarray:
    """:func:`detect_candidates` on a numpy array: the same comparisons, 3x3 maximum, gathers and float32
    prefilter, so the same rows bit for bit (tests/postprocess hold the two equal); 2-3x faster than torch's
    operations on a CPU for a runtime's output (2 frames of 264² px on the 2-core AMD EPYC, ad hoc)."""
    out = _batch(np.asarray(output, dtype=np.float32))
    n, _, h, w = out.shape
    frames_arr, (cy0, cy1, cx0, cx1), empty = _layout(out, frames, core)
    y0, x0 = (int(v) for v in offset)
    if empty:
        return np.zeros((0, CANDIDATE_WIDTH), np.float32)
    logit = out[:, _P]
    above = logit > _logit(config.raw_threshold)
    # the logits above the raw threshold in a frame of -inf one pixel wide (the pooling's padding)
    padded = np.full((n, h + 2, w + 2), -np.inf, np.float32)
    np.copyto(padded[:, 1:-1, 1:-1], logit, where=above)
    pooled = padded[:, 1:-1, 1:-1].copy()
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di or dj:
                np.maximum(pooled, padded[:, 1 + di:1 + di + h, 1 + dj:1 + dj + w], out=pooled)
    cand = (above & (logit == pooled)) | (logit > _logit(config.split_threshold))
    b, i, j = np.nonzero(cand[:, cy0:cy1, cx0:cx1])
    i, j = i + cy0, j + cx0
    padded[:, 1:-1, 1:-1] = logit  # every logit now, -inf (p = 0) outside the array
    cross_l = np.stack([padded[b, i + 1 + di, j + 1 + dj] for di, dj in _CROSS], axis=1)
    lower = float(config.threshold) - PREFILTER_MARGIN
    if lower > 0:  # far below the threshold even with float32 rounding: no need to keep them
        near = np.nonzero(expit(cross_l).sum(axis=1) >= lower)[0]
        b, i, j, cross_l = b[near], i[near], j[near], cross_l[near]
    where = np.stack([frames_arr[b], i + y0, j + x0], axis=1).astype(np.int32).view(np.float32)
    return np.concatenate([cross_l, out[b, :, i, j], where], axis=1)


def _batch(out: Any) -> Any:
    """Network output ``(N, 10, H, W)`` (a tensor or an array) from itself or from ``(10, H, W)``; else a
    ValueError."""
    batch = out[None] if out.ndim == 3 else out
    if batch.ndim != 4 or batch.shape[1] != len(OUTPUT_CHANNELS):
        raise ValueError(
            f"network output must be (N, {len(OUTPUT_CHANNELS)}, H, W) or ({len(OUTPUT_CHANNELS)}, H, W),"
            f" got shape {tuple(out.shape)}"
        )
    return batch


def _layout(out: Any, frames: int | Sequence[int] | np.ndarray,
            core: tuple[slice, slice] | None) -> tuple[np.ndarray, tuple[int, int, int, int], bool]:
    """A batch's frame numbers, its core's bounds (y0, y1, x0, x1) and whether there is nothing to detect."""
    n, _, h, w = out.shape
    frames_arr = _frame_numbers(frames, n)
    cy0, cy1, cx0, cx1 = _core_bounds(core, h, w)
    return frames_arr, (cy0, cy1, cx0, cx1), n == 0 or cy1 <= cy0 or cx1 <= cx0


def _frame_numbers(frames: int | Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Each of ``n`` items' 0-based frame index (``frames``: a list, or an int ``t0`` for ``t0, t0+1, ...``)."""
    frames_arr = (
        np.arange(n, dtype=np.int64) + int(frames)
        if isinstance(frames, (int, np.integer))
        else np.asarray(frames, dtype=np.int64).reshape(-1)
    )
    if len(frames_arr) != n:
        raise ValueError(f"frames has {len(frames_arr)} entries for a batch of {n}")
    return frames_arr


def candidates_to_emitters(candidates: torch.Tensor | np.ndarray, *, config: PostprocessConfig,
                           frame_shape: tuple[int, int] | None = None) -> EmitterTable:
    """Steps 4-5 on the host: rows of :func:`detect_candidates` (a host tensor or array) -> emitters.
    ``frame_shape`` as in :func:`output_to_emitters`."""
    rows = candidates.numpy() if hasattr(candidates, "numpy") else np.asarray(candidates, np.float32)  # a tensor
    if rows.ndim != 2 or rows.shape[1] != CANDIDATE_WIDTH or rows.dtype != np.float32:
        raise ValueError(f"candidates must be float32 rows of {CANDIDATE_WIDTH}, got {rows.dtype} {rows.shape}")
    cross_l = rows[:, :_N_CROSS].astype(np.float64)
    values = rows[:, _N_CROSS:_N_CROSS + len(OUTPUT_CHANNELS)]
    where = np.ascontiguousarray(rows[:, _N_CROSS + len(OUTPUT_CHANNELS):]).view(np.int32)
    p = expit(cross_l)  # float64, elementwise: independent of where the pixel sits in the array
    prob = p[:, 0]
    for k in range(1, p.shape[1]):
        prob = prob + p[:, k]
    if config.clamp:
        prob = np.minimum(prob, 1.0)
    keep = prob >= config.threshold
    values, where, prob = values[keep], where[keep], prob[keep]

    columns = {
        "frame": where[:, 0].astype(np.int64),
        # integer part first, then the offset: the same float result whatever the tile origin
        "x": where[:, 2].astype(np.float64) + values[:, _DX].astype(np.float64),
        "y": where[:, 1].astype(np.float64) + values[:, _DY].astype(np.float64),
        "prob": prob,
    }
    columns.update({name: values[:, ch] for name, ch in _READ.items()})
    if frame_shape is not None:
        h_frame, w_frame = frame_shape
        x, y = columns["x"], columns["y"]
        inside = (x >= -0.5) & (x < w_frame - 0.5) & (y >= -0.5) & (y < h_frame - 0.5)
        columns = {c: v[inside] for c, v in columns.items()}
    return EmitterTable({c: columns[c] for c in _COLUMNS})
