"""Op micro-benchmarks at the default model's shapes (SmolLM2-135M: hidden 576, 9
heads, 3 KV heads, head_dim 64, FFN 1536, vocabulary 49,152), float32 as the runner
uses them, on one device.

* GEMV (m = 1, decode) and GEMM (m = prefill tokens) of every projection through
  ``ops.matmul_bt``: GFLOP/s = 2 m n k / t, GB/s = 4 (m k + n k + m n) / t;
* ``ops.quantized_matmul_bt`` GEMV and GEMM with Q4_1, Q8_0 and affine 4-bit weights
  (``bench/quantized_micro.py``);
* ``ops.rms_norm`` over [m, 576]: GB/s = 4 (2 m 576 + 576) / t;
* ``ops.paged_attention`` decode (one query token, blocks of 16) at context 128,
  1024 and 4096: GFLOP/s = 4 heads ctx head_dim / t, GB/s = the K/V bytes read / t;
  on the CPU each context twice, side by side: the fast provider
  (``cpu_fast_paged_attention``), then the oracle with it disabled;
* the Gated-DeltaNet ops at the Qwen3-Next geometry (``bench/gdn_micro.py``).

Each call is timed to completion (on Metal, through ``metalrt.synchronize``), one
warm-up call, then the median, min and max of the repeats. On the simulated Metal
device these are CPU-simulation times, not GPU performance; every row also names
the provider that served it (a native kernel or the CPU reference tier).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List

import numpy as np

import metalrt
from metalrt import ops

from . import gdn_micro, quantized_micro

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 576, 9, 3, 64, 1536, 49152
BLOCK = 16
FAST_ATTENTION = "cpu_fast_paged_attention"   # cpp/cpu/fast/attention/decode_attention.cpp
PROJECTIONS = {"qkv": (HIDDEN + 2 * KV_HEADS * HEAD_DIM, HIDDEN), "o_proj": (HIDDEN, HIDDEN),
               "gate_up": (2 * FFN, HIDDEN), "down": (HIDDEN, FFN), "lm_head": (VOCAB, HIDDEN)}


def _timed(fn: Callable[[], object], device: str, repeats: int) -> List[float]:
    fn()
    metalrt.synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        metalrt.synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def _row(name: str, op: str, device: str, times: List[float], flops: float, nbytes: float) -> Dict:
    t = statistics.median(times)
    return {"name": name, "op": op, "device": device,
            "provider": metalrt.providers.stats(op, device)["last_selected"],
            "seconds": {"median": t, "min": min(times), "max": max(times)},
            "gflops": flops / t / 1e9 if flops else None, "gbps": nbytes / t / 1e9}


def _rand(rng, shape, device):
    return metalrt.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.1, device=device)


def matmul_rows(device: str, m_values, projections, repeats: int, rng) -> List[Dict]:
    rows = []
    for label, (n, k) in projections.items():
        w = _rand(rng, (n, k), device)
        for m in m_values:
            x = _rand(rng, (m, k), device)
            times = _timed(lambda: ops.matmul_bt(x, w), device, repeats)
            kind = "GEMV" if m == 1 else "GEMM"
            rows.append(_row(f"{kind} {label} {m}x{n}x{k}", "matmul_bt", device, times,
                             2.0 * m * n * k, 4.0 * (m * k + n * k + m * n)))
    return rows


def rms_norm_rows(device: str, m_values, repeats: int, rng) -> List[Dict]:
    weight = _rand(rng, (HIDDEN,), device)
    rows = []
    for m in m_values:
        x = _rand(rng, (m, HIDDEN), device)
        times = _timed(lambda: ops.rms_norm(x, weight, 1e-5), device, repeats)
        rows.append(_row(f"rms_norm {m}x{HIDDEN}", "rms_norm", device, times, 0.0,
                         4.0 * (2 * m * HIDDEN + HIDDEN)))
    return rows


def attention_rows(device: str, contexts, repeats: int, rng) -> List[Dict]:
    rows = []
    for ctx in contexts:
        blocks = -(-ctx // BLOCK)
        keys = _rand(rng, (blocks, BLOCK, KV_HEADS, HEAD_DIM), device)
        values = _rand(rng, (blocks, BLOCK, KV_HEADS, HEAD_DIM), device)
        query = _rand(rng, (1, HEADS, HEAD_DIM), device)
        tables = metalrt.asarray(np.arange(blocks, dtype=np.int32)[None, :], device=device)
        seq_lens = metalrt.asarray(np.array([ctx], np.int32), device=device)
        starts = metalrt.asarray(np.array([0, 1], np.int32), device=device)
        for fast in ([True, False] if device == "cpu" else [True]):
            metalrt.providers.set_enabled(FAST_ATTENTION, fast)
            try:
                times = _timed(lambda: ops.paged_attention(query, keys, values, tables, seq_lens, starts,
                                                           HEAD_DIM ** -0.5), device, repeats)
                rows.append(_row(f"paged_attention decode ctx {ctx}", "paged_attention", device, times,
                                 4.0 * HEADS * ctx * HEAD_DIM, 4.0 * 2 * ctx * KV_HEADS * HEAD_DIM))
            finally:
                metalrt.providers.set_enabled(FAST_ATTENTION, True)
    return rows


def run(device: str, quick: bool, repeats: int) -> List[Dict]:
    """Rows of the op table for ``device``; ``quick`` keeps one shape per family."""
    rng = np.random.default_rng(0)
    projections = PROJECTIONS if not quick else {"gate_up": PROJECTIONS["gate_up"]}
    prefill = 16 if quick else 128
    rows = matmul_rows(device, (1,), projections, repeats, rng)
    prefill_projections = {k: v for k, v in projections.items() if k != "lm_head"}
    rows += matmul_rows(device, (prefill,), prefill_projections, repeats, rng)
    # --quick: one format at the smallest projection (the simulated GEMM is slow).
    quantized = {"o_proj": PROJECTIONS["o_proj"]} if quick else projections
    formats = ("q4_1",) if quick else quantized_micro.FORMATS
    rows += quantized_micro.rows(device, quantized, (1,), repeats, rng, _timed, _row, formats)
    quantized_prefill = {k: v for k, v in quantized.items() if k != "lm_head"}
    rows += quantized_micro.rows(device, quantized_prefill, (prefill,), repeats, rng, _timed, _row, formats)
    rows += rms_norm_rows(device, (1, prefill), repeats, rng)
    rows += attention_rows(device, (128,) if quick else (128, 1024, 4096), repeats, rng)
    rows += gdn_micro.rows(device, (64,) if quick else (64, 256), repeats, rng, _timed, _row)
    return rows
