"""The linker's inner loops, compiled with numba: the pairs of a frame window (``window_pairs``), the greedy links
(``greedy_links``), the chains' molecule ids (``follow_chains``) and the molecules' running sums
(``molecule_sums``).

Each is a loop over rows or pairs that numpy can only express as whole-array passes (sort, gather, mask, bincount):
the numpy linker these replace spent ~60 % of its time finding candidates on three shifted grids and most of the
rest ordering and taking them. The greedy breaks ties in distance by row order, so a table linked in any chunking
gives the same links. Compiled with ``cache=True`` (the first call in a fresh install compiles, ~seconds; later
processes load the machine code) and ``nogil=True`` (``link_file``'s reading thread, which calls ``window_pairs``
for the crowding measure, and its writing thread run beside the linking thread).

numba is a core dependency. Where it cannot be imported (a machine it was not installed on, such as a lent GPU
machine that gets only the wheels it lacks, DESIGN §9) the same functions run as plain Python: the same links, about
55 x slower (an ad hoc check on 3 x 65,536 rows of bench_postprocess's stream table, a 2-core Xeon), with a warning
from the first link.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

_WHY = ""  # why numba could not be imported
try:
    from numba import njit as _njit
except ImportError as e:  # the plain-Python fallback (module docstring)
    _njit, _WHY = None, str(e)

COMPILED = _njit is not None


def _compiled(function: Callable) -> Callable:
    """numba's ``njit(cache=True, nogil=True)``, or the function itself without numba."""
    return _njit(cache=True, nogil=True)(function) if COMPILED else function


def _warn_if_plain() -> None:
    if not COMPILED:
        warnings.warn(f"numba could not be imported ({_WHY}): the linker runs as plain Python, about 55 times "
                      f"slower (pip install numba)", RuntimeWarning, stacklevel=4)


@_compiled
def _frame_starts(frame: np.ndarray) -> np.ndarray:
    """Where each frame's rows start in a frame-sorted column, and its length at the end."""
    n = len(frame)
    count = 1 if n else 0
    for i in range(1, n):
        if frame[i] != frame[i - 1]:
            count += 1
    starts = np.empty(count + 1, np.int64)
    k = 0
    for i in range(n):
        if i == 0 or frame[i] != frame[i - 1]:
            starts[k] = i
            k += 1
    starts[count] = n
    return starts


