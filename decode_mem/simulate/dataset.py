"""On-the-fly training data: 3-frame windows of a stationary blinking movie, simulated fresh per sample.

The sample contract (``SimulatedDataset`` yields these; ``simulate_batch`` returns them with a leading
batch axis B, which is also what ``DataLoader``'s default collate makes of the samples):

- ``"frames"``: float32 (3, H, W) — frames t−1, t, t+1: noisy camera counts converted back to photons
  with ``config.camera.to_photons`` (the network input);
- ``"em"``: float32 (K, 4) — the emitters of the middle frame t with their centre inside the frame, columns
  ``x_px, y_px, z_nm, photons`` (photons emitted in frame t; z from the focal plane at the emitter's place with
  ``config.z_reference`` 'focal_plane', ``target_z``), brightest first, zero-padded to
  ``K = config.k_max``. If a frame has more than K emitters, the K brightest are kept and a
  RuntimeWarning is issued (the automatic K makes this practically impossible);
- ``"mask"``: bool (K,) — which rows of ``em`` are real;
- ``"bg"``: float32 (H, W) — the true background of frame t in photons/px;
- ``"read_var"``: float32 (H, W) — the read-noise variance in photons² the network is told about: the
  per-pixel map for an sCMOS sample converted with its maps, else the camera's scalar everywhere;
- ``"origin"``: float32 (2,) — only for a PSF that changes across the field (``config.field_shape``): the
  (row, col) px in the field of the window's pixel (0, 0); each emitter is rendered with the PSF there.

Per-movie physics (PSF width, density, camera, ...; ``decode_mem.simulate.physics``) is drawn per sample.

Sample ``i`` is a pure function of ``(seed, i)``: it is drawn from its own generator, nothing is kept
between samples, and the dataset object holds only the config and a few integers (cheap to pickle into
workers, no copy-on-read growth). DataLoader worker ``w`` of ``n`` yields samples ``w, w + n, w + 2n, ...``,
so workers never repeat each other and the set of samples does not depend on the number of workers.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import IterableDataset, get_worker_info

from decode_mem.errors import ConfigError
from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.emitters import STREAM_SAMPLE, FrameRows, frame_rows, seeded_generator, stationary_emitters
from decode_mem.simulate.movie import inside_frame
from decode_mem.simulate.noise import ADU_MAX, background
from decode_mem.simulate.physics import Physics, draw_physics
from decode_mem.simulate.psf import render_emitters

WINDOW = 3  # frames t−1, t, t+1
_INFINITE_EPOCH_STRIDE = 1 << 40  # sample-index offset between epochs of an endless dataset


@dataclass(frozen=True)
class WindowBatch:
    """B simulated windows with everything known about them (tests and diagnostics use the extras).

    ``frames`` (B, 3, H, W) photons from noisy counts; ``adu`` (B, 3, H, W) noisy counts; ``expected``
    (B, 3, H, W) noise-free photons incl. background; ``bg`` (B, H, W); ``read_var`` (B, H, W); ``em``
    (B, K, 4); ``mask`` (B, K); ``rows``: ground-truth rows of all three frames (``movie`` = sample index in
    the batch, ``frame`` 0..2); ``physics``: what each sample was given; ``origin`` (B, 2): where each window
    lies in the field of a PSF that changes across it (``window_origins``), else None.
    """

    frames: torch.Tensor
    adu: torch.Tensor
    expected: torch.Tensor
    bg: torch.Tensor
    read_var: torch.Tensor
    em: torch.Tensor
    mask: torch.Tensor
    rows: FrameRows
    physics: Physics
    origin: torch.Tensor | None = None

    def as_dict(self) -> dict[str, torch.Tensor]:
        out = {"frames": self.frames, "em": self.em, "mask": self.mask, "bg": self.bg, "read_var": self.read_var}
        if self.origin is not None:  # a PSF that changes across the field: where each window lies in it
            out["origin"] = self.origin
        return out


def simulate_windows(config: SimulationConfig, batch_size: int, generator: torch.Generator) -> WindowBatch:
    """Simulate ``batch_size`` independent 3-frame windows at once, all from ``generator`` (on its device)."""
    b = int(batch_size)
    h, w = config.frame_size
    k = config.k_max
    dev = generator.device
    physics = draw_physics(config, b, generator)
    varies = any(r is not None for r in (config.density_range, config.pixel_size_range, config.on_time_range))
    emitters = stationary_emitters(config, WINDOW, generator, n_movies=b,
                                   rate=physics.start_rates(config) if varies else None,
                                   on_time=physics.on_time if config.on_time_range is not None else None)
    rows = frame_rows(emitters, 0, WINDOW)
    bg = background(config, b, generator)
    origin = window_origins(config, b, generator)
    expected = torch.zeros((b * WINDOW, h, w), device=dev)
    field_x, field_y = (None, None) if origin is None else (rows.x + origin[rows.movie, 1],
                                                            rows.y + origin[rows.movie, 0])
    render_emitters(config, expected, rows.movie * WINDOW + rows.frame, rows.x, rows.y, rows.z, rows.photons,
                    physics.sigma0[rows.movie], rows.width, field_x, field_y)
    expected = expected.view(b, WINDOW, h, w) + bg[:, None]
    adu, frames, read_var = _camera_noise(config, physics, expected, generator)

    # emitters of the middle frame, inside the frame, grouped by sample, brightest first
    mid = rows.select(torch.nonzero((rows.frame == 1) & inside_frame(config, rows.x, rows.y)).squeeze(1))
    mid = mid.select(torch.sort(mid.photons, descending=True, stable=True).indices)
    mid = mid.select(torch.sort(mid.movie, stable=True).indices)
    counts = torch.bincount(mid.movie, minlength=b)
    pos = torch.arange(len(mid), device=dev) - (torch.cumsum(counts, 0) - counts)[mid.movie]
    n_max = int(counts.max()) if b > 0 and len(mid) else 0
    if n_max > k:
        warnings.warn(f"simulation: a frame has {n_max} emitters, more than max_emitters={k}; keeping the {k} "
                      "brightest (raise simulation.max_emitters)", RuntimeWarning, stacklevel=2)
        keep = torch.nonzero(pos < k).squeeze(1)
        mid, pos = mid.select(keep), pos[keep]
    em = torch.zeros((b, k, 4), device=dev)
    mask = torch.zeros((b, k), dtype=torch.bool, device=dev)
    em[mid.movie, pos] = torch.stack([mid.x, mid.y, target_z(config, mid, origin), mid.photons], dim=1)
    mask[mid.movie, pos] = True
    return WindowBatch(frames, adu, expected, bg, read_var, em, mask, rows, physics, origin)


def target_z(config: SimulationConfig, rows: FrameRows, origin: torch.Tensor | None) -> torch.Tensor:
    """The z (nm) a network is trained to read for these emitters (``config.z_reference``): their own, or that less
    the focal shift at their place in the field (window ``origin`` + position in the window)."""
    if config.z_reference != "focal_plane":
        return rows.z
    shift = config.field_psf().focal_shift(rows.x + origin[rows.movie, 1], rows.y + origin[rows.movie, 0])
    return rows.z - shift.to(rows.z.device, rows.z.dtype)


def window_origins(config: SimulationConfig, batch_size: int, generator: torch.Generator) -> torch.Tensor | None:
    """Where each window lies in the field of a PSF that changes across it (``config.field_shape``): (B, 2) float
    (row, col) px of its pixel (0, 0), uniform over the places a window fits; None where the PSF is the same
    everywhere (nothing is drawn: the other samples' random streams stay as they were)."""
    shape = config.field_shape
    if shape is None:
        return None
    h, w = config.frame_size
    if h > shape[0] or w > shape[1]:
        raise ConfigError(f"simulation.frame_size {h}x{w} px is larger than the field its PSF was calibrated over "
                          f"({shape[0]}x{shape[1]} px)")
    room = torch.tensor([shape[0] - h + 1, shape[1] - w + 1], dtype=torch.float32, device=generator.device)
    u = torch.rand((batch_size, 2), generator=generator, device=generator.device)
    return torch.floor(u * room).clamp_max(room - 1)


def _camera_noise(config: SimulationConfig, physics: Physics, expected: torch.Tensor,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noisy counts, photons the network sees, read variance in photons² (B, H, W)) of expected photons.

    All B samples in one pass, each with its own camera (``noise``'s models, its settings as (B, 1, 1, 1)
    columns): one Poisson draw, the EM register's Gamma draw for the EMCCD samples only, one read-noise draw;
    sCMOS samples with a per-pixel spread get random maps (``noise.sensor_maps``' model) and are converted back
    with them when their maps are known.
    """
    b, _, h, w = expected.shape
    dev = expected.device
    cams = physics.cameras
    spread = physics.sensor_variation.tolist()
    known = physics.maps_known.tolist()

    def column(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=dev).view(b, 1, 1, 1)

    qe, gain = column([c.qe for c in cams]), column([c.em_gain for c in cams])
    e_per_adu, read_noise, baseline = (column([c.e_per_adu for c in cams]), column([c.read_noise for c in cams]),
                                       column([c.baseline for c in cams]))
    told = (baseline, e_per_adu, read_noise)  # the camera's scalars: what the network is told without known maps
    with_maps = [i for i, (c, v) in enumerate(zip(cams, spread, strict=True)) if c.kind == "scmos" and v > 0]
    if with_maps:  # per-pixel maps (B, 1, H, W): the camera's scalars where a sample has none
        index = torch.tensor(with_maps, device=dev)
        v = column(spread)[index]
        e_per_adu, read_noise, baseline = (t.expand(b, 1, h, w).clone() for t in (e_per_adu, read_noise, baseline))
        shape = (len(with_maps), 1, h, w)
        e_per_adu[index] = e_per_adu[index] * (1 + v * _randn(shape, generator)).clamp_min(0.05)
        read_noise[index] = read_noise[index] * torch.exp(v * _randn(shape, generator))
        baseline[index] = baseline[index] * (1 + v * _randn(shape, generator)).clamp_min(0)
    electrons = torch.poisson(expected.float().clamp_min(0) * qe, generator=generator)
    signal = electrons * gain
    emccd = [i for i, c in enumerate(cams) if c.kind == "emccd"]
    if emccd:  # EM register: Gamma(shape = electrons, scale = gain), 0 for no electrons
        index = torch.tensor(emccd, device=dev)
        n = electrons[index]
        signal[index] = torch._standard_gamma(n, generator=generator).mul_(gain[index]).masked_fill_(n == 0, 0.0)
    adu = ((signal + _randn(signal.shape, generator) * read_noise) / e_per_adu + baseline).round_().clamp_(0, ADU_MAX)

    # back to photons with what the network is told: the per-pixel maps where known, else the camera's scalars
    converts = column([1.0 if i in with_maps and known[i] else 0.0 for i in range(b)]) > 0
    photons_per_e = 1.0 / (qe * gain)
    told_baseline, told_e_per_adu, told_read = (torch.where(converts, actual, scalar) for actual, scalar in
                                                 zip((baseline, e_per_adu, read_noise), told, strict=True))
    frames = (adu - told_baseline) * (told_e_per_adu * photons_per_e)
    read_var = (told_read * photons_per_e) ** 2
    return adu, frames.float(), read_var[:, 0].expand(b, h, w).contiguous()


def _randn(shape: tuple[int, ...] | torch.Size, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=generator.device)


def simulate_batch(config: SimulationConfig, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One batch of the sample contract (module docstring) with a leading axis B, on the generator's device.

    Vectorised over the batch (one render and one noise call), for training on a GPU without DataLoader
    workers. Drawn from one generator, so it differs from ``SimulatedDataset``'s samples of the same seed.
    """
    return simulate_windows(config, batch_size, generator).as_dict()


class SimulatedDataset(IterableDataset):
    """Endless (``length=None``) or finite stream of simulated training samples (module docstring).

    ``device`` is where samples are simulated; keep 'cpu' with DataLoader workers (CUDA must not be used in
    forked workers). ``set_epoch(e)`` moves to a disjoint set of samples for epoch ``e``; with
    ``persistent_workers=True`` the workers keep the epoch they were started with.
    """

    def __init__(self, config: SimulationConfig, seed: int = 0, length: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed!r}")
        if length is not None and int(length) < 0:
            raise ValueError(f"length must be >= 0 or None, got {length!r}")
        self.config = config
        self.seed = int(seed)
        self.length = None if length is None else int(length)
        self.device = str(device)
        self.epoch = 0

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("SimulatedDataset(length=None) is endless and has no len()")
        return self.length

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def sample(self, index: int) -> dict[str, torch.Tensor]:
        """Sample ``index`` (a pure function of seed and index), without the batch axis."""
        gen = seeded_generator(self.seed, STREAM_SAMPLE, int(index), device=self.device)
        return {key: value[0] for key, value in simulate_batch(self.config, 1, gen).items()}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        if self.length is None:
            base = self.epoch * _INFINITE_EPOCH_STRIDE
            indices: Iterator[int] = itertools.count(worker, n_workers)
        else:
            base = self.epoch * self.length
            indices = iter(range(worker, self.length, n_workers))
        for i in indices:
            yield self.sample(base + i)


def simulate_samples(config: SimulationConfig, n: int, seed: int = 0,
                     device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """A fixed set (e.g. validation): samples ``0..n−1`` of ``SimulatedDataset(config, seed)``, stacked (B = n)."""
    ds = SimulatedDataset(config, seed, device=device)
    samples = [ds.sample(i) for i in range(int(n))]
    if not samples:
        h, w = config.frame_size
        k = config.k_max
        empty = {"frames": torch.zeros((0, WINDOW, h, w)), "em": torch.zeros((0, k, 4)),
                 "mask": torch.zeros((0, k), dtype=torch.bool), "bg": torch.zeros((0, h, w)),
                 "read_var": torch.zeros((0, h, w))}
        return empty if config.field_shape is None else {**empty, "origin": torch.zeros((0, 2))}
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}
