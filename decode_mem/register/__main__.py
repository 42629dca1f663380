"""``python -m decode_mem.register``: map channel 2 onto channel 1 from images of beads seen in both channels.

Examples: ``python -m decode_mem.register beads.tif --split left-right --out reg.json`` (a split view: each file
holds both halves), ``python -m decode_mem.register cam1.tif cam2.tif --out reg.json`` (two cameras: channel 1's and
channel 2's files in pairs); several bead images (the stage moved between them) add beads. With ``--z_step`` the
files are bead z-stacks and the axial offset between the channels' foci is measured too. Writes ``reg.json`` (what
``infer --registration`` takes) and ``reg.png`` (each bead's leave-one-out error over the field, the distortion
corrected).
Exit codes: 0 done, 2 bad settings or input (beads in one channel only, too few beads, halves of different size:
one line naming the file and the problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from decode_mem.cli import CAMERA_FLAG_HELP, CAMERA_HELP, add, new_parser, run
from decode_mem.io.camera import CAMERA_FLAGS


def build_parser() -> argparse.ArgumentParser:
    from decode_mem.io.channels import PRESETS
    from decode_mem.register.transform import KINDS

    p = new_parser("decode_mem.register", __doc__)
    p.add_argument("beads", nargs="+", metavar="BEADS",
                   help="bead images or movies (TIFF, zarr, ...): split-view files with --split, else channel 1 and "
                        "channel 2 in pairs")
    add(p, "--out", required=True, help="registration to write (.json); its figure beside it (.png)")
    add(p, "--split", help=f"the files are split views: {', '.join(PRESETS)} (channel 1 first) or two regions "
                           "'y0:y1,x0:x1;y0:y1,x0:x1' (rows, columns)")
    add(p, "--kind", choices=KINDS, default="auto",
        help="the map: auto (default: affine, polynomials of degree 2-4 or a thin-plate spline, the one with the "
             "smallest leave-one-out error), affine, polynomial or tps")
    add(p, "--z_step", type=float, help="bead z-stacks: nm between frames; the axial offset between the channels is "
                                        "measured too")
    add(p, "--z_start", type=float, help="z of the first frame in nm (default: the middle frame is z = 0)")
    cam = p.add_argument_group("camera (photons and nm; the map itself is in pixels)")
    add(cam, "--camera", help=CAMERA_HELP)
    for flag in CAMERA_FLAGS:
        add(cam, f"--{flag}", type=float, help=CAMERA_FLAG_HELP[flag] + " (overrides --camera and the metadata)")
    return p


def _body(args: argparse.Namespace) -> int:
    from decode_mem.errors import ConfigError
    from decode_mem.io.atomic import atomic_output
    from decode_mem.io.metadata import CameraRequest
    from decode_mem.register.core import register_beads
    from decode_mem.register.plot import registration_png

    out = Path(args.out)
    if out.suffix.lower() != ".json":
        raise ConfigError(f"--out {out}: a registration is written as .json")
    missing = [b for b in args.beads if not Path(b).exists()]
    if missing:
        raise ConfigError(f"{missing[0]}: no such bead file")
    flags = {k: getattr(args, k) for k in CAMERA_FLAGS if getattr(args, k) is not None}
    reg = register_beads(args.beads, split=args.split, camera=CameraRequest.from_value(args.camera, flags),
                         kind=args.kind, z_step=args.z_step, z_start=args.z_start)
    png = out.with_suffix(".png")
    figure = registration_png(reg)  # before any file is written: a figure that fails leaves nothing behind
    reg.save(out)
    with atomic_output(png) as tmp:
        tmp.write_bytes(figure)
    for line in reg.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if not args.quiet:
        t, b = reg.tre, reg.beads
        noise = f"; the beads' own noise {t['bead_noise']:.2f} nm" if t.get("bead_noise") is not None else ""
        axial = (f"; axial offset {reg.axial_offset:+.1f} nm (channel 2's z minus channel 1's)"
                 if reg.axial_offset is not None else "")
        print(f"{b['matched']} beads in both channels (found: {b['channel1']} in channel 1, {b['channel2']} in "
              f"channel 2); map {reg.transform.name}: leave-one-out error {t['leave_one_out_rms']:.2f} nm RMS, "
              f"{t['leave_one_out_max']:.2f} nm max{noise}{axial} -> wrote {out} and {png}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _body, argv, outputs={"out": "file"})


if __name__ == "__main__":
    sys.exit(main())
