"""The engine: scheduler, prefix cache, sampling, stop conditions, generation loop,
over a model and its ``metalrt.cache.ModelCache``."""
from .engine import Engine, EngineStats, TokenOutput
from .prefix_cache import BlockPool
from .request import Request
from .sampling import Sampler, SamplingParams
from .scheduler import Scheduler

__all__ = ["BlockPool", "Engine", "EngineStats", "Request", "Sampler", "SamplingParams",
           "Scheduler", "TokenOutput"]
