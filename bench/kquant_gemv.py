"""Decode GEMV (m = 1) GB/s of Q4_1, Q4_K and Q6_K weights (and MXFP4 in both
layouts, ``--formats mxfp4,mxfp4_gguf``) at Llama-3.2-1B and Llama-3.1-8B matrix shapes,
against the bandwidth probe (``bench/bandwidth.py``) on the same thread count:
``python -m bench.kquant_gemv --threads 1 [--formats q4_k,q6_k]``.

GB/s = the weight's packed bytes (with split MXFP4's scale tensor) / the best of the
repeats' wall times (the machine may be shared; the best is the least disturbed),
float32 activations, the fast CPU provider. Weights are ``bench/shapes_gguf.py``'s
random blocks (valid scales; MXFP4: random codes, E8M0 exponents 118..124); the timing
does not depend on the values. Prints one line per (format, shape) and a JSON
summary last.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Dict, List

import numpy as np

# (label, n, k): 1B q|o (2048x2048), gate|up (8192x2048), down (2048x8192), the tied
# head (128256x2048); 8B q|o (4096x4096), gate|up (14336x4096), down (4096x14336).
SHAPES = [("1b-qo", 2048, 2048), ("1b-up", 8192, 2048), ("1b-down", 2048, 8192),
          ("1b-head", 128256, 2048), ("8b-qo", 4096, 4096), ("8b-up", 14336, 4096),
          ("8b-down", 4096, 14336)]
FORMATS = ("q4_1", "q4_k", "q6_k")


def weight(fmt: str, n: int, k: int, rng):
    """A CPU QuantizedTensor [n, k] of random ``fmt`` codes with finite scales."""
    import metalrt
    if fmt == "mxfp4":
        return metalrt.quantized_tensor(fmt, (n, k), rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
                                        rng.integers(118, 125, (n, k // 32), dtype=np.uint8), device="cpu")
    return metalrt.quantized_tensor(fmt, (n, k), weight_bytes(fmt, n, k, rng), device="cpu")


def weight_bytes(fmt: str, n: int, k: int, rng) -> np.ndarray:
    """uint8 [n, row bytes] of random ``fmt`` blocks with finite scales."""
    from bench.shapes_gguf import random_blocks
    if fmt == "mxfp4_gguf":
        data = rng.integers(0, 256, (n, k // 32, 17), dtype=np.uint8)
        data[:, :, 0] = rng.integers(118, 125, (n, k // 32), dtype=np.uint8)
        return data.reshape(n, -1)
    if fmt == "q4_1":
        data = rng.integers(0, 256, (n, k // 32, 20), dtype=np.uint8)
        data[:, :, 0:2] = np.array([0.01], np.float16).view(np.uint8)
        data[:, :, 2:4] = np.array([-0.05], np.float16).view(np.uint8)
        return data.reshape(n, -1)
    return random_blocks(fmt.upper(), n * k, rng).reshape(n, -1)


def measure(formats: List[str], seconds: float = 1.0) -> List[Dict]:
    import metalrt
    from metalrt import ops
    rng = np.random.default_rng(1)
    rows = []
    for fmt in formats:
        for label, n, k in SHAPES:
            w = weight(fmt, n, k, rng)
            x = metalrt.asarray(rng.standard_normal((1, k), dtype=np.float32), device="cpu")
            ops.quantized_matmul_bt(x, w)
            times = []
            for _ in range(max(3, int(seconds * 20e9 / w.nbytes))):
                start = time.perf_counter()
                ops.quantized_matmul_bt(x, w)
                times.append(time.perf_counter() - start)
            rows.append({"format": fmt, "shape": label, "n": n, "k": k, "bytes": int(w.nbytes),
                         "gbps": w.nbytes / min(times) / 1e9,
                         "gbps_median": w.nbytes / float(np.median(times)) / 1e9})
            print(f"{fmt:5s} {label:8s} {n}x{k}: {rows[-1]['gbps']:.1f} GB/s "
                  f"(median {rows[-1]['gbps_median']:.1f})", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args()
    os.environ["METALRT_CPU_THREADS"] = str(args.threads)   # read when metalrt loads
    from bench.bandwidth import probe
    rows = measure(args.formats.split(","))
    bandwidth = probe(args.threads)
    for r in rows:
        r["probe_share"] = r["gbps"] / bandwidth["gbps"]
    print(json.dumps({"threads": args.threads, "probe_gbps": bandwidth["gbps"], "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
