"""An estimate, never a measurement, of decode tokens/s on named Apple GPUs.

Nobody can time metalrt on a Mac here, so the bench prints what the counted work of a
decode step implies on each chip: a step reads ``bytes_per_step`` bytes (the weight
bytes the sim's counters measured) at the chip's published memory bandwidth, and runs
``dispatches`` dependent dispatches (the sim's count), each costing a fixed
PER_DISPATCH_SECONDS of GPU time whatever its work:

    step seconds = bytes_per_step / bandwidth + dispatches * PER_DISPATCH_SECONDS
    tok/s        = 1 / step seconds   (the bandwidth-only roofline: bandwidth / bytes)

Left out, so the estimate is an upper bound for the GPU side: attention's growing K/V
reads, bandwidth below the peak (kernels reach some 60-85 % of it), and host time,
which the replayed, pipelined decode step (``metalrt.runner.decode_plans``) keeps off
the GPU's critical path. The GPU core count is listed, not modelled, though it
matters: 3 of a layer's 8 decode dispatches (its two RMSNorms and qkv_rope_cache)
launch one threadgroup, which no number of cores speeds up, and the GEMVs launch
4,608-12,288 threads, fewer than an M4 Max keeps resident (``bench/parallelism.py``
counts the serial chains of decode attention and the argmax).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

# Fixed GPU cost of one small dispatch in a dependent chain: 5.16 us was measured on an
# M2 Pro (github.com/antonellof/ferrox, thread 149); 3-10 us is the commonly quoted range.
PER_DISPATCH_SECONDS = 5e-6


@dataclass(frozen=True)
class Chip:
    name: str
    bandwidth_gb_s: float    # unified-memory bandwidth, 1e9 bytes/s
    gpu_cores: int           # of the configuration with that bandwidth
    source: str


# Apple's published figures, as reported at each chip's announcement.
CHIPS = (
    # 128-bit LPDDR4X-4266: 4266e6 transfers/s x 16 bytes; Apple's M2 announcement
    # gives M2's 100 GB/s as "50 percent more than M1". 8-core GPU configuration.
    Chip("M1", 68.25, 8, "Apple M1 (2020-11-10); M2 announcement, macrumors.com 2022-06-06"),
    Chip("M2", 100.0, 10, "Apple M2 announcement, macrumors.com 2022-06-06"),
    Chip("M3 Pro", 150.0, 18, "Apple M3 Pro spec sheet, macrumors.com 2023-10-31"),
    Chip("M4 Max", 546.0, 40, "Apple M4 Max announcement, macrumors.com 2024-10-30"),
)

# mlx-lm decode figures published for the default model (SmolLM2-135M) on these chips:
# none was found (search of public pages, 2026-12-01), so none is printed.
MLX_LM_PUBLISHED: Dict[str, Optional[float]] = {chip.name: None for chip in CHIPS}


def estimate(bytes_per_step: int, dispatches: int,
             per_dispatch_seconds: float = PER_DISPATCH_SECONDS) -> List[Dict]:
    """One row per chip: the roofline and the estimate with dispatch cost, tok/s.
    Raises ValueError for a non-positive byte count or a negative dispatch count."""
    if bytes_per_step <= 0 or dispatches < 0:
        raise ValueError(f"[metal estimate] needs bytes_per_step > 0 and dispatches >= 0, "
                         f"got {bytes_per_step} and {dispatches}")
    rows = []
    for chip in CHIPS:
        memory_seconds = bytes_per_step / (chip.bandwidth_gb_s * 1e9)
        step_seconds = memory_seconds + dispatches * per_dispatch_seconds
        rows.append({"chip": chip.name, "bandwidth_gb_s": chip.bandwidth_gb_s,
                     "gpu_cores": chip.gpu_cores, "source": chip.source,
                     "roofline_tok_s": 1.0 / memory_seconds,
                     "estimate_tok_s": 1.0 / step_seconds,
                     "dispatch_share": dispatches * per_dispatch_seconds / step_seconds,
                     "mlx_lm_published_tok_s": MLX_LM_PUBLISHED[chip.name]})
    return rows
