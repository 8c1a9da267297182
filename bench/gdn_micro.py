"""Gated-DeltaNet op micro-benchmarks at the Qwen3-Next geometry (16 key heads, 32 value
heads, Dk = Dv = 128, conv kernel 4), float32, one request (``bench/op_micro.py``'s
helpers):

* ``ops.gated_delta_rule`` decode (the recurrent step, one token): GB/s = the f32 state
  read and written, 2 * 4 Hv Dk Dv / t; GFLOP/s = 8 Hv Dk Dv / t (decay, S^T k, the
  rank-1 update and S^T q, a multiply-add each);
* ``ops.gated_delta_rule`` chunked prefill of T tokens: GFLOP/s of the same recurrence,
  8 T Hv Dk Dv / t (the chunked form's extra intra-chunk work is not counted);
* ``ops.causal_conv1d`` decode over the 8192 conv channels: GB/s = the x, y, weight and
  state bytes / t.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

import metalrt
from metalrt import ops

HK, DK, HV, DV, WIDTH = 16, 128, 32, 128, 4
CHANNELS = 2 * HK * DK + HV * DV


def rows(device: str, prefill_lengths, repeats: int, rng, timed, row) -> List[Dict]:
    """One row per (op, length); `timed` and `row` are op_micro's helpers."""
    def arr(shape, scale=0.1):
        return metalrt.asarray((rng.standard_normal(shape) * scale).astype(np.float32), device=device)

    state = arr((1, HV, DK, DV))
    heads = dict(num_k_heads=HK, head_k_dim=DK, num_v_heads=HV, head_v_dim=DV)
    slots = metalrt.asarray(np.zeros(1, np.int32), device=device)
    out = []
    for tokens in (1, *prefill_lengths):
        qkv, g = arr((tokens, CHANNELS)), arr((tokens, HV))
        beta = metalrt.asarray(np.full((tokens, HV), 0.5, np.float32), device=device)
        starts = metalrt.asarray(np.array([0, tokens], np.int32), device=device)
        mode = "recurrent" if tokens == 1 else "chunked"
        times = timed(lambda: ops.gated_delta_rule(qkv, g, beta, state, starts, slots, mode=mode,
                                                   **heads), device, repeats)
        name = "decode" if tokens == 1 else f"prefill {tokens}"
        out.append(row(f"gated_delta_rule {name} qwen3_next", "gated_delta_rule", device, times,
                       8.0 * tokens * HV * DK * DV, 2 * 4.0 * HV * DK * DV))
    conv_state, weight, x = arr((1, CHANNELS, WIDTH - 1)), arr((CHANNELS, WIDTH)), arr((1, CHANNELS))
    starts = metalrt.asarray(np.array([0, 1], np.int32), device=device)
    times = timed(lambda: ops.causal_conv1d(x, weight, conv_state, starts, slots), device, repeats)
    out.append(row(f"causal_conv1d decode {CHANNELS}x{WIDTH}", "causal_conv1d", device, times,
                   2.0 * CHANNELS * WIDTH, 4.0 * CHANNELS * (2 + WIDTH + 2 * (WIDTH - 1))))
    return out
