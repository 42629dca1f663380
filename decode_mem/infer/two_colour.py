"""``infer`` of two-colour movies (``InferConfig.two_colour``): each channel localized with its own model and camera,
channel 2 mapped onto channel 1 through the registration, one table with ``channel`` and ``dye`` columns.

A movie is a split-view file (its two halves, ``io.channels.ChannelView``, where the registration's bead images had
them) or two synchronized files (two cameras). Every movie is opened and checked first (frames as the registration
has them, the same frame count in both files, each channel's camera and domain), then the movies one by one. Within
a movie the two channels are localized block by block in step (``stream_emitters`` on each; one block of each at a
time, each block length chosen for both channels' frames together, so two channels hold about what one frame of
both would): channel 2's block is mapped onto channel 1's pixels (``Registration.to_channel1``; its precisions
scaled by the map's local scale; those it takes outside channel 1's frame are counted, not written: the two
channels share channel 1's field), the two blocks become one (``register.dyes.DyeAssigner``: each localization with
its channel and dye, or ratiometric pairs with their ratio and dye) and are written: ``<stem>.csv``/``.parquet``
(channel, dye, ratio columns), Picasso one file per channel (``<stem>_ch1.hdf5``, ``_ch2``) or, ratiometric, per
dye (``<stem>_<dye>.hdf5``, ``_unassigned``), each with its ``.yaml``, as Picasso opens channels.

``drift``: one drift, estimated from the localizations of both channels together, subtracted from every file
(``<stem>_undrift.<ext>``, ``<stem>_drift.csv``). ``<stem>.json`` (written last) records the registration, the
cameras and models of both channels, each dye's count and the estimated crosstalk; ``report.html`` shows them with
the merged image and the ratio histogram. Not yet with two colours: ``follow``, ``resume``, dask, ``link``, the
probability map (``TwoColour.check``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.config import check_output_folder, resolve_device
from decode_mem.errors import ConfigError, StackError, Stopped, failure_reason
from decode_mem.infer.batch_report import ReportImage, write_batch_report
from decode_mem.infer.config import InferConfig, check_stems, find_stacks, stem_of
from decode_mem.infer.domain import DomainCheck, check_domain, model_psf
from decode_mem.infer.observe import InferObserver
from decode_mem.infer.outputs import EXTRAS_2D, EXTRAS_3D
from decode_mem.infer.results import InferReport, StackFailure, StackSummary
from decode_mem.infer.work import EngineSettings, cached_model, stream_emitters
from decode_mem.io.atomic import atomic_output
from decode_mem.io.channels import ChannelView
from decode_mem.io.localizations import open_writer
from decode_mem.io.metadata import CameraRequest
from decode_mem.io.provenance import generated_by
from decode_mem.io.stack import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.memory import read_host_memory
from decode_mem.register.core import Registration, check_channel, check_frame
from decode_mem.register.dyes import DyeAssigner
from decode_mem.tiling import CPU_BLOCK_PIXELS, block_length

SUFFIX = {"csv": ".csv", "parquet": ".parquet"}


@dataclass(frozen=True)
class Movie:
    """One two-colour movie: its file(s) (one split view, or channel 1's and channel 2's), the output stem, each
    channel's shape, camera and engine settings, and each channel's domain check."""

    paths: tuple[Path, ...]
    stem: str
    shape: tuple[tuple[int, int, int], tuple[int, int, int]]
    dtype: str
    settings: tuple[EngineSettings, EngineSettings]
    domain: tuple[DomainCheck, DomainCheck]
    camera_sources: tuple[dict[str, str], dict[str, str]] = field(default_factory=lambda: ({}, {}))


def run_two_colour(cfg: InferConfig, observer: InferObserver | None = None, command: str | None = None) -> InferReport:
    """Localize every two-colour movie of ``cfg.inputs`` into ``cfg.out`` (module docstring)."""
    obs = observer or InferObserver()
    t_start = time.perf_counter()
    tc = cfg.two_colour
    assert tc is not None
    reg: Registration = tc.loaded
    check_output_folder(cfg.out)
    path1 = cfg.model_path
    path2 = Path(tc.model2) if tc.model2 else path1
    models = (cached_model(str(path1), cfg.device), cached_model(str(path2), cfg.device))
    requests = tuple(CameraRequest.from_value(cam, cfg.camera_overrides, base=m.camera,
                                              base_label=f"the model's camera ({p.name})")
                     for cam, m, p in ((cfg.camera, models[0], path1), (tc.camera2 or cfg.camera, models[1], path2)))
    movies, failures = _plan(cfg, reg, models, requests)
    if failures and not movies:
        raise StackError(failures[0].line() if len(failures) == 1 else
                         f"none of the {len(failures)} inputs can be read: " + "; ".join(f.line() for f in failures))
    for f in failures:
        obs.warning(f"skipped {f.line()}")
    outside = [(m, k) for m in movies for k in (0, 1) if not m.domain[k].ok]
    if cfg.strict and outside:
        raise ConfigError(f"--strict: {len(outside)} channel(s) outside their model's domain, nothing written: "
                          + " | ".join(m.domain[k].message(f"{m.stem} channel {k + 1}") for m, k in outside))
    for m, k in outside:
        obs.warning(m.domain[k].message(f"{m.stem} channel {k + 1}"))
    if not cfg.model_choice.given:
        obs.message(f"no --model given: using the shipped default model for this device, {path1} "
                    f"({cfg.model_choice.why}) for both channels" if not tc.model2 else
                    f"no --model given: channel 1 takes the shipped default model, {path1}")
    obs.run_started(len(movies))
    summaries: list[StackSummary] = []
    superres: ReportImage | None = None
    figures: list[tuple[str, bytes]] = []
    for movie in movies:
        obs.stack_started(movie.stem, movie.shape[0][0])
        image = ReportImage(movie.shape[0][1:], movie.settings[0].camera.pixel_size) \
            if cfg.report and superres is None else None
        try:
            summary, figure = _one_movie(cfg, reg, movie, (path1, path2), obs, image)
        except Stopped:
            obs.stack_finished(movie.stem)
            raise
        except Exception as e:  # a movie that fails must not stop the batch
            if isinstance(e, ConfigError) and not summaries:
                raise
            failures.append(StackFailure(" + ".join(map(str, movie.paths)), failure_reason(e)))
            obs.warning(f"skipped {failures[-1].line()}")
        else:
            summaries.append(summary)
            obs.message(summary.line())
            obs.message(f"{movie.stem}: {dye_line(summary.extra['two_colour']['dyes'])}; "
                        f"{summary.extra['two_colour']['channel2_outside_channel1']} of channel 2's localizations "
                        "fell outside channel 1's frame (not written)")
            if image is not None and summary.localizations > 0:
                superres = image
            if figure is not None:
                figures.append((f"dyes of {movie.stem}: the ratio of each pair", figure))
        obs.stack_finished(movie.stem)
    obs.run_finished()
    report = InferReport(tuple(summaries), tuple(failures), str(path1), time.perf_counter() - t_start)
    if cfg.report and (summaries or failures):
        pixel = movies[0].settings[0].camera.pixel_size
        rows = [("models", f"channel 1 {path1}" + (f", channel 2 {path2}" if path2 != path1 else " (both)")),
                ("registration", f"{tc.registration} ({reg.layout}; map {reg.transform.name}, leave-one-out error "
                                 f"{reg.tre.get('leave_one_out_rms', float('nan')):.2f} nm RMS)"),
                ("device", str(cfg.device or "auto")), ("movies", f"{len(summaries)} done, {len(failures)} failed"),
                ("frames", f"{report.frames}"), ("wall time", f"{report.wall_s:.1f} s")]
        rows += [(f"dyes of {s.stem}", dye_line(s.extra["two_colour"]["dyes"])) for s in summaries]
        write_batch_report(Path(cfg.out), f"decode_mem infer (two colours): {Path(cfg.out).name}", summaries, failures,
                           obs.memory_history(), rows, command, pixel, superres, figures=figures)
    return report


def dye_line(d: dict[str, Any]) -> str:
    """Each dye's count, the unassigned and the crosstalk, in one line (``DyeAssigner.summary``)."""
    counts = ", ".join(f"{name} {n}" for name, n in d["dyes"].items())
    if d["mode"] != "ratiometric":
        o = d["overlap"]
        share = o["channel1_with_partner"]
        return (f"{counts} localizations; " + ("n/a" if share is None else f"{100 * share:.1f} %") +
                " of channel 1's have one of channel 2 within the pair radius")
    ct = d["crosstalk"]["overall"]
    assigned = d["assigned_share"]
    return (f"{counts}, unassigned {d['unassigned']} (of them {d['unpaired']} seen in one channel only, "
            f"{d.get('inconsistent_pairs', 0)} pairs whose positions disagree); assigned "
            + ("n/a" if assigned is None else f"{100 * assigned:.1f} %") + ", estimated crosstalk "
            + ("n/a" if ct is None else f"{100 * ct:.2f} %"))


