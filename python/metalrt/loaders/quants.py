"""Dequantization of GGML tensor data to float32 (vectorised numpy, one pass per block
field, no Python loop over blocks).

Block formats (ggml's ``ggml-common.h``, the GGUF specification):
* Q8_0: 32 weights per 34-byte block — f16 scale ``d``, 32 int8 ``q``; ``w = d·q``.
* Q4_1: 32 weights per 20-byte block — f16 scale ``d``, f16 minimum ``m``, 16 bytes of
  nibbles where byte ``j`` holds weight ``j`` in its low and weight ``j + 16`` in its
  high nibble; ``w = d·q + m``.
* F32, F16, BF16 (the top 16 bits of an IEEE float32).
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T

_BLOCK = 32


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values given as their uint16 bit patterns → float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return blocks[:, 2:].view(np.int8) * d


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    dm = blocks[:, :4].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[:, 4:]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1)
    out = np.multiply(q, dm[:, :1], dtype=np.float32)
    out += dm[:, 1:]
    return out


# type → (bytes per block of 32, block decoder)
_BLOCK_DECODERS = {T.Q8_0: (2 + _BLOCK, _q8_0), T.Q4_1: (4 + _BLOCK // 2, _q4_1)}
SUPPORTED_TYPES = (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_1)


def dequantize(raw: np.ndarray, ggml_type: T, shape: tuple[int, ...]) -> np.ndarray:
    """``raw``: the tensor's bytes (uint8, C order); returns float32 of ``shape``
    (numpy order, the last dimension contiguous). F32 data is returned as a (read-only)
    view of ``raw`` without a copy."""
    flat = raw.reshape(-1)
    if ggml_type == T.F32:
        out = flat.view(np.float32)
    elif ggml_type == T.F16:
        out = flat.view(np.float16).astype(np.float32)
    elif ggml_type == T.BF16:
        out = bf16_to_float32(flat.view(np.uint16))
    elif ggml_type in _BLOCK_DECODERS:
        block_bytes, decode = _BLOCK_DECODERS[ggml_type]
        out = decode(flat.reshape(-1, block_bytes))
    else:
        raise ValueError(f"[dequantize] GGML type {ggml_type.name} is not supported; supported "
                         f"types are {', '.join(t.name for t in SUPPORTED_TYPES)}")
    return out.reshape(shape)
