"""Blinking emitters in continuous time, and their per-frame ground truth.

Model (like DECODE's ``EmitterSamplerBlinking``, research/decode_picasso.md §1.3; re-derived, not copied):

- Emitters are placed uniformly over the frame extended by ``config.margin`` px on every side; flux
  (photons per full frame on) from ``config.photons_dist``; z uniform in ``config.z_range`` for 3D PSFs,
  0 otherwise.
- Each emitter switches on once, at a time ``start`` (frames, continuous), and stays on for an
  exponential time with mean ``config.on_time``. In frame ``f`` (the interval ``[f, f+1)``) it emits
  ``flux × |[start, end) ∩ [f, f+1)|`` photons, so the photons over all its frames sum to ``flux × on-time``.
- Starts form a Poisson process of rate ``config.start_rate`` per frame. A movie begins in the stationary
  state: the emitters already on at t = 0 are Poisson with mean ``start_rate × on_time``, and by the
  memorylessness of the exponential their remaining on-time is again exponential with the same mean. So the
  expected number of emitters visible in any frame is ``config.emitters_per_frame``, from the first frame on.

Long movies (``BlinkingProcess``): time is cut into epochs of ``EPOCH_FRAMES`` frames. The emitters
starting in epoch ``k`` are drawn from their own generator, seeded from ``(seed, k)``; emitters still on at
the end of a requested frame range are carried over to the next. Hence a movie is the same whatever frame
blocks it is generated in, frames ``[0, n)`` of a longer movie equal the shorter movie, and the state held
is the emitters on at the current time plus one epoch's worth — independent of the movie's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from decode_mem.simulate.config import SimulationConfig

EPOCH_FRAMES = 16

# independent random streams of one seed (see ``seeded_generator``)
(STREAM_INIT, STREAM_EPOCH, STREAM_NOISE, STREAM_BG, STREAM_SENSOR, STREAM_SAMPLE, STREAM_PHYSICS, STREAM_STRUCTURE,
 STREAM_DRIFT) = range(9)


def seeded_generator(seed: int, *keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator on ``device`` seeded from ``(seed, *keys)`` through numpy's SeedSequence.

    Distinct key tuples give statistically independent streams; the same tuple gives the same stream.
    (The CPU and CUDA generators are different algorithms: a CUDA run is reproducible, but not
    identical to the CPU run.)
    """
    if int(seed) < 0 or any(int(k) < 0 for k in keys):
        raise ValueError(f"seeds must be >= 0, got seed={seed!r}, keys={keys!r}")
    state = np.random.SeedSequence([int(seed), *map(int, keys)]).generate_state(1, np.uint64)[0]
    gen = torch.Generator(device=device)
    gen.manual_seed(int(state) & ((1 << 63) - 1))
    return gen


