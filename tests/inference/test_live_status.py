"""The state a followed run keeps for its refreshed report stays bounded however long the acquisition."""

from __future__ import annotations

import numpy as np
import pytest

from decode_mem.infer import live_status
from decode_mem.infer.live_status import Bins, LiveStatus, timeline_png
from decode_mem.io.table import EmitterTable


def table(frame0: int, frames: int, per_frame: int, rng: np.random.Generator, shift: float = 0.0) -> EmitterTable:
    frame = np.repeat(np.arange(frame0, frame0 + frames), per_frame)
    n = len(frame)
    base = rng.integers(0, 6, n) * 10.0 + 5.0  # a few fixed sites: structure to correlate
    return EmitterTable.from_arrays(frame=frame, x=base + shift * frame + rng.normal(0, 0.05, n),
                                    y=base[::-1] + rng.normal(0, 0.05, n), photons=np.full(n, 1000.0))


def test_bins_merge_when_full_and_keep_every_count():
    bins = Bins(width=4, n=8)
    for t0 in range(0, 400, 4):
        bins.add(t0, 4, np.full(4, 3))
    assert bins.width == 64 and bins.frames.sum() == 400 and bins.locs.sum() == 1200
    frames, per_frame = bins.series()
    assert frames[0] == 0 and np.allclose(per_frame, 3.0)


def test_status_memory_is_bounded_and_the_drift_so_far_follows_the_positions(monkeypatch):
    monkeypatch.setattr(live_status, "DRIFT_LOCS", 2000)
    rng = np.random.default_rng(0)
    status = LiveStatus((64, 64), pixel_size=100.0, block=10)
    for t0 in range(0, 2000, 10):
        status.add(table(t0, 10, 8, rng, shift=0.002), t0, 10)
        status.sample(seen=t0 + 20, lag_s=0.5)
    assert status.frames_done == 2000 and status.localizations == 16000
    kept = sum(p.shape[1] for p in status.positions)
    assert kept <= 2000 and status.stride >= 8  # every stride-th localization, stride doubled when full
    assert len(status.lag) <= 2 * live_status.BINS
    image = status.rendering.image()  # each localization a Gaussian of unit sum, all well inside the field
    assert status.rendering.n == 16000 and image.sum() == pytest.approx(16000, rel=1e-4)
    drift = status.drift_so_far()
    assert drift is not None
    span = drift.dxdy[-1, 0] - drift.dxdy[0, 0]  # 0.002 px/frame over 2000 frames: 4 px = 400 nm along x
    assert 300 < span < 500
    assert timeline_png(status).startswith(b"\x89PNG")
