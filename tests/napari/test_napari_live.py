"""The Live widget follows a TIFF that a camera stand-in (tests/inference/live_writer.py, its own process) is still
writing: the live layer is refreshed from the run's parts while frames arrive, with frames done and lag shown, and
the end shows the offline run's localizations."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("napari", reason="the napari extra is not installed (pip install -e '.[napari]')")
pytest.importorskip("pytestqt", reason="the napari extra is not installed (pip install -e '.[napari]')")

from decode_mem.napari.live import LiveWidget
from decode_mem.napari.localize import A_FILE
from decode_mem.napari.sample import sample_movie

WRITER = Path(__file__).parents[1] / "inference" / "live_writer.py"
FRAMES, BLOCK, RATE = 48, 4, 8.0  # 6 s of acquisition


def test_the_live_widget_follows_a_growing_tiff_to_the_offline_result(viewer, qtbot, tmp_path: Path) -> None:
    import tifffile

    from decode_mem.infer import InferConfig, run_inference
    from decode_mem.io.localizations import read_localizations

    movie = sample_movie(tmp_path / "sample", frames=FRAMES, size=32)
    np.save(tmp_path / "frames.npy", tifffile.imread(movie))
    target = tmp_path / "growing.tif"
    writer = subprocess.Popen([sys.executable, str(WRITER), "tiff", str(tmp_path / "frames.npy"), str(target),
                               "--rate", str(RATE)])
    deadline = time.monotonic() + 30
    while not target.exists():
        assert writer.poll() in (None, 0) and time.monotonic() < deadline, "the writer did not start"
        time.sleep(0.01)
    widget = LiveWidget(viewer)
    widget.source.value = A_FILE
    widget.path.value, widget.out.value, widget.device.value, widget.block.value = target, tmp_path / "out", "cpu", \
        BLOCK
    widget.idle_timeout.value, widget.refresh.value = 3.0, 0.5
    widget.start()
    try:
        qtbot.waitUntil(lambda: "frames done" in widget.lag.value and "growing live" in viewer.layers,
                        timeout=120_000)
        mid = viewer.layers["growing live"].metadata["decode_mem"]
        assert 0 < mid["frames"] < FRAMES  # refreshed while the camera still wrote
        qtbot.waitUntil(lambda: not widget.running, timeout=300_000)
    finally:
        assert writer.wait(60) == 0
    assert "done: 1 stack(s), 48 frames" in widget.log.value, widget.log.value
    assert widget.refreshes >= 1 and "growing live" not in viewer.layers
    run_inference(InferConfig(inputs=(str(movie),), out=str(tmp_path / "offline"), device="cpu", block=BLOCK,
                              report=False))
    offline = read_localizations(tmp_path / "offline" / f"{movie.stem}.csv", pixel_size=100.0)
    points = viewer.layers["growing localizations"]
    assert len(points.data) == len(offline) > 30
    np.testing.assert_allclose(points.data, (np.column_stack([offline["y"], offline["x"]]) + 0.5) * 100.0,
                               rtol=1e-5, atol=2e-4)
    np.testing.assert_array_equal(points.features["frame"], offline["frame"])
