"""python -m bench.speculative [--max-tokens N] [--k K] [--mtp-k K] [--runs N]
[--mtp-model DIR] [--out-dir DIR]: speculative decoding on the CPU, each mode against
plain decoding of the same model in the same run.

Two workloads, one after the other:

* the default model on a code snippet and the instruction to rewrite it with one
  change, so the answer repeats the prompt (prompt lookup's case): plain greedy
  decoding; prompt lookup ("ngram", k = --k); the default model as its own draft
  ("self-draft": every draft is accepted, so it shows the upper bound of acceptance
  and the drafting overhead);
* a model with a multi-token-prediction head (``mtp.*``; default: the tests' random
  Qwen3.5 twin ``tests/python/tiny_hybrid.py`` "qwen3_5_mtp", under
  ``<metalrt cache>/hybrid-fixtures/``) on a 32-token prompt of seeded random ids:
  plain against "mtp" (k = --mtp-k). The twin's head is crafted to predict its
  scaled-down target (a "bigram" head), so its acceptance is what that crafting
  makes it, not a trained head's.

Per mode: decode tokens/s (generated tokens after the first over the time after the
first token, the median of --runs, the modes of a workload interleaved so that load
changes hit them alike), drafted tokens accepted per verify step, and whether the
text equals plain decoding's. Greedy text is identical by construction; the check
runs on the f32 prefill arithmetic (METALRT_CPU_GEMM=f32), as the server test does,
because a verify step's attention over several query rows is the prefill attention.
Writes ``bench/results/speculative-<UTC timestamp>.json`` (with the load average
before and after) and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("METALRT_CPU_GEMM", "f32")

import numpy as np  # noqa: E402

import metalrt  # noqa: E402
from metalrt.cache import blocks_for  # noqa: E402
from metalrt.runner import Engine, SamplingParams  # noqa: E402
from metalrt.runner.speculative import SpeculativeConfig  # noqa: E402

from .__main__ import ROOT, load_average, machine  # noqa: E402

CODE = '''def total(prices, tax):
    result = 0
    for price in prices:
        result += price
    return result * (1 + tax)
'''
TASK = ("<|im_start|>user\nRewrite this code with one change: rename `result` to `acc`.\n\n"
        f"{CODE}<|im_end|>\n<|im_start|>assistant\n")


def measure(model, ids, max_tokens, spec):
    """(output ids, decode tokens/s, EngineStats) of one greedy request."""
    engine = Engine(model, model.kv_cache(blocks_for(len(ids) + max_tokens)), speculative=spec)
    try:
        request = engine.add_request(ids, SamplingParams(), max_tokens)
        first = None
        while engine.has_work:
            engine.step()
            if first is None and request.output:
                first = time.perf_counter(), len(request.output)
        elapsed = time.perf_counter() - first[0]
        return request.output, (len(request.output) - first[1]) / elapsed, engine.stats
    finally:
        engine.close()


def run_workload(name, model, ids, modes, max_tokens, runs):
    """The rows of one workload: every mode ``runs`` times, interleaved."""
    rates = {m: [] for m in modes}
    results = {}
    for _ in range(runs):
        for mode, spec in modes.items():
            output, rate, stats = measure(model, ids, max_tokens, spec)
            rates[mode].append(rate)
            results[mode] = (output, stats)
    plain = results["plain"][0]
    rows = []
    for mode, spec in modes.items():
        output, stats = results[mode]
        rows.append({
            "workload": name, "mode": mode, "prompt_tokens": len(ids),
            "generated_tokens": len(output),
            "num_draft_tokens": None if spec is None else spec.num_draft_tokens,
            "decode_tok_s": statistics.median(rates[mode]), "decode_tok_s_runs": rates[mode],
            "accepted_per_verify": (stats.accepted_tokens / stats.verify_steps
                                    if stats.verify_steps else 0.0),
            "verify_steps": stats.verify_steps, "draft_tokens": stats.draft_tokens,
            "accepted_tokens": stats.accepted_tokens, "same_text": output == plain})
    return rows


def twin_path() -> str:
    """The tests' Qwen3.5 MTP twin (built under the metalrt cache on first use)."""
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import tiny_hybrid

    return str(tiny_hybrid.path("qwen3_5_mtp"))


def print_table(rows) -> None:
    print(f"{'workload':<16} {'mode':<11} {'k':>2} {'decode tok/s':>12} {'vs plain':>9} "
          f"{'accepted/verify':>16} {'verify steps':>13} {'same text':>10}")
    plain = {r["workload"]: r["decode_tok_s"] for r in rows if r["mode"] == "plain"}
    for r in rows:
        print(f"{r['workload']:<16} {r['mode']:<11} {r['num_draft_tokens'] or '-':>2} "
              f"{r['decode_tok_s']:>12.1f} {r['decode_tok_s'] / plain[r['workload']]:>8.2f}x "
              f"{r['accepted_per_verify']:>16.2f} {r['verify_steps']:>13} "
              f"{str(r['same_text']):>10}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=4, help="num_draft_tokens of ngram, self-draft")
    parser.add_argument("--mtp-k", type=int, default=3, help="num_draft_tokens of mtp")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mtp-model", metavar="DIR", default=None,
                        help="a model with an MTP head (default: the tests' Qwen3.5 twin)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    for name in ("max_tokens", "k", "mtp_k", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    load_before = load_average()
    model, tokenizer = metalrt.load(device="cpu")
    rows = run_workload("default/rewrite", model, tokenizer.encode(TASK, add_special_tokens=False),
                        {"plain": None, "ngram": SpeculativeConfig("ngram", args.k),
                         "self-draft": SpeculativeConfig("draft", args.k, draft_model=model)},
                        args.max_tokens, args.runs)
    mtp_model = args.mtp_model or twin_path()
    model = metalrt.load(mtp_model, device="cpu")[0]
    ids = np.random.default_rng(0).integers(0, model.vocab_size, 32).tolist()
    rows += run_workload("mtp-twin/random", model, ids,
                         {"plain": None, "mtp": SpeculativeConfig("mtp", args.mtp_k)},
                         args.max_tokens, args.runs)
    load_after = load_average()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"speculative-{stamp}.json"
    out.write_text(json.dumps({
        "machine": machine(), "threads": os.environ.get("METALRT_CPU_THREADS", "default"),
        "load_average_before": load_before, "load_average_after": load_after,
        "max_tokens": args.max_tokens, "runs": args.runs, "mtp_model": mtp_model,
        "rows": rows}, indent=1))
    print(f"{args.max_tokens} tokens, median of {args.runs} runs, threads "
          f"{os.environ.get('METALRT_CPU_THREADS', 'default')}, load average "
          f"{load_before} -> {load_after}")
    print_table(rows)
    print(f"bench.speculative: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
