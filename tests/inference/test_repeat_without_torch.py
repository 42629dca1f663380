"""A repeat run whose network a CPU runtime computes imports no torch (issue 77): the first run on a machine loads the
checkpoint with torch and keeps what later runs need (``model.trained``: the model's metadata, its network's config,
receptive field and digest), beside the planner's and the engine's timings and the converted network; a later run,
in a fresh process, reads them, localizes with OpenVINO on numpy arrays and never imports torch. Needs the ``cpu``
extra (OpenVINO): skipped, saying so, without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tifffile
from infer_helpers import REPO, SAMPLE

from decode_mem.io.localizations import read_localizations
from decode_mem.model import engine as engines

PROBE = """import json, runpy, sys
sys.argv = ["decode_mem.infer", *json.loads(sys.argv[1])]
try:
    runpy.run_module("decode_mem.infer", run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({"exit": code, "torch": "torch" in sys.modules}))
"""


def _run(args: list[str], env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit"] in (0, None), done.stdout[-3000:] + done.stderr[-3000:]
    return result


def _sorted(path) -> np.ndarray:
    table = read_localizations(path)
    rows = np.column_stack([np.asarray(table[c], np.float64) for c in ("frame", "x", "y", "photons", "prob")])
    return rows[np.lexsort(rows.T[::-1])]


def test_a_repeat_run_with_a_cpu_runtime_imports_no_torch_and_localizes_the_same(tmp_path) -> None:
    if not engines.installed("openvino"):
        pytest.skip("openvino not installed (the optional 'cpu' extra: pip install -e \".[cpu]\")")
    movie = tmp_path / "movie.tif"
    tifffile.imwrite(movie, tifffile.imread(SAMPLE)[:12])
    env = {**os.environ, "DECODE_MEM_CACHE": str(tmp_path / "cache" / "throughput.json")}
    # --device cpu: on a machine with a CUDA build of torch, 'auto' asks torch whether a GPU is there
    args = ["--engine", "openvino", "--device", "cpu"]
    first = _run([str(movie), "--out", str(tmp_path / "first"), *args], env)
    again = _run([str(movie), "--out", str(tmp_path / "again"), *args], env)
    assert first["torch"] and not again["torch"]
    a, b = _sorted(tmp_path / "first" / "movie.csv"), _sorted(tmp_path / "again" / "movie.csv")
    assert len(a) > 50 and a.shape == b.shape
    np.testing.assert_array_equal(a, b)
    kept = json.loads((tmp_path / "cache" / "models.json").read_text())
    assert len(kept) == 1 and next(iter(kept.values()))["model_config"]["features"] > 0
