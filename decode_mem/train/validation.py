"""Validation on a fixed simulated set: loss and streaming detection metrics, nothing accumulated per sample."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from decode_mem.evaluate import StreamingMetrics
from decode_mem.io.table import EmitterTable
from decode_mem.model.loss import DecodeLoss
from decode_mem.model.precision import autocast
from decode_mem.postprocess import PostprocessConfig, output_to_emitters

Batch = dict[str, torch.Tensor]


def targets_to_table(em: torch.Tensor, mask: torch.Tensor, bg: torch.Tensor, first_frame: int) -> EmitterTable:
    """Padded targets of a batch (B, K, 4) -> ground-truth EmitterTable with frame = sample index."""
    b, n = torch.nonzero(mask.cpu(), as_tuple=True)
    rows = em.cpu()[b, n].double().numpy()
    ys, xs = np.clip(np.round(rows[:, 1]), 0, bg.shape[-2] - 1), np.clip(np.round(rows[:, 0]), 0, bg.shape[-1] - 1)
    return EmitterTable.from_arrays(
        frame=b.numpy() + first_frame, x=rows[:, 0], y=rows[:, 1], z=rows[:, 2], photons=rows[:, 3],
        bg=bg.cpu().numpy()[b.numpy(), ys.astype(int), xs.astype(int)],
    )


@torch.inference_mode()
def validate(net: nn.Module, val: Batch, loss_fn: DecodeLoss, *, batch_size: int, device: torch.device,
             amp_dtype: torch.dtype | None, pixel_size: float,
             postprocess: PostprocessConfig | None = None) -> dict[str, float]:
    """Mean loss terms and detection metrics (Jaccard, recall, precision, RMSE) over the validation set."""
    net.eval()
    metrics = StreamingMetrics(pixel_size=pixel_size)
    pp = postprocess or PostprocessConfig()
    n = len(val["frames"])
    sums = torch.zeros(4, dtype=torch.float64)
    for i in range(0, n, batch_size):
        part = {k: v[i:i + batch_size].to(device) for k, v in val.items()}
        with autocast(device, amp_dtype):
            output = net(part["frames"], read_var=part.get("read_var"),
                         **({"origin": part["origin"]} if "origin" in part else {}))
        terms = loss_fn(output, part["em"], part["mask"], part["bg"])
        sums += torch.stack([terms.total, terms.count, terms.loc, terms.bg]).double().cpu() * len(part["frames"])
        pred = output_to_emitters(output.float(), np.arange(i, i + len(part["frames"])), config=pp)
        metrics.update(pred, targets_to_table(part["em"], part["mask"], part["bg"], i))
    result = metrics.result()
    loss, count, loc, bg = (sums / max(n, 1)).tolist()
    return {"val_loss": loss, "val_count": count, "val_loc": loc, "val_bg": bg, "jaccard": result.jaccard,
            "recall": result.recall, "precision": result.precision, "rmse_lat": result.rmse_lat,
            "rmse_ax": result.rmse_ax}
