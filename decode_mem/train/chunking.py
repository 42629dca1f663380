"""Chunked training: cut large frames into aligned crops so device memory is set by the crop, not the frame."""

from __future__ import annotations

from collections.abc import Iterator

import torch

Batch = dict[str, torch.Tensor]
SPATIAL = ("frames", "bg", "read_var")  # cut into crops; other entries (e.g. each frame's level) pass unchanged


def crop_origins(size: int, chunk: int) -> list[int]:
    """Origins of crops of length ``chunk`` tiling ``[0, size)``; the last crop may be shorter."""
    return list(range(0, size, chunk)) if size > chunk else [0]


def chunk_batch(batch: Batch, chunk_size: int | None) -> Iterator[Batch]:
    """Yield the crops of a batch (frames, em, mask, bg, read_var, level) that together cover the whole frame.

    Emitters are re-expressed in crop coordinates and kept only in the crop whose pixels contain them,
    so every target counts exactly once; a crop's targets are packed to the front of its slots and the slots
    no frame of the crop uses are dropped (the loss compares every slot with every pixel: a crop holds a
    crop's worth of emitters, not a frame's). Per-frame entries (``level``: computed on the whole frame before
    chunking, so that a crop is normalized as part of its frame) are passed to every crop; ``origin`` (a window's
    place in the field of a PSF that changes across it) becomes the crop's. With
    ``chunk_size=None`` (or a frame no larger than the chunk) the batch itself is the only crop.
    """
    h, w = batch["frames"].shape[-2:]
    if chunk_size is None or (h <= chunk_size and w <= chunk_size):
        yield batch
        return
    em, mask = batch["em"], batch["mask"]
    for y0 in crop_origins(h, chunk_size):
        for x0 in crop_origins(w, chunk_size):
            y1, x1 = min(y0 + chunk_size, h), min(x0 + chunk_size, w)
            shifted = em.clone()
            shifted[..., 0] -= x0
            shifted[..., 1] -= y0
            # pixel j covers [j - 0.5, j + 0.5): the crop owns x in [-0.5, x1 - x0 - 0.5)
            inside = ((shifted[..., 0] >= -0.5) & (shifted[..., 0] < x1 - x0 - 0.5)
                      & (shifted[..., 1] >= -0.5) & (shifted[..., 1] < y1 - y0 - 0.5))
            crop = {key: value[..., y0:y1, x0:x1] if key in SPATIAL else value for key, value in batch.items()}
            crop["em"], crop["mask"] = packed(shifted, mask & inside)
            if "origin" in batch:  # a PSF that changes across the field: the crop's own place in it
                crop["origin"] = batch["origin"] + torch.tensor([y0, x0], dtype=batch["origin"].dtype,
                                                                device=batch["origin"].device)
            yield crop


def packed(em: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets (B, K, d) with their mask (B, K): each frame's used slots moved to the front (in order), the
    slots no frame uses cut off. The loss, a sum over used slots, is unchanged."""
    order = torch.sort((~mask).to(torch.uint8), dim=1, stable=True).indices
    k = int(mask.sum(dim=1).max()) if mask.numel() else 0
    order = order[:, :k]
    return torch.gather(em, 1, order[..., None].expand(-1, -1, em.shape[-1])), torch.gather(mask, 1, order)


def count_crops(frame_size: tuple[int, int], chunk_size: int | None) -> int:
    h, w = frame_size
    if chunk_size is None or (h <= chunk_size and w <= chunk_size):
        return 1
    return len(crop_origins(h, chunk_size)) * len(crop_origins(w, chunk_size))
