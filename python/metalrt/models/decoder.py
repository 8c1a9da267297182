"""The pre-norm decoder layer and the causal-LM wrapper of the decoder-only
architectures.

Every forward computation is a ``metalrt.ops`` call on the model's device; numpy is
used only to prepare step inputs.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import (BLOCK_SIZE, ModelCache, ScheduledChunk, StepInputs, blocks_for, build_step,
                     paged_kv_layers)
from ..cache.kv_types import device_default, parse_kv_type
from ..cache.window import window_blocks_per_sequence
from ..tensor import check_int_range, is_int
from .attention import Attention
from .config_values import config_int
from .layers import linear, residual_add
from .logits import as_float32
from .shape import DecoderShape


def scored_ids(token_ids: Sequence[int]) -> List[int]:
    """The ids of a ``logits`` call as ints; ValueError for an empty list or ids outside
    int32."""
    ids = [int(t) for t in token_ids]
    if not ids:
        raise ValueError("[logits] token_ids must not be empty")
    check_int_range(min(ids), max(ids), "int32", "[logits] token id")
    return ids


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

    A model may hold a range of the config's layers only (a pipeline stage,
    ``metalrt.pipeline``): a family that can build one sets ``layer_ranges`` and takes
    ``layers`` = (start, stop) in ``__init__`` (``stage_layers``); ``layers`` then holds
    layers start..stop-1 and ``layer_start``/``layer_stop`` say which.
    """

    arch = "model"
    layers: List[PreNormLayer]
    layer_ranges = False   # whether __init__ takes ``layers`` (a pipeline stage's range)
    records_plans = True   # its forward runs here: a Plan records it (runner.decode_plans)
    # LongRoPE's original context (``rope.long_rope_switch``): a sequence longer than
    # it rotates every token with the long factors (the engine recomputes one that
    # grows past it, ``runner.scheduler``); None for every other RoPE.
    rope_switch: Optional[int] = None

    def __init__(self, config: Mapping, device: str, dtype: str, shape: DecoderShape):
        self.config, self.device, self.dtype, self.shape = dict(config), device, dtype, shape
        self.num_kv_heads, self.head_dim, self.vocab_size = shape.kv_heads, shape.head_dim, shape.vocab
        self.context_length = config_int(config, "max_position_embeddings", self.arch, None)
        self.layer_start, self.layer_stop = 0, shape.num_layers
        self._cache: Optional[ModelCache] = None
        self.kv_type = parse_kv_type(None, shape.head_dim, device_default(device, dtype))

    def set_kv_type(self, kv_type) -> None:
        """The (key, value) types of the KV caches ``new_cache`` makes from now on:
        ``kv_types.parse_kv_type``'s argument (None: ``kv_types.device_default``, float16
        on Metal for a float32 model, else the model's dtype; "q8_0"; a pair such as
        ("q8_0", "float16")). ValueError for an unknown type or a quantized one where
        head_dim is not a multiple of 32."""
        self.kv_type = parse_kv_type(kv_type, self.head_dim, device_default(self.device, self.dtype))
        self._cache = None

    def stage_layers(self, layers: Optional[Tuple[int, int]]) -> range:
        """The indices of the config's layers this model builds: all of them for None,
        else ``layers`` = (start, stop), half-open, 0 <= start < stop <= num_hidden_layers
        (ValueError otherwise). A range that does not start at 0 needs no embedding
        (``first_stage`` False: its ``forward`` takes the previous stage's hidden
        states), one that does not end at the last layer no final norm and LM head
        (``last_stage`` False: its ``forward`` returns hidden states)."""
        total = self.shape.num_layers
        if layers is not None:
            if not (isinstance(layers, (tuple, list)) and len(layers) == 2
                    and all(is_int(i) for i in layers)):
                raise TypeError(f"[{self.arch}] layers must be a (start, stop) pair of ints, "
                                f"got {layers!r}")
            start, stop = (int(i) for i in layers)
            if not 0 <= start < stop <= total:
                raise ValueError(f"[{self.arch}] layers ({start}, {stop}) must satisfy 0 <= start "
                                 f"< stop <= {total} (the model's num_hidden_layers)")
            self.layer_start, self.layer_stop = start, stop
        return range(self.layer_start, self.layer_stop)

    @property
    def first_stage(self) -> bool:
        """Whether this model starts at layer 0 (it embeds the token ids)."""
        return self.layer_start == 0

    @property
    def last_stage(self) -> bool:
        """Whether this model ends at the last layer (it computes the logits)."""
        return self.layer_stop == self.shape.num_layers

    def check_last_stage(self, use: str) -> None:
        """ValueError unless this model computes logits (``last_stage``): a first or
        middle stage returns hidden states, which only a pipeline (``metalrt.pipeline``)
        passes on; ``use`` names what needed the logits."""
        if not self.last_stage:
            raise ValueError(f"[model] {use} needs logits: this model holds layers "
                             f"{self.layer_start}..{self.layer_stop - 1} of "
                             f"{self.shape.num_layers}, a pipeline stage that returns "
                             f"hidden states (only metalrt.pipeline drives it)")

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def embed(self, step: StepInputs):
        return self.embed_tokens(step.token_ids)

    def forward(self, step: StepInputs, cache: ModelCache, float32_logits: bool = True,
                hidden=None, final_hidden: bool = False):
        """Runs one step, writing its K/V (and state) into ``cache``. Returns the logits
        [step.num_logit_rows, vocab] on the device, float32 (cast from the model's dtype
        when it is float16/bfloat16), or in the model's dtype with ``float32_logits``
        False (the decode step's greedy_argmax reads those directly, one dispatch less);
        None when no row wants logits. ``final_hidden``: returns (logits, the final-normed
        hidden state of every row [T, hidden] in the model's dtype, what an MTP head
        reads: ``models/mtp.py``).

        A pipeline stage (``stage_layers``) after the first takes ``hidden``, the
        previous stage's hidden states [T, hidden_size] in the model's dtype on its
        device (updated in place: the residual stream), instead of embedding the ids; a
        stage before the last returns its hidden states [T, hidden_size] instead of
        logits. A step with ``decode_rows`` runs inside ``ops.decode_rows()``. ValueError
        for ``hidden`` given to a first stage or missing for another."""
        if (hidden is None) != self.first_stage:
            raise ValueError(f"[{self.arch}] a model holding layers {self.layer_start}.."
                             f"{self.layer_stop - 1} " + ("embeds the ids itself: no hidden states"
                                                        if self.first_stage else
                                                        "needs the previous stage's hidden states"))
        # Decode rows (ops.decode_rows): each row's bits as in a one-row decode step.
        with ops.decode_rows(step.decode_rows):
            h = self.embed(step) if hidden is None else hidden
            # A prefill (more tokens than sequences) commits each layer's work: its GEMMs and
            # attention are large, and the dispatch cap alone could keep one command buffer
            # on the GPU long enough for macOS to abort it ("Impacting Interactivity").
            # Decode steps stay batched at the cap.
            prefill = step.token_ids.shape[0] > step.seq_lens.shape[0]
            for layer, layer_cache in zip(self.layers, cache.layers):
                h = layer(h, step, layer_cache)
                if prefill:
                    metalrt.flush(self.device)
            if not self.last_stage:
                return h
            if final_hidden:
                # Every row normed (the MTP head reads them), then the sampled rows gathered:
                # the norm is per row, so the logits are those of the other order.
                h = self.final_norm(h)
                return self._head(h, step, float32_logits, normed=True), h
            return self._head(h, step, float32_logits)

    def _head(self, h, step: StepInputs, float32_logits: bool, normed: bool = False):
        if step.num_logit_rows == 0:
            return None
        if step.logit_rows is not None:
            h = ops.embedding(h, step.logit_rows)  # gather: only sampled rows reach the head
        logits = linear(self.lm_head)(h if normed else self.final_norm(h))
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
            expected = self.kv_type if isinstance(layer.attention, Attention) else self.dtype
            layer.attention.check_cache(layer_cache, expected, self.device,
                                        f"{self.arch} layer {i}")

    # The sequences a default window pool holds at a whole window and a full prompt
    # chunk each (``new_cache``), and the chunk it assumes (the engine's default).
    WINDOW_SEQUENCES, WINDOW_STEP_TOKENS = 8, 512

    def new_cache(self, num_blocks: int, window_blocks="auto") -> ModelCache:
        """A cache of ``num_blocks`` KV blocks for every attention layer; sliding-window
        layers (``attention.window`` > 0) get a pool of their own of ``window_blocks``
        blocks (``cache.window``: they keep only their window's blocks). "auto":
        ``WINDOW_SEQUENCES`` sequences at a whole window and a ``WINDOW_STEP_TOKENS``-token
        step each, at most ``num_blocks``; None: they share the blocks of the other
        layers and keep every position (one block table for all layers).

        Memory: ``16 * kv_heads`` rows of each side's ``kv_types.row_bytes`` (``kv_type``) a block, times ``num_blocks``
        for each global layer plus ``window_blocks`` for each sliding-window layer."""
        windows = [getattr(getattr(layer, "attention", None), "window", 0) for layer in self.layers]
        window = self._windowed()
        if not window or window_blocks is None:
            return ModelCache(paged_kv_layers(self.num_layers, num_blocks, self.num_kv_heads,
                                              self.head_dim, self.device, self.kv_type), num_blocks)
        if window_blocks == "auto":
            window_blocks = self.new_cache_window_blocks(num_blocks)
        if not is_int(window_blocks) or window_blocks < 1:
            raise ValueError(f"[{self.arch}] window_blocks must be an int >= 1, \"auto\" or None, "
                             f"got {window_blocks!r}")
        geometry = (self.num_kv_heads, self.head_dim, self.device, self.kv_type)
        pools = {0: iter(paged_kv_layers(windows.count(0), num_blocks, *geometry)),
                 window: iter(paged_kv_layers(len(windows) - windows.count(0), window_blocks,
                                              *geometry, window=window))}
        return ModelCache([next(pools[w]) for w in windows], num_blocks, window_blocks)

    def kv_cache(self, num_blocks: int, window_blocks="auto") -> ModelCache:
        """A cache of at least ``num_blocks`` blocks (``window_blocks`` as ``new_cache``)
        that no engine holds: the last one made is reused when its pools are as large
        and of the same kind (stale rows are never read: attention stops at seq_len)."""
        old = self._cache
        if old is None or old.in_use or old.num_blocks < num_blocks or \
                not self._same_window_pool(old, num_blocks, window_blocks):
            # (A model without windows takes new_cache's other defaults: hybrids' slots.)
            self._cache = self.new_cache(num_blocks, window_blocks) if self._windowed() \
                else self.new_cache(num_blocks)
        return self._cache

    def _same_window_pool(self, cache: ModelCache, num_blocks: int, window_blocks) -> bool:
        if window_blocks is None or not cache.window:
            return (window_blocks is None) == (not cache.window) or not self._windowed()
        if window_blocks == "auto":
            return cache.num_window_blocks == self.new_cache_window_blocks(num_blocks)
        return cache.num_window_blocks >= window_blocks

    def _windowed(self) -> int:
        return max((getattr(getattr(layer, "attention", None), "window", 0)
                    for layer in self.layers), default=0)

    def new_cache_window_blocks(self, num_blocks: int) -> int:
        """The window pool ``new_cache(num_blocks)`` gives sliding-window layers ("auto")."""
        return min(num_blocks, self.WINDOW_SEQUENCES * window_blocks_per_sequence(
            self._windowed(), num_blocks * BLOCK_SIZE, self.WINDOW_STEP_TOKENS))

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float32 [n_tokens, vocab]: the logits after every token of ``token_ids``,
        from one prefill into a fresh cache (for parity checks and scoring).
        Raises ValueError for an empty list, ids outside the vocabulary (or int32), or
        a model of a first or middle pipeline stage (``check_last_stage``)."""
        self.check_last_stage("logits()")
        ids = scored_ids(token_ids)
        cache = self.new_cache(blocks_for(len(ids)), window_blocks=None)   # one pass: one table
        step = build_step([ScheduledChunk(ids, 0, list(range(cache.num_blocks)), "all")],
                          self.device)
        return self.forward(step, cache).numpy()
