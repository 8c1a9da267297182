"""The element types of the paged KV cache (llama.cpp's ``-ctk`` / ``-ctv``): float32,
float16, bfloat16, and GGML's block formats q8_0 and q4_0, K and V each of its own.

A float cache side is a tensor of its dtype ``[num_blocks, 16, kv_heads, head_dim]``. A
quantized side is a uint8 tensor ``[num_blocks, 16, kv_heads, row_bytes]``: each
(slot, kv head) row of head_dim features is head_dim / 32 blocks of 32 features (GGML's
block_q8_0 / block_q4_0, ggml-common.h):

* q8_0: 34 bytes, an f16 scale d then 32 int8 codes q; x = d * q;
* q4_0: 18 bytes, an f16 scale d then 16 bytes of 4-bit codes (byte i: feature i in the
  low nibble, feature i + 16 in the high one); x = d * (q - 8).

The cache write quantizes (GGML's reference quantizers, cpp/cpu/kv_blocks.h); attention
reads the blocks in place. Bytes per token and layer: 2 sides x kv_heads x row bytes
(``bytes_per_token``).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

KV_TYPES = ("float32", "float16", "bfloat16", "q8_0", "q4_0")
QUANT_BLOCK = 32   # features per quantized block
_ALIASES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_BLOCK_BYTES = {"q8_0": 2 + QUANT_BLOCK, "q4_0": 2 + QUANT_BLOCK // 2}
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

KvTypeArg = Union[None, str, Tuple[str, str]]


def _one(name, head_dim: int) -> str:
    if not isinstance(name, str):
        raise TypeError(f"[kv_type] a KV cache type must be a str, got {type(name).__name__}")
    canonical = _ALIASES.get(name, name)
    if canonical not in KV_TYPES:
        raise ValueError(f"[kv_type] unknown KV cache type {name!r}; expected one of "
                         f"{', '.join(KV_TYPES)} (or f32, f16, bf16)")
    if canonical in _BLOCK_BYTES and head_dim % QUANT_BLOCK:
        raise ValueError(f"[kv_type] {canonical} needs head_dim a multiple of {QUANT_BLOCK} "
                         f"(blocks of {QUANT_BLOCK} features), the model's is {head_dim}; "
                         "expected float32, float16 or bfloat16 for it")
    return canonical


def device_default(device: str, dtype: str) -> str:
    """The KV type a model's caches take unless told otherwise: float16 on the Metal
    device for a float32 model (half the K/V bytes a decode step reads; the attention
    kernels load the f16 rows and accumulate in f32), else the model's ``dtype``. The
    CPU keeps the model's dtype: its kernels convert an f16 cache a block at a time,
    which is slower than reading f32 (docs/cpu.md)."""
    return "float16" if device == "metal" and dtype == "float32" else dtype


def parse_kv_type(kv_type: KvTypeArg, head_dim: int, default: str) -> Tuple[str, str]:
    """(key type, value type) of a ``kv_type`` argument: None (both ``default``, the
    model's dtype), one name for both sides, or a (key, value) pair of names; names are
    ``KV_TYPES`` or f32 / f16 / bf16. ValueError for an unknown name or a quantized type
    with head_dim not a multiple of 32; TypeError for another kind of argument."""
    if kv_type is None:
        return default, default
    if isinstance(kv_type, str):
        kv_type = (kv_type, kv_type)
    if not isinstance(kv_type, (tuple, list)) or len(kv_type) != 2:
        raise TypeError("[kv_type] expected a KV cache type name or a (key, value) pair of "
                        f"names, got {kv_type!r}")
    return _one(kv_type[0], head_dim), _one(kv_type[1], head_dim)


KV_TYPE_HELP = ("the KV cache's element type: float32, float16, bfloat16, q8_0 or q4_0 (or "
                "f32, f16, bf16), or KEY,VALUE to type the keys and values apart (e.g. "
                "q8_0,f16; llama.cpp's -ctk / -ctv); default: float16 on the Metal device "
                "for a float32 model, else the model's dtype")


def from_text(text: str) -> KvTypeArg:
    """A ``--kv-type`` value: "q8_0" (both sides) or "KEY,VALUE" such as "q8_0,f16"."""
    parts = [part.strip() for part in text.split(",")]
    return parts[0] if len(parts) == 1 else tuple(parts)


def is_quantized(kv_type: str) -> bool:
    return kv_type in _BLOCK_BYTES


def row_bytes(kv_type: str, head_dim: int) -> int:
    """Bytes of one (slot, kv head) row of head_dim features."""
    if is_quantized(kv_type):
        return head_dim // QUANT_BLOCK * _BLOCK_BYTES[kv_type]
    return head_dim * _ELEMENT_BYTES[kv_type]


def storage(kv_type: str, head_dim: int) -> Tuple[int, str]:
    """(last dimension, tensor dtype) of a cache side of ``kv_type``."""
    if is_quantized(kv_type):
        return row_bytes(kv_type, head_dim), "uint8"
    return head_dim, kv_type


def bytes_per_token(kv_type: Tuple[str, str], kv_heads: int, head_dim: int,
                    layers: int = 1) -> int:
    """KV-cache bytes one token takes in ``layers`` attention layers: kv_heads rows of
    each side's row bytes (e.g. SmolLM2-135M, 30 layers x 3 kv heads x 64: float32
    46,080, float16 23,040, q8_0 12,240, q4_0 6,480)."""
    return layers * kv_heads * sum(row_bytes(t, head_dim) for t in kv_type)

