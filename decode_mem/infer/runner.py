"""``run_inference``: every stack of the inputs -> localization files, in one process or on dask.distributed.

Order of events: the model is loaded first (a bad checkpoint is a CheckpointError before any stack is
touched), the inputs are expanded and every stack's header read and its first frames checked against the
model's domain (``domain``: warnings, or with ``strict`` one ConfigError before anything is written), then
stack after stack: stream emitters block by block into the writers, close the writers, write ``<stem>.json``.
Progress, lines and warnings go to an ``InferObserver``; nothing here prints.
With ``workers``/``scheduler`` the stacks are cut into frame ranges that run as dask tasks; the client
takes their results strictly in frame order (a bounded number of tasks in flight) and streams them into
the same writers, so the files are those of a single-process run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.config import check_output_folder, resolve_device
from decode_mem.errors import ConfigError, DecodeMemError, StackError, Stopped, failure_reason
from decode_mem.infer.batch_report import ReportImage, assess_stack, correct_stack_drift, write_batch_report
from decode_mem.infer.config import InferConfig, check_stems, find_stacks, stem_of
from decode_mem.infer.device_peak import DevicePeak
from decode_mem.infer.domain import DomainCheck, check_domain, model_psf
from decode_mem.infer.domain_cache import as_record, domain_key, from_record, remembered_check
from decode_mem.infer.live_parts import progress_dir, read_manifest, summary_complete
from decode_mem.infer.observe import InferObserver
from decode_mem.infer.outputs import StackOutputs, remove_partials, summary_path
from decode_mem.infer.ranges import FrameRange
from decode_mem.infer.results import InferReport, StackFailure, StackSummary
from decode_mem.infer.work import EngineSettings, StackJob, cached_model, stream_emitters
from decode_mem.io.atomic import remove_path
from decode_mem.io.camera import Camera
from decode_mem.io.damage import Damage, DamageLog
from decode_mem.io.first_frames import FirstFramesMean, SummingReads
from decode_mem.io.metadata import CameraRequest, camera_gaps, camera_text
from decode_mem.io.provenance import generated_by
from decode_mem.io.stack import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.memory import read_host_memory
from decode_mem.model.trained import file_sha256
from decode_mem.tiling import CPU_BLOCK_PIXELS, block_length
from decode_mem.torch_facts import device_type


def run_inference(cfg: InferConfig, observer: InferObserver | None = None, command: str | None = None) -> InferReport:
    """Localize every stack named by ``cfg.inputs`` into ``cfg.out``, then write ``cfg.out/report.html``
    (``command``: the command line it shows); see the module docstring.

    Raises ConfigError / CheckpointError for problems that concern the whole run (bad model, bad settings,
    two inputs with the same output name, with ``strict`` data outside the model's domain) before any work;
    problems of single stacks are in ``failures``.
    """
    obs = observer or InferObserver()
    if cfg.two_colour is not None:  # two colour channels in every movie: their own run (infer.two_colour)
        from decode_mem.infer.two_colour import run_two_colour

        return run_two_colour(cfg, obs, command)
    t_start = time.perf_counter()
    check_output_folder(cfg.out)
    choice = cfg.model_choice
    model_path = choice.path
    # CheckpointError here, before any work; with dask the workers load their own copy, this one stays on the CPU
    model = cached_model(str(model_path), "cpu" if cfg.distributed else cfg.device)
    # the camera: --camera and its flags, then what each file states (io.metadata), then the model's
    request = CameraRequest.from_value(cfg.camera, cfg.camera_overrides, base=model.camera,
                                       base_label=f"the model's camera ({model_path.name})")
    camera, _ = request.resolve()  # a file that states nothing: the batch report's default scale
    if cfg.follow:  # one stack that is still being written
        from decode_mem.infer.live import follow_stack

        _say_choices(cfg, model, obs)
        return follow_stack(cfg, model, request, obs, command, t_start)
    found = find_stacks(cfg.inputs)
    check_stems(found.stacks)
    failures = [StackFailure(item, reason) for item, reason in found.missing]
    psf_sigma = model.simulation.get("psf_sigma", 1.0)
    engine = EngineSettings(model=str(model_path), camera=camera, sizes=cfg.sizes, compile=cfg.compile,
                            device=cfg.device, threshold=cfg.threshold, threads=cfg.threads)
    extras = {"model": str(model_path.resolve()), "model_choice": choice.as_dict(), "model_step": model.step,
              "camera": camera.to_dict(), "settings": cfg.settings(), "generated_by": generated_by()}
    writer_options = {"three_d": bool(model.config.use_z), "psf_sigma": float(np.mean(psf_sigma))}

    summaries: list[StackSummary] = []
    jobs: list[StackJob] = []
    psf = model_psf(model)  # a 3-D model's PSF: the domain check fits the spots with it
    model_sha = file_sha256(model_path)
    on_cpu = device_type(cfg.device or "auto") == "cpu"
    for path in found.stacks:  # plan: headers only, so that a bad stack is known before the work starts
        stem = stem_of(path)
        done = summary_path(cfg.out, stem)
        if cfg.resume and summary_complete(done):
            summaries.append(StackSummary.finished_before(path, done))
            remove_path(progress_dir(cfg.out, stem))  # a journal a kill left after the summary was written
            obs.message(summaries[-1].line())
            continue
        try:
            with open_stack(path, **cfg.stack_options) as stack:
                shape, dtype = stack.shape, stack.dtype
                stack_camera, sources = request.resolve(stack.metadata)
                key = resume_key(cfg, model_sha, stack_camera, shape, dtype)
                # a resumed stack's check is its first run's (recorded in its journal): the same frames, checked once
                # a repeat run on the same file, model and camera reads the check this machine remembers
                check = functools.partial(check_domain, stack, stack_camera, model.envelope, psf=psf)
                domain = (_journal_domain(cfg, stem, key) or remembered_check(
                    domain_key(path, cfg.stack_options, key["camera"], model_sha, shape, dtype), check))
                file_metadata = stack.metadata
        except Exception as e:  # a bad stack must not stop the batch; the reason is reported
            failures.append(StackFailure(str(path), failure_reason(e)))
            continue
        gaps = camera_gaps(file_metadata, sources)
        if gaps:
            obs.warning(f"{path}: {gaps}")
        if not domain.ok:
            obs.warning(domain.message(str(path)))
        # on a CPU 'auto' blocks are also short in pixels: the journal's unit, what a kill or a stop redoes
        settings = dataclasses.replace(engine, camera=stack_camera).with_block(
            block_length(shape, dtype.itemsize, cfg.block, cfg.streams,
                         max_pixels=CPU_BLOCK_PIXELS if on_cpu else None))
        start, settings = _resume_point(cfg, stem, key, settings)  # ConfigError: settings that change results
        if start:
            obs.message(f"{stem}: resuming at frame {start} of {shape[0]} (the frames before it are in "
                        f"{progress_dir(cfg.out, stem)})")
        if cfg.distributed and settings.sizes.automatic:
            settings = _sizes_for_workers(settings, model, shape, dtype.itemsize)
        jobs.append(StackJob(len(jobs), path, stem, shape, str(dtype), settings, domain, start=start, key=key,
                             camera_sources=sources, file_metadata=file_metadata.as_json() if file_metadata else {},
                             camera_warning=gaps))
    if failures and not jobs and not summaries:  # nothing to do: a bad input, not a batch with failures
        raise StackError(failures[0].line() if len(failures) == 1 else
                         f"none of the {len(failures)} inputs can be read: " + "; ".join(f.line() for f in failures))
    for f in failures:
        obs.warning(f"skipped {f.line()}")
    outside = [job for job in jobs if not job.domain.ok]
    if cfg.strict and outside:
        raise ConfigError(f"--strict: {len(outside)} stack(s) outside the model's domain, nothing written: "
                          + " | ".join(job.domain.message(str(job.path)) for job in outside))

    out_existed = Path(cfg.out).exists()
    _say_choices(cfg, model, obs)  # after the checks: a run that stops at a bad setting prints only the error
    obs.run_started(len(jobs))
    superres: ReportImage | None = None  # the report's image: of the first stack done with localizations
    quality_figures: dict[str, bytes] = {}  # the report's FRC and NeNA figure of each stack, by stem
    with _Backend(cfg, jobs) as backend:
        for job in jobs:
            if job.start == 0:  # a resumed stack keeps its journal (and partial probability map)
                remove_partials(cfg.out, job.stem, cfg.formats)
            obs.stack_started(job.stem, job.shape[0])
            image = ReportImage(job.shape[1:], job.settings.camera.pixel_size) if cfg.report and superres is None \
                else None
            try:
                summary = _one_stack(cfg, backend, job, writer_options, extras, obs, image, quality_figures)
            except Stopped:
                obs.stack_finished(job.stem)
                raise
            except Exception as e:  # e.g. a corrupt frame in the middle of a file
                if isinstance(e, ConfigError) and not any(not s.skipped for s in summaries):
                    # settings that cannot apply (sizes beyond --memory_limit), found before any stack was done:
                    # a bad setting, exit 2 with nothing written, rather than a bad stack
                    remove_partials(cfg.out, job.stem, cfg.formats)
                    if not out_existed:
                        with contextlib.suppress(OSError):
                            Path(cfg.out).rmdir()  # made by this run, empty
                    raise
                failures.append(StackFailure(str(job.path), failure_reason(e)))
                obs.warning(f"skipped {failures[-1].line()}")
            else:
                summaries.append(summary)
                obs.message(summary.line())
                if cfg.quality and summary.extra.get("quality"):  # --quality's numbers, on the console too
                    from decode_mem.evaluate.no_truth import quality_line

                    obs.message(f"{summary.stem}: {quality_line(summary.extra['quality'])}")
                if image is not None and summary.localizations > 0:
                    superres = image
            obs.stack_finished(job.stem)
        peaks = backend.worker_peaks()
    obs.run_finished()
    report = InferReport(tuple(summaries), tuple(failures), str(model_path), time.perf_counter() - t_start, peaks)
    if cfg.report and (summaries or failures):
        before = sum(s.frames for s in summaries if s.skipped)
        rows = [("model", str(model_path)), ("device", str(cfg.device or "auto")),
                ("stacks", f"{sum(not s.skipped for s in summaries)} done now, "
                           f"{sum(s.skipped for s in summaries)} done before (--resume), {len(failures)} failed"),
                ("frames", f"{report.frames} now" + (f", {before} before" if before else "")),
                ("wall time", f"{report.wall_s:.1f} s")]
        rows += [(f"camera of {s.stem}", camera_text(Camera(**s.extra["camera"]), s.extra["camera_sources"]))
                 for s in summaries if "camera_sources" in s.extra][:MAX_CAMERA_ROWS]
        if superres is None and cfg.report:  # every stack was done before: its image from its file
            superres = _image_from_files(summaries, Path(cfg.out), camera.pixel_size)
        write_batch_report(Path(cfg.out), f"decode_mem infer: {Path(cfg.out).name}", summaries, failures,
                           obs.memory_history(), rows, command, camera.pixel_size, superres, quality_figures)
    return report


MAX_CAMERA_ROWS = 20  # the report's camera rows: one per stack, for the first ones of a large batch


def _sizes_for_workers(settings: EngineSettings, model: Any, shape: tuple[int, ...], itemsize: int) -> EngineSettings:
    """'auto' sizes chosen once, here, for every worker of a distributed run: workers that chose for
    themselves (each with its own baseline memory) could cut the same stack into different tiles."""
    from decode_mem.infer.predict import choose_for_stack

    sizes = dataclasses.replace(settings.sizes, streams=1)  # one stream's sizes, as choose gives every stream
    choice = choose_for_stack(model.net, tuple(shape), itemsize, resolve_device(settings.device or "auto"), sizes)
    chosen = dataclasses.replace(settings.sizes, chunk_size=choice.plan.chunk_size, batch_size=choice.plan.batch_size)
    return dataclasses.replace(settings, sizes=chosen)


def _one_stack(cfg: InferConfig, backend: _Backend, job: StackJob, writer_options: dict[str, Any],
               extras: dict[str, Any], obs: InferObserver, image: ReportImage | None = None,
               quality_figures: dict[str, bytes] | None = None) -> StackSummary:
    t0, cpu0 = time.perf_counter(), time.process_time()
    peak = _Peak()
    sizes: dict[str, Any] = {}
    device_peak = DevicePeak().start()
    outs = StackOutputs(cfg.out, job.stem, cfg.formats, pixel_size=job.settings.camera.pixel_size,
                        shape=job.shape, source=str(job.path), source_dtype=job.dtype,
                        prob_map_block=job.settings.block if cfg.write_probability_map else None,
                        journal=True, block=job.settings.block, journal_seconds=cfg.journal_seconds,
                        on_written=image.add if image is not None else None,  # the report's image, as written
                        **writer_options)
    given = _sizes_kept({k: getattr(job.settings.sizes, k) for k in ("chunk_size", "batch_size")})
    start, damage_before = 0, []
    try:  # a signal from the journal's start on says where the stack stopped and how to continue
        start = outs.begin(job.start > 0, {**job.key, **({"sizes": given} if given else {}),
                                           "domain": as_record(job.domain)})
        # frames repaired before the resume point (the first run's, from its journal): this run does not read them
        damage_before = [Damage(**d) for d in outs.journal.meta.get("damage", [])] if start and outs.journal else []
        stop, n_kept = start, 0
        with outs:
            try:
                outs.replay()  # a resumed stack: the frames done before, from its journal (written behind)
                if start:
                    obs.block_done(job.stem, start, None)
                if obs.stop_requested():  # a Cancel pressed before this stack's first block
                    raise Stopped("stop requested")
                for table, n_frames, worker_peak, result in backend.emitters(
                        job, peak, sizes, outs.prob_map, start, first=image.widefield if image is not None else None):
                    # how the frames are cut and computed (a resumed run does the same); a new dict: the writer
                    # thread saves it
                    if stop == start and str(sizes.get("engine", "")).startswith("auto"):
                        obs.engine_chosen(job.stem, sizes["engine"])  # what --engine auto took, and why
                    if stop == start and sizes and outs.journal is not None:
                        kept = {"sizes": _sizes_kept(sizes), "compile": sizes.get("compile")}
                        outs.journal.meta = {**outs.journal.meta, **kept}
                    stop += n_frames
                    seen = backend.damage_so_far(job.stem)
                    if seen and outs.journal is not None:  # the journal's parts carry the repairs of the frames
                        covered = [d for d in (*damage_before, *seen.records) if d.frame < stop]  # they cover
                        if len(covered) != n_kept:  # (read ahead: later frames' repairs wait for their block)
                            n_kept = len(covered)  # a new dict: the writer thread saves it
                            outs.journal.meta = {**outs.journal.meta,
                                                 "damage": [dataclasses.asdict(d) for d in covered]}
                    outs.write(table, stop)
                    obs.block_done(job.stem, n_frames, result)
                    peak.add(worker_peak)
                    if obs.stop_requested() and stop < job.shape[0]:
                        raise Stopped("stop requested")
            except (KeyboardInterrupt, Stopped) as e:  # Ctrl-C, SIGTERM, a Cancel button: keep what reached disk
                kept = outs.keep_progress()
                signum = getattr(e, "signum", 2 if isinstance(e, KeyboardInterrupt) else None)
                raise Stopped(f"{job.stem}: stopped at frame {kept} of {job.shape[0]}; the same command with --resume "
                              f"continues there (kept in {progress_dir(cfg.out, job.stem)})", signum=signum,
                              stem=job.stem, frame=kept, frames=job.shape[0]) from e
    except KeyboardInterrupt as e:  # before the writers were open, or while they closed: the journal stands
        kept = outs.journal.start if outs.journal is not None else start
        raise Stopped(f"{job.stem}: stopped at frame {kept} of {job.shape[0]}; the same command with --resume "
                      f"continues there (kept in {progress_dir(cfg.out, job.stem)})",
                      signum=getattr(e, "signum", 2), stem=job.stem, frame=kept, frames=job.shape[0]) from e
    peak.add(read_host_memory().get("rss_anon_mb"))
    measured_device = device_peak.as_dict(sizes.get("plan", {}))
    if measured_device is not None:
        sizes["measured_device"] = measured_device
    wall = time.perf_counter() - t0  # localization only; the drift correction is timed on its own
    cpu = time.process_time() - cpu0  # the process's CPU seconds (every thread) over the same span
    files, more = list(outs.paths), {}
    if cfg.drift:
        t_drift = time.perf_counter()
        try:
            written, more["drift"] = correct_stack_drift(outs.paths, Path(cfg.out))
        except StackError as e:  # e.g. too few localizations: the localizations stand, uncorrected
            obs.warning(f"{job.stem}: no drift correction: {e}")
            more["drift_warning"] = str(e)
        else:
            files += written
            more["drift"]["seconds"] = round(time.perf_counter() - t_drift, 3)
    if (cfg.quality or cfg.link) and outs.n_localizations > 0:  # linked molecules; precision and resolution
        try:
            written, quality, figure = assess_stack(outs.paths, Path(cfg.out), job.settings.camera.pixel_size,
                                                    cfg.link, cfg.model_path)
        except DecodeMemError as e:  # e.g. no predicted σ for the 'auto' radius: the localizations stand
            obs.warning(f"{job.stem}: no linking or precision estimate: {e}")
        else:
            files += written
            more.update(quality)
            if quality_figures is not None:
                quality_figures[job.stem] = figure
    notes, damage = backend.read_notes.pop(job.stem, ([], None))
    if damage_before:
        damage = DamageLog([*damage_before, *(damage.records if damage else ())])
    for line in notes:  # series left out, damaged frames repaired (Stack.notes)
        obs.warning(line)
    if damage:
        more["damage"] = damage.as_json()
    summary = StackSummary(str(job.path), job.stem, job.shape[0], outs.n_localizations, wall, peak.value,
                           (*map(str, files), str(summary_path(cfg.out, job.stem))),
                           extra=dict(extras, camera=job.settings.camera.to_dict(),
                                      camera_sources=dict(job.camera_sources),
                                      **({"file_metadata": job.file_metadata} if job.file_metadata else {}),
                                      **({"camera_warning": job.camera_warning} if job.camera_warning else {}),
                                      cpu_s=round(cpu, 3), shape=list(job.shape),
                                      domain_warnings=list(job.domain.warnings), domain=job.domain.numbers,
                                      **({"sizes": sizes} if sizes else {}),
                                      **({"resumed_at_frame": start, "resume_files": outs.resume_files}
                                         if start else {}), **more),
                           computed=job.shape[0] - start)
    outs.finish(summary.as_dict())
    return summary


class _Peak:
    def __init__(self) -> None:
        self.value: float | None = None

    def add(self, mb: float | None) -> None:
        if mb is not None and (self.value is None or mb > self.value):
            self.value = mb


class _Backend:
    """Where the engine runs: this process, or a dask cluster (``decode_mem.infer.dask_backend``)."""

    def __init__(self, cfg: InferConfig, jobs: list[StackJob]) -> None:
        self.cfg, self.jobs = cfg, jobs
        self._dask: Any = None
        self.read_notes: dict[str, tuple[list[str], Any]] = {}  # stem -> (Stack.notes(), Stack.damage) once read
        self._reading: dict[str, DamageLog] = {}  # stem -> the damage log of the stack being read (in this process)

    def __enter__(self) -> _Backend:
        if self.cfg.distributed and self.jobs:
            from decode_mem.infer.dask_backend import DaskBackend

            self._dask = DaskBackend(self.cfg, self.jobs).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dask is not None:
            self._dask.__exit__(*exc)

    def damage_so_far(self, stem: str) -> DamageLog | None:
        """The repairs of ``stem``'s frames read so far (in this process or reported by dask workers)."""
        if self._dask is not None:
            return self._dask.damage.get(stem)
        return self._reading.get(stem)

    def emitters(self, job: StackJob, peak: _Peak, sizes: dict[str, Any], prob_map: Any = None,
                 start: int = 0, first: FirstFramesMean | None = None) -> Iterator[tuple[EmitterTable, int,
                                                                                        float | None, Any]]:
        """``(table, frames it covers, peak RssAnon of the process that made it, BlockResult or None)`` in frame
        order from frame ``start`` on; ``sizes`` receives the chosen tile/batch sizes and why (in this process;
        dask workers choose their own); ``first`` sums the stack's first frames as they are read, where they are
        read here from frame 0."""
        if self._dask is not None:
            for table, n_frames, worker_peak in self._dask.emitters(job):
                yield table, n_frames, worker_peak, None
            log = self._dask.damage.pop(job.stem, DamageLog())  # what the workers repaired, range by range
            with open_stack(job.path, **self.cfg.stack_options) as opened:  # the reader's own choices (headers only)
                notes = opened.reader_notes
            line = log.line(str(job.path))
            self.read_notes[job.stem] = ([*notes, *([line] if line else [])], log)
            return
        done: list[Any] = []

        def on_plan(choice: Any) -> None:
            # with the compile decision predict made; the journal keeps it and a resumed run takes it (_resume_point)
            sizes.update(choice.as_dict())

        def on_block(result: Any) -> None:
            done.append(result)
            peak.add(read_host_memory().get("rss_anon_mb"))

        with open_stack(job.path, **self.cfg.stack_options) as stack:
            if stack.shape != job.shape:
                raise ConfigError(f"{job.path}: the stack changed while the run was going on")
            if start >= job.shape[0]:
                return
            self._reading[job.stem] = stack.damage
            # a resumed stack: frames start .. T-1, their context the real frames around them (the blocks, hence
            # the emitters, of one pass over the whole stack)
            source = FrameRange(stack, start, job.shape[0]) if start else stack
            if first is not None and not start:  # the report's widefield image, without reading the frames again
                source = SummingReads(source, first)
            for table in stream_emitters(source, job.settings, on_block=on_block, on_plan=on_plan,
                                         prob_map=prob_map):
                result = done.pop() if done else None
                if start and len(table):
                    table = EmitterTable({**table.columns, "frame": table["frame"] + start})
                yield table, result.n_frames if result is not None else 0, None, result
            self.read_notes[job.stem] = (stack.notes(), stack.damage)  # io.damage: frames repaired as read
            self._reading.pop(job.stem, None)

    def worker_peaks(self) -> dict[str, float]:
        return self._dask.worker_peaks() if self._dask is not None else {}


def resume_key(cfg: InferConfig, model_sha: str, camera: Any, shape: tuple[int, ...], dtype: Any) -> dict[str, Any]:
    """What a stack's localizations depend on beyond the frames: a resumed run must have the same (its journal
    records the first run's)."""
    return {"model_sha256": model_sha, "series": cfg.series, "camera": camera.to_dict(), "threshold": cfg.threshold,
            "amp": cfg.amp,
            "device": str(cfg.device), "probability_map": bool(cfg.write_probability_map),
            "shape": [int(v) for v in shape], "dtype": str(dtype)}


def _resume_point(cfg: InferConfig, stem: str, key: dict[str, Any],
                  settings: EngineSettings) -> tuple[int, EngineSettings]:
    """``(first frame to compute, settings)`` of a stack: with ``--resume`` after the journal a stopped or killed
    run left, cut into the same blocks and tiles as that run (so the emitters are those of one pass); a journal of
    other settings is a ConfigError naming the difference."""
    state = read_manifest(progress_dir(cfg.out, stem)) if cfg.resume else None
    if not state or not state.get("parts"):
        return 0, settings
    before = state.get("meta", {})
    differ = [k for k in key if before.get(k) != key[k]]
    if differ:
        what = "; ".join(f"{k}: {_short(before.get(k))} then, {_short(key[k])} now" for k in differ)
        raise ConfigError(f"{progress_dir(cfg.out, stem)}: cannot resume {stem} with other settings ({what}); "
                          "run it with the first run's settings, or without --resume to start it again")
    settings = settings.with_block(int(state["block"]))
    kept = before.get("sizes")
    if kept and settings.sizes.automatic:
        settings = dataclasses.replace(settings, sizes=dataclasses.replace(settings.sizes, **kept))
    if settings.compile == "auto" and isinstance(before.get("compile"), bool):
        settings = dataclasses.replace(settings, compile=before["compile"])
    return int(state["parts"][-1]["stop"]), settings


def _journal_domain(cfg: InferConfig, stem: str, key: dict[str, Any]) -> DomainCheck | None:
    """With ``--resume``, the domain check the first run recorded in its journal (same settings only: other
    settings are refused by ``_resume_point``); None when there is none."""
    state = read_manifest(progress_dir(cfg.out, stem)) if cfg.resume else None
    meta = (state or {}).get("meta", {})
    if not state or not state.get("parts") or "domain" not in meta or any(meta.get(k) != key[k] for k in key):
        return None
    return from_record(meta["domain"])


def _sizes_kept(sizes: dict[str, Any]) -> dict[str, Any]:
    """The tile and batch sizes the planner chose (what a resumed run reuses)."""
    return {k: sizes[k] for k in ("chunk_size", "batch_size")
            if isinstance(sizes.get(k), int) or sizes.get(k) == "whole"}


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _image_from_files(summaries: list[StackSummary], out: Path, pixel_size: float) -> ReportImage | None:
    """The report's image of the first stack with localizations when every stack was done by an earlier run:
    counted from its localization file, streamed (memory: the image)."""
    from decode_mem.io.localizations import FORMATS, iter_localizations

    for s in summaries:
        files = [out / name for name in s.as_dict()["outputs"] if Path(name).suffix.lower() in FORMATS
                 and not Path(name).stem.endswith("_undrift")]
        if s.localizations <= 0 or not files or not files[0].is_file() or len(s.extra.get("shape", ())) != 3:
            continue
        image = ReportImage(tuple(s.extra["shape"][1:]), pixel_size)
        for table in iter_localizations(files[0], pixel_size=pixel_size):
            image.add(table)
        return image
    return None


def _say_choices(cfg: InferConfig, model: Any, obs: InferObserver) -> None:
    """What the run takes that the user did not name, said once, after the checks: the shipped model for this device
    (no model given), that 'openvino-int8' quantizes the network before its first block, and that 'auto' quantizes
    and checks int8 against fp32 there (the first run on this machine and model; later runs read what it made)."""
    choice = cfg.model_choice
    if not choice.given:
        obs.message(f"no --model given: using the shipped default model for this device, {choice.path} ({choice.why})")
    if cfg.engine == "openvino-int8" and model.simulation:
        from decode_mem.footprint.engines import converted_dir
        from decode_mem.model.engine import int8_kept

        if not int8_kept(model.net, converted_dir(), model.simulation):
            obs.message(f"engine openvino-int8: quantizing the network to int8 for this machine and model before the "
                        f"first block (once: later runs read it from {converted_dir()} and start sooner)")
    if cfg.engine == "auto" and model.simulation and device_type(cfg.device or "auto") == "cpu":
        from decode_mem.footprint.engines import converted_dir
        from decode_mem.infer.int8_check import int8_checked
        from decode_mem.model.engine import QUANTIZED, installed, int8_kept

        if installed(QUANTIZED[0]) and not int8_checked(model.net, model.simulation, cfg.amp):
            what = "checking int8" if int8_kept(model.net, converted_dir(), model.simulation) else \
                "quantizing the network to int8 and checking it"
            obs.message(f"engine auto: {what} against fp32 on windows simulated from the model's training physics "
                        f"before the first block (once for this machine and model: later runs read the verdict from "
                        f"{converted_dir()})")
