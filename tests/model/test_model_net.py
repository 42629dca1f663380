"""DecodeNet: output contract, padding convention, receptive field, tile exactness, parts, checkpointing."""

from __future__ import annotations

import math

import pytest
import torch
from numerics import SAME_MATH, channel_error

from decode_mem.errors import ConfigError
from decode_mem.model import (
    CHANNEL_INDEX,
    OUTPUT_CHANNELS,
    DecodeNet,
    ModelConfig,
    measure_receptive_field,
)


@pytest.fixture(scope="module")
def tiny() -> DecodeNet:
    torch.manual_seed(0)
    return DecodeNet(ModelConfig.tiny()).eval()


def _scaled(net: DecodeNet, out: torch.Tensor) -> torch.Tensor:
    """Output divided by each channel's unit (photon_scale, z_scale, ...): O(1) values for absolute tolerances."""
    return out / torch.tensor(net.config.output_scales()).view(1, -1, 1, 1)


def _maxdiff(net: DecodeNet, a: torch.Tensor, b: torch.Tensor) -> float:
    """The error relative to each output channel's scale (``numerics``: holds on any CPU)."""
    return channel_error(a, b)


def _frames(n: int, h: int, w: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 100.0 + 400.0 * torch.rand(n, 3, h, w, generator=g)


def test_channel_contract() -> None:
    assert OUTPUT_CHANNELS == (
        "p_logit", "photons", "dx", "dy", "z", "sigma_photons", "sigma_x", "sigma_y", "sigma_z", "bg",
    )
    assert [CHANNEL_INDEX[c] for c in OUTPUT_CHANNELS] == list(range(10))


@pytest.mark.parametrize("hw", [(37, 53), (1, 1), (3, 2), (4, 7), (16, 16)])
def test_output_shape_and_ranges(tiny: DecodeNet, hw: tuple[int, int]) -> None:
    cfg = tiny.config
    with torch.no_grad():
        out = tiny(_frames(2, *hw))
    assert out.shape == (2, 10, *hw) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    c = CHANNEL_INDEX
    p = torch.sigmoid(out[:, c["p_logit"]])
    assert ((p > 0) & (p < 1)).all()
    assert (out[:, c["dx"]].abs() < 1).all() and (out[:, c["dy"]].abs() < 1).all()
    assert (out[:, c["z"]].abs() < cfg.z_scale).all()
    assert ((out[:, c["photons"]] >= 0) & (out[:, c["photons"]] <= cfg.photon_scale)).all()
    assert ((out[:, c["bg"]] >= 0) & (out[:, c["bg"]] <= cfg.bg_scale)).all()
    for name in ("sigma_photons", "sigma_x", "sigma_y", "sigma_z"):
        assert (out[:, c[name]] > 0).all()
    sx = out[:, c["sigma_x"]]
    assert (sx >= cfg.sigma_eps).all() and (sx <= cfg.sigma_max + cfg.sigma_eps).all()


def test_integer_input_and_bad_shapes(tiny: DecodeNet) -> None:
    x = _frames(1, 9, 11).to(torch.int32)
    with torch.no_grad():
        assert torch.equal(tiny(x), tiny(x.float()))
    with pytest.raises(ValueError):
        tiny(torch.zeros(1, 2, 8, 8))
    with pytest.raises(ValueError):
        tiny.frame_features(torch.zeros(1, 1, 10, 8))


def test_padding_convention_is_zero_in_normalized_units(tiny: DecodeNet) -> None:
    """forward pads the *normalized* frame with zeros in every channel, at the bottom and right: the frame
    channel reads as a pixel at the frame's level, the read-noise and level channels as 0."""
    x = _frames(1, 37, 53)
    ph, pw = tiny.padded_shape(37, 53)
    assert (ph, pw) == (40, 56)
    with torch.no_grad():
        norm = tiny.normalize(x)  # (1, 3, C, 37, 53)
        padded = torch.zeros((1, 3, norm.shape[2], ph, pw))
        padded[..., :37, :53] = norm
        assert torch.equal(tiny.pad(norm), padded)
        by_hand = tiny.temporal(*[tiny.frame_features(padded[:, i]) for i in range(3)])[..., :37, :53]
        assert _maxdiff(tiny, tiny(x), by_hand) <= SAME_MATH
        # the level channel is what tells frames apart that differ only by their background level
        norm_bright = tiny.normalize(x + 500.0)
        assert (norm_bright[:, :, 2] > norm[:, :, 2]).all()


def test_linear_input_pads_with_the_offset() -> None:
    """Format-1 models ('linear'): the padding is input_offset photons, one input channel."""
    net = DecodeNet(ModelConfig.tiny(input_transform="linear", input_offset=100.0, input_scale=100.0)).eval()
    x = _frames(1, 37, 53)
    x_padded = torch.full((1, 3, 40, 56), 100.0)
    x_padded[..., :37, :53] = x
    with torch.no_grad():
        assert net.normalize(x).shape == (1, 3, 1, 37, 53)
        assert _maxdiff(net, net(x), net(x_padded)[..., :37, :53]) <= SAME_MATH


def test_read_noise_channel() -> None:
    """The second input channel carries log1p(read variance) / 3: a map changes the output where it differs."""
    net = DecodeNet(ModelConfig.tiny()).eval()
    x = _frames(1, 100, 100)
    var = torch.full((1, 100, 100), 2.0)
    hot = var.clone()
    hot[0, 5, 7] = 400.0
    with torch.no_grad():
        norm = net.normalize(x, read_var=hot[:, None])
        assert norm.shape == (1, 3, 3, 100, 100)
        torch.testing.assert_close(norm[0, :, 1, 5, 7], torch.full((3,), math.log1p(400.0) / 3))
        diff = (net(x, read_var=hot) - net(x, read_var=var)).abs().amax(dim=1)[0]
    assert diff[5, 7] > 0 and diff[90, 90] == 0  # only inside the receptive field of the hot pixel


def test_forward_is_composition_of_parts(tiny: DecodeNet) -> None:
    x = _frames(2, 21, 30)
    with torch.no_grad():
        whole = tiny(x)
        x_norm = tiny.pad(tiny.normalize(x))
        feats = [tiny.frame_features(x_norm[:, i]) for i in range(3)]
        parts = tiny.temporal(*feats)[..., :21, :30]
    assert _maxdiff(tiny, whole, parts) <= SAME_MATH


def test_frame_features_computed_once_and_reused(tiny: DecodeNet) -> None:
    """A stack's features computed once per frame and reused by the 3 windows == forward per window."""
    g = torch.Generator().manual_seed(3)
    stack = 100.0 + 300.0 * torch.rand(6, 20, 24, generator=g)  # (T, H, W)
    t_max = stack.shape[0] - 1
    windows = torch.stack([stack[[max(t - 1, 0), t, min(t + 1, t_max)]] for t in range(t_max + 1)])
    with torch.no_grad():
        per_window = tiny(windows)
        feats = tiny.frame_features(tiny.pad(tiny.normalize(stack)))  # once per frame
        reused = torch.cat(
            [tiny.temporal(feats[[max(t - 1, 0)]], feats[[t]], feats[[min(t + 1, t_max)]]) for t in range(t_max + 1)]
        )
    assert _maxdiff(tiny, per_window, reused) <= SAME_MATH  # batch composition only changes rounding


def test_receptive_field_values() -> None:
    tiny, default = DecodeNet(ModelConfig.tiny()), DecodeNet(ModelConfig())
    assert tiny.downsample_factor == default.downsample_factor == 4
    rf = tiny.receptive_field()
    assert rf == default.receptive_field()  # architecture, not width, sets it
    assert 0 < tiny.frame_unet_receptive_field() < rf
    assert rf <= tiny.frame_unet_receptive_field() + tiny.temporal_receptive_field()
    # regression values; frame U-Net of depth 2, by hand: 2 + 1 + 4 + 2 + 8 + 4 + 2 = 23 px
    assert tiny.frame_unet_receptive_field() == 23
    assert measure_receptive_field(ModelConfig.tiny(depth=1)) == 18 < rf == 44


def test_receptive_field_measurement_ignores_the_callers_context() -> None:
    from decode_mem.model import net as net_module

    net_module._measure_cached.cache_clear()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert measure_receptive_field(ModelConfig.tiny(depth=1)) == 18
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random stream is untouched


@pytest.mark.parametrize("frame", [0, 1, 2])
def test_receptive_field_bounds_an_impulse(tiny: DecodeNet, frame: int) -> None:
    rf = tiny.receptive_field()
    size = 2 * rf + 24
    x = _frames(1, size, size, seed=5)
    level = tiny.frame_level(x)  # held fixed: the impulse must not move the frames' levels
    with torch.no_grad():
        base = tiny(x, level=level)
        reached = 0
        for a in range(tiny.downsample_factor):  # every position modulo the down-sampling factor
            r0, c0 = size // 2 + a, size // 2 - a
            x2 = x.clone()
            x2[0, frame, r0, c0] += 1000.0
            changed = (tiny(x2, level=level) != base).any(dim=1)[0]
            rows = torch.arange(size)[:, None].expand(size, size)
            cols = torch.arange(size)[None, :].expand(size, size)
            dist = torch.maximum((rows - r0).abs(), (cols - c0).abs())
            assert not changed[dist > rf].any(), "an output beyond the receptive field changed"
            assert changed[dist <= 2].all(), "outputs next to the impulse did not change"
            reached = max(reached, int(dist[changed].max()))
    assert reached >= rf - tiny.downsample_factor  # the measured radius is not a loose bound


def _tile_output(net: DecodeNet, x_norm: torch.Tensor, r0: int, r1: int, c0: int, c1: int) -> torch.Tensor:
    tile = x_norm[..., r0:r1, c0:c1]
    feats = [net.frame_features(tile[:, i]) for i in range(3)]
    return net.temporal(*feats)


@pytest.mark.parametrize("interior", [(48, 64, 52, 72), (0, 16, 0, 12), (136, 152, 160, 172)])
def test_tile_with_halo_reproduces_whole_frame(tiny: DecodeNet, interior: tuple[int, int, int, int]) -> None:
    h, w = 150, 170  # not multiples of the factor: the frame is padded to 152 x 172
    f = tiny.downsample_factor
    halo = -(-tiny.receptive_field() // f) * f
    x = _frames(1, h, w, seed=7)
    with torch.no_grad():
        whole = tiny(x)
        x_norm = tiny.pad(tiny.normalize(x))
        ph, pw = x_norm.shape[-2:]
        i0, i1, j0, j1 = interior
        r0, r1, c0, c1 = max(i0 - halo, 0), min(i1 + halo, ph), max(j0 - halo, 0), min(j1 + halo, pw)
        assert all(v % f == 0 for v in (r0, r1, c0, c1))
        tiled = _tile_output(tiny, x_norm, r0, r1, c0, c1)[..., i0 - r0 : i1 - r0, j0 - c0 : j1 - c0]
        ref = tiny.temporal(*[tiny.frame_features(x_norm[:, i]) for i in range(3)])[..., i0:i1, j0:j1]
        assert _maxdiff(tiny, tiled, ref) <= SAME_MATH
        hi, wi = min(i1, h) - i0, min(j1, w) - j0  # the same pixels of forward's cropped output
        assert _maxdiff(tiny, tiled[..., :hi, :wi], whole[..., i0 : i0 + hi, j0 : j0 + wi]) <= SAME_MATH
        # control: a halo smaller than the receptive field is not exact
        if i0 >= 16 and i1 + 16 <= ph:
            small = _tile_output(tiny, x_norm, i0 - 8, i1 + 8, c0, c1)[..., 8:-8, j0 - c0 : j1 - c0]
            assert _maxdiff(tiny, small, ref) > 100 * SAME_MATH


def test_gradient_checkpointing_is_equivalent() -> None:
    torch.manual_seed(0)
    plain = DecodeNet(ModelConfig.tiny()).train()
    ckpt = DecodeNet(ModelConfig.tiny(grad_checkpointing=True)).train()
    ckpt.load_state_dict(plain.state_dict())
    calls = {"n": 0}

    def count(*_: object) -> None:
        calls["n"] += 1

    ckpt.frame_unet.register_forward_pre_hook(count)  # (recomputation stops early: no post-hook)
    x = _frames(2, 16, 20)
    outs, grads = [], []
    for net in (plain, ckpt):
        out = net(x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out.detach())
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
    assert calls["n"] == 2  # forward + recomputation in backward: checkpointing was active
    assert _maxdiff(plain, outs[0], outs[1]) <= SAME_MATH
    # recomputation repeats the same math: gradients agree to rounding, relative to the largest gradient
    assert float((grads[0] - grads[1]).abs().max()) <= SAME_MATH * float(grads[0].abs().max())
    with torch.no_grad():
        ckpt(x)
    ckpt.eval()
    ckpt(x)
    assert calls["n"] == 4  # no recomputation without grad or in eval mode


def test_model_config_round_trip_and_validation() -> None:
    cfg = ModelConfig.tiny(photon_scale=5000.0, grad_checkpointing=True)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert ModelConfig.from_dict({}) == ModelConfig()
    assert ModelConfig().depth == 2 and ModelConfig().features == 48 and ModelConfig().activation == "elu"
    with pytest.raises(ConfigError, match="bogus"):
        ModelConfig.from_dict({"bogus": 1})
    for bad in ({"depth": -1}, {"features": 0}, {"depth": 2.0}, {"activation": "tanhh"}, {"upsample": "bilinear"},
                {"photon_scale": 0.0}, {"z_scale": float("nan")}, {"grad_checkpointing": "yes"}):
        with pytest.raises(ConfigError):
            ModelConfig(**bad)


@pytest.mark.gpu
def test_cuda_matches_cpu_and_loss_runs_under_bf16_autocast() -> None:
    from decode_mem.model import DecodeLoss

    torch.manual_seed(0)
    net = DecodeNet(ModelConfig.tiny()).eval()
    cuda_net = DecodeNet(ModelConfig.tiny()).cuda().eval()
    cuda_net.load_state_dict(net.state_dict())
    x = _frames(2, 44, 52)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            assert _maxdiff(net, net(x), cuda_net(x.cuda()).cpu()) <= 1e-4
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    cuda_net.train()
    em = torch.tensor([[[3.0, 4.0, 0.0, 2000.0]], [[10.0, 20.0, 100.0, 3000.0]]], device="cuda")
    mask = torch.ones(2, 1, dtype=torch.bool, device="cuda")
    bg = torch.full((2, 44, 52), 100.0, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        terms = DecodeLoss(model_config=cuda_net.config)(cuda_net(x.cuda()), em, mask, bg)
    assert terms.total.dtype == torch.float32 and torch.isfinite(terms.total)
    terms.total.backward()
    assert all(torch.isfinite(p.grad).all() for p in cuda_net.parameters())


@pytest.mark.parametrize("activation", ["elu", "relu", "leaky_relu"])
def test_fast_forward_is_the_textbook_network(activation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The network runs its activations in place and its 1x1 up-sampling conv before the nearest up-sampling
    (both for speed); outputs and gradients equal the textbook order with out-of-place activations."""
    from torch import nn

    from decode_mem.model import unet

    torch.manual_seed(0)
    fast = DecodeNet(ModelConfig.tiny(activation=activation)).train()
    textbook = DecodeNet(ModelConfig.tiny(activation=activation)).train()
    textbook.load_state_dict(fast.state_dict())
    acts = [m for m in textbook.modules() if hasattr(m, "inplace")]
    assert acts and all(m.inplace for m in acts)  # the fast form is the default
    for m in acts:
        m.inplace = False
    x = _frames(2, 16, 20)
    results = []
    for net in (fast, textbook):
        if net is textbook:
            monkeypatch.setattr(unet.Upsample, "forward", lambda self, v: self.conv(
                nn.functional.interpolate(v, scale_factor=2.0, mode="nearest")))
        out = net(x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append((out.detach(), torch.cat([p.grad.flatten() for p in net.parameters()])))
    (out_fast, grad_fast), (out_ref, grad_ref) = results
    assert _maxdiff(fast, out_fast, out_ref) <= SAME_MATH
    assert float((grad_fast - grad_ref).abs().max()) <= SAME_MATH * float(grad_ref.abs().max())


def test_transpose_upsampling_variant_runs() -> None:
    net = DecodeNet(ModelConfig.tiny(upsample="transpose", activation="relu")).eval()
    with torch.no_grad():
        assert net(_frames(1, 13, 9)).shape == (1, 10, 13, 9)
    assert net.receptive_field() > 0


def test_a_2d_model_outputs_zero_z() -> None:
    net = DecodeNet(ModelConfig.tiny(use_z=False)).eval()
    with torch.inference_mode():
        out = net(torch.rand(2, 3, 12, 12) * 200)
    assert torch.count_nonzero(out[:, 4]) == 0


def test_photon_outputs_are_not_quantized_under_bf16() -> None:
    """The heads' last conv runs in fp32: under bf16 autocast the shipped model's photon counts at the
    detections of the sample take as many values as there are detections; through a logit rounded to bf16
    (the conv's output before) a few hundred photons apart collapse onto one value."""
    import tifffile

    from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model

    if not SHIPPED_MODEL.is_file():
        pytest.skip("the shipped model is not there")
    net = load_model().net
    frames = torch.from_numpy(tifffile.imread(SHIPPED_MODEL.parents[1] / "sample" / "stack.tif")[:6, :48, :48]
                              .astype("float32"))
    cam = load_model().camera
    x = torch.stack([frames[i:i + 3] for i in range(4)])
    x = (x - cam.baseline) / cam.adu_per_photon
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x)
    with torch.no_grad():
        ref = net(x)
    spots = torch.sigmoid(ref[:, CHANNEL_INDEX["p_logit"]]) > 0.3
    photons = out[:, CHANNEL_INDEX["photons"]][spots]
    assert out.dtype == torch.float32 and spots.sum() >= 10
    assert photons.unique().numel() == photons.numel()
    scale = net.config.photon_scale
    np_ref = ref[:, CHANNEL_INDEX["photons"]][spots]
    assert ((photons - np_ref).abs() < 0.05 * np_ref + 20).all()  # bf16 features, fp32 last layer
    # what a bf16 logit gave: the same photons through a logit rounded to bf16
    rounded = torch.sigmoid(torch.logit(np_ref / scale).bfloat16().float()) * scale
    assert rounded.unique().numel() < np_ref.numel()


def test_photon_sigma_floor_is_in_photons_and_legacy_checkpoints_keep_theirs(tmp_path) -> None:
    """A saturated sigma head gives the floor ``sigma_photons_eps`` (10 photons), not sigma_eps * photon_scale
    (300 photons at 30 000, above the whole error of a dim spot); a checkpoint saved before the field
    existed keeps the floor its weights were trained against."""
    from decode_mem.io.camera import Camera
    from decode_mem.model.checkpoint import load_checkpoint, load_model, save_checkpoint

    cfg = ModelConfig.tiny(photon_scale=30000.0)
    net = DecodeNet(cfg).eval()
    with torch.no_grad():
        net.heads["sigma"][-1].bias.fill_(-40.0)  # sigmoid ~ 0: the floor
        out = net(_frames(1, 8, 8))
    sig = out[0, CHANNEL_INDEX["sigma_photons"]]
    assert torch.allclose(sig, torch.full_like(sig, cfg.sigma_photons_eps)) and cfg.sigma_photons_eps == 10.0
    assert torch.allclose(out[0, CHANNEL_INDEX["sigma_x"]], torch.full_like(sig, cfg.sigma_eps))
    path = save_checkpoint(tmp_path / "m.pt", net=net, camera=Camera.emccd(), simulation={}, step=0)
    assert load_model(path).net.config == cfg  # a new checkpoint keeps its floor
    state = torch.load(path, weights_only=True)
    del state["model_config"]["sigma_photons_eps"]  # as saved before the field existed
    torch.save(state, tmp_path / "old.pt")
    assert load_checkpoint(tmp_path / "old.pt")["model_config"]["sigma_photons_eps"] == 300.0
    old = load_model(tmp_path / "old.pt").net
    with torch.no_grad():
        sig_old = old(_frames(1, 8, 8))[0, CHANNEL_INDEX["sigma_photons"]]
    assert torch.allclose(sig_old, torch.full_like(sig_old, 300.0))


def test_shipped_model_photon_sigma_is_below_the_legacy_floor_on_dim_spots() -> None:
    """The shipped model was recalibrated without the legacy 300-photon floor (pipelines/
    recalibrate_photon_sigma_2d.yaml): at its detections of dim spots (150–500 photons, low background, the
    shot noise ~20 photons) it reports photon sigmas well below 300, and above its 10-photon floor."""
    from decode_mem.model.checkpoint import SHIPPED_MODEL, load_model
    from decode_mem.simulate.config import SimulationConfig
    from decode_mem.simulate.dataset import simulate_samples

    if not SHIPPED_MODEL.is_file():
        pytest.skip("the shipped model is not there")
    net = load_model().net
    assert net.config.sigma_photons_eps == 10.0
    sim = SimulationConfig(frame_size=(32, 32), density=1.0, photons_dist="loguniform", photons_range=(150.0, 500.0),
                           bg=20.0, psf_sigma=1.0)
    windows = simulate_samples(sim, 8, seed=3)
    with torch.no_grad():
        out = net(windows["frames"], read_var=windows["read_var"])
    spots = torch.sigmoid(out[:, CHANNEL_INDEX["p_logit"]]) > 0.5
    sigma = out[:, CHANNEL_INDEX["sigma_photons"]][spots]
    assert spots.sum() >= 10
    assert float(sigma.median()) < 150.0 and float(sigma.max()) < 300.0 and float(sigma.min()) > 10.0


@pytest.mark.parametrize("use_z, bg_param", [(False, "sqrt"), (True, "linear"), (True, "sqrt")])
def test_activate_in_place_gives_the_same_numbers_bit_for_bit(use_z, bg_param) -> None:
    """The int8 engine activates its corrected output in place (half the time): the same floats as the out-of-place
    activation training and every other engine use, and over the tensor it was given."""
    net = DecodeNet(ModelConfig.tiny(use_z=use_z, bg_param=bg_param)).eval()
    raw = torch.randn(3, 10, 17, 19, generator=torch.Generator().manual_seed(1)) * 4.0
    expected = net.activate(raw.clone())
    given = raw.clone()
    got = net.activate(given, in_place=True)
    assert got.data_ptr() == given.data_ptr() and torch.equal(got, expected)
    needs_grad = raw.clone().requires_grad_()
    assert torch.equal(net.activate(needs_grad, in_place=True), expected) and torch.equal(needs_grad, raw)  # kept


def test_the_activation_names_a_config_is_checked_against_are_the_networks() -> None:
    """``ModelConfig`` checks an activation's name without torch (``config.ACTIVATION_NAMES``): the names the
    U-Net makes modules of (``unet.ACTIVATIONS``)."""
    from decode_mem.model import config, unet

    assert tuple(unet.ACTIVATIONS) == config.ACTIVATION_NAMES and unet.UPSAMPLE_MODES is config.UPSAMPLE_MODES
