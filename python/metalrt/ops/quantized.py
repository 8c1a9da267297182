"""Quantized weights: GGUF block types (Q4_0 ... Q6_K, Q3_K, Q2_K, MXFP4), MLX affine and
split-layout MXFP4, kept in their
file's layout, with the ops that use them without a float copy (layouts:
cpp/include/metalrt/quantized.h; math: ops.h, "quantized weights"; docs/quantization.md)."""
from __future__ import annotations

import numpy as np

from .. import _metalrt
from .._metalrt import QuantizedTensor, Tensor
from .._metalrt import ops as _native
from ..tensor import asarray, dtype_name
from ._args import integer, out_tensor, tensors


def quantized_tensor(format: str, shape, data, scales=None, biases=None, *, bits=None,
                     group_size=None, device=None) -> QuantizedTensor:
    """A quantized weight of `shape` (N, K), validated. Layouts: quantized.h.

    format: a GGUF block type ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k",
    "q6_k", "q3_k", "q2_k", "mxfp4_gguf": the table of cpp/core/quantized_tensor.cpp),
    "affine" or "mxfp4". GGUF formats: data uint8 [N, K / block * block_bytes], each
    row's blocks byte for byte as in the file; no scales or biases. "affine" (MLX): data
    uint32 [N, K * bits / 32], scales and biases [N, K / group_size]
    float32/float16/bfloat16, bits in {2, 3, 4, 5, 6, 8}, group_size in {32, 64, 128}.
    "mxfp4" (MLX mode mxfp4, gpt-oss *_blocks/*_scales): data uint8 [N, K / 2] of FP4
    E2M1 codes (value k in the low nibble of byte k / 2 for even k), scales uint8
    [N, K / 32] E8M0 exponents, no biases; w = e2m1 * 2^(e - 127). data/scales/biases: metalrt Tensors, or numpy arrays,
    which are wrapped without a copy (asarray(copy=False): an np.memmap view stays a
    view of the file, kept alive by the weight; bfloat16 scales as uint16 bit patterns).
    device: where numpy arrays go (default: the device of a Tensor argument, else
    "cpu"). Returns a QuantizedTensor.

    Raises ValueError naming what was expected for an unknown format, bits (e.g. 7),
    group_size (e.g. 48), K not divisible by the block or group, data of the wrong shape
    (truncated), scales or biases not matching the packed weight; TypeError for wrong
    dtypes or argument kinds.
    """
    if not isinstance(format, str):
        raise TypeError(f"[quantized_tensor] format must be a str, got {type(format).__name__}")
    try:
        rows, cols = (integer("quantized_tensor", "shape", d) for d in shape)
    except (TypeError, ValueError):
        raise ValueError(f"[quantized_tensor] shape must be (N, K), got {shape!r}") from None
    # Beyond the native int64 (int for bits/group_size) nanobind would refuse the call
    # with its "incompatible function arguments" listing instead of saying what is wrong.
    if not all(-2**63 <= d < 2**63 for d in (rows, cols)):
        raise ValueError(f"[quantized_tensor] shape must be [N >= 1, K >= 1], got [{rows}, {cols}]")
    for name, value in (("bits", bits), ("group_size", group_size)):
        if value is not None and not -2**31 <= integer("quantized_tensor", name, value) < 2**31:
            raise ValueError(f"[quantized_tensor] {name} {value} is not a supported {name}")
    given = [t for t in (data, scales, biases) if isinstance(t, Tensor)]
    if device is None:
        device = given[0].device if given else "cpu"
    parts = [_wrap(name, value, device) for name, value in
             (("data", data), ("scales", scales), ("biases", biases))]
    return _metalrt._quantized_tensor(format, rows, cols, *parts,
                                      0 if bits is None else integer("quantized_tensor", "bits", bits),
                                      0 if group_size is None else
                                      integer("quantized_tensor", "group_size", group_size))


def _wrap(name: str, value, device: str):
    if value is None or isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        dtype = "bfloat16" if value.dtype == np.uint16 else None
        return asarray(np.ascontiguousarray(value), device=device, dtype=dtype, copy=False)
    raise TypeError(f"[quantized_tensor] {name} must be a metalrt.Tensor or a numpy array, "
                    f"got {type(value).__name__}")


def _weight(op: str, w) -> QuantizedTensor:
    if not isinstance(w, QuantizedTensor):
        raise TypeError(f"[{op}] w must be a metalrt.QuantizedTensor, got {type(w).__name__}")
    return w


def dequantize(w, dtype="float32", out=None) -> Tensor:
    """The float weights of a QuantizedTensor. Math: ops.h ``Dequantize``.

    w: QuantizedTensor [N, K]; dtype: "float32" (default), "float16" or "bfloat16" (a
    name or numpy dtype); out: optional Tensor [N, K] of `dtype`. Returns [N, K] of
    `dtype` on w's device.

    Raises TypeError for a non-float dtype or a w that is not a QuantizedTensor;
    ValueError for a wrong out.
    """
    return _native.dequantize(_weight("dequantize", w), dtype_name(dtype), out=out_tensor("dequantize", out))


def quantized_matmul_bt(x, w, out=None) -> Tensor:
    """A linear layer with a quantized weight in nn.Linear layout: x @ dequantize(w)^T.
    Math: ops.h ``QuantizedMatmulBT``.

    x: [M, K] float (f32/f16/bf16; an array or list is copied to the CPU); w:
    QuantizedTensor [N, K]; out: optional Tensor [M, N] in x's dtype. Returns [M, N] in
    x's dtype.

    Raises ValueError when x has not K columns or lives on another device; TypeError for
    a non-float x or a w that is not a QuantizedTensor.
    """
    w = _weight("quantized_matmul_bt", w)
    (x,) = tensors("quantized_matmul_bt", x=x)
    return _native.quantized_matmul_bt(x, w, out=out_tensor("quantized_matmul_bt", out))


def quantized_embedding(ids, w, dtype="float32", out=None) -> Tensor:
    """Rows ids[t] of dequantize(w), dequantizing only the rows asked for. Math: ops.h
    ``QuantizedEmbedding``.

    ids: int32 [T] (a list of Python ints becomes int32, range-checked; a numpy array
    must be int32; copied to the CPU unless a Tensor); w: QuantizedTensor [N, K]; dtype:
    "float32" (default), "float16" or "bfloat16"; out: optional Tensor [T, K] of
    `dtype`. Returns [T, K] of `dtype`.

    Raises ValueError for an id outside [0, N) wherever the host can read the ids (one
    that reaches a kernel anyway gives a zero row); TypeError for non-int32 ids or a w
    that is not a QuantizedTensor.
    """
    w = _weight("quantized_embedding", w)
    (ids,) = tensors("quantized_embedding", index_dtypes={"ids": "int32"}, ids=ids)
    return _native.quantized_embedding(ids, w, dtype_name(dtype),
                                       out=out_tensor("quantized_embedding", out))