@dataclass(frozen=True)
class Emitters:
    """N emitters (tensors of length N on one device).

    ``movie`` (int64): which independent movie/sample the emitter belongs to (0 for a single movie);
    ``start``/``end`` (float64 frames): on during ``[start, end)``; ``x``, ``y`` (px), ``z`` (nm),
    ``flux`` (photons per full frame on) float32; ``width`` (float32) the emitter's PSF width relative to
    its movie's σ0 (1 without ``psf_sigma_jitter``).
    """

    movie: torch.Tensor
    start: torch.Tensor
    end: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    flux: torch.Tensor
    width: torch.Tensor

    def __len__(self) -> int:
        return self.x.numel()

    @property
    def on_time(self) -> torch.Tensor:
        return self.end - self.start

    def select(self, index: torch.Tensor) -> Emitters:
        return Emitters(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    @staticmethod
    def cat(parts: list[Emitters]) -> Emitters:
        return Emitters(**{f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(Emitters)})

    @staticmethod
    def empty(device: torch.device | str = "cpu") -> Emitters:
        f64 = torch.zeros(0, dtype=torch.float64, device=device)
        f32 = torch.zeros(0, dtype=torch.float32, device=device)
        return Emitters(torch.zeros(0, dtype=torch.long, device=device), f64, f64, f32, f32, f32, f32, f32)


@dataclass(frozen=True)
class FrameRows:
    """Ground truth: one row per emitter per frame in which it is on (tensors of length R).

    ``emitter`` indexes the ``Emitters`` the rows came from; ``movie``, ``frame`` (int64, absolute frame
    index); ``x``, ``y`` px, ``z`` nm, ``photons`` emitted in that frame, ``width`` (float32).
    """

    emitter: torch.Tensor
    movie: torch.Tensor
    frame: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    photons: torch.Tensor
    width: torch.Tensor

    def __len__(self) -> int:
        return self.frame.numel()

    def select(self, index: torch.Tensor) -> FrameRows:
        return FrameRows(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


def sample_flux(config: SimulationConfig, n: int, generator: torch.Generator) -> torch.Tensor:
    """Flux in photons per full frame, (n,) float32, clipped below at ``config.photons_min``."""
    dev = generator.device
    m, s = config.photons_mean, config.photons_std
    if config.photons_dist == "loguniform":
        lo, hi = (math.log(v) for v in config.photons_range)
        return torch.exp(lo + (hi - lo) * torch.rand(n, generator=generator, device=dev)).clamp_min(config.photons_min)
    if config.photons_dist == "normal":
        flux = m + s * torch.randn(n, generator=generator, device=dev)
    elif config.photons_dist == "lognormal":
        var = math.log1p((s / m) ** 2)
        mu = math.log(m) - var / 2
        flux = torch.exp(mu + math.sqrt(var) * torch.randn(n, generator=generator, device=dev))
    else:  # uniform with that mean and std
        half = math.sqrt(3.0) * s
        flux = m - half + 2 * half * torch.rand(n, generator=generator, device=dev)
    return flux.clamp_min(config.photons_min)


def _poisson_counts(mean: float | torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Poisson counts for ``n`` movies: one mean for all, or a (n,) tensor of means."""
    if isinstance(mean, torch.Tensor):
        rates = mean.to(device=generator.device, dtype=torch.float64).expand(n).contiguous()
    else:
        rates = torch.full((n,), float(mean), dtype=torch.float64, device=generator.device)
    return torch.poisson(rates, generator=generator).long()


def _draw(config: SimulationConfig, movie: torch.Tensor, t_low: float, t_high: float | None,
          generator: torch.Generator, on_time: Rate | None = None) -> Emitters:
    """Attributes of ``len(movie)`` emitters; start uniform in [t_low, t_high), or at t_low if t_high is None.

    ``on_time``: mean on-time per movie ((n_movies,) tensor) or for all (default ``config.on_time``)."""
    n = movie.numel()
    dev = generator.device
    (x0, x1), (y0, y1) = config.extent
    x = x0 + (x1 - x0) * torch.rand(n, generator=generator, device=dev)
    y = y0 + (y1 - y0) * torch.rand(n, generator=generator, device=dev)
    if config.is_3d:
        z0, z1 = config.z_range
        z = z0 + (z1 - z0) * torch.rand(n, generator=generator, device=dev)
    else:
        z = torch.zeros(n, device=dev)
    flux = sample_flux(config, n, generator)
    if isinstance(on_time, torch.Tensor):
        duration = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0, generator=generator)
        duration = duration * on_time.to(device=dev, dtype=torch.float64)[movie]
    else:
        mean = config.on_time if on_time is None else float(on_time)
        duration = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0 / mean, generator=generator)
    if t_high is None:
        start = torch.full((n,), float(t_low), dtype=torch.float64, device=dev)
    else:
        start = t_low + (t_high - t_low) * torch.rand(n, dtype=torch.float64, generator=generator, device=dev)
    if config.psf_sigma_jitter > 0:
        width = torch.exp(config.psf_sigma_jitter * torch.randn(n, generator=generator, device=dev))
    else:
        width = torch.ones(n, device=dev)
    return Emitters(movie, start, start + duration, x, y, z, flux, width)


def _movie_index(counts: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)


Rate = float | torch.Tensor  # per frame: one value for all movies, or (n_movies,)


def initial_emitters(config: SimulationConfig, generator: torch.Generator, n_movies: int = 1,
                     rate: Rate | None = None, on_time: Rate | None = None) -> Emitters:
    """Emitters already on at t = 0 in the stationary state (start = 0, exponential remaining on-time).

    ``rate``: start rate per movie (default ``config.start_rate``); ``on_time``: mean on-time per movie
    (default ``config.on_time``)."""
    rate = config.start_rate if rate is None else rate
    mean_on = config.on_time if on_time is None else on_time
    counts = _poisson_counts(rate * mean_on, n_movies, generator)
    return _draw(config, _movie_index(counts), 0.0, None, generator, on_time)


def new_emitters(config: SimulationConfig, t_low: float, t_high: float, generator: torch.Generator,
                 n_movies: int = 1, rate: Rate | None = None, on_time: Rate | None = None) -> Emitters:
    """Emitters switching on in ``[t_low, t_high)`` (Poisson number, uniform start times)."""
    rate = config.start_rate if rate is None else rate
    counts = _poisson_counts(rate * (t_high - t_low), n_movies, generator)
    return _draw(config, _movie_index(counts), t_low, t_high, generator, on_time)


def stationary_emitters(config: SimulationConfig, n_frames: int, generator: torch.Generator,
                        n_movies: int = 1, rate: Rate | None = None, on_time: Rate | None = None) -> Emitters:
    """All emitters visible in frames ``[0, n_frames)`` of ``n_movies`` independent stationary movies.

    One generator for everything: used for training windows (n_frames = 3), batched over samples.
    """
    return Emitters.cat([initial_emitters(config, generator, n_movies, rate, on_time),
                         new_emitters(config, 0.0, float(n_frames), generator, n_movies, rate, on_time)])


def frame_rows(emitters: Emitters, t0: int, t1: int) -> FrameRows:
    """Per-frame ground-truth rows of ``emitters`` for frames ``[t0, t1)``: photons in proportion to on-time."""
    dev = emitters.x.device
    first = torch.clamp(torch.floor(emitters.start).long(), min=t0)
    last = torch.clamp(torch.ceil(emitters.end).long() - 1, max=t1 - 1)
    count = (last - first + 1).clamp_min(0)
    idx = torch.repeat_interleave(torch.arange(len(emitters), device=dev), count)
    offset = torch.arange(idx.numel(), device=dev) - (torch.cumsum(count, 0) - count)[idx]
    frame = first[idx] + offset
    f64 = frame.to(torch.float64)
    overlap = torch.minimum(emitters.end[idx], f64 + 1) - torch.maximum(emitters.start[idx], f64)
    rows = FrameRows(idx, emitters.movie[idx], frame, emitters.x[idx], emitters.y[idx], emitters.z[idx],
                     (emitters.flux[idx].to(torch.float64) * overlap).to(torch.float32), emitters.width[idx])
    return rows.select(torch.nonzero(overlap > 0).squeeze(1))


class BlinkingProcess:
    """The emitters of one long stationary movie, generated epoch by epoch (see the module docstring).

    ``active(t0, t1)``/``rows(t0, t1)`` must be asked for non-decreasing ``t0``: emitters that ended before
    the last ``t0`` asked for are forgotten. Going back in time raises ValueError (make a new process).
    """

    def __init__(self, config: SimulationConfig, seed: int, device: torch.device | str = "cpu",
                 epoch: int = EPOCH_FRAMES, rate: float | None = None, on_time: float | None = None) -> None:
        self.config = config
        self.seed = int(seed)
        self.device = torch.device(device)
        self.epoch = int(epoch)
        self.rate = config.start_rate if rate is None else float(rate)
        self.on_time = None if on_time is None else float(on_time)
        self._pool = self._initial(seeded_generator(self.seed, STREAM_INIT, device=self.device))
        self._next_epoch = 0
        self._t = 0

    def _initial(self, generator: torch.Generator) -> Emitters:
        """The emitters on at t = 0."""
        return initial_emitters(self.config, generator, rate=self.rate, on_time=self.on_time)

    def _fresh(self, t_low: float, t_high: float, generator: torch.Generator) -> Emitters:
        """The emitters switching on in ``[t_low, t_high)`` (one epoch)."""
        return new_emitters(self.config, t_low, t_high, generator, rate=self.rate, on_time=self.on_time)

    def active(self, t0: int, t1: int) -> Emitters:
        """Emitters on during any part of frames ``[t0, t1)``."""
        if t0 < self._t:
            raise ValueError(f"BlinkingProcess: frames must be asked for in order (asked for {t0} after {self._t})")
        while self._next_epoch * self.epoch < t1:
            k = self._next_epoch
            gen = seeded_generator(self.seed, STREAM_EPOCH, k, device=self.device)
            fresh = self._fresh(float(k * self.epoch), float((k + 1) * self.epoch), gen)
            self._pool = Emitters.cat([self._pool, fresh])
            self._next_epoch += 1
        self._pool = self._pool.select(torch.nonzero(self._pool.end > t0).squeeze(1))  # forget finished ones
        self._t = t0
        return self._pool.select(torch.nonzero(self._pool.start < t1).squeeze(1))

    def rows(self, t0: int, t1: int) -> tuple[Emitters, FrameRows]:
        """The active emitters and their ground-truth rows for frames ``[t0, t1)``."""
        em = self.active(t0, t1)
        return em, frame_rows(em, t0, t1)
