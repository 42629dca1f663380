"""``python -m decode_mem.evaluate PRED GT``: match localizations to ground truth and print the metrics;
``python -m decode_mem.evaluate LOCS --no_truth``: precision (predicted σ, NeNA) and resolution (FRC) without
ground truth, as JSON + PNG."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import TABLES_READ, add, new_parser, run
from decode_mem.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    from decode_mem.link.correlation import CORRELATIONS  # numpy only: the choices' one table

    p = new_parser("decode_mem.evaluate", "Match localizations to ground truth per frame (optimal assignment) and "
                                          "print SMLM-challenge metrics; or, with --no_truth, estimate precision "
                                          "and resolution of one file without ground truth (writes "
                                          "<stem>_quality.json, or --json's file, and <stem>_quality.png)."
                   "\n\nExample: python -m decode_mem.evaluate locs/stack.csv ground_truth.csv --json "
                   "metrics.json; python -m decode_mem.evaluate locs/stack.csv --no_truth --out quality\nExit "
                   "codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the problem;"
                   " nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).")
    p.add_argument("pred", help=f"predicted localizations ({TABLES_READ})")
    p.add_argument("gt", nargs="?", help="ground truth (the same formats)")
    add(p, "--no_truth", action="store_true",
        help="no ground truth: precision from the predicted σ and from NeNA of linked molecules (corrected for the "
             "localizer's correlated errors), Picasso's NeNA beside it, FRC of halves split by molecule")
    p.add_argument("--out", help="--no_truth: folder for the JSON and PNG (default: the file's folder)")
    p.add_argument("--radius", default="auto",
                   help="--no_truth: link radius in nm or 'auto' (default: 8 x the median predicted σ, a fixed "
                        "radius: link's sigma gate would keep out the differences the σ check looks for)")
    p.add_argument("--correlation", choices=("auto", *CORRELATIONS), default="auto",
                   help="--no_truth: the localizer's frame-to-frame error correlation: auto (default: the shipped "
                        "model's that the run's <stem>.json beside the file names, else the small one's), "
                        "decode_mem, decode_mem_wide, decode_mem_light or none")
    add(p, "--tolerance_lat", type=float, default=250.0, help="lateral match distance in nm (default 250)")
    add(p, "--tolerance_ax", type=float, default=500.0, help="axial match distance in nm, 3-D only (default 500)")
    add(p, "--pixel_size", type=float,
        help="camera pixel in nm (default: as the file records it, or for a CSV the <stem>.json that infer wrote "
             "beside it; where neither does, --no_truth gives Picasso's NeNA as n/a, and with ground truth 100 is "
             "taken: there it only converts units)")
    p.add_argument("--json", metavar="OUT", help="write the numbers as JSON to OUT (NaN as null); with --no_truth in "
                                                 "place of <stem>_quality.json")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.evaluate import evaluate_files, write_metrics_json

        if args.pixel_size is not None and not args.pixel_size > 0:
            raise ConfigError(f"--pixel_size must be > 0 nm, got {args.pixel_size}")
        if args.no_truth:
            _no_truth(args)
            return
        if args.gt is None:
            raise ConfigError("give the ground truth file (PRED GT), or --no_truth")
        from decode_mem.io.localizations import localization_meta

        pixel_size = args.pixel_size or localization_meta(args.pred).pixel_size or 100.0
        metrics = evaluate_files(args.pred, args.gt, pixel_size=pixel_size,
                                 tolerance_lat=args.tolerance_lat, tolerance_ax=args.tolerance_ax)
        print(metrics.table())
        if args.json:
            write_metrics_json(metrics, args.json)

    return run(build_parser(), body, argv, outputs={"json": "file", "out": "folder"})


def _no_truth(args: argparse.Namespace) -> None:
    from pathlib import Path

    from decode_mem.evaluate.no_truth import assess_file, quality_line, write_quality
    from decode_mem.link.correlation import correlation_of
    from decode_mem.link.files import check_radius

    if args.gt is not None:
        raise ConfigError("--no_truth takes one localization file, got a ground truth too")
    radius = check_radius(args.radius)
    result = assess_file(args.pred, pixel_size=args.pixel_size, correlation=correlation_of(args.correlation),
                         radius=radius)
    path = Path(args.pred)
    js, png = write_quality(result, args.out or path.parent, path.stem, args.json)
    if not args.quiet:
        print(f"{path}: {quality_line(result.as_dict())} -> {js}, {png}")


if __name__ == "__main__":
    sys.exit(main())
