"""``python -m decode_mem.export RUN --out data/models/NAME``: a trained run as a shippable model + model card."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from decode_mem.cli import add, new_parser, run


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.export", "Export a training run (its model.pt, or checkpoint.pt) as an inference "
                                        "checkpoint without optimizer state, with a model card (.md)."
                   "\n\nExample: python -m decode_mem.export runs/mine --out data/models/mine\nExit codes: 0 "
                   "done, 2 bad settings or input (one line on stderr naming the file and the problem; nothing "
                   "written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).")
    p.add_argument("run_dir", type=Path, help="the training run's --out folder")
    p.add_argument("--out", type=Path, required=True, help="output stem, e.g. data/models/default_2d")
    add(p, "--n_eval", type=int, default=256, help="validation windows per density on the card (default 256)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from decode_mem.export.card import export_model

        model_path, card_path = export_model(args.run_dir, args.out, n_eval=args.n_eval)
        if not args.quiet:
            print(f"wrote {model_path} and {card_path}")

    return run(build_parser(), body, argv, outputs={"out": "path"})


if __name__ == "__main__":
    sys.exit(main())
