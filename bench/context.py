"""The context section of ``python -m bench`` (``--sections context``; optional, minutes):
decode speed of the default model as the context grows, metalrt on the CPU against
llama.cpp, with the same KV cache types, file, prompt ids and threads.

Per engine and KV type (METALRT_KV_TYPES, LLAMA_CPP_KV_TYPES), in a worker process of its
own (``bench/context_worker.py``): the context filled to each of ``--context-lengths``
(default CONTEXTS) and, there, DECODE_TOKENS greedy decode steps timed. Lengths up to
``--context-prefill`` (default PREFILL_CONTEXT) are fresh fills, so each is a prefill
figure; a longer one extends the fill before it (its tail is computed after the earlier
context's cache), so the longest is not filled twice. llama.cpp runs with flash attention
on for every type (it needs it for a quantized V cache).

Contexts above the model's ``max_position_embeddings`` (8,192 for the default
SmolLM2-135M) are speed figures only: both engines run past it without RoPE scaling
(metalrt does not cap positions, llama.cpp warns about an ``n_ctx`` above its training
context), so the tokens decoded there are not meaningful text.

Also: the KV bytes per token of each type, measured from the cache object
(``bench/kv_bytes.py``) against ``kv_types.bytes_per_token``; and the Metal estimate per chip
(``bench/metal_estimate.py``) of a decode step at each context: the weight bytes and
dispatches of one decode step counted on the Metal device (the simulated one on Linux) plus
the context's K/V bytes (context x bytes per token), which the estimate itself leaves out.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Dict, List, Sequence

from . import metal_estimate, peers

CONTEXTS = (128, 4096, 16384, 32768)
PREFILL_CONTEXT = 16384
DECODE_TOKENS = 16
METALRT_KV_TYPES = ("float32", "float16", "q8_0")   # float32: #36's f16-or-f32 CPU default
LLAMA_CPP_KV_TYPES = ("float16", "q8_0")
MAX_CONTEXT = 1 << 20


def parse_contexts(text: str) -> List[int]:
    """Sorted distinct context lengths of a comma-separated list of positive integers (at
    most MAX_CONTEXT). ValueError naming what is expected."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not values or not all(0 < v <= MAX_CONTEXT for v in values):
        raise ValueError(f"expected context lengths in 1-{MAX_CONTEXT}, got {text!r}")
    return sorted(set(values))


def kv_bytes_check(per_token: Dict[str, tuple]) -> Dict[str, Dict]:
    """{kv type: {"measured", "formula", "equal"}} of ``kv_bytes.measured_per_token``'s
    {kv type: (measured bytes per token, formula)}."""
    return {t: {"measured": measured, "formula": formula, "equal": measured == formula}
            for t, (measured, formula) in per_token.items()}


def metal_rows(counts: Dict, bytes_per_token: int, contexts: Sequence[int]) -> List[Dict]:
    """Per context: the Metal estimate per chip of a decode step that reads the counted
    weight bytes plus ``context x bytes_per_token`` K/V bytes, with the counted
    dispatches (``counts``: ``context_worker.metal_counts``)."""
    return [{"context": c, "step_bytes": counts["weight_bytes"] + c * bytes_per_token,
             "chips": metal_estimate.estimate(counts["weight_bytes"] + c * bytes_per_token,
                                              counts["dispatches"])}
            for c in contexts]


