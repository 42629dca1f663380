"""Blinking: photons split over frames, stationarity, block-independent long movies."""

from __future__ import annotations

import pytest
import torch

from decode_mem.simulate import SimulationConfig
from decode_mem.simulate.emitters import BlinkingProcess, frame_rows, seeded_generator, stationary_emitters


def test_photons_over_all_frames_equal_flux_times_on_time() -> None:
    cfg = SimulationConfig(frame_size=(32, 32), density=3.0, on_time=2.5)
    em = stationary_emitters(cfg, 20, torch.Generator().manual_seed(0))
    assert len(em) > 50
    horizon = int(torch.ceil(em.end.max())) + 1
    rows = frame_rows(em, 0, horizon)
    total = torch.zeros(len(em), dtype=torch.float64).index_add_(0, rows.emitter, rows.photons.double())
    torch.testing.assert_close(total, em.flux.double() * em.on_time, rtol=1e-5, atol=1e-3)
    # an emitter is visible in exactly the frames its on-interval touches
    n_frames = torch.bincount(rows.emitter, minlength=len(em))
    expected = torch.ceil(em.end).long() - torch.floor(em.start).long()
    assert torch.equal(n_frames, expected)


def test_photons_per_frame_never_exceed_the_flux() -> None:
    cfg = SimulationConfig(frame_size=(32, 32), density=3.0)
    em = stationary_emitters(cfg, 10, torch.Generator().manual_seed(1))
    rows = frame_rows(em, 0, 10)
    assert torch.all(rows.photons <= em.flux[rows.emitter] * (1 + 1e-6))
    assert torch.all(rows.photons > 0)


def test_stationary_density_and_placement() -> None:
    cfg = SimulationConfig(frame_size=(40, 40), density=2.0, on_time=2.0, margin=3.0, psf="astig3d",
                           z_range=(-500, 300))
    em = stationary_emitters(cfg, 5, torch.Generator().manual_seed(2), n_movies=400)
    rows = frame_rows(em, 0, 5)
    per_frame = torch.bincount(rows.movie * 5 + rows.frame, minlength=400 * 5).double()
    # every frame, the first one included, shows the configured density (Poisson, 2000 frames)
    assert float(per_frame.mean()) == pytest.approx(cfg.emitters_per_frame, rel=0.02)
    for f in range(5):
        assert float(per_frame.view(400, 5)[:, f].mean()) == pytest.approx(cfg.emitters_per_frame, rel=0.05)
    (x0, x1), (y0, y1) = cfg.extent
    assert float(em.x.min()) >= x0 and float(em.x.max()) <= x1
    assert float(em.y.min()) >= y0 and float(em.y.max()) <= y1
    assert float(em.z.min()) >= -500 and float(em.z.max()) <= 300
    assert float(em.on_time.mean()) == pytest.approx(2.0, rel=0.05)
    assert float(em.flux.mean()) == pytest.approx(5000, rel=0.02)


def test_2d_emitters_have_z_zero() -> None:
    em = stationary_emitters(SimulationConfig(), 3, torch.Generator().manual_seed(3))
    assert torch.all(em.z == 0)


@pytest.mark.parametrize("block", [1, 7, 16, 50])
def test_long_movie_rows_do_not_depend_on_the_block_size(block: int) -> None:
    cfg = SimulationConfig(frame_size=(16, 16), density=5.0, on_time=4.0)
    n = 100

    def all_rows(step: int) -> torch.Tensor:
        proc = BlinkingProcess(cfg, seed=11)
        parts = []
        for t0 in range(0, n, step):
            _, r = proc.rows(t0, min(n, t0 + step))
            parts.append(torch.stack([r.frame.double(), r.x.double(), r.y.double(), r.photons.double()], 1))
        out = torch.cat(parts)
        return out[torch.argsort(out[:, 0], stable=True)]

    torch.testing.assert_close(all_rows(block), all_rows(n), rtol=0, atol=0)


def test_blinking_process_refuses_to_go_back() -> None:
    proc = BlinkingProcess(SimulationConfig(), seed=0)
    proc.rows(0, 10)
    proc.rows(10, 20)
    with pytest.raises(ValueError, match="in order"):
        proc.rows(5, 10)


def test_seeded_generators_are_reproducible_and_independent() -> None:
    a = torch.rand(5, generator=seeded_generator(1, 2, 3))
    assert torch.equal(a, torch.rand(5, generator=seeded_generator(1, 2, 3)))
    assert not torch.equal(a, torch.rand(5, generator=seeded_generator(1, 2, 4)))
    assert not torch.equal(a, torch.rand(5, generator=seeded_generator(2, 2, 3)))
