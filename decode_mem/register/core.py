"""A registration of two colour channels from bead images: what ``python -m decode_mem.register`` makes and ``infer``
takes (``--registration``).

``register_beads`` opens every bead file (a split view: each file's two halves, ``io.channels``; two cameras: files
in pairs), checks them (halves of one size, the pairs' frames), finds and fits the beads of each channel
(``register.beads``), matches them (``register.match``), fits the map from channel 2's pixels to channel 1's
(``register.transform``: the kind with the smallest leave-one-out error) and, from z-stacks, the axial offset
between the channels' foci. The target registration error (TRE) is measured by leaving beads out: each bead is
predicted by the map fitted without it; that error also holds the beads' own localization noise (``bead_noise_nm``).
Where the beads do not cover the field (more than ``UNCOVERED_WARN`` of it outside their convex hull by more than
``HULL_MARGIN`` of its side) the map is extrapolated there: a warning says so.

The file is JSON (``Registration.save``/``load_registration``): the layout, the frames, the map's every number, the
axial offset, the beads and their leave-one-out residuals, the TRE and the warnings.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, StackError
from decode_mem.io.atomic import atomic_output
from decode_mem.io.channels import TWO_FILES, ChannelView, Region, layout_text, split_regions
from decode_mem.io.metadata import CameraRequest
from decode_mem.io.provenance import generated_by
from decode_mem.io.stack import open_stack
from decode_mem.register.beads import Beads, localize_beads
from decode_mem.register.match import match_beads
from decode_mem.register.transform import MIN_BEADS, Transform, choose_transform

FORMAT_VERSION = 1
UNCOVERED_WARN = 0.10  # share of the field outside the beads' convex hull from which a warning is given
HULL_MARGIN = 0.05  # of the field's longer side: closer than this outside the hull counts as covered
COVERAGE_GRID = 41  # points per side of the grid the coverage is measured on


@dataclass(frozen=True)
class Registration:
    """Channel 2 onto channel 1 (module docstring). ``layout``: a split-view preset, regions text or 'two-files';
    ``regions``: the halves (split view) in ``frame`` (H, W) px; ``shapes``: each channel's (H, W); ``pixel_size``:
    each channel's camera pixel (nm); ``transform``: channel-2 px -> channel-1 px; ``axial_offset``: nm to subtract
    from channel 2's z (None: not measured); ``beads``: matched positions and residuals; ``tre``: numbers (nm)."""

    layout: str
    shapes: tuple[tuple[int, int], tuple[int, int]]
    pixel_size: tuple[float, float]
    transform: Transform
    regions: tuple[Region, Region] | None = None
    frame: tuple[int, int] | None = None
    axial_offset: float | None = None
    beads: dict[str, Any] = field(default_factory=dict)
    tre: dict[str, Any] = field(default_factory=dict)
    coverage: dict[str, Any] = field(default_factory=dict)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def split(self) -> bool:
        return self.layout != TWO_FILES

    def to_channel1(self, x: np.ndarray, y: np.ndarray, z: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Channel-2 positions (px of its own frame; z nm) in channel 1's frame."""
        x1, y1 = self.transform(x, y)
        if z is not None and self.axial_offset is not None:
            z = np.asarray(z, np.float64) - self.axial_offset
        return x1, y1, z

    def as_dict(self) -> dict[str, Any]:
        return {"decode_mem_registration": FORMAT_VERSION,
                "what": "channel 2 mapped onto channel 1 (python -m decode_mem.register; infer --registration)",
                "layout": self.layout, "frame": None if self.frame is None else list(self.frame),
                "regions": None if self.regions is None else [r.to_list() for r in self.regions],
                "channel_shapes": [list(s) for s in self.shapes], "pixel_size_nm": list(self.pixel_size),
                "transform": self.transform.to_dict(), "axial_offset_nm": self.axial_offset,
                "tre_nm": self.tre, "coverage": self.coverage, "beads": self.beads, "candidates": self.candidates,
                "warnings": list(self.warnings), "sources": list(self.sources), "generated_by": generated_by()}

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(self.as_dict(), indent=1, default=_plain) + "\n")
        return path


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def load_registration(path: str | os.PathLike) -> Registration:
    """A registration file (``Registration.save``); a ConfigError naming the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such registration file (python -m decode_mem.register makes one)")
    try:
        d = json.loads(path.read_text())
        if not isinstance(d, dict) or "decode_mem_registration" not in d:
            raise ValueError("not a decode_mem registration")
        if int(d["decode_mem_registration"]) > FORMAT_VERSION:
            raise ValueError(f"version {d['decode_mem_registration']}; this decode_mem reads {FORMAT_VERSION}")
        regions = None if d.get("regions") is None else tuple(Region(*map(int, r)) for r in d["regions"])
        return Registration(
            layout=str(d["layout"]), shapes=tuple(tuple(int(v) for v in s) for s in d["channel_shapes"]),
            pixel_size=tuple(float(v) for v in d["pixel_size_nm"]), transform=Transform.from_dict(d["transform"]),
            regions=regions, frame=None if d.get("frame") is None else tuple(int(v) for v in d["frame"]),
            axial_offset=None if d.get("axial_offset_nm") is None else float(d["axial_offset_nm"]),
            beads=d.get("beads", {}), tre=d.get("tre_nm", {}), coverage=d.get("coverage", {}),
            candidates=d.get("candidates", []), warnings=tuple(d.get("warnings", ())),
            sources=tuple(d.get("sources", ())))
    except (ValueError, KeyError, TypeError, ConfigError) as e:
        raise ConfigError(f"{path}: not a readable registration file ({e})") from e


@dataclass(frozen=True)
class BeadPair:
    """The beads of one bead file (or pair of files): each channel's, and which are the same bead."""

    source: str
    beads1: Beads
    beads2: Beads
    i1: np.ndarray
    i2: np.ndarray
    mirror: tuple[float, float]


