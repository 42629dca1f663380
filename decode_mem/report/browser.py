"""A report as a browser shows it: headless Chromium renders an HTML file to a PNG (tests, screenshots).

Chromium is an outside program (Debian: ``apt-get install chromium``); ``find_chromium`` says whether there
is one. Each call gets a fresh throw-away profile and no network, sync, GPU or first-run work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from decode_mem.errors import DecodeMemError

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(html: str | os.PathLike, png: str | os.PathLike, *, width: int = 1280, height: int = 2000,
               chromium: str | None = None, timeout: float = 120.0) -> Path:
    """Render ``html`` (a file) to ``png`` at ``width`` × ``height`` CSS px (the top of the page that fits).

    Raises DecodeMemError when there is no Chromium, or when it fails or writes no PNG (its output in the message).
    """
    exe = chromium or find_chromium()
    if exe is None:
        raise DecodeMemError(f"no Chromium found (looked for {', '.join(CHROMIUM_NAMES)}); "
                             "install it, e.g. `apt-get install chromium`")
    png = Path(png).resolve()
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="decode_mem_chromium_") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={int(width)},{int(height)}",
               Path(html).resolve().as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise DecodeMemError(f"{exe}: no screenshot of {html} within {timeout:g} s") from None
    if not png.is_file() or png.stat().st_size == 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:]
        raise DecodeMemError(f"{exe} wrote no screenshot of {html} (exit {done.returncode}): {' | '.join(tail)}")
    return png
