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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.config import check_output_folder
from decode_mem.errors import ConfigError, StackError
from decode_mem.infer.batch_report import ReportImage, correct_stack_drift, write_batch_report
from decode_mem.infer.config import InferConfig, check_stems, find_stacks, stem_of
from decode_mem.infer.device_peak import DevicePeak
from decode_mem.infer.domain import check_domain, model_psf
from decode_mem.infer.live_parts import summary_complete
from decode_mem.infer.observe import InferObserver
from decode_mem.infer.outputs import StackOutputs, remove_partials, summary_path
from decode_mem.infer.results import InferReport, StackFailure, StackSummary
from decode_mem.infer.work import EngineSettings, StackJob, cached_model, stream_emitters
from decode_mem.io.camera import with_fields
from decode_mem.io.provenance import generated_by
from decode_mem.io.stack import open_stack
from decode_mem.io.table import EmitterTable
from decode_mem.memory import read_host_memory
from decode_mem.tiling import block_length


def run_inference(cfg: InferConfig, observer: InferObserver | None = None, command: str | None = None) -> InferReport:
    """Localize every stack named by ``cfg.inputs`` into ``cfg.out``, then write ``cfg.out/report.html``
    (``command``: the command line it shows); see the module docstring.

    Raises ConfigError / CheckpointError for problems that concern the whole run (bad model, bad settings,
    two inputs with the same output name, with ``strict`` data outside the model's domain) before any work;
    problems of single stacks are in ``failures``.
    """
    obs = observer or InferObserver()
    t_start = time.perf_counter()
    check_output_folder(cfg.out)
    choice = cfg.model_choice
    model_path = choice.path
    # CheckpointError here, before any work; with dask the workers load their own copy, this one stays on the CPU
    model = cached_model(str(model_path), "cpu" if cfg.distributed else cfg.device)
    camera = cfg.camera or model.camera
    if cfg.camera_overrides:  # em_gain 1 on an EMCCD: see io.camera.with_fields
        camera = with_fields(camera, cfg.camera_overrides)
    if cfg.follow:  # one stack that is still being written
        from decode_mem.infer.live import follow_stack

        return follow_stack(cfg, model, camera, obs, command, t_start)
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
    for path in found.stacks:  # plan: headers only, so that a bad stack is known before the work starts
        stem = stem_of(path)
        done = summary_path(cfg.out, stem)
        if cfg.resume and summary_complete(done):
            summaries.append(StackSummary(str(path), stem, 0, 0, 0.0, None, (str(done),), skipped=True))
            obs.message(summaries[-1].line())
            continue
        try:
            with open_stack(path) as stack:
                shape, dtype = stack.shape, stack.dtype
                domain = check_domain(stack, camera, model.envelope, psf=psf)
        except Exception as e:  # a bad stack must not stop the batch; the reason is reported
            failures.append(StackFailure(str(path), _reason(e)))
            continue
        if not domain.ok:
            obs.warning(domain.message(str(path)))
        settings = engine.with_block(block_length(shape, dtype.itemsize, cfg.block, cfg.streams))
        if cfg.distributed and settings.sizes.automatic:
            settings = _sizes_for_workers(settings, model, shape, dtype.itemsize)
        jobs.append(StackJob(len(jobs), path, stem, shape, str(dtype), settings, domain))
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
    obs.run_started(len(jobs))
    superres: ReportImage | None = None  # the report's image: of the first stack done with localizations
    with _Backend(cfg, jobs) as backend:
        for job in jobs:
            summary_path(cfg.out, job.stem).unlink(missing_ok=True)  # the stack is not complete any more
            remove_partials(cfg.out, job.stem, cfg.formats)
            obs.stack_started(job.stem, job.shape[0])
            image = ReportImage(job.shape[1:], camera.pixel_size) if cfg.report and superres is None else None
            try:
                summary = _one_stack(cfg, backend, job, writer_options, extras, obs, image)
            except Exception as e:  # e.g. a corrupt frame in the middle of a file
                if isinstance(e, ConfigError) and not any(not s.skipped for s in summaries):
                    # settings that cannot apply (sizes beyond --memory_limit), found before any stack was done:
                    # a bad setting, exit 2 with nothing written, rather than a bad stack
                    remove_partials(cfg.out, job.stem, cfg.formats)
                    if not out_existed:
                        with contextlib.suppress(OSError):
                            Path(cfg.out).rmdir()  # made by this run, empty
                    raise
                failures.append(StackFailure(str(job.path), _reason(e)))
                obs.warning(f"skipped {failures[-1].line()}")
            else:
                summaries.append(summary)
                obs.message(summary.line())
                if image is not None and summary.localizations > 0:
                    superres = image
            obs.stack_finished(job.stem)
        peaks = backend.worker_peaks()
    obs.run_finished()
    report = InferReport(tuple(summaries), tuple(failures), str(model_path), time.perf_counter() - t_start, peaks)
    if cfg.report and (summaries or failures):
        rows = [("model", str(model_path)), ("device", str(cfg.device or "auto")),
                ("stacks", f"{len(summaries)} done or skipped, {len(failures)} failed"),
                ("frames", str(report.frames)), ("wall time", f"{report.wall_s:.1f} s")]
        write_batch_report(Path(cfg.out), f"decode_mem infer: {Path(cfg.out).name}", summaries, failures,
                           obs.memory_history(), rows, command, camera.pixel_size, superres)
    return report


