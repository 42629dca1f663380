"""YAML pipelines: simulate -> train -> infer -> evaluate -> render, run with ``python -m decode_mem.pipeline``.

    from decode_mem.pipeline import run_pipeline
    produced = run_pipeline("pipelines/quickstart.yaml", out="runs/quickstart")   # {name: path}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decode_mem._lazy import lazy_exports

if TYPE_CHECKING:
    from decode_mem.pipeline.config import PipelineConfig, load_pipeline, pipeline_from_dict
    from decode_mem.pipeline.runner import run_pipeline

__all__ = ["PipelineConfig", "load_pipeline", "pipeline_from_dict", "run_pipeline"]
__getattr__, __dir__ = lazy_exports(__name__, {"PipelineConfig": "config", "load_pipeline": "config",
                                               "pipeline_from_dict": "config", "run_pipeline": "runner"})
