"""``python -m decode_mem.evaluate PRED GT``: match localizations to ground truth and print the metrics."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import add, new_parser, run


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.evaluate", "Match localizations to ground truth per frame (optimal assignment) and "
                                          "print SMLM-challenge metrics.")
    p.add_argument("pred", help="predicted localizations (.csv ThunderSTORM, .hdf5 Picasso, .parquet)")
    p.add_argument("gt", help="ground truth (.csv ThunderSTORM, .hdf5 Picasso, .parquet)")
    add(p, "--tolerance_lat", type=float, default=250.0, help="nm (default 250)")
    add(p, "--tolerance_ax", type=float, default=500.0, help="nm (default 500)")
    add(p, "--pixel_size", type=float, default=100.0, help="camera pixel in nm (default 100)")
    p.add_argument("--json", metavar="OUT", help="also write the metrics as JSON (NaN as null)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.evaluate import evaluate_files, write_metrics_json

        metrics = evaluate_files(args.pred, args.gt, pixel_size=args.pixel_size, tolerance_lat=args.tolerance_lat,
                                 tolerance_ax=args.tolerance_ax)
        print(metrics.table())
        if args.json:
            write_metrics_json(metrics, args.json)

    return run(build_parser(), body, argv, outputs={"json": "file"})


if __name__ == "__main__":
    sys.exit(main())
