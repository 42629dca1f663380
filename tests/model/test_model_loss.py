"""decode_loss: count, GMM localization and background terms; fp32 under autocast; a tiny model learns."""

from __future__ import annotations

import math

import pytest
import torch

from decode_mem.errors import ConfigError
from decode_mem.model import CHANNEL_INDEX, DecodeLoss, DecodeNet, LossConfig, ModelConfig, decode_loss

PHOT, ZS, BGS = 10000.0, 1000.0, 200.0
C = CHANNEL_INDEX


def _loss(out, em, mask, bg, cfg=None, use_z=True):
    return decode_loss(out, em, mask, bg, cfg, photon_scale=PHOT, z_scale=ZS, bg_scale=BGS, use_z=use_z)


def _output(n: int, h: int, w: int, logit: float = -8.0) -> torch.Tensor:
    """A hand-made network output in physical units: p ~ 0 everywhere, mid-range values."""
    out = torch.zeros(n, 10, h, w)
    out[:, C["p_logit"]] = logit
    out[:, C["photons"]] = 2000.0
    out[:, C["sigma_photons"]] = 300.0
    out[:, C["sigma_x"]] = 0.3
    out[:, C["sigma_y"]] = 0.3
    out[:, C["sigma_z"]] = 50.0
    out[:, C["bg"]] = 100.0
    return out


def _one_emitter(x: float, y: float, z: float = 100.0, photons: float = 2000.0) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[[x, y, z, photons]]]), torch.tensor([[True]])


