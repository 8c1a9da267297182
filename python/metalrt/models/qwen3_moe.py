"""Qwen3-MoE (Qwen team 2025; transformers 5.24 ``qwen3_moe``): the Qwen3 dense layout
(q/k RMSNorm, plain ``w`` norms, full rotary) whose MLP is a sparse MoE block without
shared expert where the sparse-layer rule says (``mlp_only_layers``,
``decoder_sparse_step``), a dense SwiGLU MLP elsewhere; top-k weights renormalised iff
``norm_topk_prob`` (default False). The expert count is ``num_experts`` or
``num_local_experts`` (what transformers 5 writes)."""
from __future__ import annotations

from .layers import dense_mlp
from .config_values import config_bool, config_int
from .hybrid_config import sparse_layers
from .qwen3 import Qwen3Model
from .sparse_moe import SparseMoE
from .registry import family


@family
class Qwen3MoeModel(Qwen3Model):
    arch = "qwen3_moe"

    def feed_forward(self, config, w, prefix, index, hidden, bias):
        if sparse_layers(config, self.arch)[index]:
            return SparseMoE(config, w, prefix + "mlp.", hidden,
                             config_bool(config, "norm_topk_prob", self.arch, False), shared=False)
        return dense_mlp(w, prefix + "mlp.", hidden, config_int(config, "intermediate_size", self.arch))
