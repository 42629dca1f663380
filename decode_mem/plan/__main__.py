"""``python -m decode_mem.plan``: predict peak host and device memory of inference or training before
anything runs.

Example: ``python -m decode_mem.plan --frame 2048 2048 --chunk_size 512 --batch_size 4 --amp bf16 --device cpu``.
Without ``--chunk_size``/``--batch_size`` (or with ``auto``) it chooses them as ``infer`` would under
``--memory_limit`` (timing candidates on this machine unless ``--no_probe``); it prints the measured throughput
where this machine has timed that unit of work before. The flags mean what they mean in ``infer`` and ``train``.

With ``--train`` it plans ``python -m decode_mem.train`` instead: ``--frame`` is the training frame size,
``--batch_size`` the training windows per micro-batch (default: the training config's), ``--crop_size`` the crop
side (``auto``: the largest that fits, as ``train --use_chunking --crop_size auto`` chooses; ``none``: whole
frames); the model, loss and simulation come from ``--config`` (a training YAML) or the defaults. It exits
with an error where ``train`` would refuse the settings. The old spellings ``--chunk``, ``--batch`` and
``--accumulation`` are still accepted (with ``--train``, ``--chunk``/``--chunk_size`` is read as ``--crop_size``).

Exit codes: 0 done, 2 bad settings or input (one line on stderr naming the file and the problem; nothing written), 130
/ 143 stopped by Ctrl-C / SIGTERM (what reached disk is kept).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from decode_mem.cli import DEVICE_HELP, MEANINGS, add, int_or_auto, new_parser, run
from decode_mem.config import AMP_CHOICES
from decode_mem.footprint.request import ENGINE_CHOICES


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("decode_mem.plan", __doc__)
    p.add_argument("--frame", type=int, nargs=2, metavar=("H", "W"), required=True, help="frame size in px")
    p.add_argument("--frames", type=int, help="frames in the stack (default: long)")
    add(p, "--chunk_size", old=("--chunk",), type=crop_arg,
        help=MEANINGS["--chunk_size"] + ", or auto (default); with --train read as --crop_size (none: whole "
             "frames)")
    add(p, "--batch_size", old=("--batch",), type=int_or_auto, default="auto",
        help=MEANINGS["--batch_size"] + " (inference: one per tile and frame; --train: a micro-batch), or auto "
             "(default; --train: the training config's)")
    p.add_argument("--amp", choices=AMP_CHOICES,
                   help="precision (default: auto for inference, as infer runs it: bf16 on CUDA and on CPUs with "
                        "native bf16, else off; the training config's for --train)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--model", help="checkpoint (default: the shipped model)")
    p.add_argument("--dtype", help="pixel type of the stack (default uint16)")
    add(p, "--memory_limit", help=MEANINGS["--memory_limit"])
    add(p, "--no_probe", action="store_true", help="choose 'auto' sizes without timing candidates")
    p.add_argument("--streams", type=int, default=1, help="blocks computed at once on a CPU (infer --streams)")
    p.add_argument("--engine", choices=ENGINE_CHOICES, default="torch",
                   help="what computes the network on a CPU, as infer --engine: a runtime's own buffers are planned "
                        "(auto: planned as torch; a run in which auto picks a runtime plans again)")
    train = p.add_argument_group("training (--train)")
    train.add_argument("--train", action="store_true", help="plan a training run instead of inference")
    train.add_argument("--config", help="training YAML (model, loss, simulation); default: the embedded defaults")
    add(train, "--crop_size", type=crop_arg,
        help=MEANINGS["--crop_size"] + ", auto (default: the largest that fits), or none for whole frames")
    add(train, "--accumulation_steps", old=("--accumulation",), type=int, help=MEANINGS["--accumulation_steps"])
    add(train, "--val_size", type=int, help="validation windows")
    return p


def crop_arg(value: str) -> int | str:
    """``--crop_size``: an integer, 'auto', or 'none' (whole frames). ``--chunk_size`` takes the same words: with
    ``--train`` it is the old spelling of ``--crop_size``; without, 'none' is refused (``check_mode``)."""
    return value if value == "none" else int_or_auto(value)


def main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace) -> None:
        check_mode(args)
        if args.train:
            print(plan_training_here(args))
            return
        import numpy as np
        import torch

        import decode_mem.infer.runner  # noqa: F401 - what an infer process holds: its baseline is measured below
        from decode_mem.config import parse_bytes, resolve_device
        from decode_mem.errors import ConfigError
        from decode_mem.footprint.choose import choose_sizes_here
        from decode_mem.footprint.engines import choose_engine, remembered_engine_seconds
        from decode_mem.footprint.speed import frames_per_second, remembered_seconds
        from decode_mem.model.checkpoint import load_model

        device = resolve_device(args.device)
        if device.type != "cpu" and args.engine not in ("torch", "auto"):  # as infer refuses it (footprint.engines)
            raise ConfigError(f"--engine {args.engine}: a CPU runtime; on {device} use --engine torch or auto")
        model = load_model(args.model, device=device)  # None: the shipped model
        itemsize = np.dtype(args.dtype or "uint16").itemsize
        chunk_size = "auto" if args.chunk_size is None else args.chunk_size
        sizes = {"chunk_size": chunk_size, "batch_size": args.batch_size, "amp": args.amp or "auto", "device": device,
                 "itemsize": itemsize, "memory_limit": parse_bytes(args.memory_limit), "n_frames": args.frames,
                 "probe": not args.no_probe, "streams": args.streams, "engine": args.engine}
        choice = choose_sizes_here(model.net, tuple(args.frame), **sizes)
        runtime = None
        automatic = "auto" in (chunk_size, args.batch_size)
        if args.engine not in ("torch", "auto") and automatic and not args.no_probe:  # as infer: a runtime by name
            # times the sizes it chooses; given sizes keep the plan made before the runtime was loaded
            threads = max(1, torch.get_num_threads() // args.streams)
            runtime = choose_engine(args.engine, model.net, choice.plan, device, threads,
                                    simulation=getattr(model, "simulation", None)).engine
            choice = choose_sizes_here(model.net, tuple(args.frame), **sizes, runtime=runtime)
        plan = choice.plan
        baseline = plan.baseline_bytes
        seconds = remembered_seconds(model.net, plan, device) if runtime is None else \
            remembered_engine_seconds(model.net, plan, device, runtime)
        speed = "not measured on this machine yet" if seconds is None else \
            f"{frames_per_second(plan, seconds):.2f} frames/s of network work (measured here before)"
        lines = [
            f"frames {plan.frame_shape[0]}x{plan.frame_shape[1]} px on {device} ({plan.amp}): chunk_size "
            f"{plan.chunk_size}, batch_size {plan.batch_size}, block {plan.block} frames"
            + (f", {plan.streams} streams" if plan.streams > 1 else "")
            + (f", engine {args.engine}" if args.engine != "torch" else "") + f" ({choice.reason})",
            f"  tiles: {plan.n_tiles} of {plan.tile_shape[0]}x{plan.tile_shape[1]} px; largest call "
            f"{plan.unit_shape[0]} tile(s) x {plan.unit_shape[1]} frames",
            f"  predicted peak host RssAnon: {plan.host_bytes / 2**20:.0f} MiB (baseline {baseline / 2**20:.0f}, "
            f"frame blocks {plan.block_bytes / 2**20:.0f}, staging {plan.staging_bytes / 2**20:.0f}"
            + (f", network {plan.network_host_bytes / 2**20:.0f} with the allocator's slack"
               + (f" and its working set measured here, {plan.measured_ratio:.2f}x its trace"
                  if plan.measured_ratio else "") if device.type == "cpu" else "") + ")",
        ]
        if device.type == "cpu" and plan.probe_bytes:
            lines.append(f"  before the blocks, this command timed candidate sizes: up to "
                         f"{plan.probe_bytes / 2**20:.0f} MiB over the baseline")
        if device.type == "cuda":
            lines.append(f"  predicted peak device memory (allocator): {plan.device_bytes / 2**20:.0f} MiB")
        if choice.budget_bytes:
            lines.append(f"  budget: {choice.budget_bytes / 2**20:.0f} MiB ({choice.budget_kind})")
        lines.append(f"  throughput: {speed}")
        print("\n".join(lines))

    return run(build_parser(), body, argv)


def check_mode(args: argparse.Namespace) -> None:
    """One error for flags the chosen mode (inference, or ``--train``) would ignore. With ``--train``, a
    ``--chunk_size`` (the old spelling of the crop side) becomes ``--crop_size``."""
    from decode_mem.errors import ConfigError

    if args.train:
        if args.chunk_size is not None:
            if args.crop_size is not None:
                raise ConfigError("--chunk_size and --crop_size with --train: give --crop_size only (the training "
                                  "crop side; --chunk_size is the inference tile core)")
            args.crop_size, args.chunk_size = args.chunk_size, None
        ignored = {"--frames": args.frames, "--model": args.model, "--dtype": args.dtype,
                   "--no_probe": args.no_probe or None, "--streams": args.streams if args.streams != 1 else None,
                   "--engine": args.engine if args.engine != "torch" else None}
    else:
        ignored = {"--config": args.config, "--accumulation_steps": args.accumulation_steps,
                   "--val_size": args.val_size, "--crop_size": args.crop_size,
                   "--chunk_size none": "none" if args.chunk_size == "none" else None}
    given = [flag for flag, value in ignored.items() if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)}: only for {'inference (without --train)' if args.train else '--train'}")


def plan_training_here(args: argparse.Namespace) -> str:
    """The training plan of the arguments, its baseline measured in this process as ``train`` would hold it
    (imports, the model and its optimizer); ConfigError where ``train`` would refuse."""
    from dataclasses import replace

    import torch

    from decode_mem.config import resolve_device
    from decode_mem.footprint.inference import MiB
    from decode_mem.model.net import DecodeNet
    from decode_mem.train.config import load_train_config
    from decode_mem.train.sizing import check_fits, plan_for, resolve_chunk_size

    cfg = load_train_config(args.config)
    crop = str(args.crop_size or "auto")
    cfg = replace(cfg.with_overrides(batch_size=None if args.batch_size == "auto" else args.batch_size,
                                     accumulation_steps=args.accumulation_steps, val_size=args.val_size,
                                     amp=args.amp, memory_limit=args.memory_limit),
                  use_chunking=crop != "none", crop_size="auto" if crop in ("auto", "none") else int(crop),
                  simulation=replace(cfg.simulation, frame_size=tuple(args.frame)))
    device = resolve_device(args.device)
    net = DecodeNet(cfg.model).to(device)
    torch.optim.AdamW(net.parameters())  # what a training process holds before it plans
    crop_px = resolve_chunk_size(cfg, net, device)
    plan = plan_for(cfg, net, device, crop_px)
    h, w = plan.frame_shape
    lines = [
        f"training on {device} ({plan.amp}): frames {h}x{w} px, batch_size {plan.batch_size} windows, "
        + ("whole frames" if crop_px is None else f"crops of {plan.crop_shape[0]}x{plan.crop_shape[1]} px")
        + f", accumulation {plan.accumulation_steps}, {plan.slots} target slots",
        f"  predicted peak host RssAnon: {plan.host_bytes / MiB:.0f} MiB (baseline {plan.baseline_bytes / MiB:.0f}, "
        f"data {plan.data_bytes / MiB:.0f}"
        + (f", optimizer {plan.optimizer_bytes / MiB:.0f}, network {plan.network_bytes / MiB:.0f} "
           f"[training step {plan.train_bytes / MiB:.0f}, validation {plan.validation_bytes / MiB:.0f}])"
           if device.type == "cpu" else ")"),
    ]
    if device.type == "cuda":
        lines.append(f"  predicted peak device memory (allocator): {plan.device_bytes / MiB:.0f} MiB")
    check_fits(plan, cfg.memory_limit)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
