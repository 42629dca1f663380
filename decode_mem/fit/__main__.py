"""``python -m decode_mem.fit MOVIE... --out DIR [--budget_minutes M] [--train auto|always|never] [--psf psf.h5]``.

Calibrates the first movie, uses the shipped generalist where its training envelope covers it, otherwise
fine-tunes it on matching simulations (progress and remaining time shown; Ctrl-C or a kill leaves a state that
the same command continues from), validates the new model against the shipped one
on held-out matched simulations, localizes every movie (outputs as ``decode_mem.infer``) and writes
``fit.json``. Give the camera that recorded the movies (``--camera CAM.yaml`` or the camera flags of infer).
With ``--psf psf.h5`` (``python -m decode_mem.psf``) the movies are 3-D: a 3-D model is trained on that PSF.
``--budget_minutes`` is the whole command's wall time when it trains: training gets what calibration, validation
and localization are measured or predicted to leave (``decode_mem.fit.budget``); the memory budget is
``--memory_limit``.

Example: python -m decode_mem.fit movie.tif --camera cam.yaml --out fitted --budget_minutes 15
Exit codes: 0 done, 1 some movie could not be localized (the others were), 2 bad settings or input (one
line on stderr naming the file and the problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (the
same command continues, its training from its checkpoint).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

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
    progress_bars,
    run,
)
from decode_mem.io.camera import CAMERA_FLAGS


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.fit", __doc__)
    p.add_argument("movies", nargs="+", metavar="MOVIE", help="stacks of one setup (the first is calibrated)")
    p.add_argument("--out", required=True, help="output folder")
    add(p, "--budget_minutes", old=("--budget",), type=float, default=15.0,
        help=MEANINGS["--budget_minutes"] + " for the whole command when it fine-tunes or trains (--psf); training "
        "gets what the other stages leave (default 15)")
    p.add_argument("--train", choices=("auto", "always", "never"), default="auto",
                   help="auto (default): fine-tune only when the shipped model does not cover the movie")
    p.add_argument("--model", help="base model to use or fine-tune (default: the shipped generalist)")
    p.add_argument("--psf", help="PSF file (python -m decode_mem.psf): train a 3-D model on it within --budget_minutes")
    cam = p.add_argument_group("camera")
    cam.add_argument("--camera", help=CAMERA_HELP)
    for flag in CAMERA_FLAGS:
        add(cam, f"--{flag}", type=float, help=CAMERA_FLAG_HELP[flag] + " (overrides --camera / the file's metadata)")
    run_ = p.add_argument_group("run")
    add(run_, "--calib_frames", type=int, default=200, help="frames the calibration reads (default 200)")
    add(run_, "--val_windows", type=int, default=256, help="held-out matched windows for validation (default 256)")
    run_.add_argument("--format", default="csv", help=f"comma-separated: {TABLES_WRITTEN} (default csv)")
    add(run_, "--chunk_size", type=int_or_auto, default="auto", help=MEANINGS["--chunk_size"] + ", or auto")
    add(run_, "--batch_size", type=int_or_auto, default="auto",
        help=MEANINGS["--batch_size"] + " in inference, or auto")
    add(run_, "--memory_limit", help=MEANINGS["--memory_limit"] + ", for fine-tuning and inference; fine-tuning "
        "that cannot fit it is refused")
    run_.add_argument("--device", default="auto", help=DEVICE_HELP)
    run_.add_argument("--threads", type=int, help="torch CPU threads")
    run_.add_argument("--seed", type=int, default=0,
                      help="random seed of the matched simulations, an integer (default 0)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> int:
        from tqdm.auto import tqdm

        from decode_mem.config import parse_bytes
        from decode_mem.fit import FitConfig, fit_movies
        from decode_mem.infer.console import ConsoleObserver
        from decode_mem.io.metadata import CameraRequest, read_metadata
        from decode_mem.train.observers import ProgressLines

        flags = {k: getattr(args, k) for k in CAMERA_FLAGS if getattr(args, k) is not None}
        camera, _ = CameraRequest.from_value(args.camera, flags).resolve(read_metadata(args.movies[0]))
        cfg = FitConfig(movies=tuple(args.movies), out=args.out, camera=camera, budget_minutes=args.budget_minutes,
                        train=args.train, base_model=args.model, psf=args.psf, calib_frames=args.calib_frames,
                        val_windows=args.val_windows,
                        device=args.device, threads=args.threads, seed=args.seed,
                        formats=tuple(f.strip() for f in args.format.split(",") if f.strip()),
                        chunk_size=args.chunk_size, batch_size=args.batch_size,
                        memory_limit=parse_bytes(args.memory_limit))
        bar = None
        t_train = [0.0]
        lines: list[ProgressLines | None] = [None]

        def on_progress(stage: str, details: dict) -> None:
            nonlocal bar
            if stage == "train":
                t_train[0] = time.perf_counter()
                if not args.quiet:
                    what = "training" if args.psf else "fine-tuning"
                    split = details["budget"]
                    print(f"{what} for {details['train_minutes']:.3g} of the {details['budget_minutes']:g} min "
                          f"(set-up took {split['spent_before_training_s']:.0f} s; localizing and validating are "
                          f"predicted to take {split['predicted_localize_s'] + split['predicted_evaluate_s']:.0f} s; "
                          f"batch {details['batch_size']} x {details['accumulation_steps']} accumulated): "
                          + "; ".join(details["why"]))
                bar = tqdm(total=round(60 * details["train_minutes"]), unit="s", desc="fine-tune",
                           disable=not progress_bars(args.quiet))
                if not args.quiet and not progress_bars(args.quiet):  # a log or a pipe: a line every 30 s
                    lines[0] = ProgressLines(None, lambda line: print(line, flush=True),
                                             prefix="train" if args.psf else "fine-tune",
                                             budget_s=60 * details["train_minutes"])
            elif bar is not None:
                bar.close()
                bar = None
            if stage == "warning":
                print(f"warning: {details['line']}", file=sys.stderr)
            elif stage == "calibrated":
                for w in details["camera_warnings"]:
                    print(f"warning: {w}", file=sys.stderr)
                if not args.quiet:
                    est = ", ".join(f"{k} {v:.4g}" for k, v in details["estimates"].items()
                                    if isinstance(v, float) and v == v)
                    print(f"calibrated {args.movies[0]}: {est}")
            elif stage == "validate" and not args.quiet:
                print(f"validating on {details['windows']} held-out matched windows")

        def on_step(step: int, row: dict) -> None:
            if lines[0] is not None:
                lines[0](step, row)
            if bar is not None:
                bar.n = min(bar.total, round(time.perf_counter() - t_train[0]))
                bar.set_postfix(step=step, loss=f"{row['loss']:.3g}", refresh=True)

        report = fit_movies(cfg, on_progress=on_progress, on_step=on_step,
                            observer=ConsoleObserver(quiet=bool(args.quiet)))
        if not args.quiet:
            print(f"model: {report.model} ({report.decision}: {'; '.join(report.reasons)})")
            for name, m in report.validation.items():
                ax = f", axial {m['rmse_ax']:.1f} nm" if "rmse_ax" in m else ""
                print(f"  held-out matched windows, {name}: Jaccard {m['jaccard']:.3f}, "
                      f"RMSE {m['rmse_lat']:.1f} nm{ax}")
            done = [st for st in report.inference.stacks if not st.skipped] if report.inference is not None else []
            files = [n for n in ("fit.json", "calib.yaml", "model.pt", "model.md") if (Path(args.out) / n).is_file()]
            print(f"results in {Path(args.out)} ({', '.join(files)}; localizations of {len(done)} of "
                  f"{len(args.movies)} movie(s))")
        return EXIT_SOME_FAILED if report.inference is not None and report.inference.failures else 0

    return run(build_parser(), body, argv, outputs={"out": "folder"})


if __name__ == "__main__":
    sys.exit(main())
