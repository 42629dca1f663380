"""``python -m decode_mem.infer``: localize emitters in stacks, folders of stacks or globs.

Example: ``python -m decode_mem.infer movies/ --model model.pt --out locs --format csv,picasso --resume``.
Per stack ``<stem>``: ``<stem>.csv`` / ``.hdf5`` + ``.yaml`` / ``.parquet`` and ``<stem>.json`` (written last).
Without size flags the tile size and batch are chosen per stack as the fastest that fit the memory budget
(``--memory_limit``; ``python -m decode_mem.plan`` shows the choice before a run). ``--chunk_size`` is the
tile core side (each tile adds the network's halo; training's crops are ``--crop_size``) and ``--batch_size``
the windows (tile × frame) per network call, as in ``python -m decode_mem.train``. The first frames of each
stack are checked against the model's training envelope; ``--strict`` makes a mismatch an error.
Exit codes: 0 all stacks done, 1 some stack failed (reported, the others were processed), 2 bad model,
settings or input (nothing was done), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept; the
same command with --resume continues).
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
from collections.abc import Sequence

from decode_mem.cli import (
    CAMERA_FLAG_HELP,
    CAMERA_HELP,
    DEVICE_HELP,
    EXIT_SOME_FAILED,
    MEANINGS,
    TABLES_WRITTEN,
    add,
    int_or_auto,
    new_parser,
    run,
)
from decode_mem.config import AMP_CHOICES, resolve_device
from decode_mem.footprint.request import ENGINE_CHOICES
from decode_mem.io.camera import CAMERA_FLAGS
from decode_mem.torch_facts import device_type


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.infer", __doc__)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="stack files, folders of stacks or globs")
    p.add_argument("--model", help="checkpoint (default: the shipped model for the device: "
                                   "data/models/default_2d_wide.pt on a GPU where it is shipped; on a CPU "
                                   "data/models/default_2d_light.pt where it passed its checks "
                                   "(default_2d_light_cpu.json), else data/models/default_2d.pt)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--format", default="csv", help=f"comma-separated: {TABLES_WRITTEN} (default csv)")
    p.add_argument("--series", type=int,
                   help="the series of every input to localize: a TIFF or OME-Zarr series, a CZI scene, an ND2 "
                        "position, a LIF image (default: series 0 and the series after it of the same frame size, "
                        "one movie)")
    add(p, "--max_damage", type=float,
        help="the share of a movie's frames that may be repaired (NaN frames, missing zarr chunks, unreadable frame "
             "files); a movie with more damaged frames is refused (default 0.05)")
    mem = p.add_argument_group("memory and speed")
    tiling = mem.add_mutually_exclusive_group()
    add(tiling, "--use_chunking", action="store_true",
        help="cut frames into tiles of --chunk_size (exact: the result equals whole frames)")
    add(tiling, "--whole_frames", action="store_true",
        help="no tiles: each frame in one piece (an out-of-memory error still backs off to tiles); default "
             "without either flag: whole frames when they fit the memory budget, else tiles")
    add(mem, "--chunk_size", type=int_or_auto, default="auto",
        help=MEANINGS["--chunk_size"] + " with --use_chunking, or 'auto' (default: the fastest that fits "
             "--memory_limit); whole frames, no tiles: --whole_frames")
    add(mem, "--batch_size", type=int_or_auto, default="auto",
        help=MEANINGS["--batch_size"] + " (one per tile and frame), or 'auto' (default)")
    add(mem, "--memory_limit", help=MEANINGS["--memory_limit"] + "; default: on a CPU 768 MiB or half the "
                                    "available above what the process holds before the run, on CUDA 80%% of the "
                                    "free GPU memory; given sizes that cannot fit it are refused")
    mem.add_argument("--amp", choices=AMP_CHOICES, default="auto",
                     help="mixed precision: auto (default: CUDA, or a CPU with native bf16), bf16, fp16, off")
    add(mem, "--use_amp", dest="amp", action="store_const", const="bf16", help="same as --amp bf16")
    add(mem, "--no_amp", dest="amp", action="store_const", const="off", help="same as --amp off")
    mem.add_argument("--device", default="auto", help=DEVICE_HELP)
    mem.add_argument("--threads", type=int, help="torch CPU threads per process (default: torch's, the cores; idle "
                                                  "threads sleep instead of spinning)")
    mem.add_argument("--engine", choices=ENGINE_CHOICES, default="auto",
                     help="what computes the network on a CPU: auto (default: the fastest of torch, openvino, "
                          "onnxruntime and, where its check against fp32 passed for the model, openvino-int8, measured "
                          "on this machine and remembered; said once per run; torch on a GPU or without the runtimes), "
                          "torch, openvino or onnxruntime (pip install -e \".[cpu]\"; on --threads; OpenVINO in bf16 "
                          "where --amp is bf16 on a CPU with native bf16, else fp32), or openvino-int8 (OpenVINO in "
                          "int8, calibrated once per machine on the model's training physics: faster, close to fp32 "
                          "but not equal; docs/engines.md)")
    mem.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                     help="torch.compile the network: auto (default: on a CPU for long stacks), on, off")
    mem.add_argument("--streams", type=int, default=1,
                     help="blocks computed at once on a CPU, each with a share of the threads (default 1; "
                          "benchmarks/results/streams.md); each adds a block and the network's working set")
    add(mem, "--memory_log_file", help="memory CSV, one row per block")
    det = p.add_argument_group("detection and camera")
    det.add_argument("--threshold", type=float,
                     help="detection probability threshold (default 0.4, the shipped post-processing's)")
    det.add_argument("--camera", help=CAMERA_HELP + "; default: what the file's metadata states (docs/formats.md), "
                                                   "then the camera table for the camera it names, then the model's "
                                                   "camera")
    for flag in CAMERA_FLAGS:
        add(det, f"--{flag}", type=float, help=CAMERA_FLAG_HELP[flag] + " (overrides --camera and the file's metadata)")
    add(det, "--prob_map", action="store_true",
        help="also write <stem>_prob.zarr: the detection probability of every pixel (zarr v3, float16)")
    det.add_argument("--drift", action="store_true",
                     help="also correct the stage drift (decode_mem.drift): <stem>_undrift.<ext>, <stem>_drift.csv, "
                          "<stem>_drift.png")
    det.add_argument("--link", action="store_true",
                     help="also link each stack's localizations into molecules (decode_mem.link, after --drift): "
                          "<stem>_link.<ext>, <stem>_group.<ext>")
    det.add_argument("--quality", action="store_true",
                     help="also estimate each stack's precision and resolution without ground truth (NeNA, FRC; "
                          "decode_mem.evaluate --no_truth) into <stem>.json and report.html (also with --link); its "
                          "memory grows with a stack's localizations")
    det.add_argument("--strict", action="store_true",
                     help="data outside the model's domain are an error (exit 2, nothing written)")
    add(mem, "--block", type=int_or_auto, default="auto",
        help="frames per block, or 'auto' (default: about 64 MiB of frames; with --follow at most 16 frames)")
    live = p.add_argument_group("live (a stack still being written)")
    live.add_argument("--follow", action="store_true",
                      help="localize INPUT (one TIFF file, zarr array, NDTiff dataset or folder of frame files) while "
                           "it is being "
                           "written; ends when nothing was written for --idle_timeout")
    add(live, "--idle_timeout", type=float, default=30.0,
        help="seconds without a new byte after which the acquisition counts as ended (default 30)")
    add(live, "--refresh", type=float, default=10.0,
        help="seconds between refreshes of <stem>.json, report.html and the parts in <stem>.live/ (default 10)")
    two = p.add_argument_group("two colours (docs/two_colour.md)")
    add(two, "--registration",
        help="a registration made by python -m decode_mem.register: the inputs are two-colour movies, split views "
             "as its bead images were, or for two cameras channel 1's and channel 2's movies in pairs; one table with "
             "channel and dye columns (Picasso: one file per channel or dye)")
    add(two, "--dyes", help="ratiometric dyes NAME=RATIO,... (the share of each dye's photons in channel 2, e.g. "
                            "AF647=0.2,CF680=0.45): each emitter seen in both channels is paired and its ratio names "
                            "its dye; default: one dye per channel")
    add(two, "--model2", help="channel 2's model (default: --model)")
    add(two, "--camera2", help="channel 2's camera, a preset or a camera YAML (default: --camera)")
    add(two, "--pair_radius", type=float,
        help="nm within which two localizations, one of each channel in one frame, are one emitter (default 100)")
    add(two, "--ratio_window", type=float,
        help="half-width of each dye's ratio window, a fraction of the photons (default: 0.35 of the smallest gap "
             "between two dyes' ratios); ratios outside every window are unassigned")
    run_ = p.add_argument_group("run")
    run_.add_argument("--resume", action="store_true",
                      help="skip stacks whose <stem>.json exists and continue the others where a stopped or killed "
                           "run left them (<stem>.progress/; the same settings, else exit 2 naming the difference)")
    add(run_, "--journal_seconds", type=float,
        help="seconds between the parts of <stem>.progress/ that --resume continues from (default 5; 0: after "
             "every block): what a kill can lose beside the block in hand. Offline runs; with --follow, --refresh "
             "sets it")
    run_.add_argument("--workers", type=int, default=0, help="start a local dask cluster with N processes")
    run_.add_argument("--scheduler", help="address of an existing dask scheduler")
    add(run_, "--frames_per_task", type=int, default=None, help="frames per dask task (long stacks are split)")
    return p


def config_from_args(args: argparse.Namespace):  # -> InferConfig (imported lazily: fast --help)
    from decode_mem.config import parse_bytes
    from decode_mem.infer import InferConfig

    camera = args.camera  # a preset or a YAML, resolved per stack with what the file states (io.metadata)
    overrides = {k: getattr(args, k) for k in CAMERA_FLAGS if getattr(args, k) is not None}
    # CUDA asked for but absent: an error before any work (torch is not imported where its build has no CUDA)
    device = "cpu" if device_type(args.device) == "cpu" else str(resolve_device(args.device))
    extra = {} if args.frames_per_task is None else {"frames_per_task": args.frames_per_task}
    from decode_mem.errors import ConfigError

    if args.journal_seconds is not None:
        if args.follow:  # one knob per job: a followed stack's parts are closed every --refresh seconds
            raise ConfigError("--journal_seconds is for offline runs; with --follow the parts that --resume "
                              "continues from are closed every --refresh seconds")
        extra["journal_seconds"] = args.journal_seconds
    if args.whole_frames and args.chunk_size != "auto":
        raise ConfigError("--whole_frames takes no --chunk_size (use --use_chunking --chunk_size N for tiles)")
    chunk = "whole" if args.whole_frames else args.chunk_size
    two_colour = None
    given = [f"--{k}" for k in ("dyes", "model2", "camera2", "pair_radius", "ratio_window")
             if getattr(args, k) is not None]
    if args.registration is not None:
        from decode_mem.infer.colours import PAIR_RADIUS, TwoColour

        two_colour = TwoColour(args.registration, dyes=args.dyes, model2=args.model2, camera2=args.camera2,
                               pair_radius=PAIR_RADIUS if args.pair_radius is None else args.pair_radius,
                               ratio_window=args.ratio_window)
    elif given:
        raise ConfigError(f"{', '.join(given)}: for two-colour movies, with --registration (docs/two_colour.md)")
    return InferConfig(
        inputs=tuple(args.inputs), out=args.out, model=args.model, series=args.series, max_damage=args.max_damage,
        formats=tuple(f.strip() for f in args.format.split(",") if f.strip()),
        chunk_size=chunk, batch_size=args.batch_size, amp=args.amp, write_probability_map=args.prob_map,
        compile={"on": True, "off": False}.get(args.compile, "auto"), streams=args.streams,
        block=args.block, follow=args.follow, idle_timeout=args.idle_timeout, refresh=args.refresh,
        memory_limit=parse_bytes(args.memory_limit), device=device, threshold=args.threshold, camera=camera,
        camera_overrides=overrides, strict=args.strict, drift=args.drift, resume=args.resume, workers=args.workers,
        link=args.link, quality=args.quality,
        scheduler=args.scheduler, threads=args.threads, engine=args.engine, two_colour=two_colour, **extra)


def main(argv: Sequence[str] | None = None) -> int:
    argv_used = list(sys.argv[1:] if argv is None else argv)  # for the report's command line

    def body(args: argparse.Namespace) -> int:
        gc.disable()  # torch's and scipy's imports make ~10^6 objects that live until the exit: the full
        try:  # collections they would trigger free nothing (~0.25 s of CPU, benchmarks/results/stack_cost.md)
            from decode_mem.infer import run_inference
            from decode_mem.infer.console import ConsoleObserver
        finally:
            gc.enable()

        cfg = config_from_args(args)  # the model the run takes without --model: said by run_inference, after checks
        report = run_inference(cfg, ConsoleObserver(quiet=bool(args.quiet), memory_log_file=args.memory_log_file),
                               command=" ".join(["python -m decode_mem.infer", *map(shlex.quote, argv_used)]))
        done = [s for s in report.stacks if not s.skipped]
        if not args.quiet:
            print(f"{len(done)} stack(s) done, {len(report.stacks) - len(done)} skipped (--resume), "
                  f"{len(report.failures)} failed; {report.frames} frames in {report.wall_s:.1f} s -> {args.out}")
        if report.failures:  # each was a warning line when it happened
            print(f"error: {len(report.failures)} of {len(report.failures) + len(report.stacks)} input(s) failed "
                  "(the warnings above name them); the others are done", file=sys.stderr)
            return EXIT_SOME_FAILED
        return 0

    return run(build_parser(), body, argv, outputs={"out": "folder", "memory_log_file": "file"})


if __name__ == "__main__":
    code = main()
    # every file is written and closed: what is alive now lives until the exit anyway. Frozen, it is out of the
    # interpreter's final collection, which would otherwise walk torch's objects one by one (~0.5 s of CPU per
    # run on a 2-core CPU, benchmarks/results/stack_cost.md)
    gc.freeze()
    sys.exit(code)
