"""What the models read and the engine manages: the step's flattened batch (``step``),
the KV blocks and their free lists (``blocks``), and one cache object per layer
(``paged_kv``, ``recurrent``) gathered in a ``ModelCache``."""
from .blocks import BLOCK_SIZE, BlockAllocator, OutOfBlocksError, blocks_for
from .model_cache import ModelCache
from .paged_kv import PagedKVLayer, paged_kv_layers
from .recurrent import RecurrentLayer
from .step import (DECODE_CHUNK_TOKENS, ScheduledChunk, StepBuffers, StepInputs, build_step,
                   decode_row_passes)

__all__ = ["BLOCK_SIZE", "DECODE_CHUNK_TOKENS", "BlockAllocator", "ModelCache", "OutOfBlocksError", "PagedKVLayer",
           "RecurrentLayer", "ScheduledChunk", "StepBuffers", "StepInputs", "blocks_for",
           "build_step", "decode_row_passes", "paged_kv_layers"]