def _inputs(cfg: InferConfig, reg: Registration) -> tuple[list[tuple[Path, ...]], list[StackFailure]]:
    """The movies' files: each stack a split view, or the inputs in pairs (two cameras)."""
    if reg.split:
        found = find_stacks(cfg.inputs)
        check_stems(found.stacks)
        return [(p,) for p in found.stacks], [StackFailure(i, r) for i, r in found.missing]
    paths = [Path(p) for p in cfg.inputs]
    missing = [StackFailure(str(p), "no such file or directory") for p in paths if not p.exists()]
    if missing:  # a pair with a missing half cannot be localized: the whole run is a bad input
        raise StackError(missing[0].line())
    pairs = [(paths[i].resolve(), paths[i + 1].resolve()) for i in range(0, len(paths), 2)]
    check_stems(tuple(p[0] for p in pairs))
    return pairs, []


def _plan(cfg: InferConfig, reg: Registration, models: tuple[Any, Any], requests: tuple[CameraRequest, CameraRequest]
          ) -> tuple[list[Movie], list[StackFailure]]:
    """Every movie opened and checked (headers, the first frames' domain) before any work."""
    files, failures = _inputs(cfg, reg)
    on_cpu = resolve_device(cfg.device or "auto").type == "cpu"
    psfs = tuple(model_psf(m) for m in models)
    base = EngineSettings(model="", camera=requests[0].resolve()[0], sizes=cfg.sizes, compile=cfg.compile,
                          device=cfg.device, threshold=cfg.threshold, threads=cfg.threads)
    movies = []
    for paths in files:
        try:
            with ExitStack() as stack:
                stacks = [stack.enter_context(open_stack(p, **cfg.stack_options)) for p in paths]
                views = _views(reg, stacks, paths)
                if views[0].shape[0] != views[1].shape[0]:
                    raise StackError(f"{paths[0]} has {views[0].shape[0]} frames, {paths[1]} {views[1].shape[0]}: "
                                     "two cameras' movies of one acquisition have the same frames")
                settings, domains, sources = [], [], []
                for k, (view, s) in enumerate(zip(views, (stacks[0], stacks[-1]), strict=True)):
                    camera, src = requests[k].resolve(s.metadata)
                    if camera.has_maps and reg.split:
                        raise ConfigError(f"{paths[0]}: per-pixel sCMOS maps with a split view are not cut into "
                                          "halves yet: give the camera without its maps")
                    domains.append(check_domain(view, camera, models[k].envelope, psf=psfs[k]))
                    settings.append(dataclasses.replace(base, model=str(cfg.model_path if k == 0 else
                                                                       (cfg.two_colour.model2 or cfg.model_path)),
                                                        camera=camera))
                    sources.append(dict(src))
                t = views[0].shape[0]
                both = (t, max(v.shape[1] for v in views), sum(v.shape[2] for v in views))
                block = block_length(both, stacks[0].dtype.itemsize, cfg.block, cfg.streams,
                                     max_pixels=CPU_BLOCK_PIXELS if on_cpu else None)
                movies.append(Movie(tuple(paths), stem_of(paths[0]), (views[0].shape, views[1].shape),
                                    str(stacks[0].dtype), tuple(s.with_block(block) for s in settings),
                                    tuple(domains), tuple(sources)))
        except ConfigError:
            raise
        except Exception as e:
            failures.append(StackFailure(" + ".join(map(str, paths)), failure_reason(e)))
    return movies, failures


