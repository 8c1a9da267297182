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
KV_ROUNDING = {"float32": np.float32, "float16": np.float16}   # cache types measured here


def _batch(context: int, heads: int, kv_heads: int, head_dim: int, seed: int):
    rng = np.random.default_rng(seed)
    blocks = -(-context // BLOCK_SIZE)
    query = rng.uniform(-2, 2, (1, heads, head_dim)).astype(np.float32)
    keys = rng.uniform(-1, 1, (blocks, BLOCK_SIZE, kv_heads, head_dim)).astype(np.float32)
    values = rng.uniform(-1, 1, keys.shape).astype(np.float32)
    table = rng.permutation(blocks).astype(np.int32)[None, :]
    return (query, keys, values, table, np.array([context], np.int32), np.array([0, 1], np.int32))


def measure(heads: int, kv_heads: int, head_dim: int, dtype: str = "float32",
            contexts: Sequence[int] = CONTEXTS, kv_dtype: str = None) -> List[Dict]:
    """One row per context (queries in ``dtype``, the K/V cache in ``kv_dtype``, default
    ``dtype``; float32 or float16, else ValueError): kernels {name: threadgroups}, grids {name: the profiler
    row's dispatches, threadgroups, last_threads_per_threadgroup, max_simd_collectives},
    threadgroups per (request, kv
    head) of the attending kernel, its ``parallelism.attention`` proxies, NMSE and worst
    absolute error against the CPU."""
    kv_dtype = kv_dtype or dtype
    if kv_dtype not in KV_ROUNDING:
        raise ValueError(f"[attention grid] kv_dtype must be one of {sorted(KV_ROUNDING)}, got {kv_dtype!r}")
    rows = []
    scale = head_dim ** -0.5
    for context in contexts:
        arrays = list(_batch(context, heads, kv_heads, head_dim, seed=context))
        # The reference reads the K/V the cache holds: rounded to its type.
        arrays[1:3] = [a.astype(KV_ROUNDING[kv_dtype]).astype(np.float32) for a in arrays[1:3]]
        reference = ops.paged_attention(*[metalrt.asarray(a) for a in arrays], scale).numpy()
        on_metal = [metalrt.asarray(a, device="metal", dtype=(kv_dtype if i in (1, 2) else dtype)
                                    if a.dtype == np.float32 else None)
                    for i, a in enumerate(arrays)]
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
