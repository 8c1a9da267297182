"""Pipeline parallelism across processes and machines: a model's layers split over Ray
actors (``load_pipeline``), driven by the runner's ``Engine`` as one model
(docs/serving.md, "Pipeline parallel")."""
from .model import PipelineModel, load_pipeline, require_ray, stage_ranges

__all__ = ["PipelineModel", "load_pipeline", "require_ray", "stage_ranges"]
