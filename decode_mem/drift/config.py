"""DriftConfig: how localizations are cut into time segments, rendered and cross-correlated."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from decode_mem.config import check_choice
from decode_mem.errors import ConfigError

METHODS = ("loo", "rcc")
RCC_MAX_SEGMENTS = 40  # rcc correlates every pair of segments
MIN_SEGMENT_FRAMES = 20


@dataclass(frozen=True)
class DriftConfig:
    """Settings of the drift estimate (all lengths in nm).

    ``method``: ``'loo'`` (default) registers each time segment to the sum of all the *other* segments and
    iterates, so a segment's reference never contains its own localizations (AIM's reference includes them, which
    pulls every estimate towards zero); ``'rcc'`` is redundant cross-correlation (Wang et al. 2014): every pair
    of segments, shifts solved by least squares with outlier rejection (at most 40 segments).
    ``segments``: number of time segments (0: about one per ``locs_per_segment`` localizations, at least 4,
    at most ``max_segments`` — 40 for ``rcc``, whose pairs grow with the square — and at least 20 frames each).
    ``render_px``: pixel of the rendered segment images; ``blur``: Gaussian blur of the images (about the
    localization precision). ``max_image``: the largest image side in pixels; a bigger field of view is
    registered on its densest ``max_image``² window (stage drift moves the whole field). ``iterations``: leave-one-
    out passes after the coarse start.
    """

    method: str = "loo"
    segments: int = 0
    locs_per_segment: int = 500
    max_segments: int = 200
    render_px: float = 20.0
    blur: float = 15.0
    max_image: int = 1024
    iterations: int = 3

    def __post_init__(self) -> None:
        check_choice("drift.method", self.method, METHODS)
        if self.segments == 1 or self.segments < 0:
            raise ConfigError(f"drift: segments must be 0 (auto) or >= 2, got {self.segments}")
        for name in ("render_px", "blur"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"drift: {name} must be > 0 nm, got {getattr(self, name)}")
        if self.max_image < 64 or self.iterations < 1 or self.locs_per_segment < 1 or self.max_segments < 2:
            raise ConfigError("drift: max_image >= 64, iterations >= 1, locs_per_segment >= 1 and max_segments >= 2")

    def n_segments(self, n_locs: int, n_frames: int) -> int:
        """The number of time segments for ``n_locs`` localizations over ``n_frames`` frames."""
        if self.segments:
            return max(2, min(self.segments, n_frames))
        most = min(self.max_segments, RCC_MAX_SEGMENTS if self.method == "rcc" else self.max_segments,
                   n_frames // MIN_SEGMENT_FRAMES)
        return max(2, min(max(4, n_locs // self.locs_per_segment), most))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