def _views(inputs: Sequence[str], split: str | None, z_step: float | None) -> list[tuple[str, Any, Any, Any]]:
    """(name, stack(s) to close, channel 1 view, channel 2 view) of every input, checked before any bead is fitted:
    readable, halves of one size (split view), files in pairs of one frame count (two cameras' z-stacks)."""
    if not inputs:
        raise ConfigError("give bead images: split-view files with --split, or channel 1 and channel 2 files in pairs")
    out = []
    if split is not None:
        for path in inputs:
            stack = open_stack(path)
            out.append((str(path), [stack], *(ChannelView(stack, r) for r in split_regions(split, stack.shape[1:],
                                                                                           where=str(path)))))
        return out
    if len(inputs) % 2:
        raise ConfigError(f"{len(inputs)} bead files without --split: give channel 1 and channel 2 files in pairs "
                          "(cam1.tif cam2.tif ...), or --split for split-view files")
    for a, b in zip(inputs[::2], inputs[1::2], strict=True):
        s1, s2 = open_stack(a), open_stack(b)
        if z_step is not None and s1.shape[0] != s2.shape[0]:
            raise ConfigError(f"{a} has {s1.shape[0]} frames, {b} {s2.shape[0]}: a pair of bead z-stacks images the "
                              "same planes")
        out.append((f"{a} + {b}", [s1, s2], s1, s2))
    return out


