"""``python -m decode_mem.pipeline PIPELINE.yaml [--out DIR] [--quick]``: run a YAML pipeline (thin CLI)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from decode_mem.cli import new_parser, run


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.pipeline", "Run a pipeline YAML: simulate -> train -> infer -> drift -> evaluate -> "
                                          "render -> report.html (each step optional), and print where "
                                          "everything went."
                   "\n\nExample: python -m decode_mem.pipeline pipelines/quickstart.yaml (--quick: a smoke run "
                   "of tiny sizes)\nExit codes: 0 done, 2 bad settings or input (one line on stderr naming the "
                   "file and the problem; nothing written), 130 / 143 stopped by Ctrl-C / SIGTERM (what reached"
                   " disk is kept).")
    p.add_argument("pipeline", help="pipeline YAML, e.g. pipelines/quickstart.yaml")
    p.add_argument("--out", help="output folder (default: the YAML's 'out')")
    p.add_argument("--quick", action="store_true", help="merge the YAML's 'quick' section: a tiny smoke-test run")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: the YAML's 'threads', else torch's)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv_used = list(sys.argv[1:] if argv is None else argv)  # for the report's command line
    def body(args: argparse.Namespace) -> None:
        from decode_mem.pipeline.runner import run_pipeline  # heavy imports after parsing

        overrides = {"threads": args.threads} if args.threads is not None else None
        command = " ".join(["python -m decode_mem.pipeline", *(shlex.quote(a) for a in argv_used)])
        run_pipeline(args.pipeline, out=args.out, quick=args.quick, overrides=overrides,
                     echo=(lambda _: None) if args.quiet else print, command=command)

    return run(build_parser(), body, argv, outputs={"out": "folder"})


if __name__ == "__main__":
    sys.exit(main())
