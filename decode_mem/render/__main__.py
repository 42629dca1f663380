"""``python -m decode_mem.render LOCS --out image.png|.tif``: a super-resolution image of a localization file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import TABLES_READ, add, new_parser, run
from decode_mem.errors import ConfigError
from decode_mem.render.auto import MAX_SIDE, PERCENTILE, ZOOM_PIXELS, ZOOM_SHARE
from decode_mem.render.image import BLURS, FALLBACK_SIGMA, GAUSSIAN_SIGMA


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.render", "Render a localization file (" + TABLES_READ + ") "
                                        "as a super-resolution image: each localization a Gaussian of its own "
                                        "precision, on pixels of about half the median precision; with a PNG, "
                                        "the densest square zoomed in <out>_zoom.png. Streams the file."
                   "\n\nExample: python -m decode_mem.render locs/movie.csv --out image.png\nExit "
                   "codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the problem;"
                   " nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).")
    p.add_argument("locs", help="localization file")
    p.add_argument("--out", required=True, help="image: .png (colormap) or .tif (float32 counts)")
    p.add_argument("--pixel", type=float, help=f"render pixel in nm (default: about half the localizations' median "
                                               f"precision, at most {MAX_SIDE} pixels on the longer side)")
    add(p, "--pixel_size", type=float, help="camera pixel in nm (default: from the file, or for a CSV from the "
                                            "<stem>.json infer wrote beside it; a CSV without it is rendered in nm)")
    p.add_argument("--shape", type=int, nargs=2, metavar=("H", "W"),
                   help="camera frame in px (default: the camera's field recorded in a Picasso or parquet file, or "
                        "for a CSV in the <stem>.json infer wrote beside it; else the localizations' extent)")
    p.add_argument("--blur", choices=BLURS, default="precision",
                   help=f"precision (default: each localization a Gaussian of its own sigma_x/sigma_y, at least one "
                        f"pixel; {FALLBACK_SIGMA:g} nm where the file has none), gaussian (one --sigma for all) or "
                        f"none (counts: a histogram, dark for a sparse file)")
    p.add_argument("--sigma", type=float,
                   help=f"nm: gaussian: its width (default {GAUSSIAN_SIGMA:g}); precision: the narrowest Gaussian")
    p.add_argument("--percentile", type=float, default=PERCENTILE,
                   help=f"PNG: full colour at this percentile of the non-empty pixels, 0-100 %% (default "
                        f"{PERCENTILE:g})")
    p.add_argument("--zoom", default="auto",
                   help=f"PNG: also write <out>_zoom.png, the square of this edge in µm where the localizations are "
                        f"densest (default auto: a round length of at most {ZOOM_PIXELS} pixels and 1/{ZOOM_SHARE} of "
                        f"the image; none: no zoom)")
    p.add_argument("--cmap", default="magma", help="PNG colormap (default magma; by dye: each dye's own PNG)")
    p.add_argument("--colour", choices=("auto", "dye", "none"), default="auto",
                   help="two-colour files (infer --registration): auto (default: by dye where the file has a dye "
                        "column), dye: <out> merges one image per dye, each in its colour, and <out stem>_<dye>.png "
                        "holds each dye alone; none: one image of all")
    return p


def zoom_setting(text: str) -> float | str | None:
    """``--zoom``: 'auto', 'none' (None) or an edge in µm (> 0)."""
    if text in ("auto", "none"):
        return None if text == "none" else text
    try:
        edge = float(text)
    except ValueError:
        edge = float("nan")
    if not edge > 0:
        raise ConfigError(f"--zoom {text}: give an edge in µm (> 0), auto or none")
    return edge


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.io.localizations import localization_meta
        from decode_mem.render import render_file

        zoom = zoom_setting(args.zoom)
        if args.colour != "none":
            from decode_mem.render.colour import has_dyes, render_colours

            if args.colour == "dye" or has_dyes(args.locs, args.pixel_size):
                made = render_colours(args.locs, args.out, render_pixel=args.pixel, pixel_size=args.pixel_size,
                                      shape=args.shape, blur=args.blur, sigma=args.sigma, percentile=args.percentile,
                                      cmap=args.cmap, zoom=zoom)
                if not args.quiet:
                    each = ", ".join(f"{made.names[k]} {made.counts[k]}" for k in made.names)
                    print(f"rendered by dye ({each} localizations inside the field) on {made.render_pixel:g} nm "
                          f"pixels -> {args.out} (merged) and {', '.join(str(p) for p in made.files.values())}"
                          + (f"; the densest square -> {made.zoom}" if made.zoom else ""))
                return

        done = render_file(args.locs, args.out, render_pixel=args.pixel, pixel_size=args.pixel_size,
                           shape=args.shape, blur=args.blur, sigma=args.sigma, percentile=args.percentile,
                           cmap=args.cmap, zoom=zoom)
        image, n = done.image, done.n
        if not args.quiet:
            meta = localization_meta(args.locs)
            field = ("the given --shape" if args.shape else "the camera's field" if meta.width and meta.height
                     else "the localizations' extent (the file records no frame size: --shape H W)")
            # width x height, as image viewers and file browsers say it
            chosen = "" if args.pixel else " (from the precision)"
            print(f"rendered {n} localizations inside the field -> {args.out}: {image.shape[1]} x {image.shape[0]} "
                  f"px (width x height) of {done.render_pixel:g} nm{chosen} over {field}"
                  + (f"; the densest square -> {done.zoom}" if done.zoom else ""))

    return run(build_parser(), body, argv, outputs={"out": "file"})


if __name__ == "__main__":
    sys.exit(main())
