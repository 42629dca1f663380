"""After localization: linking and precision/resolution without ground truth, checked against the truth.

    python benchmarks/bench_postprocess.py      # writes benchmarks/results/postprocess.md + .png + .json

Movies are simulated (64 x 64 px, reference EMCCD; uniform blinking emitters at several densities, photon counts and
on-times, and rings / filaments of repeatedly blinking sites) and localized by the shipped model
(``data/models/default_2d.pt``). A true blinking event is one emitter's run of consecutive frames in the ground
truth (the simulator places every emitter or binding site at its own continuous position, so the ground truth's
(x, y) names it; a site's blinks are split at dark frames). For each movie:

* the correlation of the errors (prediction - truth, matched per frame) of one event's localizations, lag 1, 2 and
  >= 3 frames (pooled over x and y);
* the true per-axis RMSE of all matched localizations (and the robust σ, 1.4826 x MAD) beside what
  ``evaluate --no_truth`` states: the RMS of the predicted σ, NeNA of linked molecules corrected for the
  correlation, NeNA as Picasso computes it (ours, and Picasso's own ``postprocess.nena`` on the same HDF5);
* linking (``decode_mem.link``, radius 'auto', max_dark 1): the multi-frame events whose matched localizations all
  land in one molecule (recovered), the events whose molecule also holds another event's localizations (merged),
  and each single-event molecule's error against its true position beside its stated precision, with the
  correlation model and with independent errors (1/sqrt(n)); Picasso's ``link`` on the same HDF5 at its defaults
  and at our radius and max_dark (molecules, seconds, peak RssAnon); linking counted on the resolvable events only
  (no other emitter on within the PSF's Sparrow limit, 2 PSF σ, in the frames a link reaches: closer, two emitters
  on together are one spot, and no linker keeps their blinks apart);
* for rings and filaments: FRC resolution of the halves split by molecule beside references computed the same
  way: the true positions of the emitters the localizer found, moved by its true errors a blink at a time (each
  event's error sequence given whole to another event as long: the within-blink correlation kept) or not moved
  (halves by true site, beside the matched localizations split so: finer data means halves that share structure),
  the ground truth's localizations blurred with the corrected NeNA, the stated precision, the RMS predicted σ
  or the true RMSE, or with each localization's own predicted σ times the σ check (a Gaussian per localization),
  or moved by the true errors resampled or by the no-truth error model (a predicted σ times a normalized linked
  difference, both drawn from the table; halves split by event), and the matched localizations themselves split
  by molecule and by true site.

Then a table of ``--rows`` simulated localizations (blinking emitters over a 512 x 512 px field, written to parquet
in chunks) is linked by ``python -m decode_mem.link`` in a child process: wall and CPU time, rows/s, RssAnon over
time and its peak (sampled from /proc), and by ``Linker.feed`` alone in this process; its report is
``postprocess_stream.md`` (``--cases 0 --rows N`` measures only that, ``--rows 0`` only the movies). Every number
in the reports comes from the run that wrote them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from command_line import command_line
from machine import commit, load_average, machine_line
from picasso_runner import find_picasso_python, picasso_version

from decode_mem.evaluate.no_truth import JUMP, QUALITY_FACTOR
from decode_mem.link.crowding import EVERY, LAG
from decode_mem.link.files import AUTO_FACTOR, AUTO_REACH, AUTO_SIGMA_GATE

AUTO_FACTOR_TEXT = f"{AUTO_FACTOR:g}"
AUTO_TEXT = (f"radius {AUTO_FACTOR:g} x the median predicted σ; beyond it pairs within {AUTO_SIGMA_GATE:g} combined "
             f"σ, up to {AUTO_REACH:g} radii")
QUALITY_FACTOR_TEXT = f"{QUALITY_FACTOR:g}"

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FRAMES = 1000
CASES = (  # name, SimulationConfig settings
    ("0.3/µm², 5000 ph, on 3", {"density": 0.3, "on_time": 3.0}),
    ("1/µm², 5000 ph, on 3", {"density": 1.0, "on_time": 3.0}),
    ("0.3/µm², 1500 ph, on 3", {"density": 0.3, "on_time": 3.0, "photons_mean": 1500.0, "photons_std": 500.0}),
    ("0.3/µm², 5000 ph, on 1.5", {"density": 0.3, "on_time": 1.5}),
    ("0.3/µm², 5000 ph, on 6", {"density": 0.3, "on_time": 6.0}),
    ("rings", {"on_time": 3.0, "structure": {"kind": "rings", "off_time": 100.0, "density": 2.0}}),
    ("filaments", {"on_time": 3.0, "structure": {"kind": "filaments", "off_time": 100.0, "density": 0.4}}),
    # held out: not looked at when the radius factors were chosen (the 7 above were); seen when linking's sigma
    # gate and reach were chosen
    ("held out: 0.5/µm², 3000 ph, on 4", {"density": 0.5, "on_time": 4.0, "photons_mean": 3000.0,
                                          "photons_std": 1000.0}),
    ("held out: 0.2/µm², 8000 ph, on 2", {"density": 0.2, "on_time": 2.0, "photons_mean": 8000.0,
                                          "photons_std": 2000.0}),
    ("held out: rings", {"on_time": 3.0, "structure": {"kind": "rings", "off_time": 100.0, "density": 2.0}}),
    # new: simulated after the linking's sigma gate and reach were chosen (the 10 above had been seen by then)
    ("new: 0.7/µm², 4000 ph, on 2.5", {"density": 0.7, "on_time": 2.5, "photons_mean": 4000.0,
                                       "photons_std": 1300.0}),
    ("new: 0.4/µm², 2000 ph, on 5", {"density": 0.4, "on_time": 5.0, "photons_mean": 2000.0,
                                     "photons_std": 700.0}),
    ("new: rings, on 2", {"on_time": 2.0, "structure": {"kind": "rings", "off_time": 80.0, "density": 2.0}}),
    # new: added after the dense filaments above were found to hold no resolvable event (every emitter has another
    # on within the Sparrow limit): a dSTORM-like duty cycle (0.12 %) where about half the blinks are resolvable
    ("new: filaments, off 2400", {"on_time": 3.0, "structure": {"kind": "filaments", "off_time": 2400.0,
                                                                "density": 0.4}}),
    # new after the σ scale's jump rule (decode_mem.evaluate.no_truth.JUMP), which was chosen on the 14 above
    ("new after the jump rule: rings, on 4", {"on_time": 4.0, "structure": {"kind": "rings", "off_time": 150.0,
                                                                            "density": 1.5}}),
    ("new after the jump rule: 0.6/µm², 2500 ph, on 3.5", {"density": 0.6, "on_time": 3.5, "photons_mean": 2500.0,
                                                           "photons_std": 800.0}),
)
PICASSO_SCRIPT = r"""
import json, sys, time
import numpy as np
from picasso import io, postprocess
path, r_matched, dark_matched = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
locs, info = io.load_locs(path)
out = {}
result, s = postprocess.nena(locs.copy(), info)
out["nena_px"] = float(s)
for name, r, dark in (("default", 0.05, 3), ("matched", r_matched, dark_matched)):
    times = []
    for _ in range(2):  # the first call compiles Picasso's numba functions
        t = time.perf_counter()
        linked = postprocess.link(locs.copy(), info, r_max=r, max_dark_time=dark)
        times.append(time.perf_counter() - t)
    out[name] = {"molecules": int(len(linked)), "first_s": times[0], "warm_s": times[1]}
print(json.dumps(out))
"""


def simulate(name: str, settings: dict[str, Any], work: Path, seed: int, model: str | None = None) -> dict[str, Any]:
    """Simulate, localize with ``model`` (None: the shipped small one) as parquet + Picasso HDF5; the paths and the
    pixel size."""
    from decode_mem.infer import InferConfig, run_inference
    from decode_mem.infer.console import ConsoleObserver
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.stack import simulate_stack

    stem = f"m{seed}"
    cfg = SimulationConfig(frame_size=(64, 64), **settings)
    simulate_stack(cfg, FRAMES, work / f"{stem}.tif", work / f"{stem}_gt.csv", seed=seed)
    t0 = time.perf_counter()
    run_inference(InferConfig(inputs=(str(work / f"{stem}.tif"),), out=str(work / "loc"),
                              formats=("parquet", "picasso"), report=False, model=model, device="cpu"),
                  ConsoleObserver(quiet=True))
    print(f"  {name}: simulated and localized in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return {"parquet": work / "loc" / f"{stem}.parquet", "hdf5": work / "loc" / f"{stem}.hdf5",
            "gt": work / f"{stem}_gt.csv", "pixel_size": cfg.camera.pixel_size, "shape": cfg.frame_size,
            "psf_sigma_nm": float(max(cfg.psf_sigma)) * cfg.camera.pixel_size}


def true_events(gt: Any) -> np.ndarray:
    """An id per ground-truth row: one emitter (its exact position) in one run of consecutive frames."""
    key = np.round(gt["x"].astype(np.float64) * 1e5).astype(np.int64) * (1 << 31) + \
        np.round(gt["y"].astype(np.float64) * 1e5).astype(np.int64)
    order = np.lexsort((gt["frame"], key))
    k, f = key[order], gt["frame"][order]
    new = np.ones(len(k), bool)
    new[1:] = (k[1:] != k[:-1]) | (f[1:] != f[:-1] + 1)
    ev = np.empty(len(k), np.int64)
    ev[order] = np.cumsum(new) - 1
    return ev


def true_sites(gt: Any) -> np.ndarray:
    """An id per ground-truth row: its emitter (binding site), all its blinks together."""
    key = np.round(gt["x"].astype(np.float64) * 1e5).astype(np.int64) * (1 << 31) + \
        np.round(gt["y"].astype(np.float64) * 1e5).astype(np.int64)
    return np.unique(key, return_inverse=True)[1].ravel()


def link_outcome(group: np.ndarray, matches: Any, events: np.ndarray, sites: np.ndarray,
                 among: np.ndarray | None = None) -> dict[str, float]:
    """Of the multi-frame events (>= 2 matched localizations; ``among``: only those marked True in this per-event
    mask, the molecules still made of every match): recovered (all in one molecule), merged (their molecule holds
    another event's localizations) and merged with another emitter (another site's)."""
    ne = int(events.max()) + 1
    ev = events[matches.gt_index]
    g = group[matches.pred_index]
    pairs = np.unique(np.stack([ev, g], 1), axis=0)
    site_of = np.zeros(ne, np.int64)
    site_of[events] = sites
    groups_per_event = np.bincount(pairs[:, 0], minlength=ne)
    events_per_group = np.bincount(pairs[:, 1], minlength=group.max() + 1)
    site_pairs = np.unique(np.stack([site_of[pairs[:, 0]], pairs[:, 1]], 1), axis=0)
    sites_per_group = np.bincount(site_pairs[:, 1], minlength=group.max() + 1)
    multi = np.bincount(ev, minlength=ne) >= 2
    if among is not None:
        multi &= among
    if not multi.any():
        return {"multi-frame events": 0, "recovered": None, "merged": None, "merged with another emitter": None}
    merged = np.zeros(ne, bool)
    np.logical_or.at(merged, pairs[:, 0], events_per_group[pairs[:, 1]] > 1)
    other = np.zeros(ne, bool)
    np.logical_or.at(other, pairs[:, 0], sites_per_group[pairs[:, 1]] > 1)
    return {"multi-frame events": int(multi.sum()), "recovered": float(np.mean(groups_per_event[multi] == 1)),
            "merged": float(np.mean(merged[multi])), "merged with another emitter": float(np.mean(other[multi]))}


def event_spans(events: np.ndarray, frame: np.ndarray, x: np.ndarray, y: np.ndarray,
                sites: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per event (ground truth): its first and last frame, its position (``x``, ``y``: nm, per row) and its site."""
    ne = int(events.max()) + 1
    first = np.full(ne, np.iinfo(np.int64).max)
    np.minimum.at(first, events, frame)
    last = np.full(ne, -1)
    np.maximum.at(last, events, frame)
    ex, ey, site_of = np.zeros(ne), np.zeros(ne), np.zeros(ne, np.int64)
    ex[events], ey[events], site_of[events] = x, y, sites
    return first, last, ex, ey, site_of


