"""YAML pipelines: simulate -> train -> infer -> evaluate -> render, run with ``python -m decode_mem.pipeline``.

    from decode_mem.pipeline import run_pipeline
    produced = run_pipeline("pipelines/quickstart.yaml", out="runs/quickstart")   # {name: path}
"""

from decode_mem.pipeline.config import PipelineConfig, load_pipeline, pipeline_from_dict
from decode_mem.pipeline.runner import run_pipeline

__all__ = ["PipelineConfig", "load_pipeline", "pipeline_from_dict", "run_pipeline"]
