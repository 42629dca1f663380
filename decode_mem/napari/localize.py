"""The Localize widget: ``decode_mem.infer``'s ``run_inference`` on a movie layer (one napari opened from a file,
or an in-memory array, written to a temporary .npy first) or on a file or folder, in a worker thread.

A progress bar follows the frames done (``InferObserver.block_done``); Cancel asks the run to stop after the
block in hand (``InferObserver.stop_requested``): what reached disk is kept for "continue a stopped run" and no
output appears under its final name half-written. Lines and domain warnings go to the widget's message box, a bad
input or setting is one line there (no traceback). The files written are the CLI's (``<stem>.csv`` ...,
``<stem>.json``, ``report.html``, which shows the equivalent command line); when the run ends each stack's
localizations are added as a rendered image and points (``decode_mem.napari.layers``).
"""

from __future__ import annotations

import shlex
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from magicgui.widgets import (
    CheckBox,
    ComboBox,
    Container,
    FileEdit,
    FloatSpinBox,
    Label,
    ProgressBar,
    PushButton,
    SpinBox,
    TextEdit,
)
from qtpy.QtCore import QObject, Signal

from decode_mem.errors import DecodeMemError, Stopped, exception_line
from decode_mem.infer.observe import InferObserver
from decode_mem.napari.layers import Opened, open_localizations

if TYPE_CHECKING:
    import napari

A_FILE = "a file or folder (below)"
CAMERAS = ("the model's", "emccd", "scmos", "a YAML file (below)")
MODELS = ("shipped (for the device)", "a file (below)", "fit to this movie (decode_mem.fit, budget below)")
FORMATS = ("csv", "csv,picasso", "parquet", "csv,picasso,parquet", "csv,smap,smlm,decode")
LOCALIZATION_SUFFIXES = (".csv", ".parquet", ".hdf5", ".h5", ".smlm", ".mat")  # a stack's layers: the first found


class Relay(QObject):
    """Signals from the worker thread to the widget (Qt queues them to the thread the widget lives in)."""

    started = Signal(str, int)  # stem, frames (0: unknown, a followed stack)
    frames = Signal(int)  # frames done in the stack
    line = Signal(str)


class WidgetObserver(InferObserver):
    """``run_inference``'s observer for a widget: progress and lines through a ``Relay``, Cancel through an event."""

    def __init__(self, relay: Relay, stop: threading.Event) -> None:
        self.relay, self.stop = relay, stop
        self.done = 0

    def stack_started(self, stem: str, frames: int | None) -> None:
        self.done = 0
        self.relay.started.emit(stem, int(frames or 0))

    def block_done(self, stem: str, frames: int, result: Any | None) -> None:
        self.done += int(frames)
        self.relay.frames.emit(self.done)

    def message(self, line: str) -> None:
        self.relay.line.emit(line)

    def warning(self, line: str) -> None:
        self.relay.line.emit(f"warning: {line}")

    def stop_requested(self) -> bool:
        return self.stop.is_set()


def localization_file(outputs: tuple[str, ...] | list[str]) -> Path | None:
    """The localization file a stack's layers are read from: its CSV, else parquet, else Picasso HDF5, DECODE,
    ShareLoc or SMAP."""
    paths = [Path(p) for p in outputs]
    for suffix in LOCALIZATION_SUFFIXES:
        for path in paths:
            if path.suffix == suffix and "_undrift" not in path.stem:
                return path
    return None


def cli_command(cfg: Any, camera: str | None) -> str:
    """The ``python -m decode_mem.infer`` command that does what the widget does (the report shows it)."""
    words = ["python -m decode_mem.infer", *cfg.inputs, "--out", cfg.out, "--format", ",".join(cfg.formats)]
    if cfg.model is not None:
        words += ["--model", cfg.model]
    if camera is not None:
        words += ["--camera", camera]
    if cfg.device is not None:
        words += ["--device", cfg.device]
    if cfg.engine != "auto":  # the widget computes with torch: --engine auto's runtimes crashed Qt's event loop
        words += ["--engine", cfg.engine]  # (a segfault in tests/napari, 2026-12-06); the CLI's default is auto
    if cfg.block != "auto":
        words += ["--block", str(cfg.block)]
    if cfg.resume:
        words.append("--resume")
    if cfg.follow:
        words.append("--follow")
    return " ".join(words[:1] + [shlex.quote(str(w)) for w in words[1:]])


