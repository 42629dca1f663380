"""Training data streams: reproducible per (seed, step, micro-batch), so a resumed run sees the same data; simulated
in vectorised blocks on the training device (a GPU does not wait for one CPU thread)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import WINDOW, simulate_batch
from decode_mem.simulate.emitters import seeded_generator

STREAM_TRAIN = 1000  # key of the training stream in ``seeded_generator`` (the simulator uses 0..5)

Batch = dict[str, torch.Tensor]


BLOCK_MAX = 64  # training windows simulated per call at most (one vectorised call, see ``block_size``)
BLOCK_PIXELS = 1 << 21  # ... and at most about this many pixels per frame tensor of a call (8 MiB in float32)


def block_size(frame_size: tuple[int, int]) -> int:
    """Windows per simulation call: the largest power of two <= ``BLOCK_MAX`` whose three-frame windows hold at
    most ``BLOCK_PIXELS`` pixels (at least 1). A function of the frame size alone, so the blocks of a global
    batch are the same for any number of ranks and any batch split (``SimulatedBatches``)."""
    h, w = frame_size
    fit = max(1, BLOCK_PIXELS // (WINDOW * h * w))
    return min(BLOCK_MAX, 1 << (fit.bit_length() - 1))


class SimulatedBatches(IterableDataset):
    """Endless stream of simulated batches; item i is step ``start + i // k``, micro-batch ``i % k``.

    The global batch (``batch_size`` × ``world_size`` windows) is cut into blocks of ``block_size`` windows
    (the last one shorter); block j is one vectorised ``simulate_batch`` call from its own generator, seeded from
    ``(seed, step, micro, j)``, on ``device``. Windows are therefore a pure function of ``(seed, step, micro,
    index in the global batch)`` and of the device's random number algorithm (the CPU's and CUDA's differ). With
    DataLoader workers (``device`` 'cpu') each worker makes every n-th item and the DataLoader interleaves them
    back in order, so the stream is identical for any number of workers and after a resume; in data-parallel
    training rank r makes windows ``[r·b, (r+1)·b)`` of each global batch, simulating the blocks that overlap
    them, so N ranks of ``batch_size`` b see exactly the windows one process of ``batch_size`` N·b sees (a rank
    whose b is not a multiple of the block simulates some windows another rank uses).

    ``size_jitter`` px: each batch's frames are ``frame_size`` minus 0..size_jitter px in H and in W, so the
    network also trains on frames that are not multiples of its down-sampling factor and sees the padding it
    gets at inference. Each batch carries ``level_noise`` (B, 3) ~ N(0, 1), with which the trainer perturbs
    the frames' levels (``TrainConfig.level_jitter``).
    """

    def __init__(self, config: SimulationConfig, batch_size: int, accumulation_steps: int, *, seed: int,
                 start_step: int = 0, size_jitter: int = 0, rank: int = 0, world_size: int = 1,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        self.config = config
        self.batch_size = int(batch_size)
        self.k = int(accumulation_steps)
        self.seed = int(seed)
        self.start_step = int(start_step)
        self.size_jitter = int(size_jitter)
        self.offset = int(rank) * self.batch_size  # first window of this rank in the global batch
        self.total = int(world_size) * self.batch_size  # windows in the global batch
        self.block = block_size(config.frame_size)
        self.device = str(device)

    def batch(self, step: int, micro: int) -> Batch:
        config = self.config
        if self.size_jitter:  # one frame size for the whole global batch
            gen = seeded_generator(self.seed, STREAM_TRAIN, int(step), int(micro))
            dh, dw = torch.randint(self.size_jitter + 1, (2,), generator=gen).tolist()
            h, w = config.frame_size
            config = replace(config, frame_size=(max(1, h - dh), max(1, w - dw)))
        first, stop = self.offset, self.offset + self.batch_size
        parts = []
        for j in range(first // self.block, (stop - 1) // self.block + 1):
            start = j * self.block
            gen = seeded_generator(self.seed, STREAM_TRAIN, int(step), int(micro), j, device=self.device)
            block = simulate_batch(config, min(self.block, self.total - start), gen)
            block["level_noise"] = torch.randn((len(block["frames"]), 3), generator=gen, device=gen.device)
            lo, hi = max(first, start) - start, min(stop, start + self.block) - start
            parts.append({key: value[lo:hi] for key, value in block.items()})
        if len(parts) == 1:
            return parts[0]
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        i = worker
        while True:
            step, micro = divmod(i, self.k)
            yield self.batch(self.start_step + step, micro)
            i += n_workers


def batch_loader(stream: SimulatedBatches, *, num_workers: int, pin_memory: bool) -> Iterator[Batch]:
    """Iterate the stream, in worker processes when ``num_workers > 0`` (bounded prefetch of 2 per worker)."""
    if num_workers <= 0:
        return iter(stream)
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers, pin_memory=pin_memory,
                        prefetch_factor=2, persistent_workers=False)
    return iter(loader)
