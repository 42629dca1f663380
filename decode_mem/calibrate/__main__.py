"""``python -m decode_mem.calibrate``: measure a movie's physics and write the matching training settings.

Example: ``python -m decode_mem.calibrate movie.tif --camera cam.yaml --out calib.yaml --png calib.png``,
then ``python -m decode_mem.train --config calib.yaml`` (and ``infer --camera calib.yaml``). The camera:
flags > ``--camera`` file (or the preset 'emccd' / 'scmos') > the movie's metadata (OME, ImageJ,
Micro-Manager, ND2, CZI, LIF, SIF, NDTiff) > the camera table (docs/cameras.md) > defaults.
Exit codes: 0 done (camera warnings are printed, not fatal), 2 bad settings or input (one line on stderr naming the
file and the problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from decode_mem.calibrate.cumulants import LIGHT_FRAMES
from decode_mem.cli import CAMERA_FLAG_HELP, CAMERA_HELP, MOVIES_READ, add, new_parser, run
from decode_mem.io.camera import CAMERA_FLAGS


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.calibrate", __doc__)
    p.add_argument("movie", metavar="MOVIE", help=f"the movie of camera counts: {MOVIES_READ}")
    add(p, "--out", required=True, help="calibration YAML to write")
    add(p, "--png", help="also draw the calibration figure here")
    add(p, "--frames", type=int, default=200,
        help="frames to sample at most, in runs spread over the movie (200; fewer for very large frames); the "
             f"pixels' statistics for crowded and 3-D fits read {LIGHT_FRAMES} single frames more")
    add(p, "--seed", type=int, default=0, help="seed of the bootstrap uncertainties, an integer (default 0)")
    cam = p.add_argument_group("camera")
    add(cam, "--camera", help=CAMERA_HELP)
    for flag in CAMERA_FLAGS:
        add(cam, f"--{flag}", type=float, help=CAMERA_FLAG_HELP[flag] + " (overrides --camera and the metadata)")
    add(p, "--model", help="checkpoint whose training envelope is checked (default: the shipped model)")
    return p


def _envelope(model: str | None) -> tuple[str, dict | None, str | None]:
    """(checkpoint path, its envelope or None, a note when there is none)."""
    from decode_mem.model.checkpoint import SHIPPED_MODEL, load_checkpoint

    path = Path(model) if model else SHIPPED_MODEL
    if model is None and not path.is_file():
        return str(path), None, "no shipped model found: coverage not checked"
    envelope = load_checkpoint(path)["meta"].get("envelope")
    note = None if envelope else "the checkpoint records no training envelope: coverage not checked"
    return str(path), envelope, note


def _table(cal, coverage: dict | None, note: str | None) -> str:
    t, h, w = cal.shape
    lines = [f"{cal.movie}: {cal.frames_used} of {t} frames, {h} x {w} px; camera {cal.camera.kind}, pixel "
             f"{cal.camera.pixel_size:g} nm ({cal.camera_sources.get('pixel_size', '?')})",
             f"  {'estimate':<22} {'value':>12} {'±':>10}"]
    for name, e in cal.estimates.items():
        value = f"{e.value:>12.4g}" if math.isfinite(e.value) else f"{'not measured':>12}"
        unc = f"{e.uncertainty:>10.3g}" if e.uncertainty is not None and math.isfinite(e.uncertainty) else f"{'-':>10}"
        lines.append(f"  {name:<22} {value} {unc}")
    lines.append(f"camera check: {cal.camera_check.verdict} (noise {cal.camera_check.noise_ratio:.2f}x the camera's "
                 f"prediction, {100 * cal.camera_check.below_baseline:.2f} % of pixels below the baseline)")
    if coverage is not None:
        outside = coverage["outside"]
        lines.append(f"model {coverage['model']}: " + ("covers this movie" if not outside else
                                                        "does NOT cover this movie: " + "; ".join(outside)))
    elif note:
        lines.append(f"model: {note}")
    return "\n".join(lines)


def _body(args: argparse.Namespace) -> int:
    from decode_mem.calibrate import calibrate_movie, covers, plot_calibration, save_calibration
    from decode_mem.errors import ConfigError
    from decode_mem.io.metadata import CameraRequest, read_metadata

    if args.frames < 1:
        raise ConfigError(f"--frames must be >= 1, got {args.frames}")
    flags = {k: getattr(args, k) for k in CAMERA_FLAGS if getattr(args, k) is not None}
    request = CameraRequest.from_value(args.camera, flags)  # a bad --camera fails before the movie is read
    metadata = read_metadata(args.movie)
    camera, sources = request.resolve(metadata)
    model, envelope, note = _envelope(args.model)  # a bad --model fails before the work
    cal = calibrate_movie(args.movie, camera, frames=args.frames, seed=args.seed, camera_sources=sources,
                          metadata=metadata)  # a movie that cannot be read: a StackError, exit 2 as in every job
    # one verdict with infer's domain check: a camera that does not fit the movie puts it outside the model's domain
    coverage = {"model": model, "outside": [*cal.camera_check.warnings, *covers(cal, envelope)]} if envelope else None
    extra = {"model_coverage": {"model": model, "covered": not coverage["outside"], "outside": coverage["outside"]}
             if coverage else {"model": model, "note": note}}
    save_calibration(cal, args.out, extra)
    if args.png:
        plot_calibration(cal, args.png)
    if not args.quiet:
        print(_table(cal, coverage, note))
        print(f"wrote {args.out}" + (f" and {args.png}" if args.png else ""))
    for warning in cal.camera_check.warnings:
        print(f"warning: camera: {warning}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _body, argv, outputs={"out": "file", "png": "file"})


if __name__ == "__main__":
    sys.exit(main())
