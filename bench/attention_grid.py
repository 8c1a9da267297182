"""Split-KV decode attention at the model's geometry: for decode contexts of
128, 512, 1,024 and 4,096 positions, one request, which kernels the Metal device
dispatched, the threadgroups per (request, kv head) the profiler recorded (goal: >= 16
at 4,096), the parallelism proxies of ``parallelism.attention`` (SIMD-groups launched,
positions and collectives per SIMD-group), and the output against the CPU oracle
(NMSE, worst element). Deterministic: grid sizes
depend on the code and the geometry, not on timing, so they are measured on the
simulated device too."""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

import metalrt
from metalrt import ops, profiler

from . import parallelism

CONTEXTS = (128, 512, 1024, 4096)
BLOCK_SIZE = 16


def _batch(context: int, heads: int, kv_heads: int, head_dim: int, seed: int):
    rng = np.random.default_rng(seed)
    blocks = -(-context // BLOCK_SIZE)
    query = rng.uniform(-2, 2, (1, heads, head_dim)).astype(np.float32)
    keys = rng.uniform(-1, 1, (blocks, BLOCK_SIZE, kv_heads, head_dim)).astype(np.float32)
    values = rng.uniform(-1, 1, keys.shape).astype(np.float32)
    table = rng.permutation(blocks).astype(np.int32)[None, :]
    return (query, keys, values, table, np.array([context], np.int32), np.array([0, 1], np.int32))


def measure(heads: int, kv_heads: int, head_dim: int, dtype: str = "float32",
            contexts: Sequence[int] = CONTEXTS) -> List[Dict]:
    """One row per context: kernels {name: threadgroups}, grids {name: the profiler
    row's dispatches, threadgroups, last_threads_per_threadgroup, max_simd_collectives},
    threadgroups per (request, kv
    head) of the attending kernel, its ``parallelism.attention`` proxies, NMSE and worst
    absolute error against the CPU."""
    rows = []
    scale = head_dim ** -0.5
    for context in contexts:
        arrays = _batch(context, heads, kv_heads, head_dim, seed=context)
        reference = ops.paged_attention(*[metalrt.asarray(a) for a in arrays], scale).numpy()
        on_metal = [metalrt.asarray(a, device="metal", dtype=dtype if a.dtype == np.float32 else None)
                    for a in arrays]
        was = profiler.enabled()
        profiler.enable(True)
        profiler.reset()
        try:
            got = ops.paged_attention(*on_metal, scale).numpy().astype(np.float64)
            profiled = parallelism.kernel_rows(profiler.rows())
        finally:
            profiler.enable(was)
        kernels = {n: r["threadgroups"] for n, r in profiled.items() if n.startswith("paged_attention")}
        attend = next(n for n in kernels if "merge" not in n)
        err = got - reference
        grids = {n: {k: r[k] for k in ("dispatches", "threadgroups", "last_threads_per_threadgroup",
                                        "max_simd_collectives")}
                 for n, r in profiled.items() if n.startswith("paged_attention")}
        rows.append({"context": context, "kernels": kernels, "grids": grids,
                     "threadgroups_per_kv_head": kernels[attend] // kv_heads,
                     **parallelism.attention(profiled, context),
                     "nmse": float(np.sum(err ** 2) / np.sum(reference.astype(np.float64) ** 2)),
                     "max_abs_error": float(np.abs(err).max())})
    return rows
