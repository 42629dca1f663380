"""``run_inference`` with ``follow``: localize a stack while the camera is still writing it.

The stack is read through ``io.follow`` (frames only once complete; the run ends ``idle_timeout`` seconds after
the writer's last byte). Blocks go through the same engine as an offline run and come out as the same blocks,
so the emitters are the offline run's with the same block length (``block``; 'auto' is at most ``LIVE_BLOCK``
frames here, which sets the lag: a block is computed once it and its next frame are complete; 'auto' compile is
off, since the stack's length is unknown). While it runs, every ``refresh`` seconds: the emitters so far are
closed as a part (``infer.live_parts``: valid files in ``<stem>.live/``), ``<stem>.json`` says ``"status":
"running"`` with frames done, frames and seconds behind the writer and both rates, and ``report.html`` shows
that, the super-resolution image and (with ``drift``) the drift so far, and localizations per frame and lag
over time (a refresh that takes longer than ``REFRESH_SHARE`` of its interval stretches the interval, so
the report never slows the localization down much). When the device cannot keep up, one warning says so
(frames/s needed and done); no frame is dropped.
At the end the final files are written from the parts (the offline run's files), then the drift correction,
``<stem>.json`` and the report, as in a batch run. ``resume`` after a kill continues after the last part.
A stack that does not exist yet is waited for (up to ``idle_timeout``); a wait for frames is said (observer
``waiting(stem, seconds left)``, else one line); rates are over the frames' own time, not the waits; ``<stem>.json``
says how the run ended (``"ended"``: "idle timeout" / "finished"; ``"status": "stopped"`` after Ctrl-C or an
error, the parts kept); repaired frames are in its ``"damage"`` and one warning.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from decode_mem.errors import ConfigError, StackError, Stopped
from decode_mem.infer.batch_report import WIDEFIELD_FRAMES, correct_stack_drift
from decode_mem.infer.config import InferConfig, stem_of
from decode_mem.infer.domain import DOMAIN_FRAMES, check_domain, model_psf
from decode_mem.infer.live_parts import LiveParts, live_dir, summary_complete
from decode_mem.infer.live_status import LiveStatus, write_live_report
from decode_mem.infer.observe import InferObserver
from decode_mem.infer.outputs import EXTRAS_2D, EXTRAS_3D, StackOutputs, remove_partials, summary_path
from decode_mem.infer.results import InferReport, StackSummary
from decode_mem.infer.work import EngineSettings, stream_emitters
from decode_mem.io.atomic import atomic_output
from decode_mem.io.follow import FollowedStack, open_growing, wait_for_path
from decode_mem.io.metadata import CameraRequest, read_metadata
from decode_mem.io.provenance import generated_by
from decode_mem.memory import read_host_memory
from decode_mem.tiling import block_length

LIVE_BLOCK = 16  # 'auto' block of a followed stack: at most this many frames (the lag of a block)
REFRESH_SHARE = 0.1  # refreshes (parts, JSON, report) take at most this share of the time: slower ones come rarer
SAY_WAIT_S = 2.0  # a wait for frames this long is said (observers without a ``waiting`` hook)
BEHIND_BLOCKS = 3  # frames behind (in blocks) from which a device slower than the camera is reported


def follow_stack(cfg: InferConfig, model: Any, request: CameraRequest, obs: InferObserver, command: str | None,
                 t_start: float) -> Any:
    """Follow ``cfg.inputs[0]`` into ``cfg.out``; returns the ``InferReport`` of the one stack. The camera is
    ``request`` resolved with what the file states once it exists (``io.metadata``)."""
    path = Path(cfg.inputs[0])
    stem, out = stem_of(path), Path(cfg.out)
    if cfg.resume and summary_complete(summary_path(out, stem)) and not _stopped_before(summary_path(out, stem)):
        summary = StackSummary(str(path), stem, 0, 0, 0.0, None, (str(summary_path(out, stem)),), skipped=True)
        obs.message(summary.line())
        return InferReport((summary,), (), str(cfg.model_path), time.perf_counter() - t_start)
    waiting = _Waiting(obs, stem, cfg.idle_timeout)
    if not path.exists():
        obs.message(f"{stem}: waiting for {path} to appear (at most --idle_timeout {cfg.idle_timeout:g} s)")
        wait_for_path(path, cfg.idle_timeout, on_wait=waiting)
        waiting(None)
    camera, sources = request.resolve(read_metadata(path))
    followed = FollowedStack(open_growing(path), idle_timeout=cfg.idle_timeout, widefield_frames=WIDEFIELD_FRAMES,
                             on_wait=waiting)
    try:
        if followed.wait_for(DOMAIN_FRAMES) == 0:
            raise StackError(f"{path}: no complete frame appeared within --idle_timeout {cfg.idle_timeout:g} s")
        first = followed.read(0, min(followed.available, DOMAIN_FRAMES))
        domain = check_domain(first, camera, model.envelope, psf=model_psf(model))
        del first
        if not domain.ok and cfg.strict:
            raise ConfigError("--strict: " + domain.message(str(path)) + "; nothing written")
        if not domain.ok:
            obs.warning(domain.message(str(path)))
        run = _FollowRun(cfg, model, camera, obs, command, followed, path, stem, domain)
        run.camera_sources = sources
        summary = run.go()
    finally:
        followed.close()
    return InferReport((summary,), (), str(cfg.model_path), time.perf_counter() - t_start)


class _FollowRun:
    def __init__(self, cfg: InferConfig, model: Any, camera: Any, obs: InferObserver, command: str | None,
                 followed: FollowedStack, path: Path, stem: str, domain: Any) -> None:
        self.cfg, self.model, self.camera, self.obs, self.command = cfg, model, camera, obs, command
        self.followed, self.path, self.stem, self.domain = followed, path, stem, domain
        self.camera_sources: dict[str, str] = {}
        self.out = Path(cfg.out)
        h, w = followed.shape[1:]
        self.frame_shape, self.dtype = (h, w), followed.dtype
        auto = min(block_length((h, w), self.dtype.itemsize), LIVE_BLOCK)
        block = auto if cfg.block == "auto" else int(cfg.block)
        three_d = bool(model.config.use_z)
        self.writer_options = {"three_d": three_d, "psf_sigma": float(np.mean(model.simulation.get("psf_sigma", 1.0)))}
        common = {"pixel_size": camera.pixel_size, "width": w, "height": h,
                  "extras": EXTRAS_3D if three_d else EXTRAS_2D}
        picasso = {**self.writer_options, "source": str(path), "source_dtype": str(self.dtype)}
        self.parts = LiveParts(self.out, stem, cfg.formats, block=block, common=common, picasso=picasso)
        self.warnings = list(domain.warnings)
        self.slow_warned = False
        self.peak: float | None = None
        self.sizes: dict[str, Any] = {}

    def go(self) -> Any:
        cfg, obs, stem = self.cfg, self.obs, self.stem
        t0 = time.perf_counter()
        summary_path(self.out, stem).unlink(missing_ok=True)
        remove_partials(self.out, stem, cfg.formats)
        start = self.parts.begin(cfg.resume)
        whole = True  # False while a block is half in the open part (an interrupt there drops the part)
        try:  # a signal from the parts' start on (a resumed run's kept parts are read first) keeps them
            if start:
                obs.message(f"{stem}: resuming after frame {start - 1} ({len(self.parts.parts)} part(s) kept)")
            self.followed.start = start
            status = self.status = LiveStatus(self.frame_shape, self.camera.pixel_size, self.parts.block)
            for part in self.parts.parts:  # a resumed run: what the kept parts hold
                status.add(_concat(self.parts.part_tables(part)), part["start"], part["stop"] - part["start"])
            settings = EngineSettings(
                model=str(cfg.model_path), camera=self.camera,
                sizes=dataclasses.replace(cfg.sizes, block=self.parts.block, streams=1),
                compile=False if cfg.compile == "auto" else cfg.compile, device=cfg.device,
                threshold=cfg.threshold, threads=cfg.threads)
            obs.run_started(1)
            obs.stack_started(stem, None)
            results: list[Any] = []
            last_refresh, interval = time.monotonic(), cfg.refresh
            for table in stream_emitters(self.followed, settings, on_block=results.append, on_plan=self._plan):
                result = results.pop()
                whole = False
                self.parts.write(table)
                status.add(table, result.t0, result.n_frames)
                whole = True
                # the engine's reader polls only when it waits; rates run on a clock that stops while it waits
                status.sample(self.followed.poll(), self._lag_s(), self.followed.waited_s)
                obs.block_done(stem, result.n_frames, result)
                if obs.stop_requested():  # a Cancel button
                    raise Stopped("stop requested")
                self._peak()
                self._check_pace()
                if time.monotonic() - last_refresh >= interval:
                    began = time.monotonic()
                    self.parts.close_part(status.frames_done)
                    self._refresh(running=True)
                    last_refresh = time.monotonic()
                    interval = max(cfg.refresh, (last_refresh - began) / REFRESH_SHARE)
        except (KeyboardInterrupt, Stopped) as e:  # Ctrl-C, SIGTERM, Cancel: the blocks done are kept as a part
            if whole:
                self.parts.close_part(self.status.frames_done if hasattr(self, "status") else start)
            else:
                self.parts.abort()
            self._stopped(e)
            raise Stopped(f"{stem}: stopped at frame {self.parts.start} of the {self.followed.available} written so "
                          f"far; the same command with --resume continues there (kept in {self.parts.dir})",
                          signum=getattr(e, "signum", 2 if isinstance(e, KeyboardInterrupt) else None), stem=stem,
                          frame=self.parts.start, frames=self.followed.available) from e
        except BaseException as e:
            self.parts.abort()
            self._stopped(e)
            raise
        self.parts.close_part(status.frames_done)
        damage = self.followed.damage_log()
        for line in [*self.followed.growing.warnings, *filter(None, [damage.line(str(self.path))])]:
            obs.warning(line)
            self.warnings.append(line)
        n = status.frames_done
        wall = time.perf_counter() - t0
        outs = StackOutputs(self.out, stem, cfg.formats, pixel_size=self.camera.pixel_size,
                            shape=(n, *self.frame_shape), source=str(self.path), source_dtype=str(self.dtype),
                            **self.writer_options)
        with outs:
            for table in self.parts.tables():
                outs.write(table)
        files, more = list(outs.paths), {}
        if cfg.drift:
            try:
                written, more["drift"] = correct_stack_drift(outs.paths, self.out)
            except StackError as e:
                obs.warning(f"{stem}: no drift correction: {e}")
                more["drift_warning"] = str(e)
            else:
                files += written
        self._peak()
        choice = cfg.model_choice
        extras = {"model": str(choice.path.resolve()), "model_choice": choice.as_dict(), "model_step": self.model.step,
                  "camera": self.camera.to_dict(), "camera_sources": dict(self.camera_sources),
                  "settings": cfg.settings(), "generated_by": generated_by(), "status": "done",
                  "ended": _ENDED.get(self.followed.ended_by, "finished"),
                  "live": self._live_numbers(ended_by=self.followed.ended_by)}
        if damage:
            extras["damage"] = damage.as_json()
        extras.update(shape=[n, *self.frame_shape], domain_warnings=list(self.domain.warnings),
                      domain=self.domain.numbers, **({"sizes": self.sizes} if self.sizes else {}), **more)
        summary = StackSummary(str(self.path), stem, n, outs.n_localizations, wall, self.peak,
                               (*map(str, files), str(summary_path(self.out, stem))), extra=extras)
        outs.finish(summary.as_dict())
        self.parts.remove()
        obs.stack_finished(stem)
        obs.run_finished()
        obs.message(summary.line())
        self._refresh(running=False, files=[Path(f) for f in summary.outputs], drift_info=more.get("drift"))
        return summary

    # -- while it runs ------------------------------------------------------------------------------------

    def _plan(self, choice: Any) -> None:
        self.sizes.update(choice.as_dict())

    def _peak(self) -> None:
        mb = read_host_memory().get("rss_anon_mb")
        if mb is not None and (self.peak is None or mb > self.peak):
            self.peak = mb

    def _lag_s(self) -> float:
        """How long ago the writer completed the oldest frame not localized yet (0 when none waits)."""
        if self.followed.available <= self.status.frames_done:
            return 0.0
        seen = self.followed.seen_at(self.status.frames_done)
        return 0.0 if seen is None else max(0.0, time.monotonic() - seen)

    def _check_pace(self) -> None:
        """Say once when the camera delivers frames faster than they are localized (nothing is dropped)."""
        if self.slow_warned:
            return
        behind = self.followed.available - self.status.frames_done
        camera, done = self.followed.camera_rate(), self.status.done_rate()
        if behind > BEHIND_BLOCKS * self.parts.block and camera and done and camera > 1.1 * done:
            self.slow_warned = True
            line = (f"{self.stem}: the camera writes {camera:.1f} frames/s, this device localizes {done:.1f} "
                    f"frames/s: {behind} frames behind and growing by {camera - done:.1f} frames/s; no frame is "
                    "dropped, the run catches up after the acquisition (or use a faster device or larger --block)")
            self.obs.warning(line)
            self.warnings.append(line)

    def _stopped(self, e: BaseException) -> None:
        """``<stem>.json`` says the run stopped (not "running") and where; the parts stay for ``--resume``."""
        if not hasattr(self, "status"):
            return
        state = {"stack": str(self.path), "stem": self.stem, "status": "stopped",
                 "ended": "stopped" if isinstance(e, KeyboardInterrupt | Stopped) else f"failed: {type(e).__name__}",
                 "updated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "parts": str(live_dir(self.out, self.stem)), **self._live_numbers()}
        try:
            with atomic_output(summary_path(self.out, self.stem)) as tmp:
                tmp.write_text(json.dumps(state, indent=2, default=str) + "\n")
        except OSError:
            pass

    def _live_numbers(self, ended_by: str = "") -> dict[str, Any]:
        status = self.status
        camera, done = self.followed.camera_rate(), status.done_rate()
        numbers = {"frames_done": status.frames_done, "frames_seen": self.followed.available,
                   "frames_behind": self.followed.available - status.frames_done,
                   "seconds_behind": round(self._lag_s(), 3), "max_frames_behind": status.max_behind,
                   "max_seconds_behind": round(status.max_behind_s, 3),
                   "camera_frames_per_s": None if camera is None else round(camera, 2),
                   "frames_per_s": None if done is None else round(done, 2),
                   "localizations": status.localizations, "block": self.parts.block,
                   "peak_rss_anon_mb": self.peak, "slower_than_camera": self.slow_warned}
        if ended_by:  # the end: how the lag went (at most 2 * BINS samples, one after each block, thinned)
            numbers["ended_by"] = ended_by
            numbers["started_at"] = round(status.started_at, 3)
            numbers["lag_timeline"] = {"columns": ["run_s", "frames_done", "frames_behind", "seconds_behind"],
                                       "rows": [[round(t, 3), int(d), int(b), round(s, 3)]
                                                for t, d, b, s in status.lag]}
        return numbers

    def _refresh(self, running: bool, files: list[Path] | None = None, drift_info: Any = None) -> None:
        """``<stem>.json`` (while running: ``"status": "running"``) and ``report.html``, both atomically."""
        numbers = self._live_numbers()
        if running:
            state = {"stack": str(self.path), "stem": self.stem, "status": "running",
                     "updated": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                     "parts": str(live_dir(self.out, self.stem)), **numbers}
            with atomic_output(summary_path(self.out, self.stem)) as tmp:
                tmp.write_text(json.dumps(state, indent=2, default=str) + "\n")
        if not self.cfg.report:
            return
        ended = (f"no new byte for {self.cfg.idle_timeout:g} s" if self.followed.ended_by == "idle"
                 else "the stack's end")
        rows = [("status", "running" if running else f"done (the acquisition ended: {ended})"),
                ("stack", str(self.path)), ("model", str(self.cfg.model_path)),
                ("device", str(self.cfg.device or "auto")), ("frames done", str(numbers["frames_done"])),
                ("frames written by the camera", str(numbers["frames_seen"])),
                ("behind the camera", f"{numbers['frames_behind']} frames, {numbers['seconds_behind']:.1f} s"),
                ("camera / localized", f"{_rate(numbers['camera_frames_per_s'])} / "
                                       f"{_rate(numbers['frames_per_s'])} frames/s"),
                ("localizations", str(numbers["localizations"]))]
        curve = None
        if drift_info is not None:
            from decode_mem.io.drift import read_drift_csv
            from decode_mem.report import DriftCurve

            frames, dxdy = read_drift_csv(self.out / drift_info["table"])
            curve = DriftCurve(frames, dxdy, label=f"estimated drift of {self.stem} ({drift_info['method']})")
        elif self.cfg.drift and running:
            est = self.status.drift_so_far()
            if est is not None:
                from decode_mem.report import DriftCurve

                curve = DriftCurve(est.frames, est.dxdy, label=f"drift of {self.stem} so far ({est.method})")
        widefield, n_wide = self.followed.widefield()
        parts = files if files is not None else sorted(p for p in live_dir(self.out, self.stem).glob("part-*"))
        write_live_report(self.out, self.stem, self.status, rows, widefield, n_wide, curve, self.warnings,
                          self.obs.memory_history(), self.command, parts)


def _stopped_before(path: Path) -> bool:
    """``<stem>.json`` of a followed run that stopped (Ctrl-C, an error): its parts are kept, ``--resume`` goes on."""
    try:
        return json.loads(path.read_text()).get("status") == "stopped"
    except (OSError, ValueError):
        return False


_ENDED = {"idle": "idle timeout"}  # FollowedStack.ended_by -> <stem>.json "ended"


class _Waiting:
    """``on_wait``: tells the observer how long until the idle timeout ends the run (``waiting(stem, s)``, None
    when frames came), or, for an observer without that hook, one line once a wait has lasted ``SAY_WAIT_S``
    (not at every block of a camera slower than the device)."""

    def __init__(self, obs: InferObserver, stem: str, idle_timeout: float) -> None:
        self.obs, self.stem, self.idle_timeout, self.said = obs, stem, idle_timeout, False

    def __call__(self, seconds_left: float | None) -> None:
        hook = getattr(self.obs, "waiting", None)
        if hook is not None:
            hook(self.stem, seconds_left)
        elif seconds_left is None:
            self.said = False
        elif not self.said and self.idle_timeout - seconds_left >= min(SAY_WAIT_S, self.idle_timeout / 2):
            self.said = True
            self.obs.message(f"{self.stem}: waiting for frames, ends in {seconds_left:.0f} s without a new byte")


def _concat(tables: Iterable[Any]) -> Any:
    from decode_mem.io.table import EmitterTable

    tables = list(tables)
    return EmitterTable.concat(tables) if tables else EmitterTable.empty()


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"
