"""python -m bench.speculative [--max-tokens N] [--k K] [--runs N] [--mtp-model DIR]:
speculative decoding on the default model (CPU), each mode against plain decoding in the
same run.

Task: a code snippet and the instruction to rewrite it with one change, so the answer
repeats the prompt (prompt lookup's case). Modes: plain greedy decoding; prompt lookup
("ngram"); the default model as its own draft ("self-draft": every draft is accepted,
so it shows the upper bound of acceptance and the drafting overhead). Prints per mode
decode tokens/s (generated tokens after the first over the time after the first
token, the median of --runs), drafted tokens accepted per verify step, and whether the
text equals plain decoding's. Greedy text is identical by construction; the check
runs on the f32 prefill arithmetic (METALRT_CPU_GEMM=f32), as the server test does,
because a verify step's attention over several query rows is the prefill attention.

``--mtp-model DIR``: instead, a model with a multi-token-prediction head (``mtp.*``) on
a 32-token prompt of seeded random ids: plain decoding against ``mtp``. The tests'
random twins (``tests/python/tiny_hybrid.py`` ``MTP_TWINS``, under
``<metalrt cache>/hybrid-fixtures/``) have heads whose acceptance is what their
crafting makes it, not a trained head's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("METALRT_CPU_GEMM", "f32")

import numpy as np  # noqa: E402

import metalrt  # noqa: E402
from metalrt.cache import blocks_for  # noqa: E402
from metalrt.runner import Engine, SamplingParams  # noqa: E402
from metalrt.runner.speculative import SpeculativeConfig  # noqa: E402

CODE = '''def total(prices, tax):
    result = 0
    for price in prices:
        result += price
    return result * (1 + tax)
'''
TASK = ("<|im_start|>user\nRewrite this code with one change: rename `result` to `acc`.\n\n"
        f"{CODE}<|im_end|>\n<|im_start|>assistant\n")


def measure(model, ids, max_tokens, spec):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=4, help="num_draft_tokens")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mtp-model", metavar="DIR", default=None,
                        help="a model with an MTP head: plain against 'mtp' on it")
    args = parser.parse_args()
    if args.mtp_model is None:
        model, tokenizer = metalrt.load(device="cpu")
        ids = tokenizer.encode(TASK, add_special_tokens=False)
        modes = {"plain": None, "ngram": SpeculativeConfig("ngram", args.k),
                 "self-draft": SpeculativeConfig("draft", args.k, draft_model=model)}
    else:
        model = metalrt.load(args.mtp_model, device="cpu")[0]
        ids = np.random.default_rng(0).integers(0, model.vocab_size, 32).tolist()
        modes = {"plain": None, "mtp": SpeculativeConfig("mtp", args.k)}
    rates = {m: [] for m in modes}
    results = {}
    for _ in range(args.runs):          # interleaved, so load changes hit every mode alike
        for mode, spec in modes.items():
            output, rate, stats = measure(model, ids, args.max_tokens, spec)
            rates[mode].append(rate)
            results[mode] = (output, stats)
    plain = results["plain"][0]
    print(f"{args.mtp_model or 'default model'}: prompt {len(ids)} tokens, {args.max_tokens} generated, k = {args.k}, "
          f"median of {args.runs} runs, threads {os.environ.get('METALRT_CPU_THREADS', 'default')}")
    print(f"{'mode':<11} {'decode tok/s':>12} {'accepted/verify':>16} {'verify steps':>13} "
          f"{'same text':>10}")
    for mode in modes:
        output, stats = results[mode]
        per = stats.accepted_tokens / stats.verify_steps if stats.verify_steps else 0.0
        print(f"{mode:<11} {statistics.median(rates[mode]):>12.1f} {per:>16.2f} "
              f"{stats.verify_steps:>13} {str(output == plain):>10}")


if __name__ == "__main__":
    main()