def error_line(error: BaseException) -> str:
    """One line for the user: decode_mem's own message, else the exception's type and message."""
    if isinstance(error, (DecodeMemError, Stopped)):
        return str(error)
    return exception_line(error)


class LocalizeWidget(Container):
    """Localize a movie; see the module docstring."""

    follow = False  # the Live widget follows a growing movie with the same form

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__(labels=True)
        self.viewer = viewer
        self.source = ComboBox(label="movie", choices=self._sources)
        self.path = FileEdit(label="file or folder", mode="r")
        self.camera = ComboBox(label="camera", choices=CAMERAS)
        self.camera_yaml = FileEdit(label="camera YAML", mode="r", filter="*.yaml *.yml")
        self.model = ComboBox(label="model", choices=MODELS)
        self.model_file = FileEdit(label="model file", mode="r", filter="*.pt")
        self.budget = FloatSpinBox(label="fit budget (min)", min=0.5, max=24 * 60.0, value=15.0,
                                   tooltip="decode_mem.fit: calibrate the movie, fine-tune the shipped model on "
                                           "matching simulations where it does not cover the movie, localize; "
                                           "the whole command within this many minutes when it trains")
        self.device = ComboBox(label="device", choices=("auto", "cpu", "cuda"))
        self.formats = ComboBox(label="formats", choices=FORMATS)
        self.out = FileEdit(label="output folder", mode="d")
        self.block = SpinBox(label="frames per block", min=0, max=1 << 20, value=0,
                             tooltip="--block: 0 is 'auto'; a block is the unit of progress and of Cancel")
        self.resume = CheckBox(text="continue a stopped run (--resume)", value=False)
        self.run_button = PushButton(text="Localize")
        self.cancel_button = PushButton(text="Cancel", enabled=False)
        self.progress = ProgressBar(label="frames", min=0, max=1, value=0)
        self.status = Label(value="")
        self.log = TextEdit(label="messages", value="")
        self.log.native.setReadOnly(True)
        self.extend([self.source, self.path, self.camera, self.camera_yaml, self.model, self.model_file,
                     self.budget, self.device, self.formats, self.out, self.block, self.resume, self.run_button,
                     self.cancel_button, self.progress, self.status, self.log])
        self.relay = Relay()
        self.relay.started.connect(self._started)
        self.relay.frames.connect(self._frames)
        self.relay.line.connect(self.say)
        self.stop = threading.Event()
        self.worker: Any = None
        self.temporary: tempfile.TemporaryDirectory | None = None
        self.source_layer: Any = None  # the movie layer localized, put in nm under its localizations
        self.last_config: Any = None  # the InferConfig of the run going on or last run
        self.opened: list[Opened] = []  # the last run's layers, as read from its files
        self.run_button.changed.connect(self.start)
        self.cancel_button.changed.connect(self.cancel)
        viewer.layers.events.inserted.connect(self.source.reset_choices)
        viewer.layers.events.removed.connect(self.source.reset_choices)

    # -- the form ---------------------------------------------------------------------------------------------

    def _sources(self, _widget: Any = None) -> list[str]:
        from napari.layers import Image

        return [layer.name for layer in self.viewer.layers if isinstance(layer, Image)] + [A_FILE]

    def say(self, line: str) -> None:
        """A line in the message box (and the status line)."""
        self.log.value = f"{self.log.value}\n{line}" if self.log.value else line
        self.status.value = line if len(line) <= 120 else line[:117] + "..."

    def input_path(self) -> str:
        """The file the run reads: the chosen layer's own file, or the layer written to a temporary .npy, or the
        file or folder given."""
        if self.source.value in (None, A_FILE):
            path = str(self.path.value)
            if path in ("", "."):
                raise DecodeMemError("choose a movie layer, or a file or folder to localize")
            return path
        layer = self.viewer.layers[self.source.value]
        self.source_layer = layer
        if layer.source.path is not None:
            return str(layer.source.path)
        self.temporary = tempfile.TemporaryDirectory(prefix="decode_mem_napari_")
        path = Path(self.temporary.name) / f"{_safe(layer.name)}.npy"
        data = layer.data
        if data.ndim not in (2, 3):
            raise DecodeMemError(f"layer {layer.name!r}: a movie is (frames, height, width), got {data.ndim} axes")
        frames = data[None] if data.ndim == 2 else data
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(data.dtype), shape=tuple(frames.shape))
        for start in range(0, len(frames), 64):  # frame blocks: a lazy (dask) layer is read a block at a time
            out[start:start + 64] = np.asarray(frames[start:start + 64])
        out.flush()
        del out
        return str(path)

    def config(self) -> tuple[Any, str | None]:
        """The ``InferConfig`` the form asks for, and the camera as the CLI would name it."""
        from decode_mem.config import resolve_device
        from decode_mem.infer import InferConfig
        from decode_mem.io.metadata import CameraRequest, read_metadata

        out = str(self.out.value)
        if out in ("", "."):
            raise DecodeMemError("choose an output folder")
        camera_name = None
        if self.camera.value == CAMERAS[3]:
            camera_name = str(self.camera_yaml.value)
        elif self.camera.value != CAMERAS[0]:
            camera_name = self.camera.value
        request = CameraRequest.from_value(camera_name)  # the CLI's --camera: a bad YAML fails here
        model = str(self.model_file.value) if self.model.value == MODELS[1] else None
        device = str(resolve_device(self.device.value))
        formats = tuple(self.formats.value.split(","))
        if self.model.value == MODELS[2]:
            if self.follow:
                raise DecodeMemError("fit needs the whole movie: fit it first, then follow with the fitted model")
            from decode_mem.fit import FitConfig

            movie = self.input_path()  # fit's camera as its CLI takes it: the form's, then the file's metadata
            camera = request.resolve(read_metadata(movie))[0]
            return FitConfig(movies=(movie,), out=out, camera=camera, device=device, formats=formats,
                             budget_minutes=float(self.budget.value)), camera_name
        cfg = InferConfig(inputs=(self.input_path(),), out=out, model=model,  # the camera resolved per file by infer
                          formats=formats, camera=camera_name, device=device, engine="torch",  # see cli_command
                          block=int(self.block.value) or "auto", resume=bool(self.resume.value), follow=self.follow,
                          **self.extra_settings())
        return cfg, camera_name

    def extra_settings(self) -> dict[str, Any]:
        """Settings a subclass adds to the ``InferConfig``."""
        return {}

    # -- the run ----------------------------------------------------------------------------------------------

    def start(self, _value: Any = None) -> None:
        """Check the form, then run in a worker thread; a bad setting is a line in the message box."""
        from napari.qt.threading import create_worker

        if self.worker is not None:
            return
        self.log.value = ""
        self.source_layer = None
        try:
            cfg, camera = self.config()
        except (DecodeMemError, OSError) as e:
            self.say(f"error: {error_line(e)}")
            self._cleanup()
            return
        self.stop.clear()
        self.last_config = cfg
        observer = WidgetObserver(self.relay, self.stop)
        if hasattr(cfg, "budget_minutes"):  # a FitConfig
            self.worker = create_worker(fit_and_open, cfg, observer, _start_thread=False, _ignore_errors=True)
        else:
            self.worker = create_worker(run_and_open, cfg, observer, cli_command(cfg, camera), _start_thread=False,
                                        _ignore_errors=True)
        self.worker.returned.connect(self._returned)
        self.worker.errored.connect(self._errored)
        self.worker.finished.connect(self._finished)
        self.run_button.enabled, self.cancel_button.enabled = False, True
        self.progress.value = 0
        self.say(f"{'fitting and localizing' if hasattr(cfg, 'budget_minutes') else 'localizing'} "
                 f"{(getattr(cfg, 'inputs', None) or cfg.movies)[0]} into {cfg.out}")
        self.worker.start()

    def cancel(self, _value: Any = None) -> None:
        """Ask the run to stop after the block in hand."""
        if self.worker is not None:
            self.stop.set()
            self.cancel_button.enabled = False
            self.say("stopping after the block in hand ...")

    @property
    def running(self) -> bool:
        return self.worker is not None

    def _started(self, stem: str, frames: int) -> None:
        self.progress.max = max(frames, 1)
        self.progress.value = 0
        self.progress.label = f"{stem}: frames"

    def _frames(self, done: int) -> None:
        if self.follow:  # a growing stack: the frames written so far, as far as known
            self.progress.max = max(self.progress.max, done)
        self.progress.value = min(done, self.progress.max)

    def _returned(self, result: tuple[Any, list[Opened]]) -> None:
        report, opened = result
        for failure in report.failures:
            self.say(f"failed: {failure.line()}")
        self.opened = opened
        if opened and self.source_layer is not None and self.source_layer in self.viewer.layers:
            in_nm(self.source_layer, opened[0].pixel_size)
        for one in opened:
            for data, kwargs, kind in one.layers:
                self.show_layer(data, kwargs, kind)
        self.say(f"done: {len(report.stacks)} stack(s), {report.frames} frames in {report.wall_s:.1f} s, "
                 f"{sum(o.n for o in opened):,} localizations")

    def show_layer(self, data: Any, kwargs: dict[str, Any], kind: str) -> None:
        """Add a layer, or replace the data of the layer of the same name (a run again, a live refresh)."""
        from napari.layers import Layer

        name = kwargs["name"]
        if name in self.viewer.layers:
            self.viewer.layers.remove(name)
        self.viewer.add_layer(Layer.create(data, kwargs, kind))

    def _errored(self, error: BaseException) -> None:
        self.say(("stopped: " if isinstance(error, Stopped) else "error: ") + error_line(error))

    def _finished(self) -> None:
        self.worker = None
        self.run_button.enabled, self.cancel_button.enabled = True, False
        self._cleanup()

    def _cleanup(self) -> None:
        if self.temporary is not None:
            self.temporary.cleanup()
            self.temporary = None


