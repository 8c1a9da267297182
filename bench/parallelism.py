"""Parallelism proxies of the Metal decode path (the attention grid and the argmax), from the
profiler's kernel rows, so they are measured on the simulated device too: they depend
on the code and the geometry, not on timing.

* Decode attention, a serial chain on a small grid: the SIMD-groups its dispatch
  launched (``simdgroups``: threadgroups x threads per threadgroup / 32, from the
  dispatch record), the positions one SIMD-group walks (each threadgroup covers one
  partition of the visible positions, ``ceil(visible / grid.z)``, shared by its
  SIMD-groups: ``ceil(partition / SIMD-groups per threadgroup)``; exact when the
  partitions are equal, i.e. one partition or a context that is a multiple of the
  partition size, as at every context the bench and the gates use), and the SIMD-group
  collectives (``simd_sum``, ``simd_max``, ...) of its busiest SIMD-group, which the
  simulated device counts while it runs the kernel (``max_simd_collectives``). Goals:
  <= 16 positions per SIMD-group at every context, >= 256 SIMD-groups at 512 positions,
  <= 64 collectives per SIMD-group.
* The greedy argmax, a row scanned by one threadgroup: the serial loads of one thread,
  ``ceil(rows x vocab / (threadgroups x threads per threadgroup))`` over its scanning
  dispatch (``greedy_argmax_row_*``; the merge of a two-level argmax reads one
  candidate a thread per 256 chunks). Goal: <= 32.
"""
from __future__ import annotations

from typing import Dict, Mapping

ATTENTION_KERNELS = ("paged_attention_decode_", "paged_attention_decode_split_")
ARGMAX_KERNEL = "greedy_argmax_row_"
MERGE_KERNELS = ("paged_attention_decode_merge_", "greedy_argmax_merge")

GOALS = {"positions_per_simdgroup": 16, "simdgroups_at_512": 256, "collectives_per_simdgroup": 64,
         "argmax_loads_per_thread": 32}


def kernel_rows(rows) -> Dict[str, Dict]:
    """``profiler.rows()`` as {kernel name: row}, without the total row."""
    return {r["name"]: r for r in rows if r["name"] != "total"}


def _one(kernels: Mapping[str, Dict], prefixes) -> Dict:
    found = [r for n, r in kernels.items() if n.startswith(prefixes) and not n.startswith(MERGE_KERNELS)]
    if len(found) != 1:
        raise ValueError(f"expected one kernel named {prefixes}, the profiler has {sorted(kernels)}")
    return found[0]


def attention(kernels: Mapping[str, Dict], visible: int) -> Dict[str, int]:
    """The decode-attention proxies of calls that each attended over ``visible``
    positions (one request; a step's layers make the same call), from the kernel rows
    profiled around them: SIMD-groups per dispatch, positions and collectives per
    SIMD-group."""
    row = _one(kernels, ATTENTION_KERNELS)
    partition = -(-visible // row["last_grid"][2])
    simdgroups_per_threadgroup = -(-row["last_threads_per_threadgroup"] // 32)
    return {"simdgroups": row["simdgroups"] // row["dispatches"],
            "positions_per_simdgroup": -(-partition // simdgroups_per_threadgroup),
            "collectives_per_simdgroup": row["max_simd_collectives"]}


def argmax_loads_per_thread(kernels: Mapping[str, Dict], rows: int, vocab: int) -> int:
    """The serial logit loads of one thread of the argmax over ``rows`` x ``vocab``
    logits (the calls profiled, each over that shape)."""
    row = _one(kernels, (ARGMAX_KERNEL,))
    threads = row["threadgroups"] // row["dispatches"] * row["last_threads_per_threadgroup"]
    return -(-rows * vocab // threads)


def step_collectives(kernels: Mapping[str, Dict]) -> Dict[str, int]:
    """{kernel: collectives of its busiest SIMD-group} of a profiled step, the largest first."""
    return dict(sorted(((n, r["max_simd_collectives"]) for n, r in kernels.items()),
                       key=lambda item: -item[1]))
