"""``python -m decode_mem.link LOCS --out DIR``: link the localizations of one emitter over consecutive frames into
molecules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import TABLES_READ, add, new_parser, run
from decode_mem.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    from decode_mem.link.correlation import CORRELATIONS  # numpy only: the choices' one table

    p = new_parser("decode_mem.link", "Link localizations (" + TABLES_READ + "; in frame "
                                      "order) that lie within --radius (farther ones by --sigma_gate) in consecutive "
                                      "frames, allowing --max_dark "
                                      "missing frames, into molecules. Writes DIR/<stem>_link.<ext> (one row per "
                                      "molecule: photon-weighted position, summed photons, len, n, combined "
                                      "precision) and DIR/<stem>_group.<ext> (every localization with the group "
                                      "id of its molecule), in the input's format."
                   "\n\nExample: python -m decode_mem.link locs/movie.csv --out linked --radius auto"
                   "\nExit codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the "
                   "problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is "
                   "kept).")
    p.add_argument("locs", help="localization file")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--radius", default="auto",
                   help="distance within which localizations link, in nm, or 'auto' (default): 4 x the median of "
                        "the localizations' precision (sigma_x/sigma_y, Picasso's lpx/lpy), and farther pairs by "
                        "--sigma_gate")
    add(p, "--sigma_gate", type=float,
        help="also link pairs farther apart than the radius (up to 2 radii) whose difference is within this many "
             "of their combined precision (sqrt(sigma1^2 + sigma2^2) per axis), nearest in those units first; "
             "default 4 with --radius auto, 0 (off: the radius alone) with a radius in nm")
    add(p, "--max_dark", type=int, default=1, help="frames a molecule may be missing in and go on (default 1)")
    p.add_argument("--correlation", choices=("auto", *CORRELATIONS), default="auto",
                   help="how one emitter's errors correlate between frames, for the combined precision: auto "
                        "(default: measured for the shipped model the run's <stem>.json beside the file names, "
                        "else the small one's), decode_mem (the small shipped model's), decode_mem_wide (the wide "
                        "one's), decode_mem_light (the light one's) or none (independent fits)")
    add(p, "--pixel_size", type=float, help="camera pixel in nm when the file records none")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.link.correlation import correlation_of
        from decode_mem.link.files import check_radius, link_file

        if args.pixel_size is not None and not args.pixel_size > 0:
            raise ConfigError(f"--pixel_size must be > 0 nm, got {args.pixel_size}")
        if args.max_dark < 0:
            raise ConfigError(f"--max_dark must be >= 0 frames, got {args.max_dark}")
        res = link_file(args.locs, args.out, radius=check_radius(args.radius), max_dark=args.max_dark,
                        correlation=correlation_of(args.correlation), pixel_size=args.pixel_size,
                        sigma_gate=args.sigma_gate)
        if not args.quiet:
            c = res.crowding
            crowd = (f"n/a (too few localizations {c.lag} frames apart)" if c.rate is None else
                     f"{100 * c.rate:.2f} % of localizations, {100 * c.joinable:.1f} % of multi-frame blinks "
                     f"reach one")
            print(f"{args.locs}: {res.localizations} localizations -> {res.molecules} molecules (radius "
                  f"{res.radius_nm:.1f} nm, {res.radius_source}; max_dark {args.max_dark}; chance neighbours "
                  f"within it: {crowd}) -> {res.molecules_path}, {res.groups_path}")

    return run(build_parser(), body, argv, outputs={"out": "folder"})


if __name__ == "__main__":
    sys.exit(main())
