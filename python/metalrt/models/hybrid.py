"""The hybrid decoder of Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (transformers 5.24
``Qwen3NextDecoderLayer``): pre-norm layers whose mixer is either Gated-DeltaNet linear
attention (``gated_deltanet``) or gated full attention (``gated_attention``) by
``layer_types``, followed by a dense SwiGLU MLP or a sparse MoE block; every RMSNorm
but the GDN output norm is zero-centred (``(1 + w)``, ``norms``). Each full-attention
layer's cache is a ``cache.PagedKVLayer``, each GDN layer's a ``cache.RecurrentLayer``
(its per-request state)."""
from __future__ import annotations

from typing import List, Mapping, Optional

from ..cache import ModelCache, RecurrentLayer, paged_kv_layers
from .attention import Rope
from .rope import partial_rotary_dim, rope_frequencies
from .config_values import config_bool, config_float, config_int
from .decoder import CausalLM, PreNormLayer
from .gated_attention import GatedAttention
from .gated_deltanet import GatedDeltaNet, GdnShape
from .hybrid_config import FULL, layer_types, text_config
from .layers import Embedding, dense_mlp
from .mtp import MtpHead, has_mtp
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
        hidden, head_dim, vocab = shape.hidden, shape.head_dim, shape.vocab
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
        self.layers = [self._layer(w, f"{prefix}layers.{i}.", kind, sparse[i], text, eps)
                       for i, kind in enumerate(self.layer_types)]
        self.final_norm = UnitOffsetRMSNorm(w, prefix + "norm.weight", hidden, eps)
        tied = config_bool(text, "tie_word_embeddings", arch, False)
        self.lm_head = (self.embed_tokens.table if tied
                        else w.matrix("lm_head.weight", (vocab, hidden)))
        # The MTP head is built when speculation first asks for it (``mtp``): most runs
        # never read its weights.
        self._mtp_source = (w, text, sparse[0], eps) if has_mtp(w.tensors) else None
        self._mtp = None

    def _layer(self, w: Weights, p: str, kind: str, sparse: bool, text: Mapping,
               eps: float) -> PreNormLayer:
        """The decoder layer whose tensors are ``p`` + ...: its mixer of ``kind``, a
        sparse MoE block or a dense MLP."""
        s = self.shape
        mixer = (GatedAttention(w, p, s.hidden, s.heads, s.kv_heads, s.head_dim, eps, self.rope)
                 if kind == FULL else GatedDeltaNet(w, p, self.gdn, s.hidden, eps))
        mlp = (SparseMoE(text, w, p + "mlp.", s.hidden, self.renormalize(text), shared=True)
               if sparse else
               dense_mlp(w, p + "mlp.", s.hidden, config_int(text, "intermediate_size", self.arch)))
        return PreNormLayer(UnitOffsetRMSNorm(w, p + "input_layernorm.weight", s.hidden, eps), mixer,
                            UnitOffsetRMSNorm(w, p + "post_attention_layernorm.weight", s.hidden,
                                              eps), mlp)

    @property
    def mtp(self) -> Optional[MtpHead]:
        """The checkpoint's multi-token-prediction head (``models/mtp.py``), loaded on
        first use; None when the checkpoint has no ``mtp.*`` tensors."""
        if self._mtp is None and self._mtp_source is not None:
            w, text, sparse, eps = self._mtp_source
            self._mtp = MtpHead(self, w, text, eps,
                                lambda weights, p: self._layer(weights, p, FULL, sparse, text, eps))
        return self._mtp

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
