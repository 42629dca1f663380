"""The device memory one stack's run really used, for ``<stem>.json`` beside the planner's prediction.

``torch.cuda.max_memory_allocated`` counts the tensors PyTorch's allocator handed out — the same tensors the
planner's device prediction counts (cuDNN workspaces and the CUDA context are in neither). The peak is reset when
the stack starts; what was allocated then (the model's weights) is reported apart, so the peak above it is the
number to set beside the prediction. Nothing is read, and CUDA is never initialized, where CUDA is not in use.
"""

from __future__ import annotations

from typing import Any

from decode_mem.memory.readings import cuda_in_use

MiB = float(2**20)


class DevicePeak:
    """``start()`` when the stack starts, ``as_dict(plan)`` when it is done (None without CUDA in use)."""

    def __init__(self) -> None:
        self._index: int | None = None
        self._start = 0

    def start(self) -> DevicePeak:
        self._index = cuda_in_use()
        if self._index is not None:
            import torch

            torch.cuda.synchronize(self._index)
            torch.cuda.reset_peak_memory_stats(self._index)
            self._start = int(torch.cuda.memory_allocated(self._index))
        return self

    def as_dict(self, plan: dict[str, Any]) -> dict[str, Any] | None:
        """Measured peak (whole and above the start) beside ``plan``'s ``predicted_device_mib``, in MiB; None
        unless the run was planned for CUDA and CUDA was in use when it started."""
        if self._index is None or plan.get("device") != "cuda":
            return None
        import torch

        torch.cuda.synchronize(self._index)
        peak = int(torch.cuda.max_memory_allocated(self._index))
        predicted = plan.get("predicted_device_mib")
        above = (peak - self._start) / MiB
        return {"predicted_mib": predicted, "peak_mib": round(peak / MiB, 1),
                "allocated_at_start_mib": round(self._start / MiB, 1), "peak_above_start_mib": round(above, 1),
                "error": None if not above else round(predicted / above - 1, 3) if predicted else None,
                "measured_by": "torch.cuda.max_memory_allocated, reset when the stack started"}
