"""What was wrong with a stack's frames and what was done about it: the record a run reports.

A frame is never dropped from the middle of a stack (frame numbers and the neighbouring frames' temporal context
must stay what they are in the file), so damaged pixels are *repaired*, not skipped:

- pixels that are NaN or infinite, or that the file does not hold (a zarr chunk that is missing, an unreadable
  frame file of a folder) are replaced by the median of the frame's good pixels: a flat patch at the frame's own
  level, about its background, where no spot is found and no NaN reaches the network or an output;
- a frame with no good pixel at all becomes a flat frame at the stack's *level*: the median of the good pixels
  of the first frame that has some (about the background), so that it yields no localizations and its
  neighbours' context holds no jump to 0;
- frames that are not in the file at all (a TIFF cut by a crash) end the stack after the last complete frame.

Repairs have a budget: a stack whose repaired frames are more than ``MAX_DAMAGED_SHARE`` (5 %) of its frames is
refused in one line saying how many are damaged (``check_budget``; ``open_stack(max_damage=...)`` and infer's
``--max_damage`` set another share), not localized as repaired frames: a movie much of which is flat patches is not
the user's data. What is known when a stack opens (chunks missing from a zarr store, frame files that cannot be read,
images an NDTiff index lacks) is checked then, before any frame is read; NaN frames as they are read. ``--follow``
repairs without a budget (its frames are localized as they arrive).

Every repair is one :class:`Damage` (frame, what, action) in a :class:`DamageLog`; a stack (``Stack.damage``) and a
followed stack keep one, the run writes it to ``<stem>.json`` (``as_json``) and says it in one line (``line``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from decode_mem.errors import StackError

JSON_RECORDS = 1000  # records listed in <stem>.json; the count covers all of them
LINE_FRAMES = 5  # frames named in the one-line warning
MAX_DAMAGED_SHARE = 0.05  # the share of a stack's frames repairs may cover (open_stack's max_damage default)


@dataclass(frozen=True)
class Damage:
    """One damaged frame (or, for a cut file, the first frame left out) and what was done about it."""

    frame: int
    what: str
    action: str
    repaired: bool = False  # the frame's pixels were replaced (True), or it is where a cut file ends (False)

    def text(self) -> str:
        return f"frame {self.frame}: {self.what}; {self.action}"


class DamageLog:
    """The damage seen so far, once per (frame, what) however often a frame is read; thread-safe."""

    def __init__(self, records: Iterable[Damage] = ()) -> None:
        self._records: dict[tuple[int, str], Damage] = {}
        self._lock = threading.Lock()
        self.extend(records)

    def add(self, damage: Damage) -> None:
        with self._lock:
            self._records.setdefault((damage.frame, damage.what), damage)

    def extend(self, records: Iterable[Damage]) -> None:
        for d in records:
            self.add(d)

    @property
    def records(self) -> tuple[Damage, ...]:
        """Every record, in frame order."""
        with self._lock:
            return tuple(sorted(self._records.values(), key=lambda d: (d.frame, d.what)))

    def __len__(self) -> int:
        return len(self._records)

    def __bool__(self) -> bool:
        return bool(self._records)

    def repaired_frames(self) -> int:
        """How many distinct frames were repaired (not counting where a cut file ends)."""
        with self._lock:
            return len({d.frame for d in self._records.values() if d.repaired})

    def line(self, where: str) -> str | None:
        """One warning line naming the damaged frames (the first ``LINE_FRAMES``), or None when there is none."""
        records = self.records
        if not records:
            return None
        shown = "; ".join(d.text() for d in records[:LINE_FRAMES])
        more = f"; and {len(records) - LINE_FRAMES} more (all in <stem>.json 'damage')" if len(records) > LINE_FRAMES \
            else ""
        return f"{where}: {len(records)} damaged frame record(s): {shown}{more}"

    def as_json(self) -> dict:
        """``{"count", "frames", "records": [{frame, what, action}, ...], "records_left_out"}`` for ``<stem>.json``."""
        records = self.records
        return {"count": len(records), "frames": sorted({d.frame for d in records}),
                "records": [asdict(d) for d in records[:JSON_RECORDS]],
                "records_left_out": max(0, len(records) - JSON_RECORDS)}


def repair_frames(frames: np.ndarray, numbers: range | list[int], log: DamageLog, level: Callable[[], float],
                  holes: dict[int, tuple[np.ndarray | None, str]] | None = None) -> np.ndarray:
    """Repair ``frames`` (``(n, h, w)``, stack frames ``numbers``) in place where pixels are not finite or are
    ``holes`` (index in ``frames`` -> (mask of the pixels missing or None for all, what was missing)); record each
    frame repaired in ``log``. ``level()``: the value of a frame with no good pixel. Returns ``frames``."""
    holes = holes or {}
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, which is what is looked for
        check = frames.dtype.kind == "f" and frames.size and not np.isfinite(
            frames.reshape(len(frames), -1).sum(axis=1, dtype=np.float64)).all()  # one sum per frame: the fast path
    if not check and not holes:
        return frames
    for i in range(len(frames)):
        frame = frames[i]
        bad = None
        whats = []
        if check and frame.dtype.kind == "f":
            finite = np.isfinite(frame)
            if not finite.all():
                bad = ~finite
                whats.append(f"{int(bad.sum())} of {frame.size} pixels NaN or infinite")
        if i in holes:
            mask, what = holes[i]
            mask = np.ones(frame.shape, bool) if mask is None else mask
            bad = mask if bad is None else bad | mask
            whats.append(what)
        if bad is None:
            continue
        good = frame[~bad]
        if good.size:
            value = float(np.median(good))
            action = f"replaced by the median of the frame's good pixels ({value:.6g})"
        else:
            value = float(level())
            action = f"a flat frame at the stack's level ({value:.6g}): no localizations"
        if frame.dtype.kind in "iu":
            info = np.iinfo(frame.dtype)
            value = float(np.clip(np.rint(value), info.min, info.max))
        frame[bad] = value
        log.add(Damage(int(numbers[i]), "; ".join(whats), action, repaired=True))
    return frames


def check_share(share: float | None) -> float:
    """``max_damage`` as given (None: ``MAX_DAMAGED_SHARE``), a share between 0 and 1; a StackError otherwise."""
    share = MAX_DAMAGED_SHARE if share is None else share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise StackError(f"max_damage must be a share of the frames between 0 and 1, got {share!r}")
    return float(share)


def check_budget(where: str, damaged: int, frames: int, share: float, what: str) -> None:
    """A StackError (one line) when ``damaged`` of a stack's ``frames`` are more than ``share`` of them: repairs
    that would cover that much of a movie are refused, not made. ``what``: what the damage is."""
    if frames and damaged > share * frames:
        raise StackError(f"{where}: {damaged} of its {frames} frames are damaged ({damaged / frames:.1%}: {what}); "
                         f"repairs may cover at most {share:.0%} of a stack's frames, so it is refused rather than "
                         f"localized as repaired frames (infer --max_damage, open_stack(max_damage=...), sets another "
                         "share)")


def finite_median(frame: np.ndarray, holes: np.ndarray | None = None) -> float | None:
    """The median of a frame's finite pixels outside ``holes`` (None: it has none)."""
    good = np.isfinite(frame) if frame.dtype.kind == "f" else np.ones(frame.shape, bool)
    if holes is not None:
        good &= ~holes
    return float(np.median(frame[good])) if good.any() else None
