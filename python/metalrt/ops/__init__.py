"""metalrt ops, one module per op family. Every op runs on the device of its Tensor
arguments; numpy arrays and lists are copied there first (to the CPU when no argument
is a Tensor). Index arguments (ids, positions, slots, lengths) given as lists of
Python ints become the op's integer dtype, range-checked; a numpy array must already
have it. Results are Tensors on that device. An op's math is written once, in the C++
header its docstring names (cpp/include/metalrt/ops.h, moe_ops.h, expert_ops.h,
linear_attention_ops.h); the docstring says what Python accepts and returns."""
from .attention import paged_attention
from .elementwise import add, cast, gelu, mul, relu, silu_and_mul
from .layout import embedding, qkv_split, reshape_and_cache
from .linear_attention import causal_conv1d, gated_delta_rule, gdn_gating
from .matmul import matmul, matmul_bt
from .quantized import dequantize, quantized_embedding, quantized_matmul_bt
from .fused import qkv_rope_cache, quantized_matmul_bt_add, quantized_matmul_bt_swiglu
from .fused import quantized_matmul_bt_concat
# Questions about how an op runs, not ops: outside __all__ (the list of ops).
from .attention import is_coarse_weight
from .fused import concat_is_one_gemv
from .decode_rows import decode_rows
from .normalization import layer_norm, rms_norm, softmax
from .rope import (qk_norm_rope, rope_cos_sin_cache, rope_from_cache, rope_interleaved,
                   rope_neox)
from .selection import greedy_argmax
from .gates import gated_query_split, gated_rms_norm, sigmoid_mul
from .moe import moe_bias_add, moe_combine, moe_matmul_bt, moe_router

__all__ = [
    "causal_conv1d", "gated_delta_rule", "gdn_gating",
    "add", "cast", "dequantize", "embedding", "gelu", "greedy_argmax", "layer_norm", "matmul",
    "matmul_bt", "mul", "paged_attention", "qk_norm_rope", "qkv_split", "quantized_embedding",
    "quantized_matmul_bt", "relu",
    "quantized_matmul_bt_add", "quantized_matmul_bt_swiglu", "qkv_rope_cache",
    "quantized_matmul_bt_concat",
    "reshape_and_cache", "rms_norm", "rope_cos_sin_cache", "rope_from_cache",
    "rope_interleaved", "rope_neox", "silu_and_mul", "softmax",
    "gated_query_split", "gated_rms_norm", "moe_bias_add", "moe_combine", "moe_matmul_bt", "moe_router", "sigmoid_mul",
]
