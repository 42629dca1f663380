"""``python -m decode_mem.drift LOCS --out DIR``: estimate the stage drift of a localization file and remove it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import TABLES_READ, add, new_parser, run
from decode_mem.drift.config import METHODS, DriftConfig
from decode_mem.errors import ConfigError
from decode_mem.io.drift import describe_drift


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.drift", "Estimate the stage drift of a localization file (" + TABLES_READ + ") "
                                       "from the localizations themselves (no fiducials) and remove it. Writes "
                                       "DIR/<stem>_undrift.<ext> (same format), DIR/<stem>_drift.csv (frame, dx "
                                       "[nm], dy [nm]: the drift subtracted) and DIR/<stem>_drift.png."
                   "\n\nExample: python -m decode_mem.drift locs/movie.csv --out undrifted\nExit codes: 0 done,"
                   " 2 bad settings or input (one line on stderr naming the file and the problem; nothing "
                   "written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).")
    p.add_argument("locs", help="localization file")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--method", choices=METHODS, default="loo",
                   help="loo: each time segment against the sum of the others, iterated (default); rcc: redundant "
                        "cross-correlation of every pair of segments, then loo refinement")
    p.add_argument("--segments", type=int, default=0,
                   help="time segments (default 0: one per --locs_per_segment localizations, 4 to 40)")
    add(p, "--locs_per_segment", type=int, default=500, help="localizations per segment when --segments is 0")
    add(p, "--render_px", type=float, default=20.0, help="pixel of the segment images in nm (default 20)")
    p.add_argument("--blur", type=float, default=15.0, help="Gaussian blur of the segment images in nm (default 15)")
    add(p, "--pixel_size", type=float, help="camera pixel in nm when the file records none")
    p.add_argument("--truth", help="a true drift table (frame, dx [nm], dy [nm]) to plot beside the estimate")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.drift.files import correct_file

        if args.pixel_size is not None and not args.pixel_size > 0:
            raise ConfigError(f"--pixel_size must be > 0 nm, got {args.pixel_size}")

        cfg = DriftConfig(method=args.method, segments=args.segments, locs_per_segment=args.locs_per_segment,
                          render_px=args.render_px, blur=args.blur)
        res = correct_file(args.locs, args.out, cfg, pixel_size=args.pixel_size, truth=args.truth)
        if not args.quiet:
            print(f"{args.locs}: {res.localizations} localizations, {len(res.estimate.centers)} segments; "
                  f"{describe_drift(res.estimate.dxdy)} -> {res.corrected}, {res.table}, {res.plot}")

    return run(build_parser(), body, argv, outputs={"out": "folder"})


if __name__ == "__main__":
    sys.exit(main())
