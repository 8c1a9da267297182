"""Quantized weights as a loader hands them to the models: the packed bytes (views of the
mapped model file) and their format, never a float copy.

GGUF block types keep their own block bytes (ggml's ``ggml-common.h``; layouts in
``docs/models.md``): ``data`` is uint8 ``[N, K / block · block_bytes]``. MLX affine
weights (``mlx.core.quantize``) keep their uint32 words ``[N, K · bits / 32]`` with
scales and biases ``[N, K / group_size]`` in f16, bf16 or f32, ``w = scale · q + bias``.
MXFP4 in its split layout (MLX ``mode: "mxfp4"``, gpt-oss's ``*_blocks`` / ``*_scales``)
keeps its packed FP4 E2M1 codes as uint8 ``[N, K / 2]`` (value k in the low nibble of
byte k / 2 for even k) and one E8M0 exponent per 32 values, uint8 ``[N, K / 32]``:
``w = e2m1 · 2^(e - 127)`` (``mxfp4_from_blocks``, ``dequantize_mxfp4``).

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
                T.Q3_K: "q3_k", T.Q2_K: "q2_k", T.MXFP4: "mxfp4_gguf"}
# Float types, kept as views of the file in their own dtype (BF16 as its uint16 bits).
FLOAT_TYPES = {T.F32: np.float32, T.F16: np.float16, T.BF16: np.uint16}
SUPPORTED_TYPES = (*FLOAT_TYPES, *GGUF_FORMATS)
# Q8_1 and Q8_K are activation formats of llama.cpp's CPU dot products, never weights.
ACTIVATION_ONLY = (T.Q8_1, T.Q8_K)

AFFINE_BITS = (2, 3, 4, 5, 6, 8)
# MXFP4 (OCP Microscaling Formats v1.0): 32 FP4 E2M1 values share one E8M0 exponent.
MXFP4_GROUP_SIZE = 32
# E2M1 codes 0-15 (sign bit 3): the values mlx's and transformers' MXFP4 tables hold.
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
AFFINE_GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class QuantizedWeight:
    """One quantized weight matrix on the host, as read from a model file.

    format: a ``metalrt.QuantizedTensor`` format ("q4_0" ... "q6_k", "q3_k", "q2_k",
    "mxfp4_gguf", "affine", "mxfp4"); shape: (N rows, K columns) of the float matrix it
    stands for; data: uint8 [N, row_bytes] (GGUF), uint32 [N, K·bits/32] (affine) or
    uint8 [N, K/2] (mxfp4), usually a read-only view of the mapped file; scales: [N,
    K/group_size] float (affine) or uint8 E8M0 (mxfp4); biases: affine only; bits,
    group_size: affine and mxfp4 (4, 32); source: "file: tensor" for error messages.
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
    """float32 [N, K] of a QuantizedWeight of any format (the reference the models'
    quantized runs are compared with)."""
    if w.format == "affine":
        return dequantize_affine(w)
    if w.format == "mxfp4":
        return dequantize_mxfp4(w)
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


def mxfp4_from_blocks(blocks: np.ndarray, scales: np.ndarray, source: str = "") -> QuantizedWeight:
    """A split-layout MXFP4 weight from gpt-oss's released tensors, without a copy.

    blocks: uint8 ``[..., N, K/32, 16]`` (``*_blocks``: 16 bytes of 32 FP4 E2M1 codes
    per group, value 2i in the low nibble of byte i, 2i + 1 in the high one); scales:
    uint8 ``[..., N, K/32]`` (``*_scales``: one E8M0 exponent per group). Leading
    dimensions (gpt-oss's experts ``E``) fold into the rows: the result is the matrix
    ``[prod(...) · N, K]`` whose ``data`` is a uint8 ``[rows, K/2]`` view of ``blocks`` and
    ``scales`` a ``[rows, K/32]`` view of ``scales`` (both stay views of a mapped file).
    ``source`` ("file: tensor") prefixes errors. Math: ``w = e2m1 · 2^(e - 127)``
    (``dequantize_mxfp4``; transformers' ``integrations/mxfp4.py`` convert_moe_packed_tensors
    reads the same bytes).

    Raises ValueError naming ``source`` for a dtype other than uint8, a last dimension
    of ``blocks`` other than 16 (a block of the wrong size), or ``scales`` whose shape is
    not ``blocks.shape[:-1]``.
    """
    where = source or "mxfp4_from_blocks"
    for name, a in (("blocks", blocks), ("scales", scales)):
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8:
            got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"[mxfp4] {where}: {name} must be a uint8 array, got {got}")
    if blocks.ndim < 3 or blocks.shape[-1] != MXFP4_GROUP_SIZE // 2:
        raise ValueError(f"[mxfp4] {where}: blocks {list(blocks.shape)} must be [..., N, K/32, 16] "
                         f"(16 bytes of 32 E2M1 codes per block)")
    if scales.shape != blocks.shape[:-1]:
        raise ValueError(f"[mxfp4] {where}: scales {list(scales.shape)} must be "
                         f"{list(blocks.shape[:-1])}, one E8M0 exponent per block of {list(blocks.shape)}")
    groups = blocks.shape[-2]
    rows = int(np.prod(blocks.shape[:-2]))
    return QuantizedWeight("mxfp4", (rows, groups * MXFP4_GROUP_SIZE),
                           blocks.reshape(rows, groups * 16), scales.reshape(rows, groups),
                           bits=4, group_size=MXFP4_GROUP_SIZE, source=source)


def dequantize_mxfp4(w: QuantizedWeight) -> np.ndarray:
    """float32 [N, K] of a split-layout MXFP4 weight: ``ldexp(e2m1, e - 127)`` per value,
    exact (±0 stays ±0, a product past f32's range is ±inf: only e = 255 gets there),
    as transformers' MXFP4 dequantize computes it. The reference of the mxfp4 kernels."""
    n, k = w.shape
    q = np.ascontiguousarray(w.data).view(np.uint8).reshape(n, k // 2)
    codes = np.stack([q & 15, q >> 4], axis=-1).reshape(n, k)
    exponents = w.scales.astype(np.int32).repeat(MXFP4_GROUP_SIZE, axis=1) - 127
    with np.errstate(over="ignore"):
        return np.ldexp(E2M1_VALUES[codes], exponents).astype(np.float32)
