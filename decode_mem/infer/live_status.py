"""What a followed run knows while it goes, in bounded memory, and the ``report.html`` / ``<stem>.json`` it refreshes.

``LiveStatus`` keeps: the super-resolution image so far (at most 4/3 of ``MAX_RENDER_SIDE``² px, drawn block by
block as the batch report draws it from the written emitters, ``render.image.Rendering``), localizations per frame
over the frames (``BINS`` bins whose width doubles when they are full), the lag over time (``BINS`` samples, thinned the
same way), the frames done and the time of each (for the rate), and for the drift so far at most
``DRIFT_LOCS`` positions (every k-th localization, k doubling when full). None of it grows with the run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import StackError
from decode_mem.infer.batch_report import MAX_RENDER_SIDE
from decode_mem.io.table import EmitterTable

BINS = 256
DRIFT_LOCS = 1 << 20
RATE_WINDOW_S = 10.0


class Bins:
    """Sums over equal frame bins; at most ``n`` bins: when full, pairs merge and the width doubles."""

    def __init__(self, width: int, n: int = BINS) -> None:
        self.width, self.n = max(1, int(width)), n
        self.locs = np.zeros(n, np.int64)
        self.frames = np.zeros(n, np.int64)

    def add(self, frame0: int, frames: int, locs_per_frame: np.ndarray) -> None:
        """Frames ``frame0 .. frame0 + frames - 1`` with these localization counts (one per frame)."""
        while frame0 + frames > self.width * self.n:
            self.locs = np.concatenate([self.locs.reshape(-1, 2).sum(1), np.zeros(self.n // 2, np.int64)])
            self.frames = np.concatenate([self.frames.reshape(-1, 2).sum(1), np.zeros(self.n // 2, np.int64)])
            self.width *= 2
        idx = (frame0 + np.arange(frames)) // self.width
        np.add.at(self.frames, idx, 1)
        np.add.at(self.locs, idx, locs_per_frame)

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """(first frame of each filled bin, localizations per frame in it)."""
        filled = self.frames > 0
        return np.flatnonzero(filled) * self.width, self.locs[filled] / self.frames[filled]


class LiveStatus:
    """The state of a followed stack for the refreshed report; ``add`` after every block."""

    def __init__(self, frame_shape: tuple[int, int], pixel_size: float, block: int) -> None:
        from decode_mem.render.image import Rendering

        self.frame_shape, self.pixel_size = tuple(frame_shape), float(pixel_size)
        self.rendering = Rendering(shape_px=self.frame_shape, pixel_size=self.pixel_size, max_side=MAX_RENDER_SIDE)
        self.per_frame = Bins(block)
        self.lag: deque[tuple[float, int, int, float]] = deque()  # (elapsed s, done, frames behind, seconds behind)
        self.done: deque[tuple[float, int]] = deque()  # (time, frames done) over the last RATE_WINDOW_S
        self.frames_done = 0
        self.localizations = 0
        self.max_behind, self.max_behind_s = 0, 0.0  # the largest lag seen after any block
        self.positions: list[np.ndarray] = []  # (3, k) frame, x nm, y nm, every `stride`-th localization
        self.stride, self._kept, self._offset = 1, 0, 0
        self.t0, self.started_at = time.monotonic(), time.time()

    def add(self, table: EmitterTable, frame0: int, frames: int) -> None:
        self.rendering.add(table)
        counts = np.bincount(table["frame"] - frame0, minlength=frames)[:frames] if len(table) else np.zeros(frames)
        self.per_frame.add(frame0, frames, counts)
        self.frames_done = frame0 + frames
        self.localizations += len(table)
        self._keep_positions(table)

    def _keep_positions(self, table: EmitterTable) -> None:
        picked = np.arange((-self._offset) % self.stride, len(table), self.stride)
        self._offset = (self._offset + len(table)) % self.stride
        if len(picked):
            px = self.pixel_size
            self.positions.append(np.stack([table["frame"][picked].astype(np.float64),
                                            (table["x"][picked] + 0.5) * px, (table["y"][picked] + 0.5) * px]))
            self._kept += len(picked)
        if self._kept > DRIFT_LOCS:
            merged = np.concatenate(self.positions, axis=1)[:, ::2]
            self.positions, self._kept, self.stride = [merged], merged.shape[1], self.stride * 2

    def sample(self, seen: int, lag_s: float | None, waited_s: float = 0.0) -> None:
        """Record the lag now (``seen``: frames the writer completed; ``lag_s``: seconds since the writer
        completed the oldest frame not localized yet; ``waited_s``: seconds spent so far waiting for frames, left
        out of the rate: it is over the frames' own time, not the idle wait)."""
        now = time.monotonic()
        busy = now - waited_s
        self.lag.append((now - self.t0, self.frames_done, seen - self.frames_done,
                         float("nan") if lag_s is None else lag_s))
        self.max_behind = max(self.max_behind, seen - self.frames_done)
        self.max_behind_s = max(self.max_behind_s, lag_s or 0.0)
        if len(self.lag) > 2 * BINS:
            items = list(self.lag)
            self.lag = deque(items[: BINS: 2] + items[BINS:])
        self.done.append((busy, self.frames_done))
        while len(self.done) > 2 and self.done[1][0] < busy - RATE_WINDOW_S:
            self.done.popleft()

    def done_rate(self) -> float | None:
        """Frames per second localized over the last ``RATE_WINDOW_S`` seconds."""
        if len(self.done) < 2:
            return None
        (t0, n0), (t1, n1) = self.done[0], self.done[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else None

    def drift_so_far(self) -> Any:
        """The drift estimate from the positions kept (``decode_mem.drift``), or None while too few."""
        from decode_mem.drift.estimate import estimate_drift

        if not self.positions:
            return None
        frame, x, y = np.concatenate(self.positions, axis=1)
        try:
            return estimate_drift(frame.astype(np.int64), x, y, n_frames=self.frames_done)
        except (StackError, ValueError):
            return None


def timeline_png(status: LiveStatus) -> bytes:
    """Localizations per frame over the frames, and the lag behind the writer over the run's time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from decode_mem.report.figures import png_bytes

    fig = Figure(figsize=(9, 5), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1)
    frames, per_frame = status.per_frame.series()
    top.plot(frames, per_frame, drawstyle="steps-post", color="#0b6e99")
    top.set_xlabel("frame")
    top.set_ylabel("localizations / frame")
    if status.lag:
        t, _, behind, seconds = np.array(list(status.lag)).T
        frames_line, = bottom.plot(t, behind, color="#b00020", label="frames behind the camera (left axis)")
        bottom.set_ylabel("frames behind")
        twin = bottom.twinx()
        seconds_line, = twin.plot(t, seconds, color="#6e6e73", linestyle="--",
                                  label="seconds behind the camera (right axis)")
        twin.set_ylabel("seconds behind")
        # one legend for the two axes' lines, above the plot (inside, it hid the lag's start: its largest value)
        bottom.legend(handles=[frames_line, seconds_line], loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2,
                      fontsize="small", frameon=False, borderaxespad=0.2)
    bottom.set_xlabel("run time (s)")
    return png_bytes(fig)


def write_live_report(out: Path, stem: str, status: LiveStatus, rows: Sequence[tuple[str, str]],
                      widefield: np.ndarray | None, widefield_frames: int, drift: Any, warnings: Sequence[str],
                      memory: Mapping[str, np.ndarray] | None, command: str | None, files: Sequence[Path]) -> Path:
    """``out/report.html`` of a followed stack: the rows, the images and ``drift`` (a ``DriftCurve`` or None) so
    far, the timeline, memory, warnings and ``files``."""
    from decode_mem.report import Images, ReportData, write_report

    images = None
    drawn = status.localizations > 0
    if widefield is not None or drawn:
        superres = status.rendering.image() if drawn else None  # chooses the render pixel if it still waits
        images = Images(status.pixel_size, widefield, superres, status.rendering.render_pixel,
                        widefield_frames or None, status.rendering.n, zoom="auto")
    data = ReportData(title=f"decode_mem infer --follow: {stem}", summary=rows, images=images, drift=drift,
                      memory=memory, warnings=list(warnings), files=[(stem, p) for p in files], command=command,
                      figures=[("Localizations per frame and lag", timeline_png(status))])
    return write_report(out / "report.html", data)
