"""The inputs of ``bench/metal_estimate.py`` for metalrt's decode step, from what the
simulated device counted: the kernel rows of one decode step (``bench/counters.py``:
dispatches, threadgroups, threads per threadgroup, the busiest SIMD-group's
collectives, the weight bytes credited to each kernel), with the decode attention's
grid re-measured at the estimate's context (``bench/attention_grid.py``) and the K/V
bytes that context reads. Serial steps: the positions one SIMD-group walks for the
attention, the serial loads of one thread for the argmax's scan, the busiest
SIMD-group's collectives for every other kernel."""
from __future__ import annotations

from typing import Dict, List, Mapping

from . import metal_estimate, parallelism
from .metal_estimate import Kernel


def _serial_steps(name: str, row: Mapping, vocab: int) -> int:
    if name.startswith(parallelism.ARGMAX_KERNEL):
        return parallelism.argmax_loads_per_thread({name: row}, 1, vocab)
    return row["max_simd_collectives"]


def metalrt_kernels(kernels: Mapping[str, Mapping], attention: Mapping, layers: int,
                    kv_bytes_per_position: int, vocab: int) -> List[Kernel]:
    """The decode step's ``kernels`` (counters' profiler rows with ``weight_bytes``) as
    Kernel rows at ``attention["context"]`` positions: the attention kernels replaced by
    that context's measured grids (``attention``: an attention_grid row), one dispatch a
    layer each, reading ``kv_bytes_per_position`` (all layers' K and V of one position)
    x context bytes between them."""
    rows = []
    for name, r in kernels.items():
        if name.startswith("paged_attention"):
            continue
        rows.append(Kernel(name, r["dispatches"], r["threadgroups"], r["last_threads_per_threadgroup"],
                           r["weight_bytes"], _serial_steps(name, r, vocab)))
    kv = kv_bytes_per_position * attention["context"]
    for name, g in attention["grids"].items():
        attend = not name.startswith(parallelism.MERGE_KERNELS)
        rows.append(Kernel(name, layers * g["dispatches"], layers * g["threadgroups"],
                           g["last_threads_per_threadgroup"], kv if attend else 0,
                           attention["positions_per_simdgroup"] if attend else g["max_simd_collectives"]))
    return rows


def metalrt_estimate(kernels: Mapping[str, Mapping], attention_rows: List[Mapping], layers: int,
                     kv_bytes_per_position: int, vocab: int) -> List[Dict]:
    """Per context of ``attention_rows``: {"context", "weight_bytes", "kv_bytes",
    "dispatches", "chips": metal_estimate.estimate's rows}."""
    out = []
    for att in attention_rows:
        ks = metalrt_kernels(kernels, att, layers, kv_bytes_per_position, vocab)
        kv = kv_bytes_per_position * att["context"]
        weights = sum(k.bytes for k in ks) - kv
        dispatches = sum(k.dispatches for k in ks)
        out.append({"context": att["context"], "weight_bytes": weights, "kv_bytes": kv,
                    "dispatches": dispatches,
                    "chips": metal_estimate.estimate(weights, dispatches, kv, ks)})
    return out
