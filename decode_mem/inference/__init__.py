"""Batch inference over stacks: ``run_inference(InferConfig(inputs=..., out=...)) -> InferReport``.

The library behind ``python -m decode_mem.infer``: files, folders and globs of stacks in; per stack
``<stem>.csv`` (ThunderSTORM), ``<stem>.hdf5`` + ``.yaml`` (Picasso), ``<stem>.parquet`` and ``<stem>.json``
(summary, written last: it marks the stack as complete for ``resume``) out, streamed block by block.
``workers``/``scheduler`` run frame ranges on dask.distributed with the same result.

    report = run_inference(InferConfig(inputs=("movies/",), out="locs", formats=("csv", "picasso")))
    for s in report.stacks: print(s.line())
    for f in report.failures: print(f.line())
"""

from decode_mem.inference.config import DEFAULT_MODEL, FORMATS, InferConfig, find_stacks, stem_of
from decode_mem.inference.ranges import FrameRange, split_frames
from decode_mem.inference.runner import InferReport, StackFailure, StackSummary, run_inference

__all__ = [
    "DEFAULT_MODEL", "FORMATS", "FrameRange", "InferConfig", "InferReport", "StackFailure", "StackSummary",
    "find_stacks", "run_inference", "split_frames", "stem_of",
]
