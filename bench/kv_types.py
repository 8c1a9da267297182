"""The KV cache types on the default model, CPU (``python -m bench.kv_types [contexts]``;
contexts default 1024,8192):

1. Accuracy: NMSE of the logits of the last 64 positions of a random-token prompt of each
   context, with the cache of each type, against the float32 cache.
2. Decode speed: greedy generation of 64 tokens after a 512-token prompt with each type
   (generation tokens-per-sec, median of 3 runs after a warm-up), and whether its ids
   equal the float32 cache's.

Output: a printed table and one JSON line (``{"kv_types": ...}``)."""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

import metalrt
from metalrt.cache import kv_types


def nmse(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


def prompt(n: int, seed: int = 7):
    return [int(t) for t in np.random.default_rng(seed).integers(100, 40000, n)]


def accuracy(model, contexts):
    rows = {}
    for context in contexts:
        ids = prompt(context)
        model.set_kv_type("float32")
        base = model.logits(ids)[-64:]
        for kv_type in kv_types.KV_TYPES[1:]:
            model.set_kv_type(kv_type)
            rows.setdefault(kv_type, {})[context] = nmse(model.logits(ids)[-64:], base)
    return rows


def decode(model, tokenizer, runs: int = 3):
    ids = prompt(512, seed=11)
    rows = {}
    for kv_type in kv_types.KV_TYPES:
        model.set_kv_type(kv_type)
        speeds, tokens = [], None
        for _ in range(runs + 1):
            out = list(metalrt.stream_generate(model, tokenizer, ids, max_tokens=64))
            speeds.append(out[-1].generation_tps)
            tokens = [r.token for r in out]
        rows[kv_type] = {"tokens": tokens, "generation_tps": statistics.median(speeds[1:])}
    return rows


def main(argv) -> int:
    contexts = [int(c) for c in argv[0].split(",")] if argv else [1024, 8192]
    model, tokenizer = metalrt.load(device="cpu")
    acc = accuracy(model, contexts)
    print("logits NMSE against the float32 cache: " + ", ".join(f"context {c}" for c in contexts))
    for kv_type, by_context in acc.items():
        print(f"  {kv_type:>8}: " + ", ".join(f"{by_context[c]:.2e}" for c in contexts), flush=True)
    speed = decode(model, tokenizer)
    reference = speed["float32"]["tokens"]
    print("CPU decode after a 512-token prompt (64 tokens): tokens/s, greedy ids equal to float32's")
    for kv_type, row in speed.items():
        print(f"  {kv_type:>8}: {row['generation_tps']:.1f} tok/s, equal: {row['tokens'] == reference}")
    print(json.dumps({"kv_types": {"nmse": acc, "decode": {
        t: {"generation_tps": r["generation_tps"], "greedy_equal": r["tokens"] == reference}
        for t, r in speed.items()}}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
