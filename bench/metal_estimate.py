"""An estimate, never a measurement, of decode tokens/s on named Apple GPUs.

Nobody can time metalrt on a Mac here, so the bench prints what the counted work of a
decode step implies on each chip. The step is a chain of dependent dispatches; each
``Kernel`` (a profiler row of the simulated device: dispatches, threadgroups, threads
per threadgroup, the bytes its calls read, the serial steps of its busiest SIMD-group)
costs, per dispatch,

    per_dispatch_seconds + max(bytes / (bandwidth x efficiency),
                               waves x serial_steps x DEPENDENT_STEP_SECONDS)
    waves = ceil(threadgroups / (gpu_cores x resident threadgroups per core))

and tok/s = 1 / the sum over the step. ``bandwidth`` is the chip's published peak;
``efficiency`` the share of it llama.cpp's Llama-2-7B Q4_0 decode reached on that chip
(tg128 tok/s x the 3.82 GB file / bandwidth, llama.cpp discussion #4167), so the bytes
term is a decoder's achieved bandwidth, not the peak. ``per_dispatch_seconds`` is the
GPU time one small dependent dispatch added on an M2 Pro (5.16 us, ferrox's GitHub thread 149),
the only published figure, used for every chip. The chain term is the latency of a
small grid's serial work: one dependent step (a DRAM round trip and its arithmetic) is
DEPENDENT_STEP_SECONDS, an assumption (metal-perf-review's middle scenario), and a grid
with more threadgroups than the chip keeps resident runs in waves.

Dispatches that no ``Kernel`` describes (``estimate``'s remainder) count the dispatch
cost and their bytes only. Left out: host time (the replayed, pipelined decode step
keeps it off the GPU's critical path), thermals, caches. Every input but the chip
constants and DEPENDENT_STEP_SECONDS is counted on the simulated device; the result is
a central guess of about +-30 %, not a bound (docs/benchmarks.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

# GPU time of one small dispatch in a dependent chain: 5.16 us measured on an M2 Pro
# (github.com/antonellof/ferrox/issues/149, quoted in its PR #151); no other chip's
# figure was found.
PER_DISPATCH_SECONDS = 5.16e-6
# One dependent step of a serial chain: a DRAM round trip (~0.4-0.6 us, not measured)
# and its arithmetic; metal-perf-review.md's "mid" scenario.
DEPENDENT_STEP_SECONDS = 0.55e-6
# Threads one GPU core keeps resident: Metal's largest threadgroup (1,024) fits one core;
# register-heavy kernels hold fewer, light ones up to 3,072 (philipturner/metal-benchmarks).
RESIDENT_THREADS_PER_CORE = 1024
# llama.cpp discussion #4167: Llama-2-7B Q4_0 (3.56 GiB file) decode, tg128.
LLAMA_2_7B_Q4_0_BYTES = 3.56 * 2 ** 30


@dataclass(frozen=True)
class Chip:
    name: str
    bandwidth_gb_s: float    # unified-memory bandwidth, 1e9 bytes/s
    gpu_cores: int           # of the configuration with that bandwidth
    source: str
    llama_cpp_7b_q4_0_tok_s: float   # published decode, #4167: gives the efficiency
    per_dispatch_seconds: float = PER_DISPATCH_SECONDS

    @property
    def efficiency(self) -> float:
        """Achieved share of the peak bandwidth in llama.cpp's 7B Q4_0 decode."""
        return self.llama_cpp_7b_q4_0_tok_s * LLAMA_2_7B_Q4_0_BYTES / (self.bandwidth_gb_s * 1e9)


# Apple's published figures, as reported at each chip's announcement; decode from
# github.com/ggml-org/llama.cpp/discussions/4167 (build 8e672ef).
CHIPS = (
    # 128-bit LPDDR4X-4266: 4266e6 transfers/s x 16 bytes; Apple's M2 announcement
    # gives M2's 100 GB/s as "50 percent more than M1". 8-core GPU configuration.
    Chip("M1", 68.25, 8, "Apple M1 (2020-11-10); M2 announcement, macrumors.com 2022-06-06", 14.15),
    Chip("M2", 100.0, 10, "Apple M2 announcement, macrumors.com 2022-06-06", 21.91),
    Chip("M3 Pro", 150.0, 18, "Apple M3 Pro spec sheet, macrumors.com 2023-10-31", 30.74),
    Chip("M4 Max", 546.0, 40, "Apple M4 Max announcement, macrumors.com 2024-10-30", 83.06),
)
# Chips with published decode figures of 1B/8B models to check the estimate against
# (bench/decode_estimate.py); bandwidth and cores as #4167's table gives them.
CHECK_CHIPS = (
    Chip("M2 Pro", 200.0, 16, "llama.cpp discussion #4167's table", 37.87),
    Chip("M4", 120.0, 10, "llama.cpp discussion #4167's table", 24.11),
)