def _views(reg: Registration, stacks: list[Any], paths: tuple[Path, ...]) -> tuple[Any, Any]:
    """Each channel of a movie as a stack of its own, checked against the registration."""
    if reg.split:
        r1, r2 = check_frame(reg, stacks[0].shape[1:], str(paths[0]))
        return ChannelView(stacks[0], r1), ChannelView(stacks[0], r2)
    for k, (s, p) in enumerate(zip(stacks, paths, strict=True), 1):
        check_channel(reg, k, s.shape[1:], str(p))
    return stacks[0], stacks[1]


def map_channel2(table: EmitterTable, reg: Registration) -> EmitterTable:
    """Channel 2's localizations in channel 1's pixels (z minus the axial offset; precisions scaled by the map's
    affine scale)."""
    if len(table) == 0:
        return table
    x, y, z = reg.to_channel1(table["x"], table["y"], table["z"])
    cols = {**table.columns, "x": x, "y": y, "z": z}
    a = reg.transform.affine_part()
    scale = float(np.sqrt(abs(np.linalg.det(a[:, :2]))))
    for name in ("sigma_x", "sigma_y"):
        if name in table:
            cols[name] = table[name] * scale
    return EmitterTable(cols)


class _Outputs:
    """The files of one movie (module docstring), written atomically: all complete under their names, or none."""

    def __init__(self, out: Path, stem: str, formats: tuple[str, ...], assigner: DyeAssigner, *, pixel_size: float,
                 shape: tuple[int, int, int], three_d: bool, psf_sigma: float, source: str) -> None:
        self.assigner = assigner
        base = EXTRAS_3D if three_d else EXTRAS_2D
        extras = (*base, "channel", "dye", *(("ratio",) if assigner.ratiometric else ()))
        t, h, w = shape
        common = {"pixel_size": pixel_size, "width": w, "height": h, "frames": t, "three_d": three_d}
        self.plan: list[tuple[Path, dict[str, Any], Any]] = []  # (path, options, which rows: None all, (col, v))
        for fmt in formats:
            if fmt in SUFFIX:
                self.plan.append((out / f"{stem}{SUFFIX[fmt]}", {**common, "extras": extras}, None))
            else:  # picasso: one file per channel or dye
                groups = ([("ch1", ("channel", 1.0)), ("ch2", ("channel", 2.0))] if not assigner.ratiometric else
                          [(name, ("dye", float(k))) for k, name in enumerate(assigner.names, 1)]
                          + [("unassigned", ("dye", 0.0))])
                for name, rows in groups:
                    self.plan.append((out / f"{stem}_{name}.hdf5", {**common, "extras": base, "psf_sigma": psf_sigma,
                                                                    "source": source}, rows))
        self.writers: list[Any] = []
        self._stack = ExitStack()

    @property
    def paths(self) -> list[Path]:
        return [p for p, _, _ in self.plan]

    def __enter__(self) -> _Outputs:
        with ExitStack() as stack:
            self.writers = [stack.enter_context(open_writer(p, **options)) for p, options, _ in self.plan]
            self._stack = stack.pop_all()
        return self

    def write(self, table: EmitterTable) -> None:
        for (_, _, rows), writer in zip(self.plan, self.writers, strict=True):
            writer.write(table if rows is None else table.select(table[rows[0]] == rows[1]))

    def __exit__(self, *exc: Any) -> None:
        self._stack.__exit__(*exc)


