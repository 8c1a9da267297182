"""Quantized weights as a loader hands them to the models: the packed bytes (views of the
mapped model file) and their format, never a float copy.

GGUF block types keep their own block bytes (ggml's ``ggml-common.h``; layouts in
``docs/models.md``): ``data`` is uint8 ``[N, K / block · block_bytes]``. MLX affine
weights (``mlx.core.quantize``) keep their uint32 words ``[N, K · bits / 32]`` with
scales and biases ``[N, K / group_size]`` in f16, bf16 or f32, ``w = scale · q + bias``.

The float reference of every GGUF block type is ``gguf.quants.dequantize`` (the
``gguf`` package, written by llama.cpp's authors), used by ``dequantize`` below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

# GGML weight types that stay quantized → metalrt.QuantizedTensor format names.
GGUF_FORMATS = {T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1",
                T.Q8_0: "q8_0", T.Q4_K: "q4_k", T.Q5_K: "q5_k", T.Q6_K: "q6_k",
                T.Q3_K: "q3_k", T.Q2_K: "q2_k"}
# Float types, kept as views of the file in their own dtype (BF16 as its uint16 bits).
FLOAT_TYPES = {T.F32: np.float32, T.F16: np.float16, T.BF16: np.uint16}
SUPPORTED_TYPES = (*FLOAT_TYPES, *GGUF_FORMATS)
# Q8_1 and Q8_K are activation formats of llama.cpp's CPU dot products, never weights.
ACTIVATION_ONLY = (T.Q8_1, T.Q8_K)

AFFINE_BITS = (2, 3, 4, 5, 6, 8)
AFFINE_GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class QuantizedWeight:
    """One quantized weight matrix on the host, as read from a model file.

    format: a ``metalrt.QuantizedTensor`` format ("q4_0" ... "q6_k", "q3_k", "q2_k", "affine");
    shape: (N rows, K columns) of the float matrix it stands for; data: uint8
    [N, row_bytes] (GGUF) or uint32 [N, K·bits/32] (affine), usually a read-only view
    of the mapped file; scales / biases: [N, K/group_size] float (affine only);
    bits, group_size: affine only; source: "file: tensor" for error messages.
    """

    format: str
    shape: tuple[int, int]
    data: np.ndarray
    scales: Optional[np.ndarray] = None
    biases: Optional[np.ndarray] = None
    bits: Optional[int] = None
    group_size: Optional[int] = None
    source: str = ""

    @property
    def nbytes(self) -> int:
        """Bytes of the packed data, scales and biases (what a kernel reads)."""
        return sum(a.nbytes for a in (self.data, self.scales, self.biases) if a is not None)

    def same_kind(self, other: "QuantizedWeight") -> bool:
        """Whether rows of ``other`` can be stacked under these (same format and
        parameters, same K, same scale dtype)."""
        return (self.format, self.shape[1], self.bits, self.group_size, self.data.dtype,
                None if self.scales is None else self.scales.dtype) == \
            (other.format, other.shape[1], other.bits, other.group_size, other.data.dtype,
             None if other.scales is None else other.scales.dtype)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values given as their uint16 bit patterns → float32 (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def row_bytes(ggml_type: T, cols: int) -> int:
    """Bytes of one row of ``cols`` values of a GGML type (a whole number of blocks)."""
    block, block_bytes = GGML_QUANT_SIZES[ggml_type]
    return cols // block * block_bytes


def dequantize(raw: np.ndarray, ggml_type: T, shape: tuple[int, ...]) -> np.ndarray:
    """``raw``: a GGUF tensor's bytes (uint8, C order) → float32 of ``shape`` (numpy
    order), by ``gguf.quants.dequantize`` for block types. The reference the quantized
    kernels are checked against; models never call it."""
    flat = raw.reshape(-1)
    if ggml_type == T.BF16:
        return bf16_to_float32(flat.view(np.uint16)).reshape(shape)
    if ggml_type in FLOAT_TYPES:
        return flat.view(FLOAT_TYPES[ggml_type]).astype(np.float32).reshape(shape)
    if ggml_type not in GGUF_FORMATS:
        raise ValueError(f"[dequantize] GGML type {ggml_type.name} is not supported; supported "
                         f"types are {', '.join(t.name for t in SUPPORTED_TYPES)}")
    return gguf_quants.dequantize(flat, ggml_type).astype(np.float32).reshape(shape)


def dequantize_weight(w: QuantizedWeight) -> np.ndarray:
    """float32 [N, K] of a QuantizedWeight of either family (the reference the models'
    quantized runs are compared with)."""
    if w.format == "affine":
        return dequantize_affine(w)
    ggml_type = next(t for t, name in GGUF_FORMATS.items() if name == w.format)
    return dequantize(w.data, ggml_type, w.shape)


def dequantize_affine(w: QuantizedWeight) -> np.ndarray:
    """float32 [N, K] of an MLX affine weight: ``scale · q + bias`` per group, q the
    ``bits``-wide fields of the little-endian bit stream of each row (LSB first, as
    ``mlx.core.quantize`` packs them). The reference of the affine kernels."""
    n, k = w.shape
    bits, gs = w.bits, w.group_size
    stream = np.unpackbits(np.ascontiguousarray(w.data).view(np.uint8), axis=1, bitorder="little")
    fields = stream[:, :k * bits].reshape(n, k, bits).astype(np.uint32)
    q = (fields << np.arange(bits, dtype=np.uint32)).sum(axis=2, dtype=np.uint32)
    scales = _float32(w.scales).repeat(gs, axis=1)
    biases = _float32(w.biases).repeat(gs, axis=1)
    return scales * q.astype(np.float32) + biases


def _float32(a: np.ndarray) -> np.ndarray:
    return bf16_to_float32(a) if a.dtype == np.uint16 else a.astype(np.float32)