@dataclass(frozen=True)
class Kernel:
    """One kernel's dispatches in a decode step, totals over them: ``threadgroups``
    launched, ``bytes`` read (weights and KV), and per dispatch ``threads_per_threadgroup``
    and ``serial_steps`` (the dependent steps of its busiest SIMD-group: positions it
    walks, loads of one thread, or its collectives)."""
    name: str
    dispatches: int
    threadgroups: int
    threads_per_threadgroup: int
    bytes: int
    serial_steps: int

    def seconds(self, chip: Chip) -> Dict[str, float]:
        """{"dispatch", "memory", "chain"}: seconds on ``chip`` over all dispatches,
        memory and chain being the larger of the two per dispatch (the other is 0)."""
        if self.dispatches <= 0:
            return {"dispatch": 0.0, "memory": 0.0, "chain": 0.0}
        per_core = max(1, RESIDENT_THREADS_PER_CORE // max(1, self.threads_per_threadgroup))
        tgs = -(-self.threadgroups // self.dispatches)
        waves = -(-tgs // (chip.gpu_cores * per_core))
        chain = waves * self.serial_steps * DEPENDENT_STEP_SECONDS
        memory = self.bytes / self.dispatches / (chip.bandwidth_gb_s * 1e9 * chip.efficiency)
        n = self.dispatches
        return {"dispatch": n * chip.per_dispatch_seconds,
                "memory": n * memory if memory >= chain else 0.0,
                "chain": n * chain if chain > memory else 0.0}


def _check(bytes_per_step: int, dispatches: int, kv_bytes: int, kernels: Sequence[Kernel]) -> None:
    if bytes_per_step <= 0 or dispatches < 0 or kv_bytes < 0:
        raise ValueError(f"[metal estimate] needs bytes_per_step > 0, dispatches >= 0 and "
                         f"kv_bytes >= 0, got {bytes_per_step}, {dispatches} and {kv_bytes}")
    for k in kernels:
        if not isinstance(k, Kernel):
            raise TypeError(f"[metal estimate] kernels must be Kernel rows, got {type(k).__name__}")
    if sum(k.dispatches for k in kernels) > dispatches or sum(k.bytes for k in kernels) > bytes_per_step + kv_bytes:
        raise ValueError("[metal estimate] the kernels describe more dispatches or bytes than the step has: "
                         f"{sum(k.dispatches for k in kernels)} of {dispatches} dispatches, "
                         f"{sum(k.bytes for k in kernels)} of {bytes_per_step + kv_bytes} bytes")


def estimate(bytes_per_step: int, dispatches: int, kv_bytes: int = 0,
             kernels: Sequence[Kernel] = (), chips: Sequence[Chip] = CHIPS) -> List[Dict]:
    """One row per chip of a decode step that reads ``bytes_per_step`` weight bytes and
    ``kv_bytes`` KV-cache bytes in ``dispatches`` dependent dispatches, of which
    ``kernels`` describe some (or all) with their grids and serial steps; the rest are
    bandwidth-bound dispatches sharing the bytes left. Row keys: chip, bandwidth_gb_s,
    efficiency, gpu_cores, per_dispatch_us, source, roofline_tok_s (bytes at the peak
    bandwidth), bandwidth_tok_s (at the achieved bandwidth), estimate_tok_s, and the
    step's shares: dispatch_share, memory_share, chain_share. ValueError for
    non-positive bytes, negative counts, or kernels exceeding the step; TypeError for a
    kernel that is not a Kernel."""
    _check(bytes_per_step, dispatches, kv_bytes, kernels)
    total = bytes_per_step + kv_bytes
    rest = Kernel("rest", dispatches - sum(k.dispatches for k in kernels), 0, 1,
                  total - sum(k.bytes for k in kernels), 0)
    rows = []
    for chip in chips:
        parts = {"dispatch": 0.0, "memory": 0.0, "chain": 0.0}
        for k in (*kernels, rest):
            for key, s in k.seconds(chip).items():
                parts[key] += s
        if rest.dispatches == 0:   # bytes no kernel reads still cross the bus
            parts["memory"] += rest.bytes / (chip.bandwidth_gb_s * 1e9 * chip.efficiency)
        step = sum(parts.values())
        rows.append({"chip": chip.name, "bandwidth_gb_s": chip.bandwidth_gb_s,
                     "efficiency": chip.efficiency, "gpu_cores": chip.gpu_cores,
                     "per_dispatch_us": chip.per_dispatch_seconds * 1e6, "source": chip.source,
                     "roofline_tok_s": chip.bandwidth_gb_s * 1e9 / total,
                     "bandwidth_tok_s": chip.bandwidth_gb_s * 1e9 * chip.efficiency / total,
                     "estimate_tok_s": 1.0 / step,
                     **{f"{key}_share": s / step for key, s in parts.items()}})
    return rows

