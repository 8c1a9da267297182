"""Memory read-bandwidth probe: the bytes/s a threaded streaming read reaches on this
machine, the ceiling of a decode step (which reads every weight once per token).

``threads`` threads each sum their own contiguous slice of one buffer far larger than
the last-level cache (512 MiB by default) with ``numpy.add.reduce`` over uint64 (an
integer sum: SIMD loads and adds, no pairwise float tree; numpy releases the GIL in
it), all started together; GB/s = buffer bytes / wall time of the slowest slice, the
best of ``repeats`` passes (the machine may be shared; the best pass is the one the
least disturbed). Same thread count as the engines (``python -m bench --threads``).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict

import numpy as np


def probe(threads: int, mib: int = 512, repeats: int = 5) -> Dict:
    """{"threads", "mib", "gbps" (best pass), "gbps_median"}; ValueError for threads or
    mib < 1."""
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
    return {"threads": threads, "mib": mib, "gbps": max(rates), "gbps_median": float(np.median(rates))}
