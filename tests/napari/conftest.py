"""napari's own fixtures (``make_napari_viewer``, pytest-qt's ``qtbot``) on an X display: napari draws with
OpenGL, which Qt's offscreen platform lacks, so without a display these tests start an Xvfb of their own for the
session (``apt-get install xvfb``). The display is set only while the QApplication connects to it: the rest of
the suite never sees it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

NEEDS = "the napari extra is not installed (pip install -e '.[napari]')"


@pytest.fixture(scope="session")
def x_display(request: pytest.FixtureRequest) -> str:
    """The X display the session's QApplication uses: $DISPLAY, else a new Xvfb, which ends by itself when its
    last client, this process's QApplication, disconnects (``-terminate``): at the process's exit, after Qt."""
    pytest.importorskip("napari", reason=NEEDS)
    pytest.importorskip("pytestqt", reason=NEEDS)
    given = os.environ.get("DISPLAY")
    if given:
        request.getfixturevalue("qapp")
        return given
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("napari draws with OpenGL on an X display: DISPLAY is not set and Xvfb is not installed "
                    "(apt-get install xvfb)")
    read, write = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(write), "-screen", "0", "1280x1024x24", "-nolisten", "tcp",
                             "-terminate"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as fh:
        number = fh.readline().strip()  # Xvfb writes the display number once it accepts connections
    if not number:
        proc.kill()
        pytest.fail("Xvfb did not start")
    display = f":{number}"
    os.environ["DISPLAY"] = display
    try:
        request.getfixturevalue("qapp")  # the QApplication connects now and keeps its connection
    finally:
        del os.environ["DISPLAY"]
    return display


@pytest.fixture
def viewer(x_display: str, make_napari_viewer):
    """A napari viewer (hidden) on the session's display, closed and checked for leaks by napari's fixture."""
    return make_napari_viewer()