def _one_movie(cfg: InferConfig, reg: Registration, movie: Movie, models: tuple[Path, Path], obs: InferObserver,
               image: ReportImage | None) -> tuple[StackSummary, bytes | None]:
    tc = cfg.two_colour
    assert tc is not None
    t0, cpu0 = time.perf_counter(), time.process_time()
    out = Path(cfg.out)
    pixel = movie.settings[0].camera.pixel_size
    tre = reg.tre.get("leave_one_out_rms")
    assigner = DyeAssigner(tc.dyes, radius=tc.pair_radius / pixel, window=tc.ratio_window,
                           registration_error=0.0 if tre is None else float(tre) / pixel)
    model1 = cached_model(str(models[0]), cfg.device)
    three_d = bool(model1.config.use_z)
    outs = _Outputs(out, movie.stem, cfg.formats, assigner, pixel_size=pixel, shape=movie.shape[0], three_d=three_d,
                    psf_sigma=float(np.mean(model1.simulation.get("psf_sigma", 1.0))),
                    source=str(movie.paths[0]))
    peak: list[float] = []
    positions: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # frame, x, y nm (for the drift only)
    n_locs = outside = 0
    out.mkdir(parents=True, exist_ok=True)
    done = 0
    with ExitStack() as stack:
        stacks = [stack.enter_context(open_stack(p, **cfg.stack_options)) for p in movie.paths]
        views = _views(reg, stacks, movie.paths)
        results: list[Any] = []
        streams = [stream_emitters(v, s, on_block=results.append) for v, s in zip(views, movie.settings, strict=True)]
        with outs:
            h1, w1 = movie.shape[0][1:]
            for a, b in zip(*streams, strict=True):
                b = map_channel2(b, reg)
                inside = (b["x"] >= -0.5) & (b["x"] < w1 - 0.5) & (b["y"] >= -0.5) & (b["y"] < h1 - 0.5)
                outside += int((~inside).sum())  # channel 2 sees past channel 1's field: counted, not written
                table = assigner.block(a, b.select(inside))
                outs.write(table)
                n_locs += len(table)
                if image is not None:
                    image.add(table)
                if cfg.drift:
                    positions.append((table["frame"].astype(np.int32), (table["x"] * pixel).astype(np.float32),
                                      (table["y"] * pixel).astype(np.float32)))
                result = results[0] if results else None  # channel 1's block (each stream adds its own)
                results.clear()
                n = result.n_frames if result is not None else 0
                done += n
                anon = read_host_memory().get("rss_anon_mb")
                if anon is not None:
                    peak.append(anon)
                obs.block_done(movie.stem, n, result)
                if obs.stop_requested() and done < movie.shape[0][0]:
                    raise Stopped(f"{movie.stem}: stopped at frame {done} of {movie.shape[0][0]} (two-colour runs "
                                  "are not resumable yet: nothing of this movie was kept)", stem=movie.stem,
                                  frame=done, frames=movie.shape[0][0])
    wall = time.perf_counter() - t0
    files = list(outs.paths)
    for p in outs.paths:
        yaml = p.with_suffix(".yaml")
        if p.suffix == ".hdf5" and yaml.is_file():
            files.append(yaml)
    more: dict[str, Any] = {}
    if cfg.drift:
        try:
            written, more["drift"] = _correct_drift(outs.paths, out, positions, movie.shape[0][0])
            files += written
        except StackError as e:  # e.g. too few localizations: the localizations stand, uncorrected
            obs.warning(f"{movie.stem}: no drift correction: {e}")
            more["drift_warning"] = str(e)
    dyes = assigner.summary()
    figure = None
    if assigner.ratiometric:
        from decode_mem.register.plot import ratio_png

        figure = ratio_png(assigner)
    summary = StackSummary(
        str(movie.paths[0]), movie.stem, movie.shape[0][0], n_locs, wall,
        max(peak, default=None), (*map(str, files), str(out / f"{movie.stem}.json")),
        extra={"model": str(models[0].resolve()), "model_channel2": str(models[1].resolve()),
               "camera": movie.settings[0].camera.to_dict(), "camera_channel2": movie.settings[1].camera.to_dict(),
               "camera_sources": movie.camera_sources[0], "camera_sources_channel2": movie.camera_sources[1],
               "settings": {**cfg.settings(), "two_colour": tc.settings()}, "generated_by": generated_by(),
               "cpu_s": round(time.process_time() - cpu0, 3), "shape": list(movie.shape[0]),
               "shape_channel2": list(movie.shape[1]),
               **({"stack_channel2": str(movie.paths[1])} if len(movie.paths) > 1 else {}),
               "domain_warnings": [f"channel {k + 1}: {w}" for k in (0, 1) for w in movie.domain[k].warnings],
               "two_colour": {"dyes": dyes, "registration": tc.registration,
                              "channel2_outside_channel1": outside}, **more})
    with atomic_output(out / f"{movie.stem}.json") as tmp:
        tmp.write_text(json.dumps(summary.as_dict(), indent=2, default=str) + "\n")
    return summary, figure


