"""The sizes section of ``python -m bench``: speed at released model shapes and at
several thread counts (``--sections sizes``; bench-only, never in CI).

Models (``bench/shapes_gguf.py``: released shapes, seeded random weights, written once
under the metalrt cache): Llama-3.2-1B Q4_K_M and Q8_0, Llama-3.1-8B Q4_K_M, and
Qwen3-30B-A3B Q4_K_M cut to CUT_LAYERS (its 48 layers do not fit a 23 GB machine beside
two engines); the 48-layer figure is scaled from the two cuts (``scaled_moe``).

``--sizes-models`` picks some of MODELS (``model_names`` spellings); ``--sizes-small``
measures SMALL_FULL / SMALL_SCALING instead (a loaded machine). The chart of a run:
``bench/sizes_chart.py``.

At ``--threads``: prefill (FULL prompt lengths) and decode tok/s and peak RSS, for
metalrt on the CPU and llama.cpp (and transformers bf16 for the 1B Q4_K_M), each engine
in its own worker (``bench/generation.py``) on the same file, prompt ids and threads.
At every other count of ``--scaling-threads``: decode only (SCALING sizes). Per thread
count, a bandwidth probe on that many threads (``bench/bandwidth.py``, before and after
its rows) is the decode ceiling: decode GB/s = weight bytes a decode token reads
(``decode_weight_bytes``) x decode tok/s.

Greedy ids: both engines decode from the same prompt; ``agree`` is how many of the
first 16 ids are equal. Random weights give small logit margins, so a split after a
near-tie is possible and is shown, not hidden.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from . import bandwidth, peers, shapes_gguf

FULL = {"prompt_lengths": [128, 512], "decode_tokens": 32}
SCALING = {"prompt_lengths": [16], "decode_tokens": 32}
# --sizes-small: a loaded 2-core machine (the prefill at 128 only; 16 decode tokens, as many
# as the greedy-id comparison reads).
SMALL_FULL = {"prompt_lengths": [128], "decode_tokens": 16}
SMALL_SCALING = {"prompt_lengths": [16], "decode_tokens": 16}
CUT_LAYERS = (4, 8)                       # the Qwen3-30B-A3B cuts
MODELS = [("llama-3.2-1b", "q4_k_m", None), ("llama-3.2-1b", "q8_0", None),
          ("llama-3.1-8b", "q4_k_m", None),
          *[("qwen3-30b-a3b", "q4_k_m", n) for n in CUT_LAYERS]]
AGREE_STEPS = 16


def model_key(key: str, quant: str, layers: Optional[int]) -> str:
    return f"{key}{f'-{layers}l' if layers else ''} {quant}"


def model_names() -> List[str]:
    """The ``--sizes-models`` spelling of MODELS: ``key[-<n>l]:quant``."""
    return [model_key(*m).replace(" ", ":") for m in MODELS]


def selected_models(names: Optional[List[str]]) -> List[tuple]:
    """The MODELS rows ``names`` (``model_names`` spellings) pick, in MODELS order; all
    of them for None or []. Raises ValueError naming the known ones for an unknown name."""
    if not names:
        return list(MODELS)
    unknown = sorted(set(names) - set(model_names()))
    if unknown:
        raise ValueError(f"unknown sizes models {unknown}; known: {', '.join(model_names())}")
    return [m for m in MODELS if model_key(*m).replace(" ", ":") in names]


def decode_weight_bytes(shape: shapes_gguf.Shape, quant: str) -> int:
    """Weight bytes one decode token reads: every tensor once, but one row of the
    embedding gather (plus the whole table when it is the tied head) and, of each
    layer's stacked experts, the ``experts_used`` a token is routed to."""
    total = 0
    for name, dims, kind in shapes_gguf.tensor_plan(shape, quant):
        count = int(np.prod(dims))
        size = count * 4 if kind == "F32" else (
            count // shapes_gguf.BLOCKS[kind][0] * shapes_gguf.BLOCKS[kind][1])
        if name == "token_embd.weight":
            total += size // dims[0] + (size if shape.tied else 0)
        elif "_exps." in name:
            total += size * shape.experts_used // shape.experts
        else:
            total += size
    return total


def default_scaling_threads() -> List[int]:
    """1, 2, 4, ... up to the CPU count, and the CPU count."""
    cpus = os.cpu_count() or 1
    counts = [1 << i for i in range(cpus.bit_length()) if 1 << i <= cpus]
    return sorted(set(counts + [cpus]))


def engines_for(key: str, quant: str, layers: Optional[int]) -> List[tuple]:
    """(engine, variant) rows of one model: metalrt cpu and llama.cpp; transformers
    bf16 too for the 1B Q4_K_M."""
    rows = [("metalrt", "cpu"), ("llama.cpp", quant)]
    if (key, quant) == ("llama-3.2-1b", "q4_k_m"):
        rows.append(("transformers", "bf16"))
    return rows


def agree(a: List[int], b: List[int]) -> int:
    """How many leading ids of the two greedy sequences are equal (of AGREE_STEPS)."""
    n = 0
    for x, y in zip(a[:AGREE_STEPS], b[:AGREE_STEPS]):
        if x != y:
            break
        n += 1
    return n


def scaled_moe(rows: List[Dict]) -> List[Dict]:
    """Qwen3-30B-A3B at its 48 layers, per engine and thread count, from the decode
    step times s4, s8 of the two cuts: per layer (s8 - s4) / 4, then
    s48 = s8 + 40 * per layer (the embedding and head are in both cuts once). No row where
    the 8-layer cut decoded faster than the 4-layer one (noise, not a figure)."""
    released = shapes_gguf.SHAPES["qwen3-30b-a3b"].layers
    lo, hi = CUT_LAYERS
    out = []
    by = {(r["model"], r["engine"], r["threads"]): r for r in rows if r.get("decode_tps")}
    for (model, engine, threads), r in by.items():
        if model != model_key("qwen3-30b-a3b", "q4_k_m", hi):
            continue
        other = by.get((model_key("qwen3-30b-a3b", "q4_k_m", lo), engine, threads))
        if not other or "median" not in r["decode_tps"] or "median" not in other["decode_tps"]:
            continue
        s_hi, s_lo = 1 / r["decode_tps"]["median"], 1 / other["decode_tps"]["median"]
        per_layer = (s_hi - s_lo) / (hi - lo)
        if per_layer <= 0:
            continue   # the longer cut was the faster (a noisy run): no per-layer figure
        s_full = s_hi + (released - hi) * per_layer
        shape = shapes_gguf.SHAPES["qwen3-30b-a3b"]
        out.append({"model": model_key("qwen3-30b-a3b", "q4_k_m", None) + " (scaled from cuts)",
                    "engine": engine, "threads": threads, "decode_tps_scaled": 1 / s_full,
                    "per_layer_ms": per_layer * 1e3, "fixed_ms": (s_hi - hi * per_layer) * 1e3,
                    "bytes_per_token": decode_weight_bytes(shape, "q4_k_m")})
    return out


def run(args, save: Callable[[Dict], None], run_worker, prompt_ids) -> Dict:
    """The section; ``save(section)`` after every row. ``run_worker`` and
    ``prompt_ids`` are the bench's (``bench/__main__.py``)."""
    from metalrt.loaders import load_model_files

    threads_list = sorted(set(args.scaling_threads) | {args.threads})
    small = getattr(args, "sizes_small", False)
    full, scaling = (SMALL_FULL, SMALL_SCALING) if small else (FULL, SCALING)
    section = {"full": full, "scaling": scaling, "small": small, "threads": threads_list, "main_threads": args.threads,
               "runs": args.runs, "models": {}, "probes": {}, "rows": []}
    available = peers.availability(args.peers_venv, ["llama.cpp", "transformers"],
                                   min(args.timeout, 300))
    python = str(peers.python_of(args.peers_venv))
    files = {}
    models = selected_models(getattr(args, "sizes_models", None))
    for key, quant, layers in models:
        shape = shapes_gguf.shape_of(key, layers)
        path = shapes_gguf.ensure(key, quant, layers)
        files[(key, quant, layers)] = path
        section["models"][model_key(key, quant, layers)] = {
            "file": str(path), "file_bytes": path.stat().st_size, "layers": shape.layers,
            "released_layers": shape.released_layers or shape.layers,
            "bytes_per_token": decode_weight_bytes(shape, quant)}
    save(section)
    for threads in sorted(threads_list, key=lambda t: t != args.threads):
        sizes = full if threads == args.threads else scaling
        probes = [("start", bandwidth.probe(threads))]
        for key, quant, layers in models:
            path = str(files[(key, quant, layers)])
            tokenizer = load_model_files(path).tokenizer
            prompts = {str(n): prompt_ids(tokenizer, n) for n in sizes["prompt_lengths"]}
            for engine, variant in engines_for(key, quant, layers):
                name = model_key(key, quant, layers)
                row = {"model": name, "engine": engine, "variant": variant, "threads": threads}
                if engine == "transformers" and threads != args.threads:
                    continue   # the 1B's transformers row is at --threads only
                if engine != "metalrt" and engine not in getattr(args, "peers", [engine]):
                    continue   # --peers leaves it out
                if engine != "metalrt" and not available[engine]["available"]:
                    row["reason"] = available[engine]["reason"]
                    section["rows"].append(row)
                    save(section)
                    continue
                spec = {"engine": engine, "variant": variant, "gguf": path, "threads": threads,
                        "runs": args.runs, "prompts": prompts, **sizes}
                if engine == "transformers":
                    reason = export(args, python, path, threads)
                    if reason:
                        section["rows"].append(dict(row, reason=reason))
                        continue
                    spec["hf_dir"] = hf_dir(args, path)
                print(f"bench: sizes: {name} {engine} {variant}, {threads} threads", file=sys.stderr)
                start = time.time()
                row.update(run_worker(python if engine != "metalrt" else sys.executable,
                                      "bench.generation", spec, threads, args.timeout))
                # The worker's "threads" is its engine's own wording of the count.
                row["engine_threads"], row["threads"] = row.get("threads"), threads
                row["worker_seconds"] = round(time.time() - start, 1)
                derive(row, section["models"][name]["bytes_per_token"])
                section["rows"].append(row)
                save(section)
        probes.append(("end", bandwidth.probe(threads)))
        section["probes"][str(threads)] = bandwidth.combine(probes)
        for row in section["rows"]:
            if row["threads"] == threads and "decode_gbps" in row:
                row["probe_share"] = row["decode_gbps"] / section["probes"][str(threads)]["gbps"]
        section["agreement"] = agreement(section["rows"])
        section["scaled"] = scaled_moe(section["rows"])
        save(section)
    return section


def derive(row: Dict, bytes_per_token: int) -> None:
    """Adds the decode GB/s of a measured row."""
    decode = row.get("decode_tps") or {}
    if "median" in decode:
        row["decode_gbps"] = bytes_per_token * decode["median"] / 1e9


def agreement(rows: List[Dict]) -> List[Dict]:
    """Per model and thread count: the leading greedy ids metalrt and llama.cpp share."""
    ids = {(r["model"], r["threads"], r["engine"]): r.get("greedy_tokens") for r in rows}
    out = []
    for (model, threads, engine), mine in ids.items():
        theirs = ids.get((model, threads, "llama.cpp"))
        if engine == "metalrt" and mine and theirs:
            out.append({"model": model, "threads": threads, "agree": agree(mine, theirs),
                        "of": min(AGREE_STEPS, len(mine), len(theirs))})
    return out


def hf_dir(args, gguf: str) -> str:
    return str(args.peers_venv / (os.path.basename(gguf)[:-len(".gguf")] + "-hf"))


def export(args, python: str, gguf: str, threads: int) -> str:
    """The Hugging Face export of ``gguf`` for the transformers row (``bench/export_hf.py``);
    "" or the reason it failed."""
    from .__main__ import export_hf
    return export_hf(python, gguf, Path(hf_dir(args, gguf)), threads, args.timeout)