def test_loc_term_matches_a_brute_force_mixture() -> None:
    g = torch.Generator().manual_seed(0)
    h, w = 2, 3
    out = _output(1, h, w)
    out[:, C["p_logit"]] = torch.randn(1, h, w, generator=g)
    out[:, C["dx"]] = torch.rand(1, h, w, generator=g) - 0.5
    out[:, C["dy"]] = torch.rand(1, h, w, generator=g) - 0.5
    out[:, C["z"]] = 200 * torch.randn(1, h, w, generator=g)
    out[:, C["photons"]] = 1000 + 2000 * torch.rand(1, h, w, generator=g)
    for name in ("sigma_x", "sigma_y"):
        out[:, C[name]] = 0.2 + torch.rand(1, h, w, generator=g)
    em = torch.tensor([[[1.3, 0.6, 150.0, 1800.0], [0.1, 0.2, -40.0, 2500.0]]])
    mask = torch.tensor([[True, True]])
    terms = _loss(out, em, mask, torch.full((1, h, w), 100.0))

    o = out[0].double()
    p = torch.sigmoid(o[C["p_logit"]])
    expected = 0.0
    for x, y, z, ph in em[0].double().tolist():
        lik = 0.0
        for r in range(h):
            for c in range(w):
                comp = p[r, c] / p.sum()
                for u, mean, sd in (
                    (ph / PHOT, o[C["photons"], r, c] / PHOT, o[C["sigma_photons"], r, c] / PHOT),
                    (x, c + o[C["dx"], r, c], o[C["sigma_x"], r, c]),
                    (y, r + o[C["dy"], r, c], o[C["sigma_y"], r, c]),
                    (z / ZS, o[C["z"], r, c] / ZS, o[C["sigma_z"], r, c] / ZS),
                ):
                    comp = comp * torch.exp(-0.5 * ((u - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
                lik = lik + comp
        expected -= math.log(float(lik))
    assert terms.loc.item() == pytest.approx(expected, rel=1e-4)
    mu, var = float(p.sum()), float((p * (1 - p)).sum())
    count = 0.5 * (2 - mu) ** 2 / var + 0.5 * math.log(2 * math.pi * var)
    assert terms.count.item() == pytest.approx(count, rel=1e-5)


def test_count_loss_is_minimal_near_the_true_count() -> None:
    h = w = 16
    for n_true in (1, 4, 9):
        em = torch.zeros(1, 12, 4)
        mask = torch.zeros(1, 12, dtype=torch.bool)
        mask[0, :n_true] = True
        sums = torch.linspace(0.2, 15.0, 149)
        values = []
        for s in sums:
            out = _output(1, h, w, logit=float(torch.logit(s / (h * w))))
            values.append(_loss(out, em, mask, torch.full((1, h, w), 100.0)).count.item())
        best = float(sums[int(torch.tensor(values).argmin())])
        assert abs(best - n_true) < 1.0, (n_true, best)
        assert values[0] > min(values) and values[-1] > min(values)


def test_loc_term_prefers_mass_and_mean_at_the_true_emitter() -> None:
    em, mask = _one_emitter(x=7.2, y=4.7)  # column 7 + 0.2, row 5 - 0.3
    bg = torch.full((1, 16, 16), 100.0)

    def predict(row: int, col: int, dx: float, dy: float) -> float:
        out = _output(1, 16, 16)
        out[0, C["p_logit"], row, col] = 6.0
        out[0, C["dx"]], out[0, C["dy"]], out[0, C["z"]] = dx, dy, 100.0
        return _loss(out, em, mask, bg).loc.item()

    right = predict(5, 7, 0.2, -0.3)
    assert right < predict(7, 5, 0.2, -0.3)  # x is the column axis, y the row axis
    assert right < predict(5, 7, -0.4, 0.4)  # right pixel, wrong offsets
    assert right < predict(11, 2, 0.2, -0.3)  # mass elsewhere


def test_use_z_false_ignores_z() -> None:
    em, mask = _one_emitter(3.0, 4.0, z=300.0)
    bg = torch.full((1, 8, 8), 100.0)
    a, b = _output(1, 8, 8), _output(1, 8, 8)
    b[:, C["z"]] = -700.0
    loc_a, loc_b = _loss(a, em, mask, bg, use_z=False).loc.item(), _loss(b, em, mask, bg, use_z=False).loc.item()
    assert loc_a == pytest.approx(loc_b)
    assert _loss(a, em, mask, bg).loc.item() < _loss(b, em, mask, bg).loc.item()


def test_zero_emitter_frames_and_masked_garbage() -> None:
    out = _output(2, 12, 10, logit=-3.0).requires_grad_(True)
    bg = torch.full((2, 12, 10), 90.0)
    for em, mask in (
        (torch.zeros(2, 0, 4), torch.zeros(2, 0, dtype=torch.bool)),
        (torch.full((2, 5, 4), float("nan")), torch.zeros(2, 5, dtype=torch.bool)),
    ):
        terms = _loss(out, em, mask, bg)
        assert terms.loc.item() == 0.0
        # the default bg term: mean over pixels of errors in units of the pixel's Poisson noise, sqrt(90 + 1)
        assert math.isfinite(terms.count.item()) and terms.bg.item() == pytest.approx(10.0**2 / 91.0)
        scaled = _loss(out, em, mask, bg, LossConfig(bg_loss="scaled"))
        assert scaled.bg.item() == pytest.approx(120 * (10.0 / BGS) ** 2)
        (grad,) = torch.autograd.grad(terms.total, out)
        assert torch.isfinite(grad).all() and grad[:, C["p_logit"]].abs().sum() > 0
    # garbage in masked rows changes nothing
    em = torch.tensor([[[3.0, 4.0, 0.0, 2000.0], [float("nan"), 1e9, -1e9, float("inf")]]] * 2)
    mask = torch.tensor([[True, False], [True, False]])
    terms = _loss(out, em, mask, bg)
    ref = _loss(out, em[:, :1].clone(), mask[:, :1].clone(), bg)
    assert terms.total.item() == pytest.approx(ref.total.item())
    (grad,) = torch.autograd.grad(terms.total, out)
    assert torch.isfinite(grad).all()


def test_weights_and_terms() -> None:
    out = _output(1, 8, 8, logit=-2.0)
    em, mask = _one_emitter(2.0, 3.0)
    bg = torch.full((1, 8, 8), 80.0)
    base = _loss(out, em, mask, bg)
    weighted = _loss(out, em, mask, bg, LossConfig(count_weight=2.0, loc_weight=0.5, bg_weight=3.0))
    assert weighted.total.item() == pytest.approx(2 * base.count.item() + 0.5 * base.loc.item() + 3 * base.bg.item())
    assert base.total.item() == pytest.approx(base.count.item() + base.loc.item() + base.bg.item())
    assert set(base.as_floats()) == {"total", "count", "loc", "bg"}
    with pytest.raises(ValueError):
        _loss(out, em, mask, torch.zeros(1, 8, 9))


def _batch(h: int = 16, w: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two fixed frames with 2 emitters each (Gaussian spots on a flat background), as 3-frame windows."""
    em = torch.tensor([[[4.3, 5.8, 120.0, 3000.0], [11.6, 9.1, -250.0, 2000.0]],
                       [[8.0, 3.2, 0.0, 2500.0], [2.7, 12.4, 300.0, 4000.0]]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    bg = torch.tensor([90.0, 120.0]).view(2, 1, 1).expand(2, h, w).contiguous()
    rows = torch.arange(h, dtype=torch.float32).view(h, 1)
    cols = torch.arange(w, dtype=torch.float32).view(1, w)
    frames = bg.clone()
    for i in range(2):
        for x, y, _, ph in em[i].tolist():
            frames[i] += ph / (2 * math.pi * 1.3**2) * torch.exp(-((cols - x) ** 2 + (rows - y) ** 2) / (2 * 1.3**2))
    return frames[:, None].expand(2, 3, h, w).contiguous(), em, mask, bg


def test_loss_fp32_under_bf16_autocast() -> None:
    torch.manual_seed(0)
    mc = ModelConfig.tiny(photon_scale=PHOT, z_scale=ZS, bg_scale=BGS)
    net = DecodeNet(mc)
    loss_fn = DecodeLoss(LossConfig(), mc)
    x, em, mask, bg = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
        terms = loss_fn(out, em, mask, bg)
        terms_bf16_in = loss_fn(out.bfloat16(), em, mask, bg)
    assert out.dtype == torch.float32
    for t in (terms, terms_bf16_in):
        assert all(v.dtype == torch.float32 and math.isfinite(v.item()) for v in (t.total, t.count, t.loc, t.bg))
    terms.total.backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


def test_a_few_adam_steps_reduce_the_loss() -> None:
    torch.manual_seed(0)
    mc = ModelConfig.tiny(photon_scale=PHOT, z_scale=ZS, bg_scale=BGS, input_offset=100.0, input_scale=200.0)
    net = DecodeNet(mc).train()
    loss_fn = DecodeLoss(LossConfig(), mc)
    x, em, mask, bg = _batch()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    history = []
    for _ in range(30):
        terms = loss_fn(net(x), em, mask, bg)
        opt.zero_grad(set_to_none=True)
        terms.total.backward()
        opt.step()
        history.append(terms.as_floats())
    assert all(math.isfinite(h["total"]) for h in history)
    def late(key: str) -> float:  # the GMM loss is jumpy step to step: average the last steps
        return sum(h[key] for h in history[-5:]) / 5

    assert late("total") < 0.7 * history[0]["total"]
    assert late("count") < history[0]["count"]
    assert late("loc") < history[0]["loc"]


def test_loss_config_round_trip_and_validation() -> None:
    cfg = LossConfig(count_weight=2.0)
    assert LossConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="nope"):
        LossConfig.from_dict({"nope": 1})
    for bad in ({"count_weight": -1.0}, {"count_var_min": 0.0}, {"bg_weight": float("inf")}):
        with pytest.raises(ConfigError):
            LossConfig(**bad)