def mark_other_site_near(hit: np.ndarray, tree: Any, gap: float, radius_nm: float, which: np.ndarray,
                         spans: tuple[np.ndarray, ...], frames: np.ndarray, sites: np.ndarray) -> None:
    """Set ``hit`` for the events ``which`` that have a row of another site within ``radius_nm`` of their position
    in ``frames`` (one frame per event; ``tree``: the rows' (x, y, frame x ``gap``), nm)."""
    _, _, ex, ey, site_of = spans
    q = np.column_stack([ex[which], ey[which], frames[which] * gap])
    for i, near in zip(which, tree.query_ball_point(q, radius_nm), strict=True):
        if near and np.any(sites[near] != site_of[i]):
            hit[i] = True


def neighbour_floor(gt: Any, events: np.ndarray, sites: np.ndarray, matches: Any, radius_nm: float,
                    px: float) -> float:
    """Of the multi-frame events: the fraction where another emitter is on (ground truth) within ``radius_nm`` of
    the event's true position in one of the two frames before it starts or after it ends — links that a linker
    with this radius and max_dark 1 cannot tell from the event's own, whatever its rule."""
    from scipy.spatial import cKDTree

    f = gt["frame"].astype(np.int64)
    spans = event_spans(events, f, gt["x"] * px, gt["y"] * px, sites)
    first, last = spans[0], spans[1]
    multi = np.nonzero(np.bincount(events[matches.gt_index], minlength=len(first)) >= 2)[0]
    gap = 10.0 * radius_nm  # frames apart in the tree's third axis: farther than any radius
    tree = cKDTree(np.column_stack([gt["x"] * px, gt["y"] * px, f * gap]))
    hit = np.zeros(len(first), bool)
    for frames in (first - 1, first - 2, last + 1, last + 2):
        mark_other_site_near(hit, tree, gap, radius_nm, multi, spans, frames, sites)
    return float(np.mean(hit[multi]))


def resolvable_events(gt: Any, events: np.ndarray, sites: np.ndarray, limit_nm: float, px: float,
                      reach: int = 2) -> np.ndarray:
    """Per event: True where no other emitter is on (ground truth) within ``limit_nm`` of the event's site in any
    of its own frames or the ``reach`` frames before and after it (the frames a link with max_dark 1 joins).

    ``limit_nm``: the PSF's Sparrow limit, 2 σ of a Gaussian PSF: two emitters on together closer than it make one
    spot with one maximum, so the localizer returns one position for the two (a blend), and a linker can only pass
    that on: such an event is not one a linker can keep apart from its neighbour."""
    from scipy.spatial import cKDTree

    f = np.asarray(gt["frame"], np.int64)
    x, y = np.asarray(gt["x"], np.float64) * px, np.asarray(gt["y"], np.float64) * px
    spans = event_spans(events, f, x, y, sites)
    first, last = spans[0], spans[1]
    gap = 10.0 * limit_nm  # frames apart in the tree's third axis: farther than the limit
    tree = cKDTree(np.column_stack([x, y, f * gap]))
    blocked = np.zeros(len(first), bool)
    # in the event's own frames: every row finds itself (one row per site and frame), so more than one is another
    own = tree.query_ball_point(np.column_stack([x, y, f * gap]), limit_nm, return_length=True)
    np.logical_or.at(blocked, events, own > 1)
    seen = np.unique(events)
    for shift in range(1, reach + 1):  # the frames around it: another site (its own site may be on again there)
        for frames in (first - shift, last + shift):
            mark_other_site_near(blocked, tree, gap, limit_nm, seen, spans, frames, sites)
    return ~blocked


def well_placed(matches: Any, placed_nm: float) -> Any:
    """The matches whose localization is within ``placed_nm`` of its ground-truth position (a localization of the
    emitter itself, not a blend of two emitters on together or a gross error): ``link_outcome`` of the events
    counted by these localizations alone says what linking does with the localizer's own positions."""
    keep = np.hypot(matches.dx, matches.dy) <= placed_nm
    return dataclasses.replace(matches, pred_index=matches.pred_index[keep], gt_index=matches.gt_index[keep],
                               dx=matches.dx[keep], dy=matches.dy[keep], dz=matches.dz[keep])


def wrong_links(group: np.ndarray, pred: Any, matches: Any, sites: np.ndarray, gt: Any, radius_nm: float,
                px: float, events: np.ndarray, placed_nm: float) -> dict[str, Any]:
    """The links between two matched localizations of different sites (a molecule's consecutive localizations,
    in frame order): how many, how far apart their two sites truly are, and whether the two sites were on in one
    frame (the frame of either localization): two emitters on together closer than the PSF are seen as one spot,
    and no rule on positions tells them apart."""
    site = np.full(len(pred), -1, np.int64)
    site[matches.pred_index] = sites[matches.gt_index]
    frame = np.asarray(pred["frame"], np.int64)
    order = np.lexsort((frame, group))
    i, j = order[:-1], order[1:]
    link = (group[i] == group[j]) & (site[i] >= 0) & (site[j] >= 0)
    i, j = i[link], j[link]
    wrong = site[i] != site[j]
    i, j = i[wrong], j[wrong]
    # both ends well placed: each within placed_nm of its own site (not a blend of two overlapping emitters)
    own = np.zeros(len(pred), bool)
    own[well_placed(matches, placed_nm).pred_index] = True
    placed = own[i] & own[j]
    ev = events[matches.gt_index]
    multi = np.bincount(ev, minlength=int(events.max()) + 1) >= 2
    hit = np.zeros(len(multi), bool)
    hit[ev[np.isin(group[matches.pred_index], group[i[placed]])]] = True
    n_sites = int(sites.max()) + 1
    sx, sy = np.zeros(n_sites), np.zeros(n_sites)
    sx[sites], sy[sites] = gt["x"] * px, gt["y"] * px
    dist = np.hypot(sx[site[i]] - sx[site[j]], sy[site[i]] - sy[site[j]])
    span = int(max(frame.max(), gt["frame"].max())) + 1
    on = np.unique(sites * span + np.asarray(gt["frame"], np.int64))  # (site, frame) pairs that are on
    together = np.isin(site[j] * span + frame[i], on) | np.isin(site[i] * span + frame[j], on)
    return {"links": int(link.sum()), "wrong": int(wrong.sum()),
            "wrong per 1000": float(1000 * wrong.sum() / max(link.sum(), 1)),
            "median site distance nm": float(np.median(dist)) if len(dist) else None,
            "site distance beyond radius": float(np.mean(dist > radius_nm)) if len(dist) else None,
            "sites on together": float(np.mean(together)) if len(dist) else None,
            "well placed": float(np.mean(placed)) if len(dist) else None,
            "events merged by a well-placed link": float(np.mean(hit[multi])), "placed nm": placed_nm}


SCAN_FACTORS = (4.0, 6.0, 8.0, 10.0, 12.0)  # radius scan: these many times the median predicted σ
FINER = 0.15  # data finer than the errorless truth by more than this: halves that share structure
MIN_RESOLVABLE = 200  # resolvable multi-frame events a movie needs before its linking goals are judged on them
SPARROW = 2.0  # a Gaussian PSF's Sparrow limit in PSF σ: two equal spots closer than this show one maximum
WELL_PLACED = 8.0  # a localization within this many median σ of its matched site is well placed (not a blend)
CROWDING_LAGS = (1, 2, 5, 10, 20, 50, 100, 200)  # frames: the chance-neighbour rate by lag, every frame a reference


