"""Data-parallel training under ``torchrun``: who this process is, and the process group around ``fit``.

``torchrun --nproc_per_node N -m decode_mem.train ...`` (or ``python -m torch.distributed.run``) sets
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; ``fit`` then trains one model with
``DistributedDataParallel`` (NCCL on CUDA, one GPU per process; gloo on a CPU). Each rank simulates its own
disjoint part of every global batch, so N processes with ``batch_size`` b train exactly like one process with
``batch_size`` N·b. Only rank 0 writes files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from decode_mem.errors import ConfigError

RENDEZVOUS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Rank:
    """This process's place in a data-parallel run (``world_size`` 1 and rank 0 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def rank_from_environment() -> Rank:
    """The rank torchrun set in the environment; a single process without it. A half-configured environment
    (``WORLD_SIZE`` without a rendezvous) is a ConfigError naming what is missing."""
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        return Rank()
    try:
        world_size = int(world)
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={world!r} is not a number of processes") from None
    if world_size <= 1:
        return Rank()
    missing = [name for name in RENDEZVOUS if not os.environ.get(name)]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world_size} is set but {', '.join(missing)} not: start data-parallel "
                          "training with torchrun (torchrun --standalone --nproc_per_node N -m decode_mem.train "
                          "...), or unset WORLD_SIZE for one process")
    return Rank(int(os.environ["RANK"]), world_size, int(os.environ["LOCAL_RANK"]))


def start(rank: Rank, device: torch.device) -> torch.device:
    """Join the process group (NCCL for CUDA, gloo for CPU); the device this rank trains on."""
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", rank.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank.rank,
                                world_size=rank.world_size)
    return device


def stop() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def agree(value: object) -> object:
    """Rank 0's ``value`` on every rank (settings that must not differ: chunk size, stopping)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
