"""Memory read-bandwidth probe: the bytes/s a threaded streaming read reaches on this
machine, the ceiling of a decode step (which reads every weight once per token).

``threads`` threads each sum their own contiguous slice of one buffer far larger than
the last-level cache (512 MiB by default) with ``numpy.add.reduce`` over uint64 (an
integer sum: SIMD loads and adds, no pairwise float tree; numpy releases the GIL in
it), all started together; GB/s = buffer bytes / wall time of the slowest slice, the
best of ``repeats`` passes (the machine may be shared; the best pass is the one the
least disturbed). Same thread count as the engines (``python -m bench --threads``).

The bench probes twice, before the sections and again after the generation section
(``combine``): on a shared host the bandwidth a probe finds moves by more than 1.5x
within seconds (37-67 GB/s seen on one 2-core VM, docs/benchmarks.md), and the
decode's share is set against the best of every pass, so a quiet moment anywhere in
the run raises the bar rather than a busy one at the start lowering it.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Tuple

import numpy as np


def probe(threads: int, mib: int = 512, repeats: int = 5) -> Dict:
    """{"threads", "mib", "gbps" (best pass), "gbps_median", "passes" (every pass's
    GB/s)}; ValueError for threads or mib < 1."""
    if threads < 1 or mib < 1:
        raise ValueError(f"bandwidth probe needs threads >= 1 and mib >= 1, got {threads}, {mib}")
    buffer = np.ones(mib * 2 ** 20 // 8, np.uint64)   # written once, so every page is resident
    slices = np.array_split(buffer, threads)
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.add.reduce, slices))   # warm-up: threads started, TLB touched
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.add.reduce, slices))
            rates.append(buffer.nbytes / (time.perf_counter() - start) / 1e9)
    return {"threads": threads, "mib": mib, "gbps": max(rates),
            "gbps_median": float(np.median(rates)), "passes": rates}


def combine(probes: List[Tuple[str, Dict]]) -> Dict:
    """The probes of one run, each (when, probe()) with the same threads and mib, as one:
    "gbps" the best pass of all, "gbps_median" the median of all passes, "samples" each
    probe's {"when", "gbps", "gbps_median"}. ValueError for no probes or mixed settings."""
    if not probes:
        raise ValueError("bandwidth.combine needs at least one probe")
    first = probes[0][1]
    if any((p["threads"], p["mib"]) != (first["threads"], first["mib"]) for _, p in probes):
        raise ValueError("bandwidth.combine: the probes' threads and mib differ")
    rates = [rate for _, p in probes for rate in p["passes"]]
    return {"threads": first["threads"], "mib": first["mib"], "gbps": max(rates),
            "gbps_median": float(np.median(rates)), "passes": rates,
            "samples": [{"when": when, "gbps": p["gbps"], "gbps_median": p["gbps_median"]}
                        for when, p in probes]}
