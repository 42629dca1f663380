"""The core install stays light: ``import decode_mem``, every job's CLI module and the layer/reader code never
import napari or Qt (only the widgets do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import decode_mem

GUI = ("napari", "qtpy", "PyQt5", "PyQt6", "PySide2", "PySide6", "vispy", "magicgui", "superqt")


def test_decode_mem_its_clis_and_the_reader_import_no_gui() -> None:
    package = Path(decode_mem.__file__).parent
    clis = sorted(f"decode_mem.{p.parent.name}.__main__" for p in package.glob("*/__main__.py"))
    assert "decode_mem.infer.__main__" in clis and not any("napari" in c for c in clis)
    modules = ["decode_mem", *clis, "decode_mem.napari.layers", "decode_mem.napari.reader"]
    code = (f"import importlib, json, sys; [importlib.import_module(m) for m in {modules!r}]; "
            f"print(json.dumps(sorted(m for m in {GUI!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
