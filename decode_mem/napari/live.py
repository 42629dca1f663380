"""The Live widget: the Localize widget's form and run with ``follow`` (``decode_mem.infer.live``): it localizes a
movie while the camera still writes it (a TIFF growing page by page, a zarr array, a folder of frame files) and
ends ``idle timeout`` seconds after the writer's last byte.

Every ``show every`` seconds the widget reads what the run has closed so far: the parts in ``<out>/<stem>.live/``
(each a complete file once listed in ``parts.json``; only parts not read before are read, into one image drawn
as ``render`` draws a file, ``decode_mem.render.image.Rendering``) refresh the ``<stem> live`` image layer, and
``<stem>.json`` (``"status": "running"``) gives the frames done and how far behind the camera they are. When the
run ends, the final files are shown as the Localize widget shows them and the live layer goes. ``report.html`` is
left out unless asked for: its refreshes (figures, seconds each) stretch the run's interval between parts
(``infer.live.REFRESH_SHARE``), and so the live layer's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from magicgui.widgets import CheckBox, FloatSpinBox, Label
from qtpy.QtCore import QTimer

from decode_mem.errors import StackError
from decode_mem.infer.config import stem_of
from decode_mem.infer.live_parts import live_dir, read_manifest
from decode_mem.io.localizations import iter_localizations, localization_meta
from decode_mem.napari.layers import image_layer
from decode_mem.napari.localize import LocalizeWidget
from decode_mem.render.image import Rendering

if TYPE_CHECKING:
    import napari


class PartsView:
    """The localizations of a followed stack's closed parts, drawn into one image as new parts appear (each a
    Gaussian of its own precision; the render pixel from the first parts' precision unless ``render_pixel``)."""

    def __init__(self, out: str | Path, stem: str, render_pixel: float | None = None) -> None:
        self.folder, self.stem, self.render_pixel = live_dir(out, stem), stem, render_pixel
        self.rendering: Rendering | None = None
        self.parts = 0  # parts counted
        self.frames = 0  # frames the counted parts cover

    def update(self) -> bool:
        """Count the parts closed since the last call; True where there were any."""
        manifest = read_manifest(self.folder)
        counted = 0
        for part in (manifest or {}).get("parts", [])[self.parts:]:
            files = [self.folder / name for name in part["files"] if name.endswith(".parquet")]
            try:
                if self.rendering is None:
                    meta = localization_meta(files[0])
                    self.rendering = Rendering(shape_px=(meta.height, meta.width), pixel_size=meta.pixel_size,
                                               render_pixel=self.render_pixel)
                for table in iter_localizations(files[0]):
                    self.rendering.add(table)
            except (IndexError, OSError, StackError):  # the run ended and removed its parts meanwhile
                break
            self.parts += 1
            self.frames = int(part["stop"])
            counted += 1
        return counted > 0

    def layer(self) -> tuple[Any, dict[str, Any], str]:
        """The image so far as an image layer in nm."""
        assert self.rendering is not None
        image = self.rendering.image()  # chooses the render pixel if the first parts were too few to
        info = {"parts": self.parts, "frames": self.frames, "localizations": self.rendering.n}
        assert self.rendering.render_pixel is not None
        return image_layer(image, self.rendering.render_pixel, f"{self.stem} live", info)


def live_line(state: dict[str, Any]) -> str:
    """``<stem>.json``'s running numbers as one line."""
    return (f"{state.get('frames_done', 0)} frames done, {state.get('frames_behind', 0)} behind the camera "
            f"({state.get('seconds_behind', 0.0):.1f} s), {state.get('localizations', 0):,} localizations")


class LiveWidget(LocalizeWidget):
    """Follow a movie that is still being written; see the module docstring."""

    follow = True

    def __init__(self, viewer: napari.viewer.Viewer) -> None:
        super().__init__(viewer)
        self.run_button.text = "Follow"
        self.idle_timeout = FloatSpinBox(label="idle timeout (s)", min=0.5, max=3600.0, value=30.0,
                                         tooltip="the acquisition counts as ended after this long without a byte")
        self.refresh = FloatSpinBox(label="show every (s)", min=0.2, max=600.0, value=3.0,
                                    tooltip="how often the run closes a part and the layer is refreshed")
        self.report = CheckBox(text="write report.html while it runs", value=False,
                               tooltip="each refresh of the report (figures) takes seconds, and the run then closes "
                                       "parts, so the live layer changes, that much less often")
        self.lag = Label(value="")
        self.insert(self.index(self.run_button), self.idle_timeout)
        self.insert(self.index(self.run_button), self.refresh)
        self.insert(self.index(self.run_button), self.report)
        self.insert(self.index(self.status), self.lag)
        self.view: PartsView | None = None
        self.refreshes = 0  # times the live layer was refreshed (mid-run)
        self.timer = QTimer()
        self.timer.timeout.connect(self.show_progress)

    def extra_settings(self) -> dict[str, Any]:
        return {"idle_timeout": float(self.idle_timeout.value), "refresh": float(self.refresh.value),
                "report": bool(self.report.value)}

    def start(self, _value: Any = None) -> None:
        super().start()
        if self.worker is not None:
            self.view = PartsView(self.out.value, stem_of(Path(self.last_config.inputs[0])))
            self.refreshes = 0
            self.timer.start(int(self.refresh.value * 1000))

    def show_progress(self) -> None:
        """The parts closed since the last look into the live layer, and the run's frames done and lag."""
        if self.view is None:
            return
        import json

        try:
            state = json.loads((Path(self.out.value) / f"{self.view.stem}.json").read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("status") == "running":
            self.lag.value = live_line(state)
            self.progress.max = max(int(state.get("frames_seen", 0)), self.progress.value, 1)
        if self.view.update():
            self.show_layer(*self.view.layer())
            self.refreshes += 1

    def cancel(self, _value: Any = None) -> None:
        """Ask the run to stop; ``infer.live`` does not poll ``stop_requested`` yet, so a followed run goes on to
        the end of the acquisition (its idle timeout), and the widget says so."""
        super().cancel()
        if self.worker is not None:
            self.say("a followed run ends with the acquisition (idle timeout): infer's --follow takes no Cancel yet")

    def _finished(self) -> None:
        self.timer.stop()
        if self.view is not None and f"{self.view.stem} live" in self.viewer.layers and self.opened:
            self.viewer.layers.remove(f"{self.view.stem} live")  # the final files' layers replace it
        self.view = None
        super()._finished()
