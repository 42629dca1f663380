"""The one way a stack is cut into blocks with temporal context (DECODE convention at the ends).

``edge_blocks`` yields ``(t0, frames)``: frames ``t0 - context .. t1 - 1 + context`` of the stack, the real
neighbouring frames wherever the stack has them and the edge frame repeated beyond its ends. ``Stack``,
in-memory arrays and frame ranges of a stack (split over dask workers) all block through it, so a frame
range whose bounds are multiples of the block length yields exactly the blocks of one pass over the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

Read = Callable[[int, int], np.ndarray]  # (lo, hi) -> frames lo..hi-1 as a (hi - lo, H, W) array


def edge_blocks(read: Read, n_frames: int, length: int, context: int = 1, *, start: int = 0,
                stop: int | None = None, chunk: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    """Blocks of ``length`` frames of ``start .. stop - 1`` of a stack of ``n_frames`` (``t0`` relative to ``start``).

    ``chunk`` > 1 (a zarr stack chunked along time): whole chunks are decoded once and the frames later blocks
    need are carried over, instead of decoding the chunks at block edges twice.
    """
    if length < 1 or context < 0:
        raise ValueError(f"blocks: need length >= 1 and context >= 0, got length={length}, context={context}")
    stop = n_frames if stop is None else stop
    if not 0 <= start <= stop <= n_frames:
        raise ValueError(f"blocks: frames {start}..{stop} outside a stack of {n_frames} frames")
    carry, c0 = None, 0  # chunked sources: frames c0.. already decoded and still needed
    for t0 in range(start, stop, length):
        t1 = min(t0 + length, stop)
        lo, hi = max(t0 - context, 0), min(t1 + context, n_frames)
        if chunk <= 1:  # memmap / one chunk per frame: read exactly lo..hi, one copy
            frames = read(lo, hi)
        else:
            have = c0 + (0 if carry is None else len(carry))
            if hi > have:
                new = read(have, min(n_frames, -(-hi // chunk) * chunk))
                old = new[:0] if carry is None else carry[lo - c0:]
                frames, rest = np.concatenate([old, new[: hi - have]]), new[hi - have:]
            else:
                frames, rest = carry[lo - c0: hi - c0], carry[hi - c0:]
            c0 = max(t1 - context, 0)  # where the next block starts
            carry = np.concatenate([frames[c0 - lo:], rest])  # a copy: the caller may modify `frames`
        yield t0 - start, pad_edges(frames, t0, t1, lo, hi, context)


def pad_edges(frames: np.ndarray, t0: int, t1: int, lo: int, hi: int, context: int) -> np.ndarray:
    """Frames ``lo .. hi - 1`` (read for the block ``t0 .. t1 - 1``) with the edge frame repeated where the
    stack has fewer than ``context`` frames before ``t0`` or after ``t1 - 1``; unchanged elsewhere."""
    pad_lo, pad_hi = context - (t0 - lo), context - (hi - t1)
    if pad_lo or pad_hi:  # only at the stack's own ends: repeat the edge frame
        frames = np.concatenate([frames[:1].repeat(pad_lo, 0), frames, frames[-1:].repeat(pad_hi, 0)])
    return frames
