"""metalrt ops, one module per op family. Every op runs on the device of its Tensor
arguments; numpy arrays and lists are copied there first (to the CPU when no argument
is a Tensor). Results are Tensors on that device."""
from .attention import paged_attention
from .layout import embedding, qkv_split, reshape_and_cache
from .rope import rope_cos_sin_cache, rope_from_cache, rope_interleaved, rope_neox
from .selection import greedy_argmax

__all__ = [
    "embedding", "greedy_argmax", "paged_attention", "qkv_split", "reshape_and_cache",
    "rope_cos_sin_cache", "rope_from_cache", "rope_interleaved", "rope_neox",
]