def window_pairs(x: np.ndarray, y: np.ndarray, frame: np.ndarray, radius: float, window: int,
                 first_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair ``(a, b)`` of rows (frame-sorted) with ``1 <= frame[b] - frame[a] <= window``, ``b >= first_b``
    and ``(x[a] - x[b])² + (y[a] - y[b])² <= radius²``, once each; a row with a NaN coordinate is in none.

    The rows are put in x order within each frame (numpy's argsort by x, then a stable counting sort by frame);
    for each pair of frames within the window the two x-sorted lists are walked together, so a row meets only the
    rows of the other frame in its strip ``x ± radius`` (the strip's edges decided on ``dx²`` as the distance is, so
    a pair exactly at the radius is in it)."""
    _warn_if_plain()
    return _window_pairs(x, y, frame, np.argsort(x), radius, window, first_b)


@_compiled
def _window_pairs(x: np.ndarray, y: np.ndarray, frame: np.ndarray, by_x: np.ndarray, radius: float, window: int,
                  first_b: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(x)
    starts = _frame_starts(frame)
    segment = np.empty(n, np.int64)
    for s in range(len(starts) - 1):
        segment[starts[s]:starts[s + 1]] = s
    at = starts[:-1].copy()
    order = np.empty(n, np.int64)
    xs = np.empty(n, np.float64)
    for i in by_x:  # x order (NaN last: never within a strip), stably into each frame's rows
        s = segment[i]
        order[at[s]] = i
        xs[at[s]] = x[i]
        at[s] += 1
    out_a = np.empty(2 * n, np.int64)
    out_b = np.empty(2 * n, np.int64)
    m = _walk(xs, order, y, frame, starts, radius, window, first_b, out_a, out_b)
    if m > len(out_a):  # more than 2 pairs a row: a second walk into arrays of the size counted
        out_a = np.empty(m, np.int64)
        out_b = np.empty(m, np.int64)
        _walk(xs, order, y, frame, starts, radius, window, first_b, out_a, out_b)
    return out_a[:m], out_b[:m]


@_compiled
def _walk(xs: np.ndarray, order: np.ndarray, y: np.ndarray, frame: np.ndarray, starts: np.ndarray, radius: float,
          window: int, first_b: int, out_a: np.ndarray, out_b: np.ndarray) -> int:
    """``window_pairs``' walk: the number of pairs, the first ``len(out_a)`` of them written there."""
    cap = len(out_a)
    m = 0
    r2 = radius * radius
    for s in range(len(starts) - 1):
        lo, hi = starts[s], starts[s + 1]
        if hi <= first_b:
            continue
        for t in range(s - 1, -1, -1):
            plo, phi = starts[t], starts[t + 1]
            if frame[lo] - frame[plo] > window:
                break
            i0 = plo  # the strip's first row in frame t: moves right as the rows of frame s do
            for k in range(lo, hi):
                b = order[k]
                xb = xs[k]
                if b < first_b or xb != xb:  # NaN
                    continue
                while i0 < phi and xs[i0] < xb and (xb - xs[i0]) * (xb - xs[i0]) > r2:
                    i0 += 1
                i = i0
                while i < phi:
                    dx = xs[i] - xb
                    if dx > 0 and dx * dx > r2:
                        break
                    a = order[i]
                    dy = y[a] - y[b]
                    if dx * dx + dy * dy <= r2:
                        if m < cap:
                            out_a[m] = a
                            out_b[m] = b
                        m += 1
                    i += 1
    return m


def greedy_links(x: np.ndarray, y: np.ndarray, frame: np.ndarray, sx: np.ndarray, sy: np.ndarray, first_b: int,
                 radius: float, reach: float, gate: float, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's predecessor and successor (-1: none): candidates within ``reach`` whose later row is at or
    after ``first_b``, kept where within ``radius`` or (``gate`` > 0) within ``gate`` combined σ, taken
    greedily: shortest frame gap first, then shortest distance (in combined σ with a gate; a pair without a usable
    σ: its distance in radii times the gate), each row linked to one predecessor and one successor at most."""
    a, b = window_pairs(x, y, frame, reach, window, first_b)
    return _greedy(x, y, frame, sx, sy, a, b, radius, gate, window)


@_compiled
def _greedy(x: np.ndarray, y: np.ndarray, frame: np.ndarray, sx: np.ndarray, sy: np.ndarray, a: np.ndarray,
            b: np.ndarray, radius: float, gate: float, window: int) -> tuple[np.ndarray, np.ndarray]:
    """``greedy_links`` over the pairs ``a``, ``b``. Per gap, a pair whose two ends are in no other pair of that
    gap is taken whatever the order (nothing competes for its ends); only the others are sorted."""
    n, m = len(x), len(a)
    lag = np.empty(m, np.int64)
    key = np.empty(m, np.float64)
    keep = np.zeros(m, np.bool_)
    r2, g2 = radius * radius, gate * gate
    for i in range(m):
        p, q = a[i], b[i]
        dx, dy = x[p] - x[q], y[p] - y[q]
        d2 = dx * dx + dy * dy
        lag[i] = frame[q] - frame[p]
        key[i] = d2
        keep[i] = d2 <= r2
        if gate > 0:
            vx = sx[p] * sx[p] + sx[q] * sx[q]
            vy = sy[p] * sy[p] + sy[q] * sy[q]
            if np.isfinite(vx) and np.isfinite(vy) and vx > 0 and vy > 0:
                key[i] = dx * dx / vx + dy * dy / vy
            else:
                key[i] = d2 / r2 * g2
            keep[i] = keep[i] or key[i] <= g2
    pred = np.full(n, -1, np.int64)
    succ = np.full(n, -1, np.int64)
    uses_a = np.zeros(n, np.int32)
    uses_b = np.zeros(n, np.int32)
    contested = np.empty(m, np.int64)
    for k in range(1, window + 1):  # every pair of gap k before those of gap k + 1
        for i in range(m):  # ends not linked at a shorter gap
            if keep[i] and lag[i] == k and succ[a[i]] < 0 and pred[b[i]] < 0:
                uses_a[a[i]] += 1
                uses_b[b[i]] += 1
        c = 0
        for i in range(m):
            if keep[i] and lag[i] == k and succ[a[i]] < 0 and pred[b[i]] < 0:
                if uses_a[a[i]] == 1 and uses_b[b[i]] == 1:
                    succ[a[i]] = b[i]
                    pred[b[i]] = a[i]
                else:
                    contested[c] = i
                    c += 1
        for i in range(m):
            uses_a[a[i]] = 0
            uses_b[b[i]] = 0
        # shortest first; ties by the later row, then the earlier: the rows' order is the whole table's in any
        # chunking, the order pairs are found in is not (the x sort is not stable)
        rows = np.argsort(b[contested[:c]] * n + a[contested[:c]])
        order = rows[np.argsort(key[contested[:c]][rows], kind="mergesort")]
        for j in order:
            p, q = a[contested[j]], b[contested[j]]
            if succ[p] < 0 and pred[q] < 0:
                succ[p] = q
                pred[q] = p
    return pred, succ


@_compiled
def follow_chains(pred: np.ndarray, group: np.ndarray, f1: np.ndarray, frame: np.ndarray, ws: np.ndarray,
                  p1: np.ndarray, n_tail: int, next_group: int) -> int:
    """For the rows from ``n_tail`` on (in place): the molecule id (the predecessor's, or a new one in row order
    from ``next_group``), the predecessor's frame ``f1`` (-1: none) and weighted σ ``p1`` (0: none). A row's
    predecessor is in an earlier frame, so earlier in the rows: one pass in row order. Returns the next free id."""
    for i in range(n_tail, len(pred)):
        p = pred[i]
        if p >= 0:
            group[i] = group[p]
            f1[i] = frame[p]
            for a in range(ws.shape[1]):
                p1[i, a] = ws[p, a]
        else:
            group[i] = next_group
            next_group += 1
            f1[i] = -1
            for a in range(ws.shape[1]):
                p1[i, a] = 0.0
    return next_group


@_compiled
def molecule_sums(inverse: np.ndarray, m: int, n_tail: int, pred: np.ndarray, frame: np.ndarray, f1: np.ndarray,
                  w: np.ndarray, x: np.ndarray, y: np.ndarray, z: np.ndarray, photons: np.ndarray, bg: np.ndarray,
                  prob: np.ndarray, ws: np.ndarray, p1: np.ndarray, rho: np.ndarray):
    """Per molecule ``inverse[j]`` of row ``n_tail + j``: its count, first and last frame, largest ``prob`` (NaN
    only where all are, as ``np.fmax`` and as the steps are merged; empty ``prob``: none), and the sums of ``w``,
    ``w·x``, ``w·y``, ``w·z``, photons, ``bg`` (``fsum``, rows in that order) and per σ axis (columns of ``ws``)
    ``B = Σ ws``, ``C = Σ ws²`` and the cross terms with the predecessor and its predecessor
    ``E = Σ ws (ρ₁' ws_pred + ρ₂' p1_pred)``, where ``ρ' = ρ(lag) - ρ_beyond`` and ``rho`` is the correlation by
    lag (``ErrorCorrelation.table``: a lag beyond its end takes the last, ``beyond``)."""
    k = ws.shape[1]
    count = np.zeros(m, np.int64)
    first = np.full(m, np.iinfo(np.int64).max, np.int64)
    last = np.full(m, np.iinfo(np.int64).min, np.int64)
    fsum = np.zeros((6, m), np.float64)
    best = np.full(m, np.nan, np.float64)
    b_sum = np.zeros((m, k), np.float64)
    c_sum = np.zeros((m, k), np.float64)
    e_sum = np.zeros((m, k), np.float64)
    top = len(rho) - 1
    beyond = rho[top]
    for j in range(len(inverse)):
        i = n_tail + j
        g = inverse[j]
        count[g] += 1
        f = frame[i]
        first[g] = min(first[g], f)
        last[g] = max(last[g], f)
        wi = w[i]
        fsum[0, g] += wi
        fsum[1, g] += wi * x[i]
        fsum[2, g] += wi * y[i]
        fsum[3, g] += wi * z[i]
        fsum[4, g] += photons[i]
        fsum[5, g] += bg[i]
        if len(prob):
            v = prob[i]
            if best[g] != best[g] or v > best[g]:  # as np.fmax: a NaN loses to any number
                best[g] = v
        p = pred[i]
        e1 = e2 = 0.0
        if p >= 0:
            e1 = rho[min(f - frame[p], top)] - beyond
            if f1[p] >= 0:
                e2 = rho[min(f - f1[p], top)] - beyond
        for a in range(k):
            v = ws[i, a]
            b_sum[g, a] += v
            c_sum[g, a] += v * v
            if p >= 0:
                e_sum[g, a] += v * (e1 * ws[p, a] + e2 * p1[p, a])
    return count, first, last, fsum, best, b_sum, c_sum, e_sum
