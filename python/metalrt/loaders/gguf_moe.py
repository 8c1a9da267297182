"""The sparse-MoE part of GGUF files (llama.cpp's ``qwen3moe``; names in the ``gguf``
package's ``MODEL_TENSORS[MODEL_ARCH.QWEN3MOE]``): the expert hyper-parameters in the
metadata and the router and stacked expert tensors of every layer.

``ffn_gate_inp`` is the router ``mlp.gate`` [E, H] (llama.cpp keeps it float).
``ffn_{gate,up,down}_exps`` hold all experts of a layer as one 3-D tensor, numpy shape
[E, I, H] (gate, up) and [E, H, I] (down); they are exposed under metalrt's stacked
names ``mlp.experts.{gate,up,down}_proj.weight`` (not transformers' per-expert names),
quantized ones as one ``QuantizedWeight`` of [E * rows, cols] (expert e's rows
e * rows .. e * rows + rows - 1, the layout ``ops.moe_matmul_bt`` reads)."""
from __future__ import annotations

from typing import Any, Callable

# GGUF layer tensor -> Hugging Face-style name (``.weight`` is appended).
LAYER_NAMES = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}


def moe_config(arch: str, count: Callable[..., int], meta: dict) -> dict[str, Any]:
    """Hugging Face config keys of the experts; ``count(key, default)`` reads a positive
    integer metadata value. llama.cpp's qwen3moe graph always renormalises the top-k
    weights (``expert_weights_norm`` when the file says otherwise)."""
    return {
        "num_experts": count(f"{arch}.expert_count"),
        "num_experts_per_tok": count(f"{arch}.expert_used_count"),
        "moe_intermediate_size": count(f"{arch}.expert_feed_forward_length"),
        "norm_topk_prob": bool(meta.get(f"{arch}.expert_weights_norm", True)),
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


def moe_layer_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """GGUF layer tensor name -> numpy shape of the MoE block (replacing ffn_gate/up/down)."""
    h, e, i = config["hidden_size"], config["num_experts"], config["moe_intermediate_size"]
    return {"ffn_gate_inp.weight": (e, h), "ffn_gate_exps.weight": (e, i, h),
            "ffn_up_exps.weight": (e, i, h), "ffn_down_exps.weight": (e, h, i)}
