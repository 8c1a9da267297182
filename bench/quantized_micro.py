"""Quantized-weight micro-benchmarks at the default model's projection shapes
(``bench/op_micro.py``'s PROJECTIONS): ``ops.quantized_matmul_bt`` with Q4_1 and Q8_0
(the default model's GGUF types) and MLX affine 4-bit group 64, GEMV (m = 1, decode)
and GEMM (m = prefill tokens), float32 activations.

GFLOP/s = 2 m n k / t; GB/s = (the weight's packed bytes, ``w.nbytes``, plus
4 (m k + m n) activation bytes) / t, so decode rows compare with the device's memory
bandwidth. Random codes and scales: the timing does not depend on the values. On the
simulated Metal device these are CPU-simulation times, not GPU performance. On the CPU
each decode row (m <= 16) is measured twice, side by side: the fast provider
(``cpu_fast_quantized_matmul_bt``), then the oracle with the fast provider disabled.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

import metalrt
from metalrt import ops

# format -> (values per block, bytes per block, offsets of its f16 scale and min) for
# the GGUF formats timed here (q3_k and q2_k: K a multiple of 256, not the default's).
_BLOCKS = {"q4_1": (32, 20, (0, 2)), "q8_0": (32, 34, (0,)), "q3_k": (256, 110, (108,)),
           "q2_k": (256, 84, (80, 82))}
FAST_PROVIDER = "cpu_fast_quantized_matmul_bt"
GEMV_MAX_ROWS = 16   # cpp/cpu/fast/gemv/matmul_dispatch.h kGemvMaxRows: the fast GEMV's rows
FORMATS = ("q4_1", "q8_0", "affine4g64")


def random_weight(fmt: str, n: int, k: int, device: str, rng) -> metalrt.QuantizedTensor:
    if fmt in _BLOCKS:
        values, size, halves = _BLOCKS[fmt]
        data = rng.integers(0, 256, (n, k // values, size), dtype=np.uint8)
        for offset, value in zip(halves, (0.01, -0.05)):   # finite scales (and mins)
            data[:, :, offset:offset + 2] = np.array([value], np.float16).view(np.uint8)
        return metalrt.quantized_tensor(fmt, (n, k), data.reshape(n, -1), device=device)
    words = rng.integers(0, 2 ** 32, (n, k // 8), dtype=np.uint32)
    scales = np.full((n, k // 64), 0.01, np.float16)
    return metalrt.quantized_tensor("affine", (n, k), words, scales, -scales * 8, bits=4,
                                    group_size=64, device=device)


def rows(device: str, projections: Dict, m_values, repeats: int, rng, timed, row,
         formats=FORMATS) -> List[Dict]:
    """One row per (format, projection, m); `timed` and `row` are op_micro's helpers."""
    result = []
    for fmt in formats:
        for label, (n, k) in projections.items():
            w = random_weight(fmt, n, k, device, rng)
            for m in m_values:
                x = metalrt.asarray(rng.standard_normal((m, k), dtype=np.float32), device=device)
                kind = "GEMV" if m <= 8 else "GEMM"
                sides = [True, False] if device == "cpu" and m <= GEMV_MAX_ROWS else [True]
                for fast in sides:
                    metalrt.providers.set_enabled(FAST_PROVIDER, fast)
                    try:
                        times = timed(lambda: ops.quantized_matmul_bt(x, w), device, repeats)
                        result.append(row(f"{kind} {fmt} {label} {m}x{n}x{k}", "quantized_matmul_bt",
                                          device, times, 2.0 * m * n * k,
                                          w.nbytes + 4.0 * (m * k + m * n)))
                    finally:
                        metalrt.providers.set_enabled(FAST_PROVIDER, True)
    return result