def correlations(event: np.ndarray, frame: np.ndarray, dx: np.ndarray, dy: np.ndarray) -> dict[str, float]:
    """Pooled correlation of the errors of one event's localizations ``lag`` frames apart (x and y together)."""
    order = np.lexsort((frame, event))
    e, f, ex, ey = event[order], frame[order], dx[order], dy[order]
    out: dict[str, float] = {}
    for name, lags in (("1", (1,)), ("2", (2,)), (">=3", tuple(range(3, 50)))):
        a_list, b_list = [], []
        for lag in lags:
            for s in range(1, lag + 1):
                same = (e[s:] == e[:-s]) & (f[s:] - f[:-s] == lag)
                idx = np.nonzero(same)[0]
                a_list += [ex[idx], ey[idx]]
                b_list += [ex[idx + s], ey[idx + s]]
        a, b = np.concatenate(a_list), np.concatenate(b_list)
        out[name] = float(np.corrcoef(a, b)[0, 1]) if len(a) > 10 else float("nan")
        out[f"pairs {name}"] = int(len(a) // 2)
        if name == "1":  # the localizations NeNA's consecutive pairs are made of: their robust σ
            both = np.concatenate([a, b])
            out["robust sigma of lag-1 pairs"] = float(1.4826 * np.median(np.abs(both - np.median(both))))
    return out


def cross_event_correlation(event: np.ndarray, site: np.ndarray, frame: np.ndarray, dx: np.ndarray,
                            dy: np.ndarray) -> dict[str, float]:
    """Correlation of the mean errors of two successive blinks (events) of one site (x and y pooled), and the
    pairs counted: how much of a site's error its separate blinks share."""
    ne = int(event.max()) + 1
    n = np.bincount(event, minlength=ne)
    mx = np.bincount(event, weights=dx, minlength=ne) / np.maximum(n, 1)
    my = np.bincount(event, weights=dy, minlength=ne) / np.maximum(n, 1)
    site_of = np.full(ne, -1)
    site_of[event] = site
    first = np.full(ne, np.iinfo(np.int64).max)
    np.minimum.at(first, event, frame)
    seen = np.nonzero(n > 0)[0]
    order = seen[np.lexsort((first[seen], site_of[seen]))]
    same = site_of[order[1:]] == site_of[order[:-1]]
    a, b = order[:-1][same], order[1:][same]
    if len(a) < 10:
        return {"r": float("nan"), "pairs": len(a)}
    return {"r": float(np.corrcoef(np.r_[mx[a], my[a]], np.r_[mx[b], my[b]])[0, 1]), "pairs": len(a)}


def auto_link(pred: Any, radius_px: float, rho: Any, gate: bool = True) -> tuple[np.ndarray, Any]:
    """``link``'s 'auto' linking at ``radius_px`` (its sigma gate and reach; ``gate=False``: the radius alone)."""
    from decode_mem.link import link_table

    if not gate:
        return link_table(pred, radius_px, 1, rho)
    return link_table(pred, radius_px, 1, rho, sigma_gate=AUTO_SIGMA_GATE, reach=AUTO_REACH * radius_px)


def chance_neighbours(pred: Any, radius_px: float, px: float, lag: int, every: int) -> Any:
    """``link.crowding``'s chance-neighbour rate of the whole table at ``radius_px`` (max_dark 1)."""
    from decode_mem.link.crowding import ChanceNeighbours

    c = ChanceNeighbours(radius_px, radius_px * px, 1, lag, every)
    c.add(pred["x"], pred["y"], pred["frame"])
    return c.result()


def link_check(pred: Any, matches: Any, events: np.ndarray, gt: Any, radius_px: float, px: float,
               correlation: Any) -> dict[str, Any]:
    """Recovered and merged events, and single-event molecules' true error vs stated precision (linked with the
    model's ``correlation``, and as if its errors were independent)."""
    from decode_mem.link import INDEPENDENT

    out: dict[str, Any] = {}
    for label, rho in (("correlated", correlation), ("independent", INDEPENDENT)):
        group, mol = auto_link(pred, radius_px, rho)
        ev = events[matches.gt_index]
        g = group[matches.pred_index]
        pairs = np.unique(np.stack([ev, g], 1), axis=0)
        groups_per_event = np.bincount(pairs[:, 0], minlength=events.max() + 1)
        events_per_group = np.bincount(pairs[:, 1], minlength=group.max() + 1)
        counts = np.bincount(ev, minlength=events.max() + 1)
        multi = counts >= 2
        merged_event = np.zeros(len(counts), bool)
        np.logical_or.at(merged_event, pairs[:, 0], events_per_group[pairs[:, 1]] > 1)
        if label == "correlated":
            out["multi-frame events"] = int(multi.sum())
            out["recovered"] = float(np.mean(groups_per_event[multi] == 1))
            out["merged"] = float(np.mean(merged_event[multi]))
            out["molecules"] = len(mol)
            out["localizations"] = len(pred)
        # single-event molecules whose localizations all matched: error of the molecule vs the event's position
        matched_per_group = np.bincount(g, minlength=group.max() + 1)
        clean = (events_per_group == 1) & (matched_per_group == np.bincount(group, minlength=group.max() + 1))
        ids = np.nonzero(clean)[0]
        ev_of = np.zeros(group.max() + 1, np.int64)
        ev_of[pairs[:, 1]] = pairs[:, 0]
        tx = np.zeros(events.max() + 1)
        ty = np.zeros(events.max() + 1)
        tx[events], ty[events] = gt["x"], gt["y"]
        at = np.searchsorted(mol.group, ids)
        err = np.concatenate([(mol.table["x"][at] - tx[ev_of[ids]]), (mol.table["y"][at] - ty[ev_of[ids]])]) * px
        sig = np.concatenate([mol.table["sigma_x"][at], mol.table["sigma_y"][at]]) * px
        n = np.concatenate([mol.n[at], mol.n[at]])
        rows = {}
        for name, lo, hi in (("n=1", 1, 1), ("n=2-3", 2, 3), ("n=4-6", 4, 6), ("n>=7", 7, 10**9)):
            k = (n >= lo) & (n <= hi)
            if k.sum() > 20:
                rows[name] = {"molecules": int(k.sum() // 2), "rmse": float(np.sqrt(np.mean(err[k] ** 2))),
                              "rms_sigma": float(np.sqrt(np.mean(sig[k] ** 2))),
                              "robust_z": float(1.4826 * np.median(np.abs(err[k] / sig[k])))}
        out[f"molecule precision ({label})"] = rows
    return out


def frc_of_halves(table: Any, half: np.ndarray, shape: tuple[int, int], px: float,
                  render_pixel: float) -> float | None:
    """FRC resolution (nm) of ``table`` (px) split into ``half`` and the rest, by ``evaluate --no_truth``'s own
    halves (the same render pixel, the curve smoothed over the same rings)."""
    from decode_mem.evaluate.no_truth import _Halves

    halves = _Halves(shape, px, render_pixel)
    halves.add(table, half)
    frc = halves.frc("reference")
    return None if frc is None else frc.resolution


def frc_of_truth(gt: Any, events: np.ndarray, precision_nm: float | tuple[np.ndarray, np.ndarray],
                 shape: tuple[int, int], px: float, render_pixel: float, seed: int) -> float | None:
    """FRC resolution of the ground truth's localizations blurred with ``precision_nm`` (Gaussian per axis), or
    with errors drawn from given (dx, dy) nm (the matched localizations' true errors, resampled), halves split by
    event."""
    from decode_mem.evaluate.no_truth import molecule_half
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(seed)
    if isinstance(precision_nm, tuple):
        pick = rng.integers(0, len(precision_nm[0]), len(gt))
        ex, ey = precision_nm[0][pick] / px, precision_nm[1][pick] / px
    else:
        ex, ey = rng.normal(0, precision_nm / px, len(gt)), rng.normal(0, precision_nm / px, len(gt))
    blurred = EmitterTable({**gt.columns, "x": gt["x"] + ex, "y": gt["y"] + ey})
    return frc_of_halves(blurred, molecule_half(events), shape, px, render_pixel)


def blink_errors(matches: Any, gt: Any, events: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The matched localizations' true errors (nm), each event's sequence (in frame order) given whole to another
    event with as many matched localizations: the localizer's own errors with their correlation within a blink
    and their mix of widths kept, their tie to where the emitter sits (its neighbours, the structure) cut."""
    rng = np.random.default_rng(seed)
    ev = events[matches.gt_index]
    order = np.lexsort((np.asarray(gt["frame"])[matches.gt_index], ev))
    starts = np.r_[0, np.nonzero(np.diff(ev[order]))[0] + 1]
    lengths = np.diff(np.r_[starts, len(order)])
    source = np.empty(len(order), np.int64)
    for n in np.unique(lengths):
        same = np.nonzero(lengths == n)[0]
        given = same[rng.permutation(len(same))]
        for k in range(n):
            source[starts[same] + k] = starts[given] + k
    dx, dy = np.empty(len(order)), np.empty(len(order))
    dx[order], dy[order] = matches.dx[order][source], matches.dy[order][source]
    return dx, dy


def frc_of_matched_truth(gt: Any, matches: Any, key: np.ndarray, errors: tuple[np.ndarray, np.ndarray] | None,
                         shape: tuple[int, int], px: float, render_pixel: float) -> float | None:
    """FRC resolution of the true positions of the matched localizations (the emitters the localizer found, as
    many points as it found), moved by ``errors`` (nm; None: not moved), halves split by ``key`` (one value per
    ground-truth row: its event or its site)."""
    from decode_mem.evaluate.no_truth import molecule_half
    from decode_mem.io.table import EmitterTable

    found = gt.select(matches.gt_index)
    ex, ey = (0.0, 0.0) if errors is None else (errors[0] / px, errors[1] / px)
    moved = EmitterTable({**found.columns, "x": found["x"] + ex, "y": found["y"] + ey})
    return frc_of_halves(moved, molecule_half(key[matches.gt_index]), shape, px, render_pixel)


def error_model_errors(pred: Any, radius_px: float, px: float, rho: Any, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """``n`` errors per axis (nm) drawn from the localizer's error model as a table shows it without truth: a
    predicted σ (x and y of one localization, drawn from all of them) times a normalized difference ``u`` (the σ
    check's: a linked lag-1 pair's difference over what σ and ρ predict for it, drawn from all of them, per
    axis) — a scale mixture with the tails the σ miss, not one Gaussian. Linked as the quality pass links (8 x
    the median σ, no sigma gate)."""
    from decode_mem.evaluate.no_truth import scale_difference

    group = auto_link(pred, radius_px, rho, gate=False)[0]
    order = np.lexsort((pred["frame"], group))
    g, f = group[order], pred["frame"][order]
    lag1 = (g[1:] == g[:-1]) & (np.diff(f) == 1)
    a, b = order[:-1][lag1], order[1:][lag1]
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(pred), n)
    out = []
    for axis, sig in (("x", "sigma_x"), ("y", "sigma_y")):
        s = pred[sig].astype(np.float64)
        u = scale_difference(pred[axis][a] - pred[axis][b], s[a], s[b], rho.consecutive)  # the σ scale's u
        u = u[np.isfinite(u)]
        out.append(s[pick] * px * u[rng.integers(0, len(u), n)])
    return tuple(out)


def calibrated_sigma_errors(pred: Any, px: float, check: float, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """``n`` errors per axis (nm): Gaussian, each with the predicted σ of a localization drawn from the table (x and
    y of the same one) times ``check``, the σ check of ``--no_truth`` (the robust scale of the linked differences
    over what σ and ρ predict): the truth blurred with the measured precision of each localization, not with one
    number for all (a localizer whose σ varies from one localization to the next has errors that are a mixture of
    Gaussians: sharper in the core, heavier in the tails than one Gaussian of their width)."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(pred), n)
    return tuple(pred[c].astype(np.float64)[pick] * px * check * rng.normal(size=n) for c in ("sigma_x", "sigma_y"))


def frc_of_matched(pred: Any, matches: Any, key: np.ndarray, shape: tuple[int, int], px: float,
                   render_pixel: float) -> float | None:
    """FRC resolution of the matched localizations themselves, halves split by ``key`` (one value per matched
    localization: its true site, or the molecule linking gave it)."""
    from decode_mem.evaluate.no_truth import molecule_half

    return frc_of_halves(pred.select(matches.pred_index), molecule_half(key), shape, px, render_pixel)


def picasso_run(python: str | None, hdf5: Path, r_max_px: float, max_dark: int) -> dict[str, Any] | None:
    """Picasso's NeNA and link (defaults; ``r_max_px``, ``max_dark``) in its own interpreter: molecules, seconds
    of each link call (first with numba's compilation, then warm), the process's wall time and peak RssAnon."""
    if python is None:
        return None
    from decode_mem.memory.peaks import ProcessPeak

    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-c", PICASSO_SCRIPT, str(hdf5), str(r_max_px), str(max_dark)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = ProcessPeak(proc)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": (stderr.strip().splitlines() or ["failed"])[-1]}
    out = json.loads(stdout.strip().splitlines()[-1])
    out.update(wall_s=wall, peak_rss_anon_mb=peak.join())
    return out


def measure_case(name: str, settings: dict[str, Any], work: Path, seed: int, picasso: str | None,
                 model: str | None = None) -> dict[str, Any]:
    from decode_mem.evaluate.metrics import match_emitters
    from decode_mem.evaluate.no_truth import assess_file
    from decode_mem.io.localizations import read_localizations
    from decode_mem.link import for_model
    from decode_mem.link.files import AUTO_FACTOR

    rho = for_model(model)  # the error correlation measured for this model (linking, --no_truth)
    files = simulate(name, settings, work, seed, model)
    px = files["pixel_size"]
    pred = read_localizations(files["parquet"])
    gt = read_localizations(files["gt"], pixel_size=px)
    events = true_events(gt)
    m = match_emitters(pred, gt, pixel_size=px)
    rec: dict[str, Any] = {"case": name, "localizations": len(pred), "ground truth rows": len(gt),
                           "matched": m.tp}
    rec["correlation"] = correlations(events[m.gt_index], gt["frame"][m.gt_index], m.dx, m.dy)
    rec["rmse"] = [float(np.sqrt(np.mean(m.dx ** 2))), float(np.sqrt(np.mean(m.dy ** 2)))]
    sx = pred["sigma_x"][m.pred_index] * px
    sy = pred["sigma_y"][m.pred_index] * px
    core = (np.abs(m.dx) <= 10 * sx) & (np.abs(m.dy) <= 10 * sy)  # gross errors: beyond 10 predicted σ
    rec["rmse within 10 sigma"] = [float(np.sqrt(np.mean(m.dx[core] ** 2))), float(np.sqrt(np.mean(m.dy[core] ** 2)))]
    rec["gross error fraction"] = float(1 - core.mean())
    rec["robust sigma"] = [float(1.4826 * np.median(np.abs(d - np.median(d)))) for d in (m.dx, m.dy)]
    t0 = time.perf_counter()
    q = assess_file(files["parquet"], correlation=rho)
    rec["assess seconds"] = time.perf_counter() - t0
    d = q.as_dict()
    rec["stated"] = {k: d[k] for k in ("precision_nm", "sigma_precision_nm", "sigma_scale",
                                       "sigma_scale_uncertainty", "unseen_error_factor", "sigma_median_nm", "nena_nm",
                                       "nena_uncertainty_nm", "nena_picasso_nm", "sigma_check", "link_radius_nm",
                                       "chance_neighbour_rate", "joinable_fraction", "crowded_for_linking")}
    rec["frc"] = {"molecule split": d["frc_molecule_split"]["resolution_nm"] if d["frc_molecule_split"] else None,
                  "frame split": d["frc_frame_split"]["resolution_nm"] if d["frc_frame_split"] else None}
    if "structure" in settings:
        render_pixel = d["frc_molecule_split"]["pixel_nm"]
        rec["frc"]["truth blurred with the stated precision"] = frc_of_truth(
            gt, events, q.precision, files["shape"], px, render_pixel, seed)
        rec["frc"]["truth blurred with the RMS predicted σ"] = frc_of_truth(
            gt, events, d["sigma_precision_nm"], files["shape"], px, render_pixel, seed)
        rec["frc"]["truth with the true errors resampled"] = frc_of_truth(
            gt, events, (m.dx, m.dy), files["shape"], px, render_pixel, seed)
        rec["frc pixel nm"] = render_pixel
        rec["frc"]["truth without error, halves by true site"] = frc_of_matched_truth(
            gt, m, true_sites(gt), None, files["shape"], px, render_pixel)
        rec["frc"]["truth + the true errors a blink at a time"] = frc_of_matched_truth(
            gt, m, events, blink_errors(m, gt, events, seed), files["shape"], px, render_pixel)
        rec["frc"]["truth blurred with the true RMSE"] = frc_of_truth(
            gt, events, float(np.sqrt(np.mean(np.square(rec["rmse"])))), files["shape"], px, render_pixel, seed)
        if d["sigma_check"] is not None:  # each localization's own σ, calibrated as the table measures it
            rec["frc"]["truth blurred with each calibrated σ"] = frc_of_truth(
                gt, events, calibrated_sigma_errors(pred, px, d["sigma_check"], len(gt), seed), files["shape"], px,
                render_pixel, seed)
        if d["nena_nm"] is not None:  # the width of the errors' core, as linked NeNA measures it
            rec["frc"]["truth blurred with the corrected NeNA"] = frc_of_truth(
                gt, events, d["nena_nm"], files["shape"], px, render_pixel, seed)
    from decode_mem.io.localizations import working_unit
    from decode_mem.link.files import auto_radius, first_chunk

    unit = working_unit(files["parquet"])
    rec["link radius nm"] = auto_radius(first_chunk(files["parquet"], unit), unit, files["parquet"])
    radius_px = rec["link radius nm"] / px
    t0 = time.perf_counter()
    rec["link"] = link_check(pred, m, events, gt, radius_px, px, rho)
    rec["link"]["seconds"] = time.perf_counter() - t0
    rec["link"]["auto factor"] = AUTO_FACTOR
    sites = true_sites(gt)
    group = auto_link(pred, radius_px, rho)[0]
    rec["link"].update(link_outcome(group, m, events, sites))
    placed_nm = WELL_PLACED * d["sigma_median_nm"]
    placed = well_placed(m, placed_nm)  # the localizations linking joins: no blends of two emitters, no gross errors
    rec["correlation well placed"] = correlations(events[placed.gt_index], gt["frame"][placed.gt_index], placed.dx,
                                                  placed.dy)
    rec["link"]["wrong links"] = wrong_links(group, pred, m, sites, gt, rec["link radius nm"], px, events, placed_nm)
    rec["link"]["neighbour floor"] = neighbour_floor(gt, events, sites, m, rec["link radius nm"], px)
    rec["link"]["crowding"] = chance_neighbours(pred, radius_px, px, LAG, EVERY).as_dict()  # what `link` says
    rec["crowding by lag"] = {str(lag): chance_neighbours(pred, radius_px, px, lag, 1).rate for lag in CROWDING_LAGS}
    rec["link"]["well placed only"] = link_outcome(group, placed, events, sites)
    sparrow_nm = SPARROW * files["psf_sigma_nm"]  # closer than this, two emitters on together are one spot
    resolvable = resolvable_events(gt, events, sites, sparrow_nm, px)
    rec["link"]["resolvable"] = {**link_outcome(group, m, events, sites, among=resolvable), "limit nm": sparrow_nm}
    rec["radius scan"] = []
    for gated in (False, True):
        for k in SCAN_FACTORS:
            r_nm = k * d["sigma_median_nm"]
            out = link_outcome(auto_link(pred, r_nm / px, rho, gated)[0], m, events, sites)
            out.update(factor=k, gate=gated, radius_nm=r_nm, floor=neighbour_floor(gt, events, sites, m, r_nm, px))
            rec["radius scan"].append(out)
    if "structure" in settings:  # the molecule split against the split no linker can make: by true site
        render_pixel = d["frc_molecule_split"]["pixel_nm"]
        rec["frc"]["truth moved by the no-truth error model"] = frc_of_truth(
            gt, events, error_model_errors(pred, q.link_radius / px, px, rho, len(gt), seed),
            files["shape"], px, render_pixel, seed)
        rec["frc"]["matched, halves by true site"] = frc_of_matched(
            pred, m, sites[m.gt_index], files["shape"], px, render_pixel)
        rec["frc"]["matched, halves by molecule"] = frc_of_matched(
            pred, m, group[m.pred_index], files["shape"], px, render_pixel)
        rec["cross-event correlation"] = cross_event_correlation(events[m.gt_index], sites[m.gt_index],
                                                                 gt["frame"][m.gt_index], m.dx, m.dy)
    pic = picasso_run(picasso, files["hdf5"], radius_px, 1)
    rec["picasso"] = pic
    rec["picasso nena nm"] = None if pic is None or "nena_px" not in pic else pic["nena_px"] * px
    return rec


def big_table(path: Path, rows: int, seed: int = 0) -> float:
    """Write ``rows`` localizations of blinking emitters (512 x 512 px, ~100 per frame, geometric on-times of
    mean 3 frames, 10 nm noise, σ columns) to parquet in chunks; the seconds it took."""
    from decode_mem.io.localizations import open_writer
    from decode_mem.io.table import EmitterTable

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    per_frame, frame0, written = 100, 0, 0
    with open_writer(path, pixel_size=100.0, width=512, height=512, extras=("sigma_x", "sigma_y"),
                     three_d=False) as w:
        while written < rows:
            frames = 2000
            n_ev = per_frame * frames // 3
            start = frame0 + rng.integers(0, frames, n_ev)
            length = rng.geometric(1 / 3, n_ev)
            idx = np.repeat(np.arange(n_ev), length)
            f = start[idx] + np.arange(len(idx)) - np.repeat(np.cumsum(length) - length, length)
            ex, ey = rng.uniform(0, 512, n_ev), rng.uniform(0, 512, n_ev)
            keep = f < frame0 + frames  # events run into the next block's frames are cut there
            idx, f = idx[keep], f[keep]
            order = np.argsort(f, kind="stable")
            idx, f = idx[order], f[order]
            n = min(len(f), rows - written)
            idx, f = idx[:n], f[:n]
            w.write(EmitterTable.from_arrays(frame=f, x=ex[idx] + rng.normal(0, 0.1, n),
                                             y=ey[idx] + rng.normal(0, 0.1, n), photons=np.full(n, 2000.0),
                                             sigma_x=np.full(n, 0.1), sigma_y=np.full(n, 0.1)))
            written += n
            frame0 += frames
    return time.perf_counter() - t0


TINY_LINK = ("import numpy as np, time; t0 = time.perf_counter(); "
             "from decode_mem.io.table import EmitterTable; from decode_mem.link import link_table; "
             "r = np.random.default_rng(0); n = 1000; "
             "link_table(EmitterTable.from_arrays(frame=np.repeat(np.arange(100), 10), x=r.uniform(0, 50, n), "
             "y=r.uniform(0, 50, n), photons=np.full(n, 1e3), sigma_x=np.full(n, 0.1), sigma_y=np.full(n, 0.1)), "
             "0.4, 1, sigma_gate=4.0, reach=0.8); print(time.perf_counter() - t0)")


def compile_seconds(work: Path) -> dict[str, float]:
    """Seconds to import decode_mem.link and link a 1000-row table in a fresh process whose numba cache is empty
    (the first link after an install compiles the kernels), then again with that cache filled."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(work / "numba_cache")}
    runs = [float(subprocess.run([sys.executable, "-c", TINY_LINK], env=env, check=True, capture_output=True,
                                 text=True).stdout.split()[-1]) for _ in range(2)]
    return {"first link s (compiles)": runs[0], "next link s (cached)": runs[1]}


def big_link(work: Path, rows: int) -> dict[str, Any]:
    """Write the table, link it with the CLI in a child (wall, CPU seconds, RssAnon sampled over time and its
    peak), then the linking alone in this process (``Linker.feed`` over the same file; wall and CPU seconds)."""
    import resource

    from decode_mem.memory.peaks import ProcessPeak
    from decode_mem.memory.readings import read_host_memory

    path = work / "big.parquet"
    write_s = big_table(path, rows)
    subprocess.run([sys.executable, "-c", TINY_LINK], check=True, capture_output=True)  # kernels compiled, cached
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "decode_mem.link", str(path), "--out", str(work / "big_out"),
                             "--quiet"], stderr=subprocess.PIPE, text=True)  # the defaults: 'auto', its gate
    peak = ProcessPeak(proc, interval=0.05)
    trace: list[tuple[float, float]] = []
    while proc.poll() is None:
        anon = read_host_memory(proc.pid).get("rss_anon_mb")
        if anon is not None:
            trace.append((time.perf_counter() - t0, anon))
        time.sleep(1.0)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"decode_mem.link failed on the big table: {err.strip()}")
    out_mb = sum(f.stat().st_size for f in (work / "big_out").iterdir()) / 2**20
    in_mb = path.stat().st_size / 2**20
    for f in (work / "big_out").iterdir():  # the disk: the input stays for the in-process pass
        f.unlink()
    # the linking alone, in this process, from the same file (no writing): rows/s of Linker.feed
    from decode_mem.io.localizations import iter_localizations
    from decode_mem.link import Linker
    from decode_mem.link.core import WORK_ROWS
    from decode_mem.link.files import auto_radius, first_chunk

    auto_px = auto_radius(first_chunk(path, 100.0), 100.0, path) / 100.0
    passes = {"radius 30 nm": Linker(0.3, 1),
              f"'auto': radius {auto_px * 100:.0f} nm, sigma gate {AUTO_SIGMA_GATE:g}, reach "
              f"{AUTO_REACH * auto_px * 100:.0f} nm": Linker(auto_px, 1, sigma_gate=AUTO_SIGMA_GATE,
                                                             reach=AUTO_REACH * auto_px)}
    alone = {}
    for label, linker in passes.items():
        read_s = link_s = link_cpu = 0.0
        t = time.perf_counter()
        for table in iter_localizations(path, chunk_rows=WORK_ROWS):
            t1, c1 = time.perf_counter(), time.process_time()
            read_s += t1 - t
            for _ in linker.feed(table):
                pass
            t = time.perf_counter()
            link_s += t - t1
            link_cpu += time.process_time() - c1
        linker.finish()
        alone[label] = {"read s": read_s, "link s": link_s, "link cpu s": link_cpu, "link rows/s": rows / link_s,
                        "link rows per cpu s": rows / link_cpu}
    path.unlink()
    return {"rows": rows, "write table s": write_s, "cli wall s": wall, "cli cpu s": cli_cpu,
            "cli rows/s": rows / wall, "cli peak rss_anon mb": peak.join(), "rss trace": trace,
            "input mb": in_mb, "output mb": out_mb, "cli radius": f"'auto' ({auto_px * 100:.0f} nm and its gate)",
            "alone": alone, "compile": compile_seconds(work)}


def fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def report(records: list[dict[str, Any]], header: list[str], rho: dict[str, Any]) -> list[str]:
    """The movies' report; ``rho``: the error correlation the run linked and assessed with (its ``to_dict``)."""
    lines = [*header, "", "## Error correlation of one blinking event's localizations (prediction - truth)", "",
             "Every matched localization, and the well-placed ones only (within "
             f"{WELL_PLACED:g} median σ of their own emitter: what linking joins; blends of two emitters on together "
             "and gross errors left out).", "",
             "| movie | lag 1 | lag 2 | lag >= 3 | pairs (lag 1 / 2 / >=3) | well placed: lag 1 | lag 2 | lag >= 3 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        c, w = r["correlation"], r["correlation well placed"]
        lines.append(f"| {r['case']} | {fmt(c['1'])} | {fmt(c['2'])} | {fmt(c['>=3'])} | {c['pairs 1']} / "
                     f"{c['pairs 2']} / {c['pairs >=3']} | {fmt(w['1'])} | {fmt(w['2'])} | {fmt(w['>=3'])} |")
    chosen_on = [r for r in records if not r["case"].startswith(("held out", "new"))]  # the movies choices use
    median = [float(np.nanmedian([r[c][k] for r in chosen_on])) for c in ("correlation", "correlation well placed")
              for k in ("1", "2", ">=3")]
    lines += ["", f"Median over the {len(chosen_on)} movies not marked held out or new: lag 1 {median[0]:.2f}, lag 2 "
                  f"{median[1]:.2f}, beyond {median[2]:.2f}; of the well-placed localizations lag 1 {median[3]:.2f}, "
                  f"lag 2 {median[4]:.2f}, beyond {median[5]:.2f} (`decode_mem.link.correlation` says which of the "
                  "two each shipped model's constant is). "
                  f"The model linking and `--no_truth` use for this localizer (`decode_mem.link.correlation."
                  f"for_model`, {rho['source']}): lag 1 {rho['by_lag'][0]}, lag 2 {rho['by_lag'][1]}, beyond "
                  f"{rho['beyond']}.",
              "",
              "## Stated precision against the truth (nm per axis)", "",
              "Stated (`precision_nm` of `evaluate --no_truth`): the RMS predicted σ times the σ scale, the RMS of "
              "the linked consecutive differences divided by what σ and ρ predict for them (a jump beyond "
              f"{JUMP:g} of it divided by what independent errors predict instead), times the model's "
              "unseen-error factor (`decode_mem.link.correlation`: the RMSE the differences do not see, 1 / the "
              "median of the column before it over the movies not held out or new and not crowded) — an estimate "
              "of the RMSE of all localizations, tails included. The RMS predicted σ alone was stated before, then "
              "RMS σ x σ scale. "
              f"`--no_truth` links at its 'auto' radius, {QUALITY_FACTOR_TEXT} x the median predicted σ (last "
              "column). The radius factor was chosen on the first 7 movies; the movies marked held out were "
              "simulated afterwards with other settings and seeds and not used for that choice (they were seen "
              "when linking's sigma gate and reach were chosen); the movies marked new were simulated after every "
              "choice in this report but one: the σ scale's jump rule was chosen on the first 14 movies, and the "
              "movies named 'new after the jump rule' were simulated after it.", "",
              "| movie | true RMSE x / y | RMSE without gross errors (> 10 σ; their fraction) | RMS predicted σ "
              "(ratio to RMSE) | σ scale ± unc. | RMS σ x σ scale (ratio to RMSE) | **stated** (ratio to RMSE) | "
              "true robust σ, all / of the lag-1 "
              "pairs | NeNA linked, corrected ± unc. (ratio to the lag-1 pairs' robust σ) | NeNA Picasso-compatible "
              "(ours) | Picasso's own NeNA | σ check (robust) | radius nm | crowded for linking (--no_truth's "
              "warning): joinable |", "|---" * 14 + "|"]

    def rmse_of(r: dict[str, Any], key: str = "rmse") -> float:
        return float(np.sqrt(np.mean(np.square(r[key]))))

    for r in records:
        s, rmse, rob = r["stated"], r["rmse"], r["robust sigma"]
        rm, rc = rmse_of(r), rmse_of(r, "rmse within 10 sigma")
        rb = float(np.sqrt(np.mean(np.square(rob))))
        rb1 = r["correlation"]["robust sigma of lag-1 pairs"]
        nratio = s["nena_nm"] / rb1 if s["nena_nm"] else None
        sp, seen = s["sigma_precision_nm"], seen_rmse(s)
        lines.append(f"| {r['case']} | {fmt(rmse[0])} / {fmt(rmse[1])} | {fmt(rc)} ({r['gross error fraction']:.4f}) "
                     f"| {fmt(sp)} ({fmt(sp and sp / rm)}) | {fmt(s['sigma_scale'])} ± "
                     f"{fmt(s['sigma_scale_uncertainty'])} | {fmt(seen)} ({fmt(seen and seen / rm)}) | "
                     f"**{fmt(s['precision_nm'])}** "
                     f"({fmt(s['precision_nm'] and s['precision_nm'] / rm)}) | {fmt(rb)} / {fmt(rb1)} | "
                     f"{fmt(s['nena_nm'])} ± {fmt(s['nena_uncertainty_nm'])} ({fmt(nratio)}) | "
                     f"{fmt(s['nena_picasso_nm'])} | {fmt(r['picasso nena nm'])} | {fmt(s['sigma_check'])} | "
                     f"{fmt(s['link_radius_nm'], 1)} | {crowded_cell(s)} |")

    def count(key: str, truth: str = "rmse") -> int:
        return sum(1 for r in records if r["stated"][key] and abs(r["stated"][key] / rmse_of(r, truth) - 1) <= 0.15)

    n = len(records)
    chosen = [r for r in records if not r["case"].startswith(("held out", "new"))
              and r["stated"].get("crowded_for_linking") is False and seen_rmse(r["stated"])]
    seen_median = float(np.median([seen_rmse(r["stated"]) / rmse_of(r) for r in chosen])) if chosen else None
    factor = records[0]["stated"].get("unseen_error_factor") if records else None
    calm = [r for r in records if r["stated"].get("crowded_for_linking") is False]
    calm_ok = [r["case"] for r in calm if r["stated"]["precision_nm"]
               and abs(r["stated"]["precision_nm"] / rmse_of(r) - 1) <= 0.15]
    flagged = [r["case"] for r in records if r["stated"].get("crowded_for_linking")]
    seen_ok = sum(1 for r in records
                  if seen_rmse(r["stated"]) and abs(seen_rmse(r["stated"]) / rmse_of(r) - 1) <= 0.15)
    lines += ["", f"Within 15 % of the true RMSE: the stated precision in {count('precision_nm')} of {n} movies, "
                  f"RMS σ x σ scale (without the unseen-error factor) in {seen_ok} of {n}, "
                  f"the RMS predicted σ alone in {count('sigma_precision_nm')} of {n} (of the RMSE without gross "
                  f"errors: {count('precision_nm', 'rmse within 10 sigma')} and "
                  f"{count('sigma_precision_nm', 'rmse within 10 sigma')} of {n}). `--no_truth` warns that the "
                  f"movie is crowded for linking (more than 2 % of multi-frame blinks with a chance neighbour "
                  f"within its radius, `decode_mem.link.crowding`) on {len(flagged)} "
                  f"({', '.join(flagged) or 'none'}); of the {len(calm)} it does not flag, the stated precision is "
                  f"within 15 % on {len(calm_ok)}. RMS σ x σ scale over the true RMSE, the median over the "
                  f"{len(chosen)} movies not held out or new and not crowded: {fmt(seen_median, 3)} (1 / it: "
                  f"{fmt(seen_median and 1 / seen_median, 3)}); the unseen-error factor this run stated with: "
                  f"{fmt(factor)}.", "",
              f"## Linking ('auto': {AUTO_TEXT}; max_dark 1)", "",
              "Of the multi-frame events (>= 2 matched localizations): recovered = all in one molecule; merged = "
              "their molecule holds another event's localizations; with another emitter = another site's (not "
              "a second blink of the same site bridged over one dark frame); floor = another emitter is on "
              "within the radius of the event's true position in one of the two frames before or after it (ground "
              "truth; no linker of this radius and max_dark tells those apart by position; the sigma gate links "
              "beyond the radius, so the floor of the gated linking can be higher).", "",
              "Chance neighbours (no truth; what `link` reports and warns on, `decode_mem.link.crowding`): the "
              f"share of localizations with another within the radius {LAG} frames earlier (one frame in {EVERY} "
              "a reference), and the share of multi-frame blinks with such a neighbour in one of the frames a link "
              "reaches (joinable, 1 - (1 - rate)^4 for max_dark 1) — an estimate of the floor; 'crowded' above "
              "2 %.", "",
              f"Resolvable events (ground truth): no other emitter is on within the PSF's Sparrow limit "
              f"({SPARROW:g} PSF σ) of the event's site in its frames or the 2 before and after it (the frames a "
              "link reaches). Closer than that two emitters on together make one spot with one maximum: the "
              "localizer returns one position for both (a blend) and every link from it joins the two, whatever "
              "the linker's rule. Their molecules are still made of every localization; the column counts only "
              "these events.", "",
              "| movie | radius nm | localizations -> molecules | multi-frame events | recovered | merged / with "
              "another emitter | floor | chance neighbours (no truth): rate / joinable | well-placed localizations "
              "only: events, recovered / merged with another "
              "emitter | resolvable events (limit nm): events (share), recovered / merged with another emitter | "
              "decode_mem link s (in process) | Picasso default (0.05 px, dark 3): "
              "molecules, s first / warm | Picasso at our radius, dark 1 | Picasso process: wall s, peak RssAnon "
              "MB |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lk = r["link"]

        p = r["picasso"]

        def pic(name: str, p: dict[str, Any] | None = p) -> str:
            if p is None:
                return "not run"
            if "error" in p:
                return f"failed: {p['error']}"
            return f"{p[name]['molecules']}, {p[name]['first_s']:.2f} / {p[name]['warm_s']:.3f}"

        proc = "n/a" if p is None or "error" in p else f"{p['wall_s']:.1f}, {fmt(p['peak_rss_anon_mb'], 0)}"
        lines.append(f"| {r['case']} | {fmt(r['link radius nm'], 1)} | {lk['localizations']} -> "
                     f"{lk['molecules']} | {lk['multi-frame events']} | {lk['recovered']:.3f} | {lk['merged']:.3f} / "
                     f"{lk['merged with another emitter']:.3f} | {lk['neighbour floor']:.3f} | "
                     f"{chance_cell(lk)} | {well_placed_cell(lk)} | {resolvable_cell(lk)} | {lk['seconds']:.2f} | "
                     f"{pic('default')} | "
                     f"{pic('matched')} | {proc} |")
    ok = [r["case"] for r in records
          if r["link"]["recovered"] >= 0.95 and r["link"]["merged with another emitter"] < 0.02]
    placed_ok = [r["case"] for r in records if r["link"]["recovered"] >= 0.95
                 and r["link"]["wrong links"]["events merged by a well-placed link"] < 0.02]
    own_ok = [r["case"] for r in records if "well placed only" in r["link"]
              and r["link"]["well placed only"]["recovered"] >= 0.95
              and r["link"]["well placed only"]["merged with another emitter"] < 0.02]
    resolvable = [r for r in records
                  if (r["link"].get("resolvable") or {}).get("multi-frame events", 0) >= MIN_RESOLVABLE]
    resolvable_ok = [r["case"] for r in resolvable if r["link"]["resolvable"]["recovered"] >= 0.95
                     and r["link"]["resolvable"]["merged with another emitter"] < 0.02]
    no_resolvable = [r["case"] for r in records if r not in resolvable]
    lines += ["", f"Both goals (recovered >= 0.95, merged with another emitter < 0.02) with 'auto': "
                  f"{len(ok)} of {len(records)} movies ({', '.join(ok) or 'none'}). Counting only the merges made "
                  f"by a link whose two localizations are each well placed (next table): {len(placed_ok)} of "
                  f"{len(records)} ({', '.join(placed_ok) or 'none'}). Counting the events by their well-placed "
                  f"localizations only (each within {WELL_PLACED:g} median σ of its own emitter; the others, blends "
                  f"of two emitters on together and gross errors, left out of the count, not out of the linking): "
                  f"{len(own_ok)} of {len(records)} ({', '.join(own_ok) or 'none'}). Counting the resolvable "
                  f"events only (no other emitter on within the Sparrow limit; their molecules made of every "
                  f"localization): {len(resolvable_ok)} of the {len(resolvable)} movies with at least "
                  f"{MIN_RESOLVABLE} such events ({', '.join(resolvable_ok) or 'none'}); with fewer, too few to "
                  f"judge a 2 % rate: {', '.join(no_resolvable) or 'none'}.",
              *crowding_lines(records), "",
              "### Where the merges come from: links between two emitters", "",
              "A wrong link: two consecutive localizations of one molecule matched to different sites (ground "
              "truth). Their sites' true distance, and whether both sites were on in the frame of either "
              "localization: two emitters on together closer than the PSF's width look like one spot, and a "
              "localization between them links to either. Well placed: both localizations within "
              f"{WELL_PLACED:g} median σ of their own site (the others are blends of two emitters or gross "
              "errors: the localizer's mistake, which a link between them only passes on); the last column counts "
              "the multi-frame events whose molecule holds such a link.", "",
              "| movie | links (both ends matched) | wrong links (per 1000) | median true distance of the two sites nm "
              "| of them beyond the radius | both sites on in one frame | both ends well placed | events merged by "
              "a well-placed link |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        w = r["link"].get("wrong links")
        if w is None:
            continue
        lines.append(f"| {r['case']} | {w['links']} | {w['wrong']} ({w['wrong per 1000']:.1f}) | "
                     f"{fmt(w['median site distance nm'], 1)} | {fmt(w['site distance beyond radius'])} | "
                     f"{fmt(w['sites on together'])} | {fmt(w.get('well placed'))} | "
                     f"{fmt(w.get('events merged by a well-placed link'), 3)} |")
    lines += ["", "### Radius scan: recovered / merged with another emitter / floor", "",
              f"Each radius alone, and with the sigma gate ({AUTO_SIGMA_GATE:g} combined σ, up to {AUTO_REACH:g} "
              "radii).", "",
              "| movie | median σ nm | sigma gate | " + " | ".join(f"{k:g} x" for k in SCAN_FACTORS) + " |",
              "|---|---|---|" + "---|" * len(SCAN_FACTORS)]
    for r in records:
        for gated in (False, True):
            cells = [f"{x['radius_nm']:.0f} nm: {x['recovered']:.3f} / {x['merged with another emitter']:.3f} / "
                     f"{x['floor']:.3f}" for x in r["radius scan"] if x.get("gate", False) == gated]
            lines.append(f"| {r['case']} | {fmt(r['stated']['sigma_median_nm'])} | {'on' if gated else 'off'} | "
                         + " | ".join(cells) + " |")
    for gated in (False, True):
        both = {r["case"]: [x["factor"] for x in r["radius scan"] if x.get("gate", False) == gated
                            and x["recovered"] >= 0.95 and x["merged with another emitter"] < 0.02] for r in records}
        lines += ["", f"Factors meeting both goals, sigma gate {'on' if gated else 'off'}: "
                  + "; ".join(f"{k}: {', '.join(f'{v:g}' for v in vs) or 'none'}" for k, vs in both.items()) + "."]
    lines += ["", "## A linked molecule's stated precision against its true error (single-event molecules, nm)", "",
              "| movie | molecules | n=1: RMSE / RMS σ | n=2-3 | n=4-6 | n>=7 | robust z (n>=4), correlated model | "
              "robust z (n>=4), independent (1/sqrt n) |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        cor, ind = r["link"]["molecule precision (correlated)"], r["link"]["molecule precision (independent)"]

        def cell(rows: dict, k: str) -> str:
            return f"{rows[k]['rmse']:.2f} / {rows[k]['rms_sigma']:.2f}" if k in rows else "n/a"

        def z(rows: dict) -> str:
            ks = [k for k in ("n=4-6", "n>=7") if k in rows]
            return " / ".join(f"{rows[k]['robust_z']:.2f}" for k in ks) or "n/a"

        lines.append(f"| {r['case']} | {sum(v['molecules'] for v in cor.values())} | {cell(cor, 'n=1')} | "
                     f"{cell(cor, 'n=2-3')} | {cell(cor, 'n=4-6')} | {cell(cor, 'n>=7')} | {z(cor)} | {z(ind)} |")
    lines += ["", "Robust z: 1.4826 x median |molecule error / stated σ| (1 when the stated σ is right); the "
                  "independent column states σ as 1/sqrt(n) shrinks it.", "",
              "## FRC resolution (nm, 1/7 threshold)", "",
              "Every column is computed as `evaluate --no_truth` computes its FRC (the same render pixel, the curve "
              "smoothed over the same rings). Truth columns: the ground truth's positions, halves split by event, "
              "moved by Gaussian errors of the named width per axis, by Gaussian errors whose width is a "
              "localization's own predicted σ drawn from the table times the σ check (each calibrated σ: the "
              "measured precision of each localization), by the matched localizations' true errors "
              "drawn at random, or by the no-truth error model: a predicted σ drawn from the table times a "
              "normalized linked consecutive difference (the σ check's u) drawn from the quality pass, per axis — "
              "errors of RMS σ x σ scale (the stated precision without the unseen-error factor) with the "
              "table's own mix of σ and tails, made without the "
              "truth. Truth without error and a blink at a time: the true positions of the matched "
              "localizations only (the emitters the localizer found, as many points as it found), unmoved (halves "
              "by true site, as the matched column beside it: the same points, the same split, without the "
              "errors), or moved by the matched localizations' true errors an event at a time — each event's "
              "errors, in frame order, given whole to another event with as many matched localizations: the "
              "localizer's own errors with their correlation within a blink (its localizations count as fewer "
              "independent points than independent errors would, which matters where the FRC is limited by the "
              "number of points) and their mix of widths, cut from where the emitter sits; halves split by "
              "event. Matched columns: the "
              "localizations matched to the truth, unmoved, split by the "
              "molecule linking gave them or by their true site (the split no linker can beat: one site's "
              "correlated localizations never in both halves).", "",
              "| movie | halves by molecule | halves by alternating frames | matched, by molecule | matched, by true "
              "site | truth without error, by true site | truth + the true errors a blink at a time | "
              "truth + the true errors resampled | truth + the no-truth error model | "
              "truth blurred with each calibrated σ | truth blurred with "
              "the corrected NeNA | with the stated precision | with the RMS predicted σ | with the true RMSE | "
              "correlation of the mean errors of two blinks of one site (pairs) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        ce = r.get("cross-event correlation")
        cols = ("molecule split", "frame split", "matched, halves by molecule", "matched, halves by true site",
                "truth without error, halves by true site", "truth + the true errors a blink at a time",
                "truth with the true errors resampled",
                "truth moved by the no-truth error model",
                "truth blurred with each calibrated σ", "truth blurred with the corrected NeNA",
                "truth blurred with the stated precision",
                "truth blurred with the RMS predicted σ",
                "truth blurred with the true RMSE")
        lines.append(f"| {r['case']} | " + " | ".join(frc_cell(r, c) for c in cols) +
                     f" | {'n/a' if ce is None else fmt(ce['r']) + ' (' + str(ce['pairs']) + ')'} |")
    structured = [r for r in records if r["frc"].get("matched, halves by true site") is not None]
    if structured:
        def within(ref: str) -> str:
            ok = [r["case"] for r in structured if r["frc"]["molecule split"] and r["frc"].get(ref)
                  and abs(r["frc"]["molecule split"] / r["frc"][ref] - 1) <= 0.15]
            return f"{len(ok)} of {len(structured)}" + (f" ({', '.join(ok)})" if ok else "")
        lines += ["", "The molecule split's resolution within 15 % of: the truth + the true errors a blink at "
                      f"a time in {within('truth + the true errors a blink at a time')}; "
                      "the truth blurred with the corrected NeNA "
                      f"in {within('truth blurred with the corrected NeNA')}; the truth + the true errors in "
                      f"{within('truth with the true errors resampled')}; the truth + the no-truth error model in "
                      f"{within('truth moved by the no-truth error model')}; the truth blurred with each calibrated "
                      f"σ in {within('truth blurred with each calibrated σ')}; the matched localizations split by "
                      f"true site in {within('matched, halves by true site')}; the truth blurred with the stated "
                      f"precision in {within('truth blurred with the stated precision')}. The matched "
                      "localizations split by true site resolve finer than their own true positions split the same "
                      f"way without error (by more than {100 * FINER:.0f} %) in {sharper_than_truth(structured)}: "
                      "a resolution no localizer reaches, "
                      "so there the halves share structure the emitters do not have (a blend of two emitters on "
                      "together is one position, matched to either, so it falls in both halves whichever split is "
                      "used), and no FRC of those localizations is a resolution. A site of these "
                      "structures blinks several times (80 to 2400 frames dark on average): its blinks are separate "
                      "molecules, in either half, sharing their true position, as the truth columns' events do; "
                      "the true-site split keeps them in one half, which no split without the truth can do."]
    lines += ["", "Uniform emitters blink once: two halves split by molecule share no structure, so their FRC "
                  "falls at once (a resolution of about the field of view); the frame split's halves share every "
                  "emitter's correlated localizations and report a resolution that is not there.", "",
              "## Streaming a large table", "",
              "Measured on its own: [postprocess_stream.md](postprocess_stream.md).", ""]
    return lines


def frc_cell(r: dict[str, Any], column: str) -> str:
    """An FRC resolution (nm); 'n/a' where it was not computed, the Nyquist limit where the curve never fell below
    1/7 (finer than the render pixel resolves)."""
    f = r["frc"]
    if column in f and f[column] is None and r.get("frc pixel nm"):
        return f"< {2 * r['frc pixel nm']:.1f} (never below 1/7)"
    return fmt(f.get(column), 1)


def sharper_than_truth(structured: list[dict[str, Any]]) -> str:
    """The movies whose matched localizations, halves by true site, resolve finer than their own true positions
    split the same way without error (by more than ``FINER``: where the points' number limits both, they read
    alike), as report text."""
    def finer(f: dict[str, Any]) -> bool:
        data, truth = f.get("matched, halves by true site"), f.get("truth without error, halves by true site")
        return bool(data and truth and data < (1 - FINER) * truth)

    sharper = [r["case"] for r in structured if finer(r["frc"])]
    return f"{len(sharper)} of {len(structured)}" + (f" ({', '.join(sharper)})" if sharper else "")


def seen_rmse(s: dict[str, Any]) -> float | None:
    """RMS σ x σ scale of a record's ``stated``: the RMSE the consecutive differences show (nm; None without σ)."""
    sp, scale = s.get("sigma_precision_nm"), s.get("sigma_scale")
    return None if sp is None or scale is None else float(sp * scale)


def crowded_cell(s: dict[str, Any]) -> str:
    """The precision table's crowding cell ('not measured' in a record made before it was)."""
    if "crowded_for_linking" not in s:
        return "not measured"
    j = s["joinable_fraction"]
    return ("yes" if s["crowded_for_linking"] else "no") + f": {fmt(j, 3)}"


def chance_cell(lk: dict[str, Any]) -> str:
    """The linking table's chance-neighbour cell."""
    c = lk.get("crowding")
    if c is None:
        return "not measured"
    return (f"{fmt(c['chance_neighbour_rate'], 4)} / {fmt(c['joinable_fraction'], 3)}"
            + (" crowded" if c["crowded_for_linking"] else ""))


def crowding_lines(records: list[dict[str, Any]]) -> list[str]:
    """What the no-truth crowding flag says against the merges, and the chance-neighbour rate by lag."""
    have = [r for r in records if "crowding" in r["link"]]
    if not have:
        return []
    missed = [r for r in have if r["link"]["merged with another emitter"] >= 0.02]
    met = [r for r in have if r["link"]["merged with another emitter"] < 0.02]

    def flagged(rs: list[dict[str, Any]]) -> str:
        f = [r["case"] for r in rs if r["link"]["crowding"]["crowded_for_linking"]]
        return f"{len(f)} of {len(rs)}" + (f" ({', '.join(f)})" if f else "")

    out = ["", f"`link` flags as crowded {flagged(have)}; of the movies that miss the merge goal (merged with "
               f"another emitter >= 0.02) it flags {flagged(missed)}, of those that meet it {flagged(met)}. It sees "
               "chance neighbours, not blends of two emitters on together (single localizations).",
           "", "### The chance-neighbour rate by lag", "",
           "The share of localizations with another within the linking radius this many frames earlier (every frame "
           "a reference): the same blink at short lags, then a plateau — other emitters and later blinks of the "
           f"same site. `link` measures it at {LAG} frames.", "",
           "| movie | " + " | ".join(f"{k}" for k in CROWDING_LAGS) + " |", "|---|" + "---|" * len(CROWDING_LAGS)]
    for r in have:
        by = r.get("crowding by lag", {})
        out.append(f"| {r['case']} | " + " | ".join(fmt(by.get(str(k)), 4) for k in CROWDING_LAGS) + " |")
    return out


def well_placed_cell(lk: dict[str, Any]) -> str:
    """The linking table's cell of the events counted by their well-placed localizations ('not measured' in a
    record made before it was)."""
    w = lk.get("well placed only")
    if w is None:
        return "not measured"
    return f"{w['multi-frame events']}, {w['recovered']:.3f} / {w['merged with another emitter']:.3f}"


def resolvable_cell(lk: dict[str, Any]) -> str:
    """The linking table's cell of the resolvable events ('not measured' in a record made before it was)."""
    r = lk.get("resolvable")
    if r is None:
        return "not measured"
    n = r["multi-frame events"]
    head = f"{n} ({n / lk['multi-frame events']:.2f})" if lk["multi-frame events"] else f"{n} (n/a)"
    if not n:
        return f"{head}: n/a ({r['limit nm']:.0f})"
    return f"{head}: {r['recovered']:.3f} / {r['merged with another emitter']:.3f} ({r['limit nm']:.0f})"


def draw(records: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 7), layout="constrained")
    FigureCanvasAgg(fig)
    a, b = fig.subplots(1, 2)
    x = np.arange(len(records))
    rm = [float(np.sqrt(np.mean(np.square(r["rmse"])))) for r in records]
    rb = [float(np.sqrt(np.mean(np.square(r["robust sigma"])))) for r in records]
    a.plot(x, rm, "ko-", label="true RMSE")
    a.plot(x, rb, "k^--", label="true robust σ")
    a.plot(x, [r["stated"]["sigma_precision_nm"] for r in records], "s:", label="RMS predicted σ")
    a.plot(x, [r["stated"]["precision_nm"] for r in records], "s-",
           label="stated: RMS predicted σ x σ scale x unseen-error factor")
    a.errorbar(x, [r["stated"]["nena_nm"] or np.nan for r in records],
               yerr=[r["stated"]["nena_uncertainty_nm"] or 0 for r in records], fmt="d-",
               label="NeNA linked, corrected")
    a.plot(x, [r["stated"]["nena_picasso_nm"] or np.nan for r in records], "v:", label="NeNA as Picasso (ours)")
    a.plot(x, [r["picasso nena nm"] or np.nan for r in records], "x", label="Picasso's own NeNA")
    names = [r["case"].replace("new after the jump rule", "after jump rule") for r in records]  # tick labels
    a.set_xticks(x, names, rotation=30, ha="right", fontsize="small")
    a.set_ylabel("precision per axis [nm]")
    a.grid(alpha=0.3)
    a.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.4), ncol=2)  # below: no line hidden
    for key, mark in (("1", "o-"), ("2", "s-"), (">=3", "^-")):
        b.plot(x, [r["correlation"][key] for r in records], mark, label=f"lag {key}")
    b.plot(x, [r["link"]["recovered"] for r in records], "k*--", label="events recovered by linking")
    b.plot(x, [r["link"]["merged with another emitter"] for r in records], "r*--",
           label="events merged with another emitter")
    b.plot(x, [r["link"]["wrong links"]["events merged by a well-placed link"] for r in records], "m+--",
           label="merged by a link between well-placed localizations")
    b.plot(x, [r["link"].get("well placed only", {}).get("recovered", np.nan) for r in records], "g*:",
           label="recovered, well-placed localizations only")
    b.plot(x, [r["link"].get("well placed only", {}).get("merged with another emitter", np.nan) for r in records],
           "g+:", label="merged with another emitter, well-placed localizations only")
    res = [r["link"].get("resolvable") or {} for r in records]  # too few to judge: not drawn
    res = [v if v.get("multi-frame events", 0) >= MIN_RESOLVABLE else {} for v in res]
    b.plot(x, [np.nan if v.get("recovered") is None else v["recovered"] for v in res], "b*-.",
           label=f"recovered, resolvable events only (no neighbour on within the Sparrow limit; >= {MIN_RESOLVABLE})")
    b.plot(x, [np.nan if v.get("merged with another emitter") is None else v["merged with another emitter"]
               for v in res], "b+-.", label="merged with another emitter, resolvable events only")
    b.plot(x, [r["link"]["neighbour floor"] for r in records], "rx:",
           label="another emitter within the radius next to the event (truth)")
    b.plot(x, [(r["link"].get("crowding") or {}).get("joinable_fraction") or np.nan for r in records], "D:",
           color="tab:brown", mfc="none", label="events with a chance neighbour a link reaches (no truth: `link`)")
    b.set_xticks(x, names, rotation=30, ha="right", fontsize="small")
    b.set_ylabel("correlation of consecutive errors / fraction")
    b.set_ylim(-0.05, 1.05)
    b.grid(alpha=0.3)
    b.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.4), ncol=2)
    fig.savefig(path, dpi=100, bbox_inches="tight")  # the legends below the axes included


def stream_report(big: dict[str, Any], header: list[str]) -> list[str]:
    cpu_rate = big["rows"] / big["cli cpu s"] if big["cli cpu s"] > 0 else None
    return [*header, "", "## Streaming a large table", "",
            f"A simulated table of {big['rows']:,} localizations (blinking emitters over a 512 x 512 px field, ~100 "
            f"per frame, geometric on-times of mean 3 frames; parquet, {big['input mb']:.0f} MB, written in "
            f"{big['write table s']:.0f} s), max_dark 1. The CLI links with its defaults (radius "
            f"{big['cli radius']}).", "",
            "| what | rows | wall s | M rows/s (wall) | CPU s | M rows per CPU s | peak RssAnon MB |",
            "|---|---|---|---|---|---|---|",
            f"| `python -m decode_mem.link` (child process: reading, linking, writing both files, "
            f"{big['output mb']:.0f} MB) | {big['rows']:,} | {big['cli wall s']:.1f} | "
            f"{big['cli rows/s'] / 1e6:.2f} | {big['cli cpu s']:.1f} | {fmt(cpu_rate and cpu_rate / 1e6)} | "
            f"{fmt(big['cli peak rss_anon mb'], 0)} |",
            *[f"| `Linker.feed` alone in the benchmark's process, {label} (reading excluded: {a['read s']:.1f} s) | "
              f"{big['rows']:,} | {a['link s']:.1f} | {a['link rows/s'] / 1e6:.2f} | {a['link cpu s']:.1f} | "
              f"{a['link rows per cpu s'] / 1e6:.2f} | n/a |" for label, a in big["alone"].items()], "",
            "CPU s: user + system time of the process (the child's from getrusage of the children). The linker "
            "runs on one thread; on this shared machine the wall time includes waiting for a core, so rows per "
            "CPU second is the linker's own speed and the wall rate what this run got.", "",
            *compile_lines(big.get("compile")), ""]


def compile_lines(c: dict[str, float] | None) -> list[str]:
    """The numba kernels' one-time compile cost (not measured before it was added: n/a)."""
    if not c:
        return ["The kernels' compile time: not measured in this run."]
    return [f"The linker's kernels are compiled by numba on the first link after an install and cached: importing "
            f"`decode_mem.link` and linking 1000 rows in a fresh process took {c['first link s (compiles)']:.1f} s "
            f"with an empty cache, {c['next link s (cached)']:.1f} s with it filled (the runs above used a filled "
            f"cache)."]


def draw_stream(big: dict[str, Any], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    tr = np.array(big["rss trace"] or [(0.0, np.nan)])
    ax.plot(tr[:, 0], tr[:, 1], "-", label="RssAnon of `python -m decode_mem.link` (1 s samples)")
    ax.axhline(1024, color="r", ls="--", label="goal: 1 GiB")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("MB")
    ax.set_ylim(0, max(1100, float(np.nanmax(tr[:, 1])) * 1.1))
    ax.set_title(f"linking {big['rows']:,} localizations, streamed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=100)


def main() -> None:
    from report_files import add_render_option, write_report_files

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000_000,
                   help="localizations of the streamed table (default 1e7; 0: skip it)")
    p.add_argument("--cases", type=int, default=len(CASES), help="the first N movies only (0: none)")
    p.add_argument("--out", default=str(RESULTS / "postprocess.md"), help="the movies' report")
    p.add_argument("--model", help="the localizer (default: the shipped small model, data/models/default_2d.pt); "
                                   "linking and --no_truth take the error correlation measured for it "
                                   "(decode_mem.link.correlation.for_model)")
    p.add_argument("--stream_out", default=str(RESULTS / "postprocess_stream.md"), help="the large table's report")
    add_render_option(p, "postprocess")
    args = p.parse_args()
    if args.render is not None:  # the movies' report again from its record (its header and correlation in it)
        rec = json.loads(args.render.read_text())
        write_report_files(Path(args.out), report(rec["records"], rec["header"], rec["correlation"]),
                           lambda png: draw(rec["records"], png), rec)
        print(f"wrote {args.out}")
        return
    at, load0 = commit(), load_average()
    picasso = find_picasso_python() if args.cases else None
    records = []
    big = None
    with tempfile.TemporaryDirectory(prefix="bench_postprocess_") as tmp:
        work = Path(tmp)
        for seed, (name, settings) in enumerate(CASES[:args.cases], start=1):
            case_dir = work / f"case{seed}"
            case_dir.mkdir()
            records.append(measure_case(name, settings, case_dir, seed, picasso, args.model))
        if args.rows > 0:
            print("  big table ...", file=sys.stderr)
            big = big_link(work, args.rows)
    machine = f"Machine: {machine_line('torch default', load_start=load0, at=at)}."
    if records:
        header = ["# Linking, precision and resolution without ground truth, checked against the truth", "",
                  f"`{command_line()}`", "", machine,
                  f"Picasso: {picasso_version(picasso) if picasso else 'not installed (its columns say not run)'}, "
                  f"in its own interpreter, numba 2 threads.",
                  f"Movies: 64 x 64 px x {FRAMES} frames, reference EMCCD, localized by "
                  f"{args.model or 'data/models/default_2d.pt'} (CPU). The machine is shared (2 cores, other jobs "
                  "running): times are upper bounds."]
        from decode_mem.link import for_model

        rho = for_model(args.model).to_dict()  # what measure_case linked and assessed with
        write_report_files(Path(args.out), report(records, header, rho), lambda png: draw(records, png),
                           {"records": records, "header": header, "model": args.model, "correlation": rho})
    if big is not None:
        header = ["# Linking a large table, streamed", "", f"`{command_line()}`", "", machine]
        write_report_files(Path(args.stream_out), stream_report(big, header), lambda png: draw_stream(big, png),
                           {"big": big})


if __name__ == "__main__":
    main()
