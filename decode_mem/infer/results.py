"""What ``run_inference`` returns: one summary per stack, one failure per bad input, and the run's report.

Its own module so that the offline runner and ``infer --follow`` (``live``) both build them without importing
each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decode_mem.infer.outputs import summary_path


@dataclass(frozen=True)
class StackSummary:
    """One finished (or, with ``skipped``, previously finished) stack; ``as_dict()`` is its JSON summary."""

    stack: str
    stem: str
    frames: int
    localizations: int
    wall_s: float
    peak_rss_anon_mb: float | None
    outputs: tuple[str, ...]
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    computed: int | None = None  # frames computed by this run (a resumed stack's are fewer than ``frames``)

    @classmethod
    def finished_before(cls, stack: str | Path, summary: Path) -> StackSummary:
        """A stack an earlier run finished (``--resume`` skips it): what its ``<stem>.json`` says, so that the
        batch's report covers it too."""
        record = json.loads(summary.read_text())
        main = ("stack", "stem", "frames", "localizations", "wall_s", "frames_per_s", "peak_rss_anon_mb", "outputs")
        outputs = tuple(str(summary.parent / name) for name in record.get("outputs", ()) if name != summary.name)
        return cls(str(stack), summary.stem, int(record.get("frames", 0)), int(record.get("localizations", 0)),
                   float(record.get("wall_s", 0.0)), record.get("peak_rss_anon_mb"), (*outputs, str(summary)),
                   skipped=True, extra={k: v for k, v in record.items() if k not in main})

    @property
    def frames_per_s(self) -> float:
        """Frames computed per second of this run's wall time."""
        frames = self.frames if self.computed is None else self.computed
        return frames / self.wall_s if self.wall_s > 0 else float("nan")

    def line(self) -> str:
        if self.skipped:
            return f"{self.stem}: already done ({summary_path(Path(self.outputs[-1]).parent, self.stem)}), skipped"
        mem = "" if self.peak_rss_anon_mb is None else f", peak RssAnon {self.peak_rss_anon_mb:.0f} MB"
        return (f"{self.stem}: {self.frames} frames, {self.localizations} localizations, {self.wall_s:.1f} s "
                f"({self.frames_per_s:.1f} frames/s){mem}")

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "stem": self.stem, "frames": self.frames, "localizations": self.localizations,
                "wall_s": round(self.wall_s, 4), "frames_per_s": round(self.frames_per_s, 3),
                "peak_rss_anon_mb": self.peak_rss_anon_mb, "outputs": [Path(p).name for p in self.outputs],
                **self.extra}


@dataclass(frozen=True)
class StackFailure:
    """An input that produced no outputs: the file (or input pattern) and why."""

    stack: str
    reason: str

    def line(self) -> str:
        return self.reason if self.reason.startswith(self.stack) else f"{self.stack}: {self.reason}"


@dataclass(frozen=True)
class InferReport:
    """What ``run_inference`` did: one summary per finished or skipped stack, one failure per bad input."""

    stacks: tuple[StackSummary, ...]
    failures: tuple[StackFailure, ...]
    model: str
    wall_s: float
    worker_peak_rss_anon_mb: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def frames(self) -> int:
        """Frames computed by this run (a resumed stack's frames before its resume point not counted)."""
        return sum(s.frames if s.computed is None else s.computed for s in self.stacks if not s.skipped)