def _correct_drift(paths: list[Path], out: Path, positions: list[tuple[np.ndarray, ...]], n_frames: int
                   ) -> tuple[list[Path], dict[str, Any]]:
    """One drift from both channels' localizations, subtracted from every file: what was written and recorded."""
    from decode_mem.drift import correct_file
    from decode_mem.drift.estimate import estimate_drift

    frame = np.concatenate([p[0] for p in positions]) if positions else np.zeros(0, np.int32)
    x = np.concatenate([p[1] for p in positions]) if positions else np.zeros(0, np.float32)
    y = np.concatenate([p[2] for p in positions]) if positions else np.zeros(0, np.float32)
    est = estimate_drift(frame, x, y, n_frames=n_frames)
    del frame, x, y
    written: list[Path] = []
    for path in paths:
        done = correct_file(path, out, estimate=est)
        written += [done.corrected, done.table, done.plot]  # the same drift, beside each file
        if path.suffix == ".hdf5" and done.corrected.with_suffix(".yaml").is_file():
            written.append(done.corrected.with_suffix(".yaml"))
    span = est.dxdy.max(axis=0) - est.dxdy.min(axis=0)
    return written, {"method": est.method, "segments": len(est.centers), "span_nm": [round(float(v), 2) for v in span],
                     "table": f"{paths[0].stem}_drift.csv", "from": "both channels"}
