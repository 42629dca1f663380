"""Picasso (identify + LQ Gaussian fit) as a baseline for the benchmarks, run in its own interpreter.

Picasso's pins clash with decode_mem's environment (pandas < 3, scikit-learn < 1.8), so it runs in a separate
venv; this module is both the client (``run_picasso``, ``tune_picasso``: in the benchmark's process) and the
worker (``python benchmarks/picasso_runner.py STACK OUT BOXES MIN_NG CAMERA``: in Picasso's). Recipe:

    python -m venv --system-site-packages /work/picasso_venv
    /work/picasso_venv/bin/pip install picassosr==0.11.3 --no-deps
    /work/picasso_venv/bin/pip install "pandas<3" "scikit-learn<1.8" numba nd2 sqlalchemy statsmodels playsound3

or reuse the venv ``.ci/run`` makes for the reader test (``.ci/.picasso-venv``) after
``.ci/.picasso-venv/bin/pip install imageio`` (``picasso.localize`` needs it, the reader does not).

Single-threaded (numba 1 thread, ``threaded=False``), like decode_mem's benchmarks (torch 1 thread). Spots
are converted ADU -> photons with ``Sensitivity = e⁻/ADU / QE`` (Picasso ignores QE), which changes photon
counts only, not positions. Tuning: every box is fitted once at a low threshold, then each minimum net
gradient is a filter (identification at a higher threshold keeps exactly those maxima).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BOXES = (3, 5, 7, 9)
NG_FLOOR = 300.0  # lowest minimum net gradient tried (ADU)
N_THRESHOLDS = 80
DEFAULT_PYTHONS = ("/work/picasso_venv/bin/python", "/tmp/picasso_venv/bin/python",
                   str(Path(__file__).resolve().parents[1] / ".ci" / ".picasso-venv" / "bin" / "python"))


def camera_settings(camera: Any) -> dict[str, float]:
    """Picasso's camera dictionary for a decode_mem Camera."""
    return {"Baseline": camera.baseline, "Sensitivity": camera.e_per_adu / camera.qe, "Gain": camera.em_gain,
            "Pixelsize": camera.pixel_size}


def find_picasso_python(given: str | None = None) -> str | None:
    """An interpreter that imports picasso: ``given`` (it must, or this exits saying why), $PICASSO_PYTHON, this
    one, the usual venvs; else None."""
    if given:
        done = subprocess.run([given, "-c", "import picasso.localize"], capture_output=True, text=True)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["it did not run"])[-1]
            raise SystemExit(f"--picasso-python {given}: cannot import picasso.localize ({reason})")
        return given
    candidates = [os.environ.get("PICASSO_PYTHON"), sys.executable, *DEFAULT_PYTHONS]
    for python in candidates:
        if python and shutil.which(python) and subprocess.run(
                [python, "-c", "import picasso.localize"], capture_output=True).returncode == 0:
            return python
    return None


def picasso_version(python: str) -> str:
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('picassosr'), "
                           "m.version('numba'))"], capture_output=True, text=True)
    parts = done.stdout.split()
    return f"picassosr {parts[0]}, numba {parts[1]}" if len(parts) == 2 else "picassosr (version unknown)"


def run_picasso(python: str, stack: Path, boxes: list[int], min_ng: float, camera: dict, work: Path,
                threaded: bool = False) -> dict:
    """Localizations for each box (``f'{box}_x'``, ...) and the seconds each took (``f'{box}_seconds'``).

    ``threaded``: Picasso's own multi-threaded identify and fit on every core (default: one thread)."""
    out = work / f"{stack.stem}_picasso.npz"
    env = dict(os.environ) if threaded else dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [python, __file__, str(stack), str(out), json.dumps(boxes), str(min_ng), json.dumps(camera),
           "threaded" if threaded else "single"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"Picasso worker failed ({' '.join(cmd[:3])} ...):\n{done.stderr[-4000:]}")
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def table_from(res: dict, box: int, ng: float):
    """Picasso's localizations of ``box`` with net gradient above ``ng`` as an EmitterTable (pixels)."""
    from decode_mem.io.table import EmitterTable

    keep = res[f"{box}_net_gradient"] > ng
    return EmitterTable.from_arrays(frame=res[f"{box}_frame"][keep].astype(np.int64), x=res[f"{box}_x"][keep],
                                    y=res[f"{box}_y"][keep], photons=res[f"{box}_photons"][keep],
                                    bg=res[f"{box}_bg"][keep])


def tune_picasso(res: dict, gt, px: float, boxes: tuple[int, ...] = BOXES) -> tuple[int, float, float]:
    """(box, min net gradient, Jaccard) with the best Jaccard against ``gt`` (the tuning movie's)."""
    from decode_mem.evaluate import evaluate

    best = (boxes[0], NG_FLOOR, -1.0)
    for box in boxes:
        ng_all = res[f"{box}_net_gradient"]
        hi = max(float(np.percentile(ng_all, 99.5)), NG_FLOOR * 2) if len(ng_all) else NG_FLOOR * 2
        for ng in np.geomspace(NG_FLOOR, hi, N_THRESHOLDS):
            jac = evaluate(table_from(res, box, ng), gt, pixel_size=px).jaccard
            if jac > best[2]:
                best = (box, float(ng), float(jac))
    return best


