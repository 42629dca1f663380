"""One optimizer step: accumulation equals the large batch, chunking covers every target once, AMP is finite."""

from __future__ import annotations

import torch

from decode_mem.model.loss import DecodeLoss
from decode_mem.model.net import DecodeNet, ModelConfig
from decode_mem.simulate.config import SimulationConfig
from decode_mem.train.chunking import chunk_batch, count_crops
from decode_mem.train.data import SimulatedBatches
from decode_mem.train.step import make_scaler, train_step

CPU = torch.device("cpu")


def _setup(seed: int = 0) -> tuple[DecodeNet, DecodeLoss, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    net = DecodeNet(ModelConfig.tiny())
    # plain SGD: the parameter update is exactly -lr * gradient
    return net, DecodeLoss(model_config=net.config), torch.optim.SGD(net.parameters(), lr=0.1)


def _batch(n: int = 4, size: int = 16) -> dict[str, torch.Tensor]:
    return SimulatedBatches(SimulationConfig(frame_size=(size, size), density=2.0), n, 1, seed=3).batch(0, 0)


def test_accumulating_k_micro_batches_equals_one_k_times_larger_batch() -> None:
    batch = _batch(4)
    halves = [{k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}]
    net_a, loss_a, opt_a = _setup()
    net_b, loss_b, opt_b = _setup()
    start = [p.detach().clone() for p in net_a.parameters()]
    kw = dict(device=CPU, amp_dtype=None, grad_clip=None)
    train_step(net_a, loss_a, [batch], 1, opt_a, make_scaler(CPU, None), **kw)
    train_step(net_b, loss_b, halves, 2, opt_b, make_scaler(CPU, None), **kw)
    for (name, a), b, p0 in zip(net_a.named_parameters(), net_b.parameters(), start, strict=True):
        # the updates are -lr * gradient; only the summation order differs (float32 rounding of the sums)
        step_a, step_b = a.detach() - p0, b.detach() - p0
        torch.testing.assert_close(step_b, step_a, rtol=0, atol=1e-5 * float(step_a.abs().max()) + 1e-12, msg=name)


def test_train_step_rejects_a_wrong_number_of_micro_batches() -> None:
    net, loss, opt = _setup()
    try:
        train_step(net, loss, [_batch(2)], 2, opt, make_scaler(CPU, None), device=CPU, amp_dtype=None, grad_clip=1.0)
    except RuntimeError as e:
        assert "expected 2 micro-batches" in str(e)
    else:
        raise AssertionError("no error for a short accumulation")


def test_loss_decreases_on_a_tiny_fixed_problem() -> None:
    torch.manual_seed(0)
    net = DecodeNet(ModelConfig.tiny())
    loss = DecodeLoss(model_config=net.config)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    batch = _batch(2)
    losses = [train_step(net, loss, [batch], 1, opt, make_scaler(CPU, None), device=CPU, amp_dtype=None,
                         grad_clip=None)["loss"] for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0], losses


def test_bf16_autocast_on_cpu_runs_and_stays_finite() -> None:
    net, loss, _ = _setup()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for _ in range(3):
        row = train_step(net, loss, [_batch(2)], 1, opt, make_scaler(CPU, torch.bfloat16), device=CPU,
                         amp_dtype=torch.bfloat16, grad_clip=1.0)
        assert all(torch.isfinite(torch.tensor(v)) for v in row.values()), row
    assert all(torch.isfinite(p).all() for p in net.parameters())


def test_chunking_covers_the_frame_and_counts_every_emitter_once() -> None:
    batch = _batch(3, size=40)
    crops = list(chunk_batch(batch, 16))
    assert len(crops) == count_crops((40, 40), 16) == 9
    assert max(c["frames"].shape[-1] for c in crops) == 16
    assert sum(int(c["mask"].sum()) for c in crops) == int(batch["mask"].sum())
    # every kept emitter lies inside its crop, in crop coordinates
    for c in crops:
        xy = c["em"][..., :2][c["mask"]]
        h, w = c["frames"].shape[-2:]
        assert ((xy[:, 0] >= -0.5) & (xy[:, 0] < w - 0.5) & (xy[:, 1] >= -0.5) & (xy[:, 1] < h - 0.5)).all()
    assert next(iter(chunk_batch(batch, None))) is batch


def test_crops_pack_their_targets_and_keep_the_loss() -> None:
    from decode_mem.train.chunking import packed

    batch = _batch(3, size=40)
    net, loss_fn, _ = _setup()
    for crop in chunk_batch(batch, 16):
        # the crop's slots: as many as its busiest frame has emitters, all used ones first
        counts = crop["mask"].sum(dim=1)
        assert crop["mask"].shape[1] == int(counts.max()) < batch["mask"].shape[1]
        assert all(bool(row[:n].all()) for row, n in zip(crop["mask"], counts.tolist(), strict=True))
    # packing moves slots only: the loss of packed targets equals that of the unpacked ones
    em = batch["em"].clone()
    mask = batch["mask"].clone()
    mask[:, ::2] = False  # holes before used slots
    em_p, mask_p = packed(em, mask)
    assert mask_p.shape[1] == int(mask.sum(dim=1).max())
    with torch.no_grad():
        out = net(batch["frames"], read_var=batch["read_var"])
        a = loss_fn(out, em, mask, batch["bg"]).total
        b = loss_fn(out, em_p, mask_p, batch["bg"]).total
    torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_auto_chunk_size_is_the_largest_crop_whose_plan_fits() -> None:
    from dataclasses import replace

    from decode_mem.footprint.choose import PLAN_HEADROOM
    from decode_mem.train.config import TrainConfig
    from decode_mem.train.sizing import plan_for, resolve_chunk_size

    net = DecodeNet(ModelConfig.tiny())
    cfg = TrainConfig(use_chunking=True, crop_size="auto", batch_size=8, val_size=1,  # the step, not validation,
                      simulation=SimulationConfig(frame_size=(256, 256), density=0.2))  # sets the peak here
    need = {c: plan_for(cfg, net, CPU, c, baseline_bytes=0).host_bytes for c in (256, 128, 64)}
    assert need[64] < need[128] < need[256]
    for chunk in (64, 128):  # a budget just above a crop's plan and the headroom chooses that crop
        limited = replace(cfg, memory_limit=int(need[chunk] / (1 - PLAN_HEADROOM)) + 2)
        assert resolve_chunk_size(limited, net, CPU, baseline_bytes=0) == chunk
    # the plan alone fitting is not enough: automatic sizes keep PLAN_HEADROOM free for the planner's error
    assert resolve_chunk_size(replace(cfg, memory_limit=need[128] + 1), net, CPU, baseline_bytes=0) == 64
    assert resolve_chunk_size(replace(cfg, memory_limit="1TiB"), net, CPU, baseline_bytes=0) == 256
    assert resolve_chunk_size(replace(cfg, use_chunking=False), net, CPU) is None
