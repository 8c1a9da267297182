"""python -m bench.grammar_mask: time per token of a JSON-schema token mask, llguidance
against xgrammar, on a 151,936-token byte-level BPE vocabulary (Qwen2's size).

No tokenizer of that size ships with the fixtures, so the vocabulary is the default
model's (SmolLM2, 49,152 tokens) extended by merges: the pairs of its first tokens after
the bytes become new tokens, with their merges appended (lowest priority), until the
vocabulary has 151,936 entries. It stays a real BPE that ``tokenizers`` runs, with
multi-word tokens as a large vocabulary has.

One document valid for the schema (the server gate's nested schema) is tokenized; each
engine then computes the mask for every position and consumes the document's token,
on one thread. Reported: grammar compile time, and mask time per token (mean, median,
p99, in microseconds). Writes ``bench/results/grammar_mask-<UTC timestamp>.json``.
"""
from __future__ import annotations

import datetime
import json
import statistics
import time
from pathlib import Path

import numpy as np

VOCAB = 151_936
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "owner": {"type": "object",
                  "properties": {"id": {"type": "integer"}, "verified": {"type": "boolean"}},
                  "required": ["id", "verified"], "additionalProperties": False},
    },
    "required": ["name", "kind", "tags", "owner"],
    "additionalProperties": False,
}
DOCUMENT = {"name": "Whiskers the second of the house", "kind": "cat",
            "tags": ["indoor", "sleepy", "orange"], "owner": {"id": 4021, "verified": True}}


def large_tokenizer():
    """(tokenizers.Tokenizer with VOCAB tokens, eos id) built from the default model's."""
    import tokenizers

    from metalrt.loaders import load_model_files

    small = load_model_files().tokenizer
    spec = json.loads(small.backend.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    pieces = [t for t, i in sorted(vocab.items(), key=lambda kv: kv[1])[256:1000]]
    for a in pieces:
        for b in pieces:
            if len(vocab) >= VOCAB:
                break
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append([a, b] if isinstance(merges[0], list) else f"{a} {b}")
    # The added (special) tokens are entries of the small vocabulary: their ids stay.
    tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
    return tok, small.eos_token_ids[0]


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def summary(compile_s, times):
    us = [t * 1e6 for t in times]
    return {"compile_ms": compile_s * 1e3, "mask_us_mean": statistics.fmean(us),
            "mask_us_median": statistics.median(us), "mask_us_p99": percentile(us, 99),
            "tokens": len(us)}


def run_llguidance(tok, eos, ids):
    import llguidance
    import llguidance.numpy as lgn

    lt = llguidance.LLTokenizer(tok.to_str(), n_vocab=tok.get_vocab_size(), eos_token=eos)
    schema = {**SCHEMA, "x-guidance": {"whitespace_flexible": False,
                                       "item_separator": ", ", "key_separator": ": "}}
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(lt, llguidance.LLMatcher.grammar_from_json_schema(schema))
    mask = lgn.allocate_token_bitmask(1, lt.vocab_size)
    lgn.fill_next_token_bitmask(matcher, mask, 0)   # the first mask finishes compiling
    compile_s = time.perf_counter() - start
    matcher.reset()
    times = []
    for t in ids:
        begin = time.perf_counter()
        lgn.fill_next_token_bitmask(matcher, mask, 0)
        times.append(time.perf_counter() - begin)
        assert (mask[0, t // 32] >> (t % 32)) & 1, "llguidance refused the document"
        assert matcher.consume_token(t)
    return summary(compile_s, times)


def run_xgrammar(tok, eos, ids):
    import transformers
    import xgrammar as xgr

    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=tok.get_vocab_size(),
                                              stop_token_ids=[eos])
    start = time.perf_counter()
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(
        json.dumps(SCHEMA), any_whitespace=False, separators=(", ", ": "))
    matcher = xgr.GrammarMatcher(compiled)
    mask = xgr.allocate_token_bitmask(1, info.vocab_size)
    compile_s = time.perf_counter() - start
    times = []
    for t in ids:
        begin = time.perf_counter()
        matcher.fill_next_token_bitmask(mask)
        times.append(time.perf_counter() - begin)
        assert (int(mask[0, t // 32]) >> (t % 32)) & 1, "xgrammar refused the document"
        assert matcher.accept_token(t)
    return summary(compile_s, times)


def main() -> int:
    tok, eos = large_tokenizer()
    ids = tok.encode(json.dumps(DOCUMENT), add_special_tokens=False).ids
    print(f"vocabulary {tok.get_vocab_size()} tokens; document {len(ids)} tokens")
    results = {"vocab": tok.get_vocab_size(), "document_tokens": len(ids),
               "llguidance": run_llguidance(tok, eos, ids),
               "xgrammar": run_xgrammar(tok, eos, ids)}
    print(f"{'engine':<12}{'compile ms':>12}{'mean us':>10}{'median us':>11}{'p99 us':>10}")
    for name in ("llguidance", "xgrammar"):
        r = results[name]
        print(f"{name:<12}{r['compile_ms']:>12.1f}{r['mask_us_mean']:>10.1f}"
              f"{r['mask_us_median']:>11.1f}{r['mask_us_p99']:>10.1f}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (out / f"grammar_mask-{stamp}.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
