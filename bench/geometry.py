"""The headline hybrid MoE checkpoints at their released geometry (transformers'
default ``Qwen3_5MoeTextConfig()``: Qwen3.5/3.6-35B-A3B, 40 layers; ``Qwen3NextConfig()``:
Qwen3-Next-80B-A3B, 48 layers): the weight bytes one decode token reads -- every dense
tensor (GDN and gated-attention projections, norms, router, shared expert, LM head, one
embedding row) and the top-k routed experts -- and what that implies on Apple GPUs
(``metal_estimate``, an estimate, never a measurement).

The element counts follow the hybrid models' layers (``metalrt/models/hybrid.py``);
``tests/python/test_real_geometry.py`` checks them against the bytes the simulated
device's counters read in a decode step of the 4-layer float32 twin (equal to the byte).
The dispatches of a step are the twin's counted ones per layer (DISPATCHES_PER_LAYER,
GDN and full-attention layers alike) plus the embedding, final norm, LM head and argmax.

    python -m bench.geometry
"""
from __future__ import annotations

import json
import sys
from typing import Dict, Mapping

from . import metal_estimate

DISPATCHES_PER_LAYER = 22    # a decode step's, measured on the sim (test_real_geometry)
DISPATCHES_OUTSIDE_LAYERS = 4
# Bits a weight takes with its scales: MLX affine group 64 (f16 scale and bias per 64).
FORMATS = {"bf16": 16.0, "mlx_8bit_g64": 8.5, "mlx_4bit_g64": 4.5}


def decode_elements(config: Mapping) -> Dict[str, int]:
    """Weight elements one decode token reads in a hybrid MoE model of ``config`` (a
    Qwen3-Next / Qwen3.5-MoE text config dict): ``dense`` (all but the routed experts,
    the LM head included) and ``experts`` (num_experts_per_tok experts a layer)."""
    h = config["hidden_size"]
    hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    heads, kv, d = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    conv = 2 * hk * dk + hv * dv
    gdn = (h * conv + h * hv * dv + 2 * h * hv + hv * dv * h   # in_proj_qkv, z, b, a; out_proj
           + conv * config["linear_conv_kernel_dim"] + dv + 2 * hv)   # conv, norm, A_log, dt_bias
    full = h * 2 * heads * d + 2 * h * kv * d + heads * d * h + 2 * d   # q|gate, k, v, o; q/k norms
    shared = config["shared_expert_intermediate_size"]
    moe_dense = config["num_experts"] * h + 3 * h * shared + h   # router, shared expert and its gate
    layers = config["layer_types"][:config["num_hidden_layers"]]
    dense = sum(gdn if t == "linear_attention" else full for t in layers)
    dense += len(layers) * (moe_dense + 2 * h) + config["vocab_size"] * h + 2 * h   # norms, LM head, row
    experts = len(layers) * config["num_experts_per_tok"] * 3 * h * config["moe_intermediate_size"]
    return {"dense": dense, "experts": experts}


def report(config: Mapping) -> Dict:
    """Per weight format: the bytes a decode token reads and the Metal estimate per chip."""
    elements = decode_elements(config)
    dispatches = DISPATCHES_PER_LAYER * config["num_hidden_layers"] + DISPATCHES_OUTSIDE_LAYERS
    rows = {}
    for name, bits in FORMATS.items():
        step = {k: int(v * bits / 8) for k, v in elements.items()}
        rows[name] = {"bytes": step, "estimate": metal_estimate.estimate(sum(step.values()), dispatches)}
    return {"elements": elements, "dispatches": dispatches, "formats": rows}


def main() -> int:
    import transformers as tf

    for name, cls in (("Qwen3.5-35B-A3B", tf.Qwen3_5MoeTextConfig), ("Qwen3-Next-80B-A3B", tf.Qwen3NextConfig)):
        print(json.dumps({"model": name, **report(cls().to_dict())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
