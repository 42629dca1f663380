"""``python -m decode_mem.pipeline PIPELINE.yaml [--out DIR] [--quick]``: run a YAML pipeline (thin CLI)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.errors import DecodeMemError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m decode_mem.pipeline",
        description="Run a pipeline YAML: simulate -> train -> infer -> evaluate -> render (each step optional), "
                    "and print where everything went.")
    p.add_argument("pipeline", help="pipeline YAML, e.g. pipelines/quickstart.yaml")
    p.add_argument("--out", help="output folder (default: the YAML's 'out')")
    p.add_argument("--quick", action="store_true", help="merge the YAML's 'quick' section: a tiny smoke-test run")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: the YAML's 'threads', else torch's)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, message already printed)
        return int(e.code or 0)
    from decode_mem.pipeline.runner import run_pipeline  # heavy imports after parsing

    try:
        overrides = {"threads": args.threads} if args.threads is not None else None
        run_pipeline(args.pipeline, out=args.out, quick=args.quick, overrides=overrides)
    except DecodeMemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
