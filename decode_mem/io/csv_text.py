"""CSV text of whole columns at once: the bytes ``np.savetxt`` writes, without Python work per row.

``csv_lines(columns, formats)`` yields exactly the text of ``np.savetxt(fh, np.column_stack(columns),
fmt=formats, delimiter=",")`` (for ``%d``, ``%.4f`` and ``%.6g``, the ThunderSTORM writer's formats), as
bytes, a few thousand rows at a time. Each block of rows is laid out in a byte matrix with one fixed-width
field per column (digits from a 4-digit lookup table, unused places a NUL filler), then the filler is
squeezed out; the blocks fit in the CPU's cache. Numbers are rounded as Python's ``%`` rounds them (the exact
decimal value, ties to even): ``rint(|v| * 10**k)``, and where that product rounded onto a tie, its exact
rounding error (Dekker's two-product) decides. Values out of the fast range (``|v| * 10**k >= 2**52``;
``%.6g`` outside ``[1e-4, 1e5)`` or 0) are formatted by Python's ``%`` itself and spliced in, so the text is
identical for every value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cache

import numpy as np

FORMATS = ("%d", "%.4f", "%.6g")
ROWS_PER_BLOCK = 16_384  # ~2.5 MB of byte matrix: stays in cache (64k-row blocks: 1.5x the CPU time per row)
_FILL = 0  # NUL never appears in the text
_P10 = 10 ** np.arange(19, dtype=np.int64)
# 1e-4 .. 1e5 as doubles: exact from 1 up; 1e-4 .. 0.1 round up, so ``a >= 1e-3`` is exactly a >= 10**-3
_DECADES = np.array([10.0**k for k in range(-4, 6)])
_SPLIT = 134_217_729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves
_SLACK = 3  # places left of the first field: a leading 4-digit group may reach 3 places to its left
_FAST_LIMIT = 2.0**52  # |v| * 10**decimals below this: rint and the int64 conversion are exact


@cache
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """4 ASCII digits of 0..9999 as little-endian uint32: '0042', leading zeros as fill '\\0\\042', and the
    latter with 0 all fill (the leading groups of a number)."""
    zeros = np.array([list(f"{i:04d}".encode()) for i in range(10_000)], np.uint8)
    lead = zeros.copy()
    for k in range(3):  # a leading zero at place k: every place before it is a zero too
        lead[:, k] = np.where((zeros[:, :k + 1] == ord("0")).all(axis=1), _FILL, lead[:, k])
    blank = lead.copy()
    blank[0] = _FILL
    return tuple(t.view("<u4").ravel() for t in (zeros, lead, blank))  # type: ignore[return-value]


def csv_lines(columns: Sequence[np.ndarray], formats: Sequence[str],
              rows_per_block: int = ROWS_PER_BLOCK) -> Iterator[bytes]:
    """The CSV lines of ``columns`` (equal length; ``%d`` columns integers) as bytes, block by block."""
    if len(columns) != len(formats) or not columns:
        raise ValueError(f"csv_lines: {len(columns)} columns for {len(formats)} formats")
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"csv_lines: formats {unknown} not supported; use {FORMATS}")
    n = len(columns[0])
    if any(len(c) != n for c in columns):
        raise ValueError("csv_lines: columns differ in length")
    for start in range(0, n, rows_per_block):
        yield _block([np.asarray(c)[start:start + rows_per_block] for c in columns], formats)


def _block(columns: list[np.ndarray], formats: Sequence[str]) -> bytes:
    n = len(columns[0])
    slow = np.zeros(n, bool)  # rows Python formats
    fields = [_Field(values, fmt, slow) for values, fmt in zip(columns, formats, strict=True)]
    offsets = np.cumsum([_SLACK] + [f.width for f in fields])
    matrix = np.empty((n, int(offsets[-1])), np.uint8)
    # right to left: a field's leading digit group may spill into its left neighbour, written afterwards
    for i in reversed(range(len(fields))):
        fields[i].lay_out(matrix, int(offsets[i]), ord("\n") if i == len(fields) - 1 else ord(","))
    matrix[:, :_SLACK] = _FILL
    if not slow.any():
        return matrix[matrix != _FILL].tobytes()
    rows = np.flatnonzero(slow)
    matrix[rows] = _FILL
    keep = matrix != _FILL
    ends = np.cumsum(keep.sum(axis=1))
    flat = matrix[keep].tobytes()
    line = ",".join(formats) + "\n"
    parts, done = [], 0
    for r in rows:
        parts += [flat[done:ends[r]], (line % tuple(c[r] for c in columns)).encode()]
        done = int(ends[r])
    parts.append(flat[done:])
    return b"".join(parts)


class _Field:
    """One column of a block as digits: sign, integer part, decimals; ``lay_out`` writes its bytes."""

    def __init__(self, values: np.ndarray, fmt: str, slow: np.ndarray) -> None:
        self.values, self.fmt = values, fmt
        self.special = None  # rows of nan / inf
        self.decimals = 0  # places after the point (for %.6g the most any row of the block needs)
        if fmt == "%d":
            if values.dtype.kind not in "iu":
                raise ValueError(f"csv_lines: '%d' needs an integer column, got {values.dtype}")
            ints = values.astype(np.int64, copy=False)
            self.neg, self.whole = ints < 0, np.abs(ints)
        else:
            v = values.astype(np.float64, copy=False)
            a = np.abs(v)
            self.neg = np.signbit(v)
            if fmt == "%.4f":
                self.decimals, scale = 4, 1e4
            else:  # %.6g: 6 significant digits, fixed notation for 1e-4 <= |v| < 1e5, trailing zeros dropped
                place = np.searchsorted(_DECADES, a, side="right")  # 10**(place - 5) <= a < 10**(place - 4)
                fast = (place >= 1) & (place < len(_DECADES))
                slow |= ~fast & np.isfinite(a)
                a = np.where(fast, a, np.where(np.isnan(a), a, np.inf))  # to Python: 0, huge and tiny
                row_decimals = np.where(fast, 10 - place, 0)  # 5 - exponent: 1..9
                self.decimals = int(row_decimals.max(initial=1))
                scale = _P10[row_decimals].astype(np.float64)
            s = a * scale
            out = ~(s < _FAST_LIMIT)  # nan, inf, huge
            if out.any():
                self.special = np.flatnonzero(~np.isfinite(v))
                slow |= out & np.isfinite(v)
                s = np.where(out, 0.0, s)
            q = _round(a, scale, s)
            if fmt == "%.4f":
                self.whole, self.frac = np.divmod(q, 10_000)
            else:
                self.whole, frac = np.divmod(q, _P10[row_decimals])
                self.frac = frac * _P10[self.decimals - row_decimals]  # the row's decimals, then zeros
        self.digits = len(str(int(self.whole.max(initial=0))))
        self.width = 1 + self.digits + (self.decimals + 1 if self.decimals else 0) + 1  # sign .. separator

    def lay_out(self, matrix: np.ndarray, off: int, sep: int) -> None:
        """Write the field at ``matrix[:, off:off + width]``; may overwrite the 3 places left of ``off``."""
        point = off + 1 + self.digits
        end = off + self.width - 1  # the separator's place
        if self.decimals:
            _digits(matrix, point + 1, end, self.frac, leading_zeros=True)
            if self.fmt == "%.6g":  # trailing zeros and a bare point are dropped
                places = matrix[:, point + 1:end]
                places[np.logical_and.accumulate(places[:, ::-1] == ord("0"), axis=1)[:, ::-1]] = _FILL
                matrix[:, point] = np.where(self.frac == 0, _FILL, ord("."))
            else:
                matrix[:, point] = ord(".")
        _digits(matrix, off + 1, point, self.whole, leading_zeros=False)
        matrix[:, off] = _FILL
        if self.neg.any():
            rows = np.flatnonzero(self.neg)
            n_digits = np.searchsorted(_P10[1:], self.whole[rows], side="right") + 1
            matrix[rows, point - 1 - n_digits] = ord("-")  # just before the first digit
        matrix[:, end] = sep
        if self.special is not None and len(self.special):
            _special(matrix, off, end, self.values[self.special], self.special)


def _round(a: np.ndarray, scale: np.ndarray | float, s: np.ndarray) -> np.ndarray:
    """``round(a * scale)`` of the exact product, ties to even (``s`` = the rounded product, < 2**52)."""
    below = np.floor(s)
    q = np.rint(s)
    near = np.flatnonzero(s - below == 0.5)  # a tie after rounding the product (none is crossed: k + 0.5 is a double)
    if len(near):  # the product's rounding error, exactly (Dekker): which side of the tie the true value is
        x, y = a[near], scale if np.ndim(scale) == 0 else scale[near]
        xh, yh = _high(x), _high(y)
        xl, yl = x - xh, y - yh
        error = ((xh * yh - s[near]) + xh * yl + xl * yh) + xl * yl
        low = below[near]  # the exact product is low + 0.5 + error
        q[near] = np.where(error > 0, low + 1, np.where(error < 0, low, low + (low % 2 == 1)))
    return q.astype(np.int64)


def _high(x: np.ndarray | float) -> np.ndarray:
    t = np.multiply(x, _SPLIT)
    return t - (t - x)


def _digits(matrix: np.ndarray, start: int, stop: int, values: np.ndarray, *, leading_zeros: bool) -> None:
    """``values`` (>= 0, at most ``stop - start`` digits) right-aligned in ``matrix[:, start:stop]``, with
    leading zeros or with fill in their place (0 itself as '0'). Groups of 4 from the right; the leading group
    may write up to 3 places left of ``start``: the caller writes those places afterwards."""
    zeros, lead, blank = _tables()
    groups = []
    rest = values
    for _ in range(-(-(stop - start) // 4) - 1):
        rest, low = np.divmod(rest, 10_000)
        groups.append(low)
    groups.append(rest)
    groups.reverse()  # most significant first
    above = None  # rows with a nonzero group further left
    for k, group in enumerate(groups):
        pos = stop - 4 * (len(groups) - k)
        if leading_zeros:
            packed = zeros[group]
        else:
            last = k == len(groups) - 1
            alone = lead[group] if last else blank[group]
            packed = alone if above is None else np.where(above, zeros[group], alone)
            if not last:
                above = group > 0 if above is None else above | (group > 0)
        matrix[:, pos:pos + 4].view("<u4")[:, 0] = packed


def _special(matrix: np.ndarray, off: int, end: int, values: np.ndarray, rows: np.ndarray) -> None:
    """``nan``, ``inf``, ``-inf`` as ``%`` writes them, right-aligned in their field."""
    matrix[rows, off:end] = _FILL
    text = np.where(np.isnan(values), np.uint32(int.from_bytes(b"nan\0", "little")),
                    np.uint32(int.from_bytes(b"inf\0", "little")))
    matrix[rows, end - 3:end] = text.view(np.uint8).reshape(-1, 4)[:, :3]
    matrix[rows[np.isneginf(values)], end - 4] = ord("-")