def register_beads(inputs: Sequence[str], *, split: str | None = None, camera: CameraRequest | None = None,
                   kind: str = "auto", z_step: float | None = None, z_start: float | None = None) -> Registration:
    """The registration of channel 2 onto channel 1 from bead files (module docstring). ``split``: a preset or
    regions (each input a split-view file); None: inputs in pairs (channel 1, channel 2). ``z_step`` (and
    ``z_start``, default: the middle frame at 0): the files are z-stacks, frame k at ``z_start + k·z_step`` nm."""
    request = camera or CameraRequest.from_value(None)
    if z_step is not None and not (math.isfinite(z_step) and z_step != 0):
        raise ConfigError(f"--z_step must be a non-zero number of nm, got {z_step}")
    with ExitStack() as closing:
        views = _views(inputs, split, z_step)
        for _, stacks, _, _ in views:
            for s in stacks:
                closing.callback(s.close)
        shapes = {(tuple(v1.shape[1:]), tuple(v2.shape[1:])) for _, _, v1, v2 in views}
        if len(shapes) > 1:
            raise ConfigError(f"the bead files' channel frames differ in size ({sorted(shapes)}): one registration "
                              "is for one camera region")
        (shape1, shape2), = shapes
        cams = []
        for _, stacks, _, _ in views:
            cams.append(tuple(request.resolve(s.metadata)[0] for s in stacks))
        pixel = (cams[0][0].pixel_size, cams[0][-1].pixel_size)
        pairs = []
        for (name, _, v1, v2), cam in zip(views, cams, strict=True):
            z = None
            if z_step is not None:
                t = v1.shape[0]
                start = -z_step * (t // 2) if z_start is None else z_start
                z = start + z_step * np.arange(t)
            b1 = localize_beads(v1, lambda f, c=cam[0]: c.to_photons(f), z)
            b2 = localize_beads(v2, lambda f, c=cam[-1]: c.to_photons(f), z)
            _check_found(name, b1, b2)
            i1, i2, mirror = match_beads(b1.xy, b2.xy)
            if len(i1) == 0:
                raise ConfigError(f"{name}: no bead of channel 1 ({len(b1)}) has a partner in channel 2 ({len(b2)}); "
                                  "are these the two channels of one bead slide?")
            pairs.append(BeadPair(name, b1, b2, i1, i2, mirror))
        frame = tuple(int(v) for v in views[0][1][0].shape[1:]) if split is not None else None
        regions = (views[0][2].region, views[0][3].region) if split is not None else None
    return _fit(pairs, split, (frame, regions), shape1, shape2, pixel, kind, z_step is not None)


def _check_found(name: str, b1: Beads, b2: Beads) -> None:
    if len(b1) == 0 and len(b2) == 0:
        raise ConfigError(f"{name}: no beads found in either channel (bright, isolated spots in most frames)")
    for k, (mine, other) in enumerate(((b1, b2), (b2, b1)), 1):
        if len(mine) == 0:
            raise ConfigError(f"{name}: beads in channel {3 - k} only ({len(other)}); channel {k} shows none: a "
                              "registration needs beads seen in both channels (broadband beads, e.g. TetraSpeck)")


def _fit(pairs: list[BeadPair], split: str | None, where: tuple[Any, Any], shape1: tuple[int, int],
         shape2: tuple[int, int], pixel: tuple[float, float], kind: str, three_d: bool) -> Registration:
    p1 = np.vstack([p.beads1.xy[p.i1] for p in pairs])
    p2 = np.vstack([p.beads2.xy[p.i2] for p in pairs])
    n = len(p1)
    if n < MIN_BEADS:
        raise ConfigError(f"too few beads: {n} matched in both channels ({', '.join(p.source for p in pairs)}); a "
                          f"registration needs at least {MIN_BEADS}, and some 20 or more spread over the field to "
                          "map a distortion (more bead images, or the stage moved between them)")
    centre = ((shape2[1] - 1) / 2.0, (shape2[0] - 1) / 2.0)
    transform, best, tried = choose_transform(p2, p1, centre, max(shape2) / 2.0, kind)
    px = pixel[0]
    loo = best.residuals * px
    err = np.hypot(loo[:, 0], loo[:, 1])
    sem = np.concatenate([np.hypot(p.beads1.sem[p.i1], p.beads2.sem[p.i2]) for p in pairs]) * px
    noise = float(np.sqrt(np.nanmean(sem**2))) if np.isfinite(sem).any() else None
    tre = {"leave_one_out_rms": float(np.sqrt((err**2).mean())), "leave_one_out_median": float(np.median(err)),
           "leave_one_out_p90": float(np.percentile(err, 90)), "leave_one_out_max": float(err.max()),
           "bead_noise": noise,
           "note": "each bead mapped by the map fitted without it (target registration error at the beads, with the "
                   "beads' own localization noise of both channels, bead_noise)"}
    warnings = []
    coverage = field_coverage(p1, shape1)
    if coverage["uncovered"] > UNCOVERED_WARN:
        warnings.append(f"the beads do not cover the field: {100 * coverage['uncovered']:.0f} % of channel 1's "
                        f"field lies outside their convex hull (up to {coverage['farthest_px'] * px / 1000:.1f} µm "
                        "from the nearest bead); the map is extrapolated there: add beads near the edges and corners")
    axial = None
    if three_d:
        f1 = np.concatenate([p.beads1.focus[p.i1] for p in pairs])
        f2 = np.concatenate([p.beads2.focus[p.i2] for p in pairs])
        d = (f1 - f2)[np.isfinite(f1 - f2)]
        if len(d) == 0:
            warnings.append("no bead has a focus inside the z-stack in both channels: the axial offset is not measured")
        else:
            if len(d) > 2:  # a bead whose focus is far from the others' (a fit gone astray) is left out
                mad = 1.4826 * np.median(np.abs(d - np.median(d)))
                d = d[np.abs(d - np.median(d)) <= max(4 * mad, 1.0)]
            axial = float(d.mean())
            tre["axial_offset_sem"] = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
            tre["axial_offset_beads"] = len(d)
    mirrors = {p.mirror for p in pairs}
    beads = {"matched": n, "channel1": int(sum(len(p.beads1) for p in pairs)),
             "channel2": int(sum(len(p.beads2) for p in pairs)),
             "mirror": [list(m) for m in mirrors],
             "channel1_px": p1.round(4).tolist(), "channel2_px": p2.round(4).tolist(),
             "leave_one_out_nm": loo.round(3).tolist(), "sem_nm": np.round(sem, 3).tolist()}
    frame, regions = where
    return Registration(layout=TWO_FILES if split is None else layout_text(split), shapes=(shape1, shape2),
                        pixel_size=pixel, transform=transform, regions=regions, frame=frame, axial_offset=axial,
                        beads=beads, tre=tre, coverage=coverage,
                        candidates=[{"map": c.name, "leave_one_out_rms_nm": round(c.rms * px, 4)} for c in tried],
                        warnings=tuple(warnings), sources=tuple(p.source for p in pairs))


def field_coverage(points: np.ndarray, shape: tuple[int, int]) -> dict[str, float]:
    """How the beads (channel-1 px) cover a field of ``shape``: the share of a grid over it farther than
    ``HULL_MARGIN`` of the field's longer side outside their convex hull (``uncovered``: there the map is
    extrapolated), and the grid's largest distance to the nearest bead (px)."""
    from scipy.spatial import ConvexHull, cKDTree

    h, w = shape
    gx, gy = np.meshgrid(np.linspace(0, w - 1, COVERAGE_GRID), np.linspace(0, h - 1, COVERAGE_GRID))
    grid = np.column_stack([gx.ravel(), gy.ravel()])
    try:
        eq = ConvexHull(points).equations  # n·p + b <= 0 inside; n unit: the largest is the distance outside
        outside = float(((grid @ eq[:, :2].T + eq[:, 2]).max(axis=1) > HULL_MARGIN * max(h, w)).mean())
    except Exception:  # fewer than 3 beads, or all on a line: no hull
        outside = 1.0
    farthest = float(cKDTree(points).query(grid)[0].max())
    return {"uncovered": round(outside, 4), "farthest_px": round(farthest, 3)}


def check_frame(reg: Registration, frame: tuple[int, int], where: str) -> tuple[Region, Region]:
    """The halves of a split-view movie with frames ``frame``, as the registration has them; a ConfigError when the
    movie is not the one the registration was made for."""
    if not reg.split or reg.regions is None:
        raise ConfigError(f"{where}: the registration is for two files (two cameras); give channel 1's and channel "
                          "2's movies")
    if reg.frame is not None and tuple(frame) != tuple(reg.frame):
        raise ConfigError(f"{where}: frames of {frame[0]} x {frame[1]} px, the registration's split view of "
                          f"{reg.frame[0]} x {reg.frame[1]} px: register beads recorded with the same camera region")
    return split_regions(reg.regions, frame, where=where)


def check_channel(reg: Registration, channel: int, shape: tuple[int, int], where: str) -> None:
    """A channel's frames as the registration has them (two cameras); a ConfigError otherwise."""
    want = reg.shapes[channel - 1]
    if tuple(shape) != tuple(want):
        raise StackError(f"{where}: channel {channel}'s frames are {shape[0]} x {shape[1]} px, the registration's "
                         f"{want[0]} x {want[1]} px")
