"""The model runner: paged KV cache, scheduler, sampling, generation loop."""
from .batch import BLOCK_SIZE, ScheduledChunk, StepBuffers, StepInputs, build_step
from .engine import Engine, EngineStats, TokenOutput
from .kv_cache import BlockAllocator, OutOfBlocksError, PagedKVCache, blocks_for
from .prefix_cache import BlockPool
from .request import Request
from .sampling import Sampler, SamplingParams
from .scheduler import Scheduler

__all__ = ["BLOCK_SIZE", "BlockAllocator", "BlockPool", "Engine", "EngineStats",
           "OutOfBlocksError", "PagedKVCache", "Request", "Sampler", "SamplingParams", "ScheduledChunk", "Scheduler",
           "StepBuffers", "StepInputs", "TokenOutput", "blocks_for", "build_step"]