def run_and_open(cfg: Any, observer: InferObserver, command: str) -> tuple[Any, list[Opened]]:
    """``run_inference``, then each stack's layers read from its localization file (in the worker thread too)."""
    from decode_mem.infer import run_inference

    report = run_inference(cfg, observer, command)
    opened = []
    for summary in report.stacks:
        path = localization_file(summary.outputs)
        if path is not None and path.is_file():
            opened.append(open_localizations(path, name=summary.stem))
    return report, opened


def in_nm(layer: Any, pixel_size: float) -> None:
    """A movie layer in camera pixels put in nm (pixel ``j``'s centre at ``(j + 0.5) * pixel_size``), where its
    localizations lie; a layer given a scale of its own keeps it."""
    if any(s != 1 for s in layer.scale[-2:]):
        return
    layer.scale = (*layer.scale[:-2], pixel_size, pixel_size)
    layer.translate = (*layer.translate[:-2], pixel_size / 2, pixel_size / 2)
    layer.units = (*layer.units[:-2], "nm", "nm")


def fit_and_open(cfg: Any, observer: WidgetObserver) -> tuple[Any, list[Opened]]:
    """``decode_mem.fit``'s ``fit_movies`` (its stages as lines; Cancel stops the training at its next step, or
    the localization after its block), then each stack's layers, as ``run_and_open``."""
    from decode_mem.fit import fit_movies

    def on_progress(stage: str, details: dict[str, Any]) -> None:
        observer.message(f"fit: {stage}")

    def on_step(step: int, details: dict[str, Any]) -> None:
        if observer.stop_requested():
            raise Stopped(f"training stopped at step {step}")

    report = fit_movies(cfg, on_progress=on_progress, on_step=on_step, observer=observer)
    observer.message(f"fit: {report.decision} ({'; '.join(report.reasons)})")
    inference = report.inference
    if inference is None:
        raise DecodeMemError("fit localized nothing")
    opened = [open_localizations(path, name=s.stem) for s in inference.stacks
              if (path := localization_file(s.outputs)) is not None and path.is_file()]
    return inference, opened


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "layer"
