"""Inference: ``predict_stack`` / ``process_large_image`` on one stack or image, and ``run_inference`` over
files, folders and globs (``python -m decode_mem.infer``).

    for table in predict_stack(stack, load_model("model.pt")): ...           # one EmitterTable per block
    report = run_inference(InferConfig(inputs=("movies/",), out="locs", formats=("csv", "picasso")))

Per stack ``<stem>.csv`` (ThunderSTORM), ``<stem>.hdf5`` + ``.yaml`` (Picasso), ``<stem>.parquet`` and
``<stem>.json`` (summary, written last: it marks the stack as complete for ``resume``), streamed block by
block. ``workers``/``scheduler`` run frame ranges on dask.distributed with the same result. Names load lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.infer.config import FORMATS, InferConfig, find_stacks, stem_of
    from decode_mem.infer.predict import predict_stack, process_large_image
    from decode_mem.infer.ranges import FrameRange, split_frames
    from decode_mem.infer.results import InferReport, StackFailure, StackSummary
    from decode_mem.infer.runner import run_inference

__all__ = [
    "FORMATS", "FrameRange", "InferConfig", "InferReport", "StackFailure", "StackSummary", "find_stacks",
    "predict_stack", "process_large_image", "run_inference", "split_frames", "stem_of",
]
_exported, __dir__ = lazy_exports(__name__, {
    "FORMATS": "config", "InferConfig": "config", "find_stacks": "config", "stem_of": "config",
    "predict_stack": "predict", "process_large_image": "predict", "FrameRange": "ranges",
    "split_frames": "ranges", "InferReport": "results", "StackFailure": "results", "StackSummary": "results",
    "run_inference": "runner",
})


def __getattr__(name: str) -> Any:
    if name == "DEFAULT_MODEL":  # the old name of decode_mem.model.checkpoint.SHIPPED_MODEL, kept for scripts
        from decode_mem.model.checkpoint import SHIPPED_MODEL

        return SHIPPED_MODEL
    return _exported(name)