def tuned_picasso(python: str, tune: tuple[Path, Any], test: Path, camera: dict, px: float,
                  work: Path) -> tuple[Any, dict[str, float]]:
    """Tune box and threshold on ``tune`` = (stack, ground truth), run them on ``test``: (table, info)."""
    tune_res = run_picasso(python, tune[0], list(BOXES), NG_FLOOR, camera, work)
    box, ng, jac_tune = tune_picasso(tune_res, tune[1], px)
    test_res = run_picasso(python, test, [box], ng, camera, work)
    return table_from(test_res, box, ng), {"box": box, "ng": ng, "jaccard_tune": jac_tune,
                                           "seconds": float(test_res[f"{box}_seconds"])}


def _worker(stack: str, out: str, boxes: list[int], min_ng: float, camera: dict, threaded: bool) -> None:
    """In Picasso's interpreter: identify + LQ fit for each box; save the localizations and timings."""
    import tifffile
    from picasso import localize

    movie = tifffile.imread(stack)
    warm = movie[:4]  # numba compiles on first use: keep that out of the timing
    ids = localize.identify(warm, min_ng, boxes[0], threaded=threaded, return_info=False)
    localize.fit_spots_gauss(localize.get_spots(warm, ids, boxes[0], camera))
    result = {}
    for box in boxes:
        t0 = time.perf_counter()
        ids = localize.identify(movie, min_ng, box, threaded=threaded, return_info=False)
        spots = localize.get_spots(movie, ids, box, camera)
        # least squares (LQ) on the CPU; the threaded fitter spreads the spots over every core
        theta = _fit_threaded(spots) if threaded else localize.fit_spots_gauss(spots)
        locs = localize.locs_from_fits_gauss(ids, theta, box, em=camera["Gain"] > 1)
        seconds = time.perf_counter() - t0
        for col in ("frame", "x", "y", "photons", "bg", "sx", "sy", "net_gradient"):
            result[f"{box}_{col}"] = np.asarray(locs[col])
        result[f"{box}_seconds"] = np.array(seconds)
    np.savez(out, **result)


def _fit_threaded(spots: np.ndarray) -> np.ndarray:
    """``localize.fit_spots_gauss`` (LQ, elliptic) on one thread per core: the same seeds, schedule and
    parameter layout, through ``gaussfit.fit_spots_async``. (``gausslq.fit_spots_parallel`` returns the old
    layout, [x, y, photons, bg, sx, sy], which ``locs_from_fits_gauss`` misreads.)"""
    from picasso import localize
    from picasso.fitting import gaussfit, seeds

    tolerance, max_iterations = localize.gauss_schedule(False, False, None, None)
    start = seeds.initial_parameters_gauss(spots, spots.shape[1], rotated=False, spherical=False)
    job = gaussfit.fit_spots_async(gaussfit.ELLIPTIC, spots, start.astype(np.float64), tolerance=tolerance,
                                   max_iterations=max_iterations, n_threads=os.cpu_count())
    while not job.finished():
        time.sleep(0.002)
    job.raise_errors()
    theta = job.results()[0].astype(np.float32)
    theta[:, 0] *= 2.0 * np.pi * theta[:, 3] * theta[:, 4]  # peak height -> photons, as fit_spots_gauss does
    return theta


def run_undrift(python: str, locs: Path, segmentation: int, work: Path) -> tuple[np.ndarray, float]:
    """Picasso's RCC drift correction (``postprocess.undrift``, its defaults) on a Picasso HDF5 file with
    ``segmentation`` frames per segment: (drift (n_frames, 2) in nm, seconds of ``undrift``)."""
    out = work / f"undrift_{locs.stem}.npz"
    done = subprocess.run([python, __file__, "undrift", str(locs), str(out), str(int(segmentation))],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"Picasso undrift failed: {done.stderr.strip()[-2000:]}")
    res = np.load(out)
    return res["drift_nm"], float(res["seconds"])


def _undrift_worker(locs_path: str, out: str, segmentation: int) -> None:
    """In Picasso's interpreter: load the locs, run undrift without display, save the drift in nm."""
    from picasso import io, postprocess

    locs, info = io.load_locs(locs_path)
    t0 = time.perf_counter()
    drift, _ = postprocess.undrift(locs, info, segmentation, display=False,
                                   segmentation_callback=lambda i: None, rcc_callback=lambda i: None)
    seconds = time.perf_counter() - t0
    px = next(d["Pixelsize"] for d in reversed(info) if "Pixelsize" in d)
    np.savez(out, drift_nm=np.column_stack([np.asarray(drift["x"]), np.asarray(drift["y"])]) * px,
             seconds=np.array(seconds))


if __name__ == "__main__":
    if sys.argv[1] == "undrift":
        _undrift_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        _stack, _out, _boxes, _ng, _camera, _mode = sys.argv[1:7]
        _worker(_stack, _out, json.loads(_boxes), float(_ng), json.loads(_camera), _mode == "threaded")
