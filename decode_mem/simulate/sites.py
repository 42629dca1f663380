"""Fixed sites that blink again and again (DNA-PAINT-like), generated epoch by epoch like ``BlinkingProcess``.

Each site alternates between dark periods (exponential, mean ``structure.off_time`` frames) and blinks
(exponential, mean ``on_time``); every blink draws its own flux and PSF width (a new imager strand binds).
A movie starts in the stationary state: a site is on at t = 0 with probability ``on / (on + off)``, and by
memorylessness its remaining on or off time is exponential with the same mean.

State: per site the start time of its next blink (drawn, not yet reached) — a fixed array — plus the blinks
still on. Epoch ``k`` (frames ``[kE, (k+1)E)``) draws, from its own generator ``(seed, k)``, every blink that
starts in it, site by site in order, and the dark time after each. So a movie is the same whatever frame
blocks it is asked for in, and the state does not grow with the movie's length.
"""

from __future__ import annotations

import torch

from decode_mem.simulate.config import SimulationConfig
from decode_mem.simulate.emitters import EPOCH_FRAMES, BlinkingProcess, Emitters, sample_flux
from decode_mem.simulate.structures import Sites


class SiteBlinking(BlinkingProcess):
    """The blinks of ``sites`` in one movie; ``active``/``rows`` as in ``BlinkingProcess``.

    ``on_time``: the movie's mean blink length (default ``config.on_time``).
    """

    def __init__(self, config: SimulationConfig, sites: Sites, seed: int, device: torch.device | str = "cpu",
                 epoch: int = EPOCH_FRAMES, on_time: float | None = None) -> None:
        self.sites = sites.to(device)
        self.off_time = config.structure.off_time
        self._next_on = torch.zeros(0, dtype=torch.float64)
        super().__init__(config, seed, device, epoch, rate=0.0, on_time=on_time)

    @property
    def mean_on(self) -> float:
        return self.config.on_time if self.on_time is None else self.on_time

    def _initial(self, generator: torch.Generator) -> Emitters:
        n = len(self.sites)
        dev = self.device
        on, off = self.mean_on, self.off_time
        lit = torch.rand(n, generator=generator, device=dev) < on / (on + off)
        dark = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0 / off, generator=generator)
        idx = torch.nonzero(lit).squeeze(1)
        blinks = self._blinks(idx, torch.zeros(idx.numel(), dtype=torch.float64, device=dev), generator)
        self._next_on = dark
        self._next_on[idx] = blinks.end + dark[idx]  # the dark time after the blink that is on at t = 0
        return blinks

    def _fresh(self, t_low: float, t_high: float, generator: torch.Generator) -> Emitters:
        parts = [Emitters.empty(self.device)]
        while True:  # a site may blink more than once per epoch when off_time is short
            idx = torch.nonzero(self._next_on < t_high).squeeze(1)
            if idx.numel() == 0:
                break
            blinks = self._blinks(idx, self._next_on[idx], generator)
            dark = torch.empty(idx.numel(), dtype=torch.float64, device=self.device)
            self._next_on[idx] = blinks.end + dark.exponential_(1.0 / self.off_time, generator=generator)
            parts.append(blinks)
        return Emitters.cat(parts)

    def _blinks(self, idx: torch.Tensor, start: torch.Tensor, generator: torch.Generator) -> Emitters:
        """Blinks of sites ``idx`` starting at ``start``: exponential length, fresh flux and width."""
        n = idx.numel()
        dev = self.device
        length = torch.empty(n, dtype=torch.float64, device=dev).exponential_(1.0 / self.mean_on, generator=generator)
        flux = sample_flux(self.config, n, generator)
        if self.config.psf_sigma_jitter > 0:
            width = torch.exp(self.config.psf_sigma_jitter * torch.randn(n, generator=generator, device=dev))
        else:
            width = torch.ones(n, device=dev)
        s = self.sites
        return Emitters(torch.zeros(n, dtype=torch.long, device=dev), start, start + length, s.x[idx].float(),
                        s.y[idx].float(), s.z[idx], flux, width)