def run(args, save: Callable[[Dict], None], run_worker, gguf: str, tokenizer, prompt_ids) -> Dict:
    """The section; ``save(section)`` after every row. ``run_worker`` and ``prompt_ids``
    are the bench's (``bench/__main__.py``)."""
    from metalrt.loaders import load_model_files

    from . import kv_bytes
    from .context_worker import PREFILL_CHUNK

    contexts = args.context_lengths
    trained = load_model_files(gguf).config.get("max_position_embeddings")
    section = {"contexts": contexts, "prefill_context": args.context_prefill,
               "decode_tokens": DECODE_TOKENS, "threads": args.threads,
               "max_position_embeddings": trained,
               "note": (f"contexts above max_position_embeddings ({trained}) are speed figures "
                        "only: both engines run past it without RoPE scaling"),
               "llama_cpp_settings": {"flash_attn": True, "n_batch": PREFILL_CHUNK,
                                      "n_ubatch": PREFILL_CHUNK},
               "metalrt_settings": {"max_batched_tokens": PREFILL_CHUNK, "prefix_caching": True},
               "rows": []}
    print(f"bench: context: {section['note']}", file=sys.stderr)
    per_token = kv_bytes_check(kv_bytes.measured_per_token(kv_bytes.PER_TOKEN_CONTEXT))
    section["kv_bytes_per_token"] = per_token
    save(section)
    prompt = prompt_ids(tokenizer, max(contexts))
    available = peers.availability(args.peers_venv, ["llama.cpp"], min(args.timeout, 300))
    python = str(peers.python_of(args.peers_venv))
    spec = {"gguf": gguf, "threads": args.threads, "contexts": contexts,
            "extend_from": args.context_prefill, "decode_tokens": DECODE_TOKENS, "prompt": prompt}
    # First the Metal estimate (seconds): a run stopped during the engine rows keeps it.
    section["metal"] = {}
    for kv_type in ("float16", "q8_0"):
        counts = run_worker(sys.executable, "bench.context_worker",
                            dict(spec, engine="metal_counts", kv_type=kv_type), args.threads,
                            args.timeout)
        if "reason" in counts:
            section["metal"][kv_type] = counts
            continue
        bpt = per_token[kv_type]["formula"]   # kv_types.bytes_per_token of the model
        section["metal"][kv_type] = {"counts": counts, "kv_bytes_per_token": bpt,
                                     "rows": metal_rows(counts, bpt, contexts)}
        save(section)
    jobs = [("metalrt", t) for t in METALRT_KV_TYPES] + \
        [("llama.cpp", t) for t in LLAMA_CPP_KV_TYPES if "llama.cpp" in args.peers]
    for engine, kv_type in jobs:
        row = {"engine": engine, "kv_type": kv_type}
        if engine != "metalrt" and not available[engine]["available"]:
            row["reason"] = available[engine]["reason"]
        else:
            print(f"bench: context: {engine} {kv_type}", file=sys.stderr)
            start = time.time()
            row.update(run_worker(sys.executable if engine == "metalrt" else python,
                                  "bench.context_worker", dict(spec, engine=engine, kv_type=kv_type),
                                  args.threads, args.timeout))
            row["worker_seconds"] = round(time.time() - start, 1)
        section["rows"].append(row)
        save(section)
    return section


def _tps(row: Dict, context: int, key: str) -> str:
    hit = next((r for r in row.get("rows", []) if r["context"] == context), None)
    return f"{hit[key]:.1f}" if hit else "-"


def context_table(section: Dict) -> str:
    """The section's printed tables: decode tok/s per context and fill tok/s per engine
    and KV type; KV bytes per token; the Metal estimate per chip and context."""
    contexts = section["contexts"]
    lines = [f"Long context ({section['threads']} threads; {section['note']}): decode tok/s "
             f"over {section['decode_tokens']} greedy steps at each context; fill tok/s of "
             f"fresh fills up to {section['prefill_context']} tokens (extend: the tail of a "
             "longer context after the earlier one's cache)"]
    head = ["engine", "kv"] + [f"decode @{c}" for c in contexts] + [f"fill @{c}" for c in contexts]
    rows = []
    for r in section["rows"]:
        if "rows" not in r:
            rows.append([r["engine"], r["kv_type"], r.get("reason", "no result")])
            continue
        rows.append([r["engine"], r["kv_type"]] + [_tps(r, c, "decode_tps") for c in contexts]
                    + [_tps(r, c, "fill_tps") + ("*" if any(x["context"] == c and x["extends"]
                                                            for x in r["rows"]) else "")
                       for c in contexts])
    width = [max(len(str(x[i])) if i < len(x) else 0 for x in [head] + rows) for i in range(len(head))]
    lines += ["  ".join(str(x).rjust(w) for x, w in zip(row, width)) for row in [head] + rows]
    lines.append("(* extend)  KV bytes per token, measured / formula: " + ", ".join(
        f"{t} {v['measured']:,.0f} / {v['formula']:,}" for t, v in section.get("kv_bytes_per_token", {}).items()))
    for kv_type, metal in section.get("metal", {}).items():
        if "rows" not in metal:
            lines.append(f"Metal estimate ({kv_type}): {metal.get('reason')}")
            continue
        chips = [c["chip"] for c in metal["rows"][0]["chips"]]
        lines.append(f"Metal estimate, decode tok/s ({kv_type} KV, {metal['counts']['dispatches']} "
                     "dispatches, an estimate, not a measurement): " + "; ".join(
                         f"@{r['context']} " + " ".join(f"{name} {c['estimate_tok_s']:.0f}"
                                                        for name, c in zip(chips, r["chips"]))
                         for r in metal["rows"]))
    return "\n".join(lines)
