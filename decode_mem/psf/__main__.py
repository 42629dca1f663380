"""``python -m decode_mem.psf``: a cubic-spline PSF (``psf.h5``) from bead z-stacks, or from a SMAP calibration.

Examples: ``python -m decode_mem.psf beads1.tif beads2.tif --z_step 20 --out psf.h5`` (frame k at
``z = z_start + k·z_step`` nm; ``--z_start`` default: the middle frame is z = 0; a negative ``--z_step`` for
stacks recorded top-down), writing ``psf.png`` beside it; ``python -m decode_mem.psf --from_smap 3dcal.mat
--out psf.h5``. Then ``simulation: {psf: spline, psf_file: psf.h5}`` in a training config.
Exit codes: 0 done, 2 bad settings or unusable beads (too few, saturated, out of range: one line naming the
files and why; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).

Beads spread over the field (one or several stacks of the same frame size): where they show that the PSF changes
across the field beyond their noise (``--field auto``, the default; ``decode_mem.psf.field``), the file holds a
PSF that changes across it and ``<out stem>_field.png`` shows how; else one PSF, as before.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from decode_mem.cli import CAMERA_FLAG_HELP, CAMERA_HELP, add, new_parser, run
from decode_mem.io.camera import CAMERA_FLAGS

BEAD_FLAGS = ("z_start", "roi", "min_beads", "threshold", "saturation", "upsample")  # BeadSettings' fields


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.psf", __doc__)
    p.usage = ("%(prog)s BEADS... --z_step NM --out psf.h5 [options]\n"
               "       %(prog)s --from_smap 3dcal.mat --out psf.h5 [options]")
    p.add_argument("beads", nargs="*", metavar="BEADS", help="bead z-stacks (TIFF, zarr, .npy), same frame count")
    add(p, "--out", required=True, help="PSF file to write (.h5)")
    add(p, "--z_step", type=float, help="nm between frames, required with BEADS (negative: recorded top-down)")
    add(p, "--z_start", type=float, help="z of the first frame in nm (default: the middle frame is z = 0)")
    add(p, "--from_smap", help="import a SMAP/DECODE 3dcal.mat (MATLAB v5 or v7.3) instead of fitting beads")
    add(p, "--png", help="figure to write (default: the --out path with .png)")
    add(p, "--roi", type=int, help="bead region in px, odd (default: the one, 7 to 25, that keeps the most beads "
        "with their own light inside and no other bead's)")
    add(p, "--min_beads", type=int, help="fewest usable beads (3)")
    add(p, "--threshold", type=float,
        help="bead detection: robust standard deviations above the median of the max projection (10)")
    add(p, "--saturation", type=float, help="ADU at which a pixel is saturated (default: the integer type's max)")
    add(p, "--upsample", type=int, help="spline nodes per camera pixel laterally (2; SMAP uses 1)")
    add(p, "--field", choices=("auto", "yes", "no"), default="auto",
        help="a PSF that changes across the field: auto (where the beads show it beyond their noise), yes, no")
    cam = p.add_argument_group("camera")
    add(cam, "--camera", help=CAMERA_HELP)
    for flag in CAMERA_FLAGS:
        add(cam, f"--{flag}", type=float, help=CAMERA_FLAG_HELP[flag] + " (overrides --camera and the metadata)")
    return p


def _body(args: argparse.Namespace) -> int:
    from decode_mem.errors import ConfigError
    from decode_mem.io.metadata import CameraRequest, read_metadata
    from decode_mem.io.psf_file import write_psf

    out = Path(args.out)
    if out.suffix not in (".h5", ".hdf5"):
        raise ConfigError(f"--out must be an .h5 file, got {out}")
    flags = {k: getattr(args, k) for k in CAMERA_FLAGS if getattr(args, k) is not None}
    if args.from_smap:
        from decode_mem.psf import spline_from_smap

        if args.beads or args.z_step is not None:
            raise ConfigError("--from_smap takes no bead stacks and no --z_step (the calibration holds them)")
        unused = [f"--{k}" for k in (*BEAD_FLAGS, "png", "camera", *CAMERA_FLAGS)
                  if k != "pixel_size" and getattr(args, k) is not None]
        unused += ["--field"] if args.field != "auto" else []
        if unused:  # bead fitting and camera settings: an import has no beads (only --pixel_size is read)
            raise ConfigError(f"--from_smap imports a finished calibration: {', '.join(unused)} would do nothing")
        spline = spline_from_smap(args.from_smap, pixel_size=float(flags.get("pixel_size", 0.0)))
        write_psf(out, spline)
        if not args.quiet:
            print(f"{args.from_smap}: spline {spline.shape[2]}x{spline.shape[1]} px x {spline.shape[0]} planes, "
                  f"dz {spline.dz:g} nm, valid z {spline.z_range[0]:g} to {spline.z_range[1]:g} nm -> wrote {out}")
        return 0
    from decode_mem.psf.beads import BeadSettings, calibrate_beads, gather_beads
    from decode_mem.psf.field import calibrate_field, check_field_beads
    from decode_mem.psf.plot import plot_psf

    if not args.beads:
        raise ConfigError("give bead z-stacks (BEADS...) or --from_smap 3dcal.mat")
    if args.z_step is None:
        raise ConfigError("--z_step (nm between the frames of the bead stacks) is required")
    missing = [b for b in args.beads if not Path(b).exists()]
    if missing:
        raise ConfigError(f"{missing[0]}: bead stack not found")
    given = {k: getattr(args, k) for k in BEAD_FLAGS if getattr(args, k) is not None}  # else BeadSettings' defaults
    settings = dataclasses.replace(BeadSettings(z_step=args.z_step), **given)
    camera, _ = CameraRequest.from_value(args.camera, flags).resolve(read_metadata(args.beads[0]))
    found = gather_beads(args.beads, camera, settings)
    if args.field != "no":
        check_field_beads(found, args.field)  # --field yes that these beads cannot give: before the fits
    cal = calibrate_beads(args.beads, camera, settings, found=found)
    field = calibrate_field(found, cal, settings, camera.pixel_size, args.field)
    if field.chosen:
        from decode_mem.io.field_psf_file import write_field_psf

        write_field_psf(out, field.centre, field.data)
    else:
        write_psf(out, cal.spline)
    png = plot_psf(cal, args.png or out.with_suffix(".png"))
    field_png = None
    if field.comps is not None:  # the beads were judged: the figure shows what they say about the field
        from decode_mem.psf.field_plot import plot_field

        field_png = plot_field(field, Path(args.png or out.with_suffix(".png")).with_name(out.stem + "_field.png"))
    warning = field.warning() if field.chosen else None
    if warning:
        print(f"warning: {out}: {warning}", file=sys.stderr)
    if not args.quiet:
        s = cal.spline
        res = sorted(b["residual"] for b in cal.beads)
        dropped = ", ".join(f"{v} {k}" for k, v in cal.rejected.items() if v) or "none"
        roi = f"{cal.roi}x{cal.roi} px regions" + (" (chosen; --roi sets it)" if cal.roi_auto else "")
        print(f"{len(cal.beads)} beads in {roi} (dropped: {dropped}); residual per bead median "
              f"{100 * res[len(res) // 2]:.1f} %, max {100 * res[-1]:.1f} %")
        print(f"spline {s.shape[2]}x{s.shape[1]} nodes ({s.upsample} per px) x {s.shape[0] + 1} planes, "
              f"dz {s.dz:g} nm, valid z {s.z_range[0]:g} to {s.z_range[1]:g} nm")
        print(field.summary())
        if field.chosen:
            lo, hi = field.data.z_range
            print(f"valid z everywhere on the field {lo:g} to {hi:g} nm")
        print(f"-> wrote {out} and {png}" + (f" and {field_png}" if field_png else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _body, argv, outputs={"out": "file", "png": "file"})


if __name__ == "__main__":
    sys.exit(main())
