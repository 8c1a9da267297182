"""One engine and KV type of the context section (``bench/context.py``), run as its own
process: ``python -m bench.context_worker SPEC.json``; it prints its result as a JSON
line under ``generation.RESULT_KEY``.

SPEC: {"engine": "metalrt" | "llama.cpp" | "metal_counts", "kv_type", "gguf", "threads",
"contexts", "decode_tokens", "prompt" (ids, at least the longest context)}.

The decode engines (metalrt on the CPU, llama.cpp through llama-cpp-python, in the peers'
venv where metalrt is not installed: each imports its library only in its own class) fill
the context in PREFILL_CHUNK-token chunks. Contexts up to ``extend_from`` are each a
fresh fill (timed: prefill tok/s); a longer context extends the fill before it (the
earlier context's positions stay in the cache; its decoded tokens are dropped), so the
longest one is never filled twice. First an untimed warm-up at the shortest context; at
every context: one untimed decode step (metalrt records its decode plan), then
``decode_tokens`` greedy steps, timed one by one.

"metal_counts" runs one decode step of the model on the Metal device (on Linux the
simulated one) with the profiler on: its dispatches and the weight bytes it read
(``bench/counters.py``), the counts the Metal estimate is made of.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Dict, List, Sequence

from .generation import emit, metalrt_version, peak_memory_bytes

# Prompt tokens per forward step, both engines: llama.cpp's default n_ubatch and metalrt's
# default max_batched_tokens.
PREFILL_CHUNK = 512
# llama.cpp's ggml_type numbers of the KV types (ggml.h), for type_k / type_v.
GGML_TYPES = {"float32": 0, "float16": 1, "q4_0": 2, "q8_0": 8, "bfloat16": 30}


class MetalrtContext:
    """metalrt's runner on the CPU, with prefix caching: an extension is a request whose
    prompt starts with the previous fill's prompt, so only its tail is computed (the
    worker checks ``prompt_tokens_cached``)."""

    def __init__(self, spec: Dict):
        import metalrt
        from metalrt.cache import blocks_for
        from metalrt.runner import Engine, SamplingParams

        self.version = metalrt_version()
        self.model, _ = metalrt.load(spec["gguf"], device="cpu", kv_type=spec["kv_type"])
        # The longest context, its decode steps and the earlier fill's partial block.
        self.cache = self.model.new_cache(blocks_for(max(spec["contexts"]) + spec["decode_tokens"] + 2) + 1)
        self.kv_bytes = self.cache.nbytes
        self._engine, self._params = Engine, SamplingParams()
        self.engine = None
        self.steps_left = spec["decode_tokens"] + 2   # the first token, the warm-up, the timed

    def fill(self, ids: Sequence[int], extend: bool) -> int:
        if not extend:
            if self.engine is not None:
                self.engine.close()
            self.engine = self._engine(self.model, self.cache, max_batched_tokens=PREFILL_CHUNK,
                                       prefix_caching=True)
        cached = self.engine.stats.prompt_tokens_cached
        self.engine.add_request(list(ids), self._params, max_tokens=self.steps_left)
        outs = []
        while not outs:
            outs = self.engine.step()
        self.cached = self.engine.stats.prompt_tokens_cached - cached
        return outs[0].token

    def decode(self, token: int) -> int:
        return self.engine.step()[0].token


class LlamaCppContext:
    """llama.cpp through llama-cpp-python on the same GGUF, its K and V cache of the KV
    type, flash attention on (llama.cpp needs it for a quantized V cache; set for every
    type, so the rows differ in the cache type only). An extension sets ``n_tokens``
    back to the earlier context (``Llama.eval`` drops the cache from there) and evaluates
    the tail."""

    def __init__(self, spec: Dict):
        import llama_cpp
        import numpy as np

        self.np, self.llama_cpp = np, llama_cpp
        self.version = f"llama-cpp-python {llama_cpp.__version__}"
        ggml_type = GGML_TYPES[spec["kv_type"]]
        # n_ctx above the GGUF's trained context: llama.cpp warns and runs (speed only).
        self.llm = llama_cpp.Llama(
            model_path=spec["gguf"], n_ctx=max(spec["contexts"]) + spec["decode_tokens"] + 16,
            n_batch=PREFILL_CHUNK, n_ubatch=PREFILL_CHUNK, n_threads=spec["threads"],
            n_threads_batch=spec["threads"], type_k=ggml_type, type_v=ggml_type,
            flash_attn=True, logits_all=False, verbose=False)
        self.length = 0

    def _argmax(self) -> int:
        row = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return int(self.np.argmax(self.np.ctypeslib.as_array(row, shape=(self.llm.n_vocab(),))))

    def fill(self, ids: Sequence[int], extend: bool) -> int:
        if extend:
            self.llm.n_tokens = self.length
            tail = list(ids[self.length:])
        else:
            self.llm.reset()
            tail = list(ids)
        self.cached = len(ids) - len(tail)
        self.llm.eval(tail)
        self.length = len(ids)
        return self._argmax()

    def decode(self, token: int) -> int:
        self.llm.eval([token])
        return self._argmax()


ENGINES = {"metalrt": MetalrtContext, "llama.cpp": LlamaCppContext}


def fill_plan(contexts: Sequence[int], extend_from: int) -> List[Dict]:
    """[{"context", "extends"}] in ascending context order: ``extends`` is the earlier
    context whose fill a context above ``extend_from`` continues (None: a fresh fill)."""
    plan, previous = [], None
    for context in sorted(set(contexts)):
        extends = previous if context > extend_from and previous is not None else None
        plan.append({"context": context, "extends": extends})
        previous = context
    return plan


def decode_figures(step_seconds: Sequence[float]) -> Dict:
    """tok/s of timed decode steps: over their sum, and of the median step."""
    return {"decode_tps": len(step_seconds) / sum(step_seconds),
            "decode_tps_median_step": 1.0 / statistics.median(step_seconds),
            "decode_steps": len(step_seconds)}


def measure(engine, prompt: Sequence[int], context: int, extends, decode_tokens: int) -> Dict:
    """Fills ``engine`` to ``context`` tokens of ``prompt`` (extending its fill of
    ``extends`` tokens, or fresh for None), then one untimed and ``decode_tokens`` timed
    greedy decode steps: the row of that context. RuntimeError when the fill reused
    fewer cached tokens than it extends (or any, fresh)."""
    start = time.perf_counter()
    token = engine.fill(prompt[:context], extends is not None)
    seconds = time.perf_counter() - start
    if engine.cached < (extends or 0) or (engine.cached and extends is None):
        raise RuntimeError(f"[context bench] the fill of {context} tokens reused {engine.cached} "
                           f"cached tokens, expected {extends or 0} or more for an extension and "
                           "0 for a fresh fill")
    computed = context - engine.cached
    token = engine.decode(token)   # untimed: metalrt records this position's decode plan
    times, tokens = [], [token]
    for _ in range(decode_tokens):
        start = time.perf_counter()
        tokens.append(engine.decode(tokens[-1]))
        times.append(time.perf_counter() - start)
    return {"context": context, "extends": extends, "fill_tokens": computed,
            "fill_seconds": seconds, "fill_tps": computed / seconds, **decode_figures(times),
            "greedy_tokens": tokens}


def run(spec: Dict, progress=lambda partial: None) -> Dict:
    """The rows of ``spec``'s contexts, after an untimed warm-up at the shortest;
    ``progress(result)`` after every context."""
    engine = ENGINES[spec["engine"]](spec)
    prompt, decode_tokens = spec["prompt"], spec["decode_tokens"]
    result = {"version": engine.version, "kv_type": spec["kv_type"], "rows": []}
    if getattr(engine, "kv_bytes", None):
        result["kv_bytes"] = engine.kv_bytes
    measure(engine, prompt, min(spec["contexts"]), None, decode_tokens)
    for step in fill_plan(spec["contexts"], spec["extend_from"]):
        result["rows"].append(measure(engine, prompt, step["context"], step["extends"], decode_tokens))
        result["peak_memory_gb"] = peak_memory_bytes() / 1e9
        progress(dict(result, partial=True))
    return result


def metal_counts(spec: Dict) -> Dict:
    """Dispatches and weight bytes of one decode step on the Metal device."""
    import metalrt
    from metalrt import profiler
    from metalrt.cache import blocks_for
    from metalrt.runner import Engine, SamplingParams

    from . import counters, weight_bytes

    model, _ = metalrt.load(spec["gguf"], device="metal", kv_type=spec["kv_type"])
    weights = weight_bytes.weight_tensors(model)
    engine = Engine(model, model.new_cache(blocks_for(64)), max_batched_tokens=8, decode_plans=False)
    engine.add_request(spec["prompt"][:4], SamplingParams(), max_tokens=3)
    try:
        engine.step()
        profiler.enable(True)
        step = counters.step_counts(engine, model, weights)
    finally:
        profiler.enable(False)
        engine.close()
    return {"device": metalrt.device_info("metal")["name"], "kv_type": spec["kv_type"],
            "dispatches": step["dispatches"], "weight_bytes": step["weight_bytes"]}


def main(argv: List[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    emit(metal_counts(spec) if spec["engine"] == "metal_counts" else run(spec, progress=emit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
