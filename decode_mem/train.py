"""``python -m decode_mem.train``: train a DECODE-style network on simulated data (the embedded defaults).

Example: ``python -m decode_mem.train --use_chunking --chunk_size 512 --memory_tracking``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import int_or_auto
from decode_mem.errors import DecodeMemError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m decode_mem.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML with train settings and model/loss/simulation sections")
    p.add_argument("--out", help="output directory (checkpoint.pt, model.pt, logs, plots)")
    p.add_argument("--preset", choices=("tiny", "small", "default"),
                   help="model size: tiny (tests), small (CPU), default (DECODE: depth 2, 48 features)")
    run = p.add_argument_group("optimization")
    run.add_argument("--steps", type=int)
    run.add_argument("--batch_size", "--batch-size", type=int)
    run.add_argument("--accumulation_steps", "--accumulation-steps", type=int)
    run.add_argument("--lr", type=float)
    run.add_argument("--seed", type=int)
    run.add_argument("--val_every", "--val-every", type=int)
    run.add_argument("--log_every", "--log-every", type=int)
    run.add_argument("--checkpoint_every", "--checkpoint-every", type=int)
    run.add_argument("--resume", action="store_true", default=None, help="continue from <out>/checkpoint.pt")
    mem = p.add_argument_group("memory")
    mem.add_argument("--use_amp", "--use-amp", dest="use_amp", action="store_true", default=None,
                     help="automatic mixed precision (default: on with CUDA)")
    mem.add_argument("--no_amp", "--no-amp", dest="use_amp", action="store_false")
    mem.add_argument("--amp_dtype", "--amp-dtype", choices=("bf16", "fp16"))
    mem.add_argument("--use_chunking", "--use-chunking", action="store_true", default=None,
                     help="train on chunk_size crops of large frames, gradients accumulated over the crops")
    mem.add_argument("--chunk_size", "--chunk-size", type=int_or_auto, help="crop side in px, or 'auto'")
    mem.add_argument("--grad_checkpointing", "--grad-checkpointing", action="store_true", default=None)
    mem.add_argument("--memory_tracking", "--memory-tracking", action="store_true", default=None)
    mem.add_argument("--memory_log_file", "--memory-log-file", help="memory CSV (default <out>/memory.csv)")
    hw = p.add_argument_group("hardware")
    hw.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    hw.add_argument("--num_workers", "--num-workers", type=int, help="DataLoader worker processes for simulation")
    hw.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy machine)")
    p.add_argument("--frame_size", "--frame-size", type=int, nargs=2, metavar=("H", "W"),
                   help="simulated training frame size")
    p.add_argument("--quiet", action="store_true", default=None)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


OVERRIDES = ("out", "steps", "batch_size", "accumulation_steps", "lr", "seed", "val_every", "log_every",
             "checkpoint_every", "resume", "use_amp",
             "amp_dtype", "use_chunking", "chunk_size", "grad_checkpointing", "memory_tracking", "memory_log_file",
             "device", "num_workers", "threads", "quiet")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from dataclasses import replace

        from decode_mem.model.net import ModelConfig
        from decode_mem.training.config import load_train_config
        from decode_mem.training.loop import fit

        cfg = load_train_config(args.config)
        cfg = cfg.with_overrides(**{k: getattr(args, k) for k in OVERRIDES})
        if args.preset:
            preset = {"tiny": ModelConfig.tiny, "small": ModelConfig.small, "default": ModelConfig}[args.preset]
            cfg = replace(cfg, model=preset(**{k: v for k, v in cfg.model.to_dict().items()
                                               if k not in ("depth", "features", "inter_features")}))
        if args.frame_size:
            cfg = replace(cfg, simulation=replace(cfg.simulation, frame_size=tuple(args.frame_size)))
        model_path = fit(cfg)
    except DecodeMemError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"model written to {model_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
