"""Speed of the simulated Metal device: how long the sim takes to run a
2048x2048 f32 GEMV (one SIMD-group per row, simd_sum) and what one tiny dispatch
costs. These are CPU-simulation figures, not GPU performance figures; targets on
2 cores: GEMV < 20 ms, dispatch < 50 us.

    python bench/sim_speed.py [--repeats 5] [--dispatches 2000] [--json PATH]

"sim" times are the command buffers' GPU start-to-end times (what the workers
spent executing), "wall" times include Python and encoding, "cpu" is the process's
CPU time (all threads): on a machine shared with other work, cpu / workers is the
fairer estimate of what dedicated cores would take. Each figure: median of the
repeats after a warm-up, with min and max.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import metalrt

GEMV = r"""
#include <metal_stdlib>
using namespace metal;

// y[row] = W[row, :] . x, one SIMD-group per row, lanes striding along k.
kernel void gemv_f32(device const float* w [[buffer(0)]],
                     device const float* x [[buffer(1)]],
                     device float* y [[buffer(2)]],
                     constant uint& rows [[buffer(3)]],
                     constant uint& k [[buffer(4)]],
                     uint tg [[threadgroup_position_in_grid]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint sgs [[simdgroups_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const uint row = tg * sgs + sg;
  if (row >= rows) return;
  device const float* wr = w + ulong(row) * k;
  float acc = 0.0f;
  for (uint i = lane; i < k; i += 32) acc += wr[i] * x[i];
  acc = simd_sum(acc);
  if (lane == 0) y[row] = acc;
}

kernel void bump(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] += 1.0f;
}
"""


def _summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "runs": len(samples)}


def _gpu_seconds() -> float:
    return next(r["gpu_seconds"] for r in metalrt.profiler.rows() if r["name"] == "total")


def _timed(run) -> tuple[float, float, float]:
    """(sim, wall, process CPU) seconds of run() followed by a synchronize."""
    metalrt.synchronize("metal")
    metalrt.profiler.reset()
    start, cpu = time.perf_counter(), time.process_time()
    run()
    metalrt.synchronize("metal")
    return _gpu_seconds(), time.perf_counter() - start, time.process_time() - cpu


def run(repeats: int = 5, dispatches: int = 2000) -> dict:
    """Runs both measurements; returns the results as a dict (seconds)."""
    info = metalrt.device_info("metal")
    lib = metalrt.compile_shader(GEMV)
    n = 2048
    rng = np.random.default_rng(0)
    w_host = rng.standard_normal((n, n)).astype(np.float32)
    x_host = rng.standard_normal(n).astype(np.float32)
    w, x = metalrt.asarray(w_host, device="metal"), metalrt.asarray(x_host, device="metal")
    y = metalrt.asarray(np.full(n, np.nan, np.float32), device="metal")
    rows_per_group = 8   # 256 threads: 8 SIMD-groups, one row each

    def gemv():
        lib.gemv_f32(w, x, y, np.uint32(n), np.uint32(n), threadgroups=n // rows_per_group,
                     group_size=32 * rows_per_group)

    def tiny():
        for _ in range(dispatches):
            lib.bump(y, threads=32, group_size=32)

    was_enabled = metalrt.profiler.enabled()
    metalrt.profiler.enable(True)
    try:
        _timed(gemv)   # warm-up: compiles nothing, but touches stacks and caches
        gemv_runs = [_timed(gemv) for _ in range(repeats)]
        error = np.max(np.abs(y.numpy().astype(np.float64) - w_host.astype(np.float64) @ x_host))
        _timed(tiny)
        tiny_runs = [_timed(tiny) for _ in range(repeats)]
    finally:
        metalrt.profiler.enable(was_enabled)
    return {
        "device": info.get("name", "metal"),
        "threads": os.cpu_count(),
        "gemv_2048x2048_f32": {"sim_seconds": _summary([r[0] for r in gemv_runs]),
                               "wall_seconds": _summary([r[1] for r in gemv_runs]),
                               "cpu_seconds": _summary([r[2] for r in gemv_runs]),
                               "max_abs_error_vs_float64": float(error)},
        "dispatch": {"count": dispatches,
                     "sim_seconds_per_dispatch": _summary([r[0] / dispatches for r in tiny_runs]),
                     "wall_seconds_per_dispatch": _summary([r[1] / dispatches for r in tiny_runs]),
                     "cpu_seconds_per_dispatch": _summary([r[2] / dispatches for r in tiny_runs])},
        "load_average": os.getloadavg()[0],
    }


def _print_table(r: dict) -> None:
    g, d = r["gemv_2048x2048_f32"], r["dispatch"]
    print(f"simulated Metal device: {r['device']} ({r['threads']} CPUs) — CPU simulation, not GPU speed")
    print(f"{'measure':34} {'median':>10} {'min':>10} {'max':>10}  target")
    for label, s, scale, unit, target in [
            ("GEMV 2048x2048 f32, sim", g["sim_seconds"], 1e3, "ms", "< 20 ms"),
            ("GEMV 2048x2048 f32, wall", g["wall_seconds"], 1e3, "ms", ""),
            ("GEMV 2048x2048 f32, process CPU", g["cpu_seconds"], 1e3, "ms", ""),
            ("tiny dispatch, sim", d["sim_seconds_per_dispatch"], 1e6, "us", "< 50 us"),
            ("tiny dispatch, wall (incl. Python)", d["wall_seconds_per_dispatch"], 1e6, "us", ""),
            ("tiny dispatch, process CPU", d["cpu_seconds_per_dispatch"], 1e6, "us", "")]:
        print(f"{label:34} {s['median'] * scale:8.2f}{unit} {s['min'] * scale:8.2f}{unit} "
              f"{s['max'] * scale:8.2f}{unit}  {target}")
    print(f"GEMV max |error| vs float64: {g['max_abs_error_vs_float64']:.3g}; "
          f"machine load average {r['load_average']:.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Speed of the simulated Metal device.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dispatches", type=int, default=2000)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if not metalrt.is_available("metal"):
        print("no Metal device (real or simulated) is available", file=sys.stderr)
        return 1
    results = run(args.repeats, args.dispatches)
    _print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
