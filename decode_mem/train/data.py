"""Training data streams: reproducible per (seed, step, micro-batch), so a resumed run sees the same data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.dataset import simulate_batch
from decode_mem.simulate.emitters import seeded_generator

STREAM_TRAIN = 1000  # key of the training stream in ``seeded_generator`` (the simulator uses 0..5)

Batch = dict[str, torch.Tensor]


class SimulatedBatches(IterableDataset):
    """Endless stream of simulated batches; item i is step ``start + i // k``, micro-batch ``i % k``.

    Each sample is a pure function of ``(seed, step, micro, index in the global batch)``: with DataLoader
    workers each worker makes every n-th item and the DataLoader interleaves them back in order, so the stream
    is identical for any number of workers and after a resume; in data-parallel training rank r makes samples
    ``[r·b, (r+1)·b)`` of each global batch, so N ranks of ``batch_size`` b see exactly the samples one process
    of ``batch_size`` N·b sees.

    ``size_jitter`` px: each batch's frames are ``frame_size`` minus 0..size_jitter px in H and in W, so the
    network also trains on frames that are not multiples of its down-sampling factor and sees the padding it
    gets at inference. Each batch carries ``level_noise`` (B, 3) ~ N(0, 1), with which the trainer perturbs
    the frames' levels (``TrainConfig.level_jitter``).
    """

    def __init__(self, config: SimulationConfig, batch_size: int, accumulation_steps: int, *, seed: int,
                 start_step: int = 0, size_jitter: int = 0, rank: int = 0) -> None:
        super().__init__()
        self.config = config
        self.batch_size = int(batch_size)
        self.k = int(accumulation_steps)
        self.seed = int(seed)
        self.start_step = int(start_step)
        self.size_jitter = int(size_jitter)
        self.offset = int(rank) * self.batch_size  # first sample of this rank in the global batch

    def batch(self, step: int, micro: int) -> Batch:
        config = self.config
        if self.size_jitter:  # one frame size for the whole global batch
            gen = seeded_generator(self.seed, STREAM_TRAIN, int(step), int(micro))
            dh, dw = torch.randint(self.size_jitter + 1, (2,), generator=gen).tolist()
            h, w = config.frame_size
            config = replace(config, frame_size=(max(1, h - dh), max(1, w - dw)))
        samples = []
        for j in range(self.offset, self.offset + self.batch_size):
            gen = seeded_generator(self.seed, STREAM_TRAIN, int(step), int(micro), j)
            sample = simulate_batch(config, 1, gen)
            sample["level_noise"] = torch.randn((1, 3), generator=gen, device=gen.device)
            samples.append(sample)
        return {key: torch.cat([s[key] for s in samples]) for key in samples[0]}

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
