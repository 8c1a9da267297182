"""The hybrid decoder of Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (transformers 5.24
``Qwen3NextDecoderLayer``): pre-norm layers whose mixer is either Gated-DeltaNet linear
attention (``gated_deltanet``) or gated full attention (``gated_attention``) by
``layer_types``, followed by a dense SwiGLU MLP or a sparse MoE block; every RMSNorm
but the GDN output norm is zero-centred (``(1 + w)``, ``norms``). Each full-attention
layer's cache is a ``cache.PagedKVLayer``, each GDN layer's a ``cache.RecurrentLayer``
(its per-request state)."""
from __future__ import annotations

from typing import List, Mapping

from ..cache import ModelCache, RecurrentLayer, paged_kv_layers
from .attention import Rope
from .rope import partial_rotary_dim, rope_frequencies
from .config_values import config_bool, config_float, config_int
from .decoder import CausalLM, PreNormLayer
from .gated_attention import GatedAttention
from .gated_deltanet import GatedDeltaNet, GdnShape
from .hybrid_config import FULL, layer_types, text_config
from .layers import Embedding, dense_mlp
from .norms import UnitOffsetRMSNorm
from .shape import DecoderShape
from .sparse_moe import SparseMoE
from .weights import Weights

# Request state slots of a cache made without an explicit count (batch_generate and
# the server): concurrent requests beyond it wait for a slot.
DEFAULT_STATE_SLOTS = 16


class HybridModel(CausalLM):
    """Subclasses set ``arch`` and say per layer whether the MLP is sparse
    (``sparse_layers``), whether the top-k routing weights are renormalised
    (``renormalize``) and may rewrite the checkpoint's tensors into the Qwen3.5 layout
    (``qwen3_5_layout``)."""

    arch = "hybrid"

    def sparse_layers(self, config: Mapping) -> List[bool]:
        raise NotImplementedError

    def renormalize(self, config: Mapping) -> bool:
        return True

    def qwen3_5_layout(self, weights: Mapping, prefix: str, types, shape: GdnShape) -> Mapping:
        return weights

    def __init__(self, config: Mapping, weights: Mapping, device: str, dtype: str = "float32"):
        arch = self.arch
        text, prefix = text_config(config)
        shape = DecoderShape.from_config(text, arch)
        hidden, heads, kv_heads, head_dim = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        vocab = shape.vocab
        eps = config_float(text, "rms_norm_eps", arch, 1e-6)
        super().__init__(text, device, dtype, shape)
        self.layer_types = layer_types(text, arch)
        self.gdn = GdnShape.from_config(text, arch)
        sparse = self.sparse_layers(text)
        w = Weights(self.qwen3_5_layout(weights, prefix, self.layer_types, self.gdn), device,
                    dtype, arch)
        self.rope = Rope(rope_frequencies(text, partial_rotary_dim(text, head_dim, arch, 0.25),
                                          arch), True, device)
        if self.rope.scaled:
            raise ValueError(f"[{arch}] RoPE scaling is not supported")
        self.embed_tokens = Embedding.load(w, prefix + "embed_tokens.weight", vocab, hidden)
        self.layers = []
        for i, kind in enumerate(self.layer_types):
            p = f"{prefix}layers.{i}."
            mixer = (GatedAttention(w, p, hidden, heads, kv_heads, head_dim, eps, self.rope)
                     if kind == FULL else GatedDeltaNet(w, p, self.gdn, hidden, eps))
            mlp = (SparseMoE(text, w, p + "mlp.", hidden, self.renormalize(text), shared=True)
                   if sparse[i] else
                   dense_mlp(w, p + "mlp.", hidden, config_int(text, "intermediate_size", arch)))
            self.layers.append(PreNormLayer(
                UnitOffsetRMSNorm(w, p + "input_layernorm.weight", hidden, eps), mixer,
                UnitOffsetRMSNorm(w, p + "post_attention_layernorm.weight", hidden, eps), mlp))
        self.final_norm = UnitOffsetRMSNorm(w, prefix + "norm.weight", hidden, eps)
        tied = config_bool(text, "tie_word_embeddings", arch, False)
        self.lm_head = (self.embed_tokens.table if tied
                        else w.matrix("lm_head.weight", (vocab, hidden)))

    def new_cache(self, num_blocks: int, num_slots: int = DEFAULT_STATE_SLOTS,
                  window_blocks=None) -> ModelCache:
        """KV blocks for the full-attention layers and ``num_slots`` request slots of
        recurrent state for the GDN layers. ``window_blocks``: taken as ``CausalLM``'s and
        unused (no layer has a sliding window)."""
        g = self.gdn
        kv = iter(paged_kv_layers(self.layer_types.count(FULL), num_blocks, self.num_kv_heads,
                                  self.head_dim, self.device, self.kv_type))
        return ModelCache([next(kv) if kind == FULL else
                           RecurrentLayer(num_slots, g.conv_dim, g.conv_width, g.v_heads, g.k_dim,
                                          g.v_dim, self.device, self.dtype)
                           for kind in self.layer_types], num_blocks)
