"""The pre-norm decoder layer and the causal-LM wrapper of the decoder-only
architectures.

Every forward computation is a ``metalrt.ops`` call on the model's device; numpy is
used only to prepare step inputs.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

import metalrt
from metalrt import ops

from ..cache import ModelCache, ScheduledChunk, StepInputs, blocks_for, build_step, paged_kv_layers
from ..tensor import check_int_range
from .config_values import config_int
from .layers import linear, residual_add
from .logits import as_float32
from .shape import DecoderShape


class PreNormLayer:
    """h += attn(norm1(h)); h += mlp(norm2(h)) (the GPT-2 / Llama residual order). The
    residual stream h is updated in place: it is the forward pass's own tensor.
    ``attention`` is the layer's token mixer, called as ``(x, step, layer_cache)``
    (``Attention``, ``GatedDeltaNet``)."""

    def __init__(self, attn_norm, attention, mlp_norm, mlp):
        self.attn_norm, self.attention, self.mlp_norm, self.mlp = attn_norm, attention, mlp_norm, mlp

    def __call__(self, h, step: StepInputs, layer_cache):
        h = residual_add(self.attention, h, self.attn_norm(h), step, layer_cache)
        return residual_add(self.mlp, h, self.mlp_norm(h))


class CausalLM:
    """A decoder-only language model on one device.

    Subclasses set ``arch`` and build ``embed_tokens`` (an ``Embedding``), ``layers``,
    ``final_norm`` and ``lm_head`` (a float Tensor or QuantizedTensor [vocab, hidden])
    in ``__init__(config, weights, device, dtype)``, passing the config's
    ``DecoderShape`` here; ``embed`` may be overridden (OPT
    adds learned positions). ``context_length``: the config's
    ``max_position_embeddings`` (None when it has none; ValueError when it is not a
    positive integer).
    """

    arch = "model"
    layers: List[PreNormLayer]

    def __init__(self, config: Mapping, device: str, dtype: str, shape: DecoderShape):
        self.config, self.device, self.dtype, self.shape = dict(config), device, dtype, shape
        self.num_kv_heads, self.head_dim, self.vocab_size = shape.kv_heads, shape.head_dim, shape.vocab
        self.context_length = config_int(config, "max_position_embeddings", self.arch, None)
        self._cache: Optional[ModelCache] = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def embed(self, step: StepInputs):
        return self.embed_tokens(step.token_ids)

    def forward(self, step: StepInputs, cache: ModelCache, float32_logits: bool = True):
        """Runs one step, writing its K/V (and state) into ``cache``. Returns the logits
        [step.num_logit_rows, vocab] on the device, float32 (cast from the model's dtype
        when it is float16/bfloat16), or in the model's dtype with ``float32_logits``
        False (the decode step's greedy_argmax reads those directly, one dispatch less);
        None when no row wants logits."""
        h = self.embed(step)
        # A prefill (more tokens than sequences) commits each layer's work: its GEMMs and
        # attention are large, and the dispatch cap alone could keep one command buffer
        # on the GPU long enough for macOS to abort it ("Impacting Interactivity").
        # Decode steps stay batched at the cap.
        prefill = step.token_ids.shape[0] > step.seq_lens.shape[0]
        for layer, layer_cache in zip(self.layers, cache.layers):
            h = layer(h, step, layer_cache)
            if prefill:
                metalrt.flush(self.device)
        if step.num_logit_rows == 0:
            return None
        if step.logit_rows is not None:
            h = ops.embedding(h, step.logit_rows)  # gather: only sampled rows reach the head
        logits = linear(self.lm_head)(self.final_norm(h))
        return as_float32(logits) if float32_logits else logits

    def check_cache(self, cache: ModelCache) -> None:
        """Raises unless ``cache`` holds, for every layer, the cache its mixer reads:
        ValueError for another layer count or geometry, dtype or device (a cache made for
        another model, which would run silently wrong where the shapes fit), TypeError for
        another kind of layer cache (a hybrid's state pools for a KV layer)."""
        if not isinstance(cache, ModelCache):
            raise TypeError(f"[{self.arch}] expected a ModelCache (model.new_cache), got "
                            f"{type(cache).__name__}")
        if len(cache.layers) != self.num_layers:
            raise ValueError(f"[{self.arch}] the cache has {len(cache.layers)} layers, the model "
                             f"{self.num_layers} (a cache made for another model?)")
        for i, (layer, layer_cache) in enumerate(zip(self.layers, cache.layers)):
            layer.attention.check_cache(layer_cache, self.dtype, self.device,
                                        f"{self.arch} layer {i}")

    def new_cache(self, num_blocks: int) -> ModelCache:
        """A cache of ``num_blocks`` KV blocks for every layer (all attention layers)."""
        return ModelCache(paged_kv_layers(self.num_layers, num_blocks, self.num_kv_heads,
                                          self.head_dim, self.device, self.dtype), num_blocks)

    def kv_cache(self, num_blocks: int) -> ModelCache:
        """A cache of at least ``num_blocks`` blocks that no engine holds: the last one
        made is reused (stale rows are never read: attention stops at seq_len)."""
        if self._cache is None or self._cache.in_use or self._cache.num_blocks < num_blocks:
            self._cache = self.new_cache(num_blocks)
        return self._cache

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float32 [n_tokens, vocab]: the logits after every token of ``token_ids``,
        from one prefill into a fresh cache (for parity checks and scoring).
        Raises ValueError for an empty list or ids outside the vocabulary (or int32)."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("[logits] token_ids must not be empty")
        check_int_range(min(ids), max(ids), "int32", "[logits] token id")
        cache = self.new_cache(blocks_for(len(ids)))
        step = build_step([ScheduledChunk(ids, 0, list(range(cache.num_blocks)), "all")],
                          self.device)
        return self.forward(step, cache).numpy()
