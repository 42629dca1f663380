"""``python -m decode_mem.render LOCS --out image.png|.tif``: a super-resolution image of a localization file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import add, new_parser, run
from decode_mem.render.image import FILE_BLURS


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.render", "Render a localization file (.csv ThunderSTORM, .hdf5 Picasso, .parquet) "
                                        "as a super-resolution image: a histogram on a fine grid, optionally "
                                        "blurred. Streams the file."
                   "\n\nExample: python -m decode_mem.render locs/movie.csv --pixel 10 --out image.png\nExit "
                   "codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the problem;"
                   " nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).")
    p.add_argument("locs", help="localization file")
    p.add_argument("--out", required=True, help="image: .png (colormap) or .tif (float32 counts)")
    p.add_argument("--pixel", type=float, default=10.0, help="render pixel in nm (default 10)")
    add(p, "--pixel_size", type=float, help="camera pixel in nm (default: from the file, or for a CSV from the "
                                            "<stem>.json infer wrote beside it; a CSV without it is rendered in nm)")
    p.add_argument("--shape", type=int, nargs=2, metavar=("H", "W"),
                   help="camera frame in px (default: the camera's field recorded in a Picasso or parquet file, or "
                        "for a CSV in the <stem>.json infer wrote beside it; else the localizations' extent)")
    p.add_argument("--blur", choices=FILE_BLURS, default="auto",
                   help="auto (default: precision where the file has sigma_x/sigma_y, else gaussian of 20 nm), "
                        "none (counts: single pixels, dark for a sparse file), gaussian (fixed --sigma) or "
                        "precision (each localization's sigma_x/sigma_y)")
    p.add_argument("--sigma", type=float,
                   help="blur sigma in nm (gaussian: default 10, 20 under auto; precision: lower bound, 20 under auto)")
    p.add_argument("--percentile", type=float, default=99.5,
                   help="PNG: clip at this percentile of non-zero pixels, 0-100 %% (default 99.5)")
    p.add_argument("--cmap", default="magma", help="PNG colormap (default magma)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.io.localizations import localization_meta
        from decode_mem.render import render_file

        image, n = render_file(args.locs, args.out, render_pixel=args.pixel, pixel_size=args.pixel_size,
                               shape=args.shape, blur=args.blur, sigma=args.sigma, percentile=args.percentile,
                               cmap=args.cmap)
        if not args.quiet:
            meta = localization_meta(args.locs)
            field = ("the given --shape" if args.shape else "the camera's field" if meta.width and meta.height
                     else "the localizations' extent (the file records no frame size: --shape H W)")
            # width x height, as image viewers and file browsers say it
            print(f"rendered {n} localizations inside the field -> {args.out}: {image.shape[1]} x {image.shape[0]} "
                  f"px (width x height) of {args.pixel:g} nm over {field}")

    return run(build_parser(), body, argv, outputs={"out": "file"})


if __name__ == "__main__":
    sys.exit(main())
