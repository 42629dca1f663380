"""Whole-process host memory of an ``infer`` run does not grow with the stack length: the report's super-resolution
image is counted from the emitters as they are written, the output is never read back (it was, and a 10x longer
stack then peaked ~100 MiB higher, at the report).

The runs are whole processes doing what ``python -m decode_mem.infer`` does (``run_inference`` with the CLI's
observer) with a fixed block of 16 frames: the stacks then differ in their number of blocks only, not in the
emitters per block (the block is bounded by construction; an 'auto' block of tiny frames would be 256 frames, so a
short stack's only block would be smaller than a long one's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from infer_helpers import REPO

from decode_mem.memory import ProcessPeak

pytestmark = pytest.mark.serial  # a child's peak sampled every 5 ms: no other worker beside it

MARGIN_MIB = 20.0
RUNS = 2  # of each length (the assertion says why)
RUN = """
import sys
from decode_mem.infer import InferConfig, run_inference
from decode_mem.infer.console import ConsoleObserver
stack, out, model = sys.argv[1:]
run_inference(InferConfig(inputs=(stack,), out=out, model=model, formats=("csv",), chunk_size="whole", batch_size=4,
                          block=16, threads=1, compile=False, device="cpu"), ConsoleObserver(quiet=True))
"""


def _peak_rss_anon_mib(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RssAnon (MiB) of a process, read from /proc every 5 ms."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watcher = ProcessPeak(proc, interval=0.005)
    out, _ = proc.communicate()
    peak = watcher.join()
    assert proc.returncode == 0, out
    assert peak is not None, "no RssAnon reading of the child"
    return peak


def test_whole_process_peak_is_flat_in_the_stack_length(tmp_path: Path, sample_frames: np.ndarray) -> None:
    """A tiny network whose detection bias makes every pixel a localization: 1024 rows per 32² frame, 33k rows
    for 32 frames and 328k for 320 (CSV); the long stack's lower peak of two runs (the report included) is less than
    MARGIN_MIB above the short stack's higher one."""
    if not Path("/proc/self/status").is_file():
        import pytest

        pytest.skip("needs /proc to read RssAnon")
    import torch

    from decode_mem.io.camera import Camera
    from decode_mem.model.checkpoint import save_checkpoint
    from decode_mem.model.net import DecodeNet, ModelConfig
    from decode_mem.simulate.config import SimulationConfig

    torch.manual_seed(0)
    model = save_checkpoint(tmp_path / "dense.pt", net=DecodeNet(ModelConfig.tiny(use_z=False, p_bias_init=3.0)),
                            camera=Camera.emccd(), simulation=SimulationConfig().to_dict(), step=0)
    frames = sample_frames[:, :32, :32]
    # glibc gives threads malloc arenas of their own, in an order that depends on timing: peaks of identical runs
    # moved by up to 40 MiB; two arenas made them repeatable within 6 MiB on the Intel Xeon where this was written
    # (not on an AMD EPYC: the assertion below)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    peaks, rows = {32: [], 320: []}, {}
    for n in peaks:
        tifffile.imwrite(tmp_path / f"s{n}.tif", np.resize(frames, (n, 32, 32)))
    for run in range(RUNS):
        for n in peaks:
            stack = tmp_path / f"s{n}.tif"
            out = tmp_path / f"out{n}_{run}"
            cache = {"DECODE_MEM_CACHE": str(tmp_path / f"cache{n}_{run}.json")}  # every run measures its traces
            peaks[n].append(_peak_rss_anon_mib([sys.executable, "-c", RUN, str(stack), str(out), str(model)],
                                               env | cache))
            rows[n] = json.loads((out / f"s{n}.json").read_text())["localizations"]
            assert (out / "report.html").is_file()
    assert rows[320] > 9 * rows[32] > 200_000  # the long stack wrote ~10x the rows
    # one-sided: what must not happen is growth with the length. Identical runs' peaks vary more than the margin
    # (on a 2-core AMD EPYC, 2026-12-03: 305-357 MiB for the short stack, 336-377 for stacks of 320-3200 frames, no
    # trend with the length; the test failed 1 time in 4 comparing one run of each): so the lowest long run
    # against the highest short one. Growth with the length moves every long run up (the report read back: ~100 MiB)
    assert min(peaks[320]) - max(peaks[32]) < MARGIN_MIB, (peaks, rows)
