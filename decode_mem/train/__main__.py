"""``python -m decode_mem.train``: train a DECODE-style network on simulated data (the embedded defaults).

Example: ``python -m decode_mem.train --use_chunking --crop_size 512 --memory_tracking``.
``--batch_size`` is the number of training windows (3-frame samples) per micro-batch, that is per network call,
as in ``python -m decode_mem.infer``; ``--crop_size`` (with ``--use_chunking``) the side of the crops large
training frames are cut into, whose gradients are accumulated. It is not infer's ``--chunk_size`` (a tile's
core, which adds a halo).

Exit codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the problem; nothing
written), 130 / 143 stopped by Ctrl-C / SIGTERM (a checkpoint at the last whole step; the same command with
--resume continues).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import DEVICE_HELP, MEANINGS, add, int_or_auto, new_parser, run
from decode_mem.config import AMP_CHOICES


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.train", __doc__)
    p.add_argument("--config", help="YAML with train settings and model/loss/simulation sections")
    p.add_argument("--out", help="output directory (checkpoint.pt, model.pt, logs, plots)")
    p.add_argument("--preset", choices=("tiny", "small", "default"),
                   help="model size: tiny (tests), small (CPU), default (DECODE: depth 2, 48 features)")
    run_ = p.add_argument_group("optimization")
    run_.add_argument("--steps", type=int, help="optimizer steps (default: the config's, else 2000)")
    add(run_, "--batch_size", type=int, help=MEANINGS["--batch_size"] + ": the training windows of a micro-batch")
    add(run_, "--accumulation_steps", type=int, help=MEANINGS["--accumulation_steps"])
    run_.add_argument("--lr", type=float,
                      help="learning rate of AdamW, dimensionless (default: the config's, else 6e-4)")
    run_.add_argument("--seed", type=int, help="random seed of the simulation and the weights, an integer (default 0)")
    add(run_, "--val_every", type=int, help="validate every N steps (default: the config's, else 250)")
    add(run_, "--log_every", type=int, help="a train_log.csv row every N steps (default: the config's, else 10)")
    add(run_, "--checkpoint_every", type=int,
        help="write <out>/checkpoint.pt every N steps, for --resume (default: the config's, else 250)")
    run_.add_argument("--resume", action="store_true", default=None, help="continue from <out>/checkpoint.pt")
    add(run_, "--max_minutes", type=float,
        help="stop after this many minutes of training, with a checkpoint that --resume continues (default: the "
             "config's, else every step)")
    add(run_, "--trainable", nargs="+", metavar="PATTERN",
        help="train only the parameters whose names match these globs, the rest frozen; a pattern may end with "
             "output rows, e.g. 'heads.sigma.2.weight[0]' (default: every parameter)")
    add(run_, "--teacher", metavar="MODEL",
        help="a trained model whose detections the network also learns (knowledge distillation; same input "
             "normalization), e.g. the small model for the light one (default: none)")
    add(run_, "--teacher_weight", type=float,
        help="weight of the teacher's term in the loss, dimensionless, >= 0 (default: the config's, else 1)")
    mem = p.add_argument_group("memory")
    mem.add_argument("--amp", choices=AMP_CHOICES,
                     help="mixed precision: auto (default: CUDA, or a CPU with native bf16), bf16, fp16 (CUDA), off")
    add(mem, "--use_amp", dest="amp", action="store_const", const="bf16", help="same as --amp bf16")
    add(mem, "--no_amp", dest="amp", action="store_const", const="off", help="same as --amp off")
    add(mem, "--use_chunking", action="store_true", default=None,
        help="cut training frames larger than --crop_size into crops, gradients accumulated over the crops")
    add(mem, "--crop_size", old=("--chunk_size",), type=int_or_auto,
        help=MEANINGS["--crop_size"] + ", or 'auto' (the largest that fits --memory_limit)")
    add(mem, "--memory_limit", help=MEANINGS["--memory_limit"] + "; settings whose planned peak exceeds it "
        "(default: what the machine has) are refused")
    add(mem, "--grad_checkpointing", action="store_true", default=None,
        help="recompute each U-Net's activations in the backward pass: less memory, about a third more time")
    add(mem, "--memory_tracking", action="store_true", default=None,
        help="record host (and GPU) memory per step in the memory CSV (default: on)")
    add(mem, "--memory_log_file", help="memory CSV (default <out>/memory.csv)")
    hw = p.add_argument_group("hardware")
    hw.add_argument("--device", help=DEVICE_HELP.replace("default auto", "default: the config's, else auto"))
    add(hw, "--num_workers", type=int,
        help="simulate the training windows in N CPU worker processes (default 0: in blocks on --device)")
    hw.add_argument("--threads", type=int, help="torch CPU threads (1 is fastest on a busy machine)")
    add(p, "--frame_size", type=int, nargs=2, metavar=("H", "W"), help="simulated training frame size in px")
    return p


OVERRIDES = ("out", "steps", "batch_size", "accumulation_steps", "lr", "seed", "trainable", "teacher",
             "teacher_weight", "val_every", "log_every",
             "checkpoint_every", "resume", "max_minutes", "amp", "use_chunking", "crop_size", "memory_limit",
             "grad_checkpointing", "memory_tracking", "memory_log_file", "device", "num_workers", "threads", "quiet")


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        from dataclasses import replace

        from decode_mem.model.net import ModelConfig
        from decode_mem.train.config import load_train_config
        from decode_mem.train.observers import train_observed

        cfg = load_train_config(args.config).with_overrides(**{k: getattr(args, k) for k in OVERRIDES})
        if args.preset:
            preset = {"tiny": ModelConfig.tiny, "small": ModelConfig.small, "default": ModelConfig}[args.preset]
            cfg = replace(cfg, model=preset(**{k: v for k, v in cfg.model.to_dict().items()
                                               if k not in ("depth", "features", "inter_features")}))
        if args.frame_size:
            cfg = replace(cfg, simulation=replace(cfg.simulation, frame_size=tuple(args.frame_size)))
        for note in cfg.notes():
            print(f"note: {note}", file=sys.stderr)
        model_path = train_observed(cfg)
        if not cfg.quiet:
            print(f"model written to {model_path}")

    return run(build_parser(), body, argv, outputs={"out": "folder", "memory_log_file": "file"})


if __name__ == "__main__":
    sys.exit(main())