def _sizes_for_workers(settings: EngineSettings, model: Any, shape: tuple[int, ...], itemsize: int) -> EngineSettings:
    """'auto' sizes chosen once, here, for every worker of a distributed run: workers that chose for
    themselves (each with its own baseline memory) could cut the same stack into different tiles."""
    from decode_mem.config import resolve_device
    from decode_mem.infer.predict import choose_for_stack

    sizes = dataclasses.replace(settings.sizes, streams=1)  # one stream's sizes, as choose gives every stream
    choice = choose_for_stack(model.net, tuple(shape), itemsize, resolve_device(settings.device or "auto"), sizes)
    chosen = dataclasses.replace(settings.sizes, chunk_size=choice.plan.chunk_size, batch_size=choice.plan.batch_size)
    return dataclasses.replace(settings, sizes=chosen)


def _one_stack(cfg: InferConfig, backend: _Backend, job: StackJob, writer_options: dict[str, Any],
               extras: dict[str, Any], obs: InferObserver, image: ReportImage | None = None) -> StackSummary:
    t0, cpu0 = time.perf_counter(), time.process_time()
    peak = _Peak()
    sizes: dict[str, Any] = {}
    device_peak = DevicePeak().start()
    outs = StackOutputs(cfg.out, job.stem, cfg.formats, pixel_size=job.settings.camera.pixel_size,
                        shape=job.shape, source=str(job.path), source_dtype=job.dtype,
                        prob_map_block=job.settings.block if cfg.write_probability_map else None, **writer_options)
    with outs:
        for table, n_frames, worker_peak, result in backend.emitters(job, peak, sizes, outs.prob_map):
            outs.write(table)
            if image is not None:  # the report's image, from the emitters as they are written (no re-read)
                image.add(table)
            obs.block_done(job.stem, n_frames, result)
            peak.add(worker_peak)
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
    summary = StackSummary(str(job.path), job.stem, job.shape[0], outs.n_localizations, wall, peak.value,
                           (*map(str, files), str(summary_path(cfg.out, job.stem))),
                           extra=dict(extras, cpu_s=round(cpu, 3), shape=list(job.shape),
                                      domain_warnings=list(job.domain.warnings), domain=job.domain.numbers,
                                      **({"sizes": sizes} if sizes else {}), **more))
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

    def __enter__(self) -> _Backend:
        if self.cfg.distributed and self.jobs:
            from decode_mem.infer.dask_backend import DaskBackend

            self._dask = DaskBackend(self.cfg, self.jobs).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dask is not None:
            self._dask.__exit__(*exc)

    def emitters(self, job: StackJob, peak: _Peak, sizes: dict[str, Any],
                 prob_map: Any = None) -> Iterator[tuple[EmitterTable, int, float | None, Any]]:
        """``(table, frames it covers, peak RssAnon of the process that made it, BlockResult or None)`` in frame
        order; ``sizes`` receives the chosen tile/batch sizes and why (in this process; dask workers choose
        their own)."""
        if self._dask is not None:
            for table, n_frames, worker_peak in self._dask.emitters(job):
                yield table, n_frames, worker_peak, None
            return
        done: list[Any] = []

        def on_plan(choice: Any) -> None:
            sizes.update(choice.as_dict())

        def on_block(result: Any) -> None:
            done.append(result)
            peak.add(read_host_memory().get("rss_anon_mb"))

        with open_stack(job.path) as stack:
            if stack.shape != job.shape:
                raise ConfigError(f"{job.path}: the stack changed while the run was going on")
            for table in stream_emitters(stack, job.settings, on_block=on_block, on_plan=on_plan, prob_map=prob_map):
                result = done.pop() if done else None
                yield table, result.n_frames if result is not None else 0, None, result

    def worker_peaks(self) -> dict[str, float]:
        return self._dask.worker_peaks() if self._dask is not None else {}


def _reason(e: BaseException) -> str:
    text = str(e)
    return text if type(e).__module__.startswith("decode_mem") else f"{type(e).__name__}: {text}"
