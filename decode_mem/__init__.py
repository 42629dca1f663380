"""decode_mem: DECODE-style single-molecule localization with memory bounded by design.

The tree is the data flow, in layers from the bottom up. A module imports only from its own layer and the layers
before it, a job's CLI (``__main__``) included, and no two packages import each other (``tests/test_layering.py``
reads this list). Each job is a package with its CLI in ``__main__`` (``python -m decode_mem.<job>``)::

    errors, config, cli, threads, _lazy   exceptions, YAML settings and checks, the CLI conventions
    io, memory, torch_facts   open_stack (TIFF memmap / zarr / npy, lazy), Camera (+ sCMOS maps), localization
                    files; MemoryTracker and readings: an observer of every stage; torch's version, build and threads
                    without importing it
    simulate        per-movie physics, blinking emitters, PSFs, backgrounds, camera noise, training windows
    model           DecodeNet, its loss, checkpoints with the training envelope, precision
    calibrate, psf, register   the physics of a movie measured from its frames (and whether a model covers
                    it); a spline PSF from bead z-stacks; two colour channels registered with beads, dyes by ratio
    tiling          exact tiled executor over blocks of frames (knows no files)
    postprocess     network output -> emitter table
    footprint       predicted memory of inference and training, 'auto' sizes within a budget
    link, evaluate, render, drift, report   blinks linked into molecules; metrics (with and without ground
                    truth); super-resolution images; drift correction; HTML reports
    infer           predict_stack / process_large_image, batch runs over files, domain check
    train           the training loop
    plan, export, fit   a run's memory before it runs (as infer or train would size it); a run as a shipped
                    model + card; calibrate -> matched model -> localize
    pipeline, napari   YAML pipelines; decode_mem in napari (reader, widgets, sample data: the ``napari``
                    extra; nothing below imports it, so ``import decode_mem`` and the CLIs never load napari or Qt)

``import decode_mem as dm`` gives the entry points below, imported on first use so that ``import decode_mem``
and every ``--help`` stay fast. The one thing importing does: ask torch's OpenMP threads to sleep when idle
(``OMP_WAIT_POLICY=PASSIVE``, if torch is not loaded yet and the variable is unset; ``decode_mem.threads``)::

    with dm.open_stack("movie.tif") as stack:
        for table in dm.predict_stack(stack, dm.load_model()):   # the shipped model without a path
            ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem import threads as _threads  # noqa: F401  (before torch loads: idle OpenMP threads sleep)
from decode_mem._lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    from decode_mem.calibrate import calibrate_movie
    from decode_mem.drift import DriftConfig, correct_file, estimate_drift
    from decode_mem.evaluate import evaluate_files
    from decode_mem.footprint import choose_sizes, plan_inference
    from decode_mem.infer import InferConfig, predict_stack, process_large_image, run_inference
    from decode_mem.io import open_stack
    from decode_mem.io.camera import Camera
    from decode_mem.io.localizations import read_localizations, write_localizations
    from decode_mem.memory import MemoryTracker
    from decode_mem.model.checkpoint import load_model
    from decode_mem.pipeline import run_pipeline
    from decode_mem.render import render_file
    from decode_mem.simulate import SimulationConfig, simulate_movie, simulate_stack
    from decode_mem.train import TrainConfig, load_train_config

_EXPORTS = {
    "open_stack": "decode_mem.io",
    "Camera": "decode_mem.io.camera",
    "read_localizations": "decode_mem.io.localizations",
    "write_localizations": "decode_mem.io.localizations",
    "SimulationConfig": "decode_mem.simulate",
    "simulate_movie": "decode_mem.simulate",
    "simulate_stack": "decode_mem.simulate",
    "calibrate_movie": "decode_mem.calibrate",
    "load_model": "decode_mem.model.checkpoint",
    "plan_inference": "decode_mem.footprint",
    "choose_sizes": "decode_mem.footprint",
    "predict_stack": "decode_mem.infer",
    "process_large_image": "decode_mem.infer",
    "InferConfig": "decode_mem.infer",
    "run_inference": "decode_mem.infer",
    "evaluate_files": "decode_mem.evaluate",
    "render_file": "decode_mem.render",
    "TrainConfig": "decode_mem.train",
    "load_train_config": "decode_mem.train",
    "run_pipeline": "decode_mem.pipeline",
    "MemoryTracker": "decode_mem.memory",
    "DriftConfig": "decode_mem.drift",
    "estimate_drift": "decode_mem.drift",
    "correct_file": "decode_mem.drift",
}
__all__ = [
    "Camera", "DriftConfig", "InferConfig", "MemoryTracker", "SimulationConfig", "TrainConfig", "calibrate_movie",
    "choose_sizes", "correct_file", "estimate_drift", "evaluate_files", "load_model", "load_train_config",
    "open_stack", "plan_inference", "predict_stack", "process_large_image", "read_localizations", "render_file",
    "run_inference", "run_pipeline", "simulate_movie", "simulate_stack", "write_localizations",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
