"""End-to-end generation timing of one engine, run as its own process:

    python -m bench.generation SPEC.json      # prints its result as JSON lines

The same script runs metalrt (in metalrt's interpreter) and every peer (in the peers'
venv, where metalrt is not installed), so it imports an engine's library only inside
that engine's class. Every engine gets the same prompt token ids (made by the caller
with metalrt's tokenizer of the default GGUF), the same thread count, and decodes
greedily without stopping at eos.

Per run: a prefill of each prompt length into a fresh cache (seconds until the first
token's logits are on the host), and, after the first prompt, ``decode_tokens``
one-token forward passes, each followed by its greedy argmax. Figures are the median,
min and max over ``runs`` runs after one warm-up run; peak memory is the process's
peak resident set (``peak_memory_bytes``) at the end, weights included.

Output: one JSON line under RESULT_KEY after every measured run, flushed at once, so
that a worker killed part-way (a timeout) leaves the runs it finished. Every line but
the last carries ``"partial": true``; the last is the result. A summary of fewer than
MIN_RUNS runs has only its ``runs``: a median of one or two runs would pass for a
figure it is not.
"""
from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from typing import Dict, List, Sequence


# The key of the worker's result lines: a library may print JSON of its own.
RESULT_KEY = "metalrt_bench_result"
MIN_RUNS = 3   # the fewest runs a median (and min, max) is given for


class Engine:
    """prefill(ids) -> first token (logits of the last prompt row on the host);
    decode(token) -> next token, one forward pass over the cache of the prefill."""

    version = ""
    threads = ""   # the thread count the engine computes with, as it reports it

    def prefill(self, ids: Sequence[int]) -> int:
        raise NotImplementedError

    def decode(self, token: int) -> int:
        raise NotImplementedError


class MetalrtEngine(Engine):
    """metalrt's own runner (Engine, paged KV cache, on-device greedy argmax)."""

    def __init__(self, spec: Dict):
        import metalrt
        from metalrt.cache import blocks_for
        from metalrt.runner import Engine as Runner, SamplingParams

        self.version = metalrt_version()
        self.threads = f"{spec['threads']} (METALRT_CPU_THREADS)"
        self.device = spec["variant"]
        self.model, _ = metalrt.load(spec.get("gguf"), device=self.device)
        self.decode_tokens = spec["decode_tokens"]
        self.cache = self.model.new_cache(blocks_for(max(spec["prompt_lengths"]) + self.decode_tokens))
        # What the cache holds (sliding-window layers: their window pool only).
        self.kv_bytes = self.cache.nbytes
        self._runner, self._params = Runner, SamplingParams()
        self.engine = None

    def prefill(self, ids):
        if self.engine is not None:
            self.engine.close()
        # One prompt in one step; max_tokens leaves room for every decode step.
        self.engine = self._runner(self.model, self.cache, max_batched_tokens=len(ids))
        self.engine.add_request(ids, self._params, max_tokens=self.decode_tokens + 1)
        return self.engine.step()[0].token

    def decode(self, token):
        return self.engine.step()[0].token


class TransformersEngine(Engine):
    """Hugging Face transformers + torch on the CPU, over the Hugging Face directory
    that transformers itself wrote from the GGUF (``hf_dir`` in the spec: its own
    dequantisation, saved once, because loading a GGUF through ``gguf_file=`` takes
    half a minute per process)."""

    def __init__(self, spec: Dict):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(spec["threads"])
        self.threads = f"{torch.get_num_threads()} (torch.get_num_threads)"
        self.torch = torch
        self.version = f"transformers {transformers.__version__}, torch {torch.__version__}"
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[spec["variant"]]
        self.model = AutoModelForCausalLM.from_pretrained(spec["hf_dir"], dtype=dtype).eval()
        self.past = None

    def _forward(self, ids, past):
        with self.torch.inference_mode():
            # logits_to_keep=1: the head runs on the last row only, as in metalrt.
            out = self.model(self.torch.tensor([ids]), past_key_values=past, use_cache=True,
                             logits_to_keep=1)
        self.past = out.past_key_values
        return int(out.logits[0, -1].argmax())

    def prefill(self, ids):
        return self._forward(list(ids), None)

    def decode(self, token):
        return self._forward([token], self.past)


class MlxEngine(Engine):
    """MLX's CPU build with mlx-lm, over the Hugging Face directory that transformers
    wrote from the GGUF (``hf_dir`` in the spec)."""

    def __init__(self, spec: Dict):
        import mlx.core as mx
        from importlib.metadata import version
        from mlx_lm import load
        from mlx_lm.models.cache import make_prompt_cache

        self.mx, self.make_cache = mx, make_prompt_cache
        mx.set_default_device(mx.cpu)
        self.version = f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}"
        # MLX has no thread-count setting; its Linux CPU build's BLAS (netlib) is
        # single-threaded.
        self.threads = "not settable in MLX"
        self.model, _ = load(spec["hf_dir"])
        self.cache = None

    def _forward(self, ids):
        logits = self.model(self.mx.array([ids]), cache=self.cache)
        token = self.mx.argmax(logits[0, -1])
        self.mx.eval(token)
        return int(token.item())

    def prefill(self, ids):
        # As mlx-lm's generate does: the prompt but its last token fills the cache
        # (the lazy graph never computes those rows' logits), then the last token.
        self.cache = self.make_cache(self.model)
        if len(ids) > 1:
            self.model(self.mx.array([list(ids[:-1])]), cache=self.cache)
            self.mx.eval([c.state for c in self.cache])
        return self._forward([ids[-1]])

    def decode(self, token):
        return self._forward([token])


class LlamaCppEngine(Engine):
    """llama.cpp through llama-cpp-python on the same GGUF (its Q4_1 kernels)."""

    def __init__(self, spec: Dict):
        import llama_cpp
        import numpy as np

        self.np, self.llama_cpp = np, llama_cpp
        self.version = f"llama-cpp-python {llama_cpp.__version__}"
        self.threads = f"{spec['threads']} (n_threads, n_threads_batch)"
        longest = max(spec["prompt_lengths"])
        self.llm = llama_cpp.Llama(
            model_path=spec["gguf"], n_ctx=longest + spec["decode_tokens"] + 16,
            n_batch=longest, n_ubatch=longest, n_threads=spec["threads"],
            n_threads_batch=spec["threads"], logits_all=False, verbose=False)

    def _argmax(self):
        # With logits_all=False, Llama.eval keeps no scores (its sampler reads the
        # context directly), so the last row's logits are read from the context.
        row = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return int(self.np.argmax(self.np.ctypeslib.as_array(row, shape=(self.llm.n_vocab(),))))

    def prefill(self, ids):
        self.llm.reset()
        self.llm.eval(list(ids))
        return self._argmax()

    def decode(self, token):
        self.llm.eval([token])
        return self._argmax()


ENGINES = {"metalrt": MetalrtEngine, "transformers": TransformersEngine, "mlx": MlxEngine,
           "llama.cpp": LlamaCppEngine}


def metalrt_version() -> str:
    from importlib.metadata import version
    return f"metalrt {version('metalrt')}"


def peak_memory_bytes() -> int:
    """This process's peak resident set. On Linux ``VmHWM`` of /proc/self/status:
    ``ru_maxrss`` would not do, because Linux carries it across fork and exec, so
    every worker would report at least the RSS of the bench process that started it. Elsewhere ``ru_maxrss`` (bytes on
    macOS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024)


def summary(values: List[float]) -> Dict:
    """median, min, max of per-run figures, and the runs themselves; the runs alone
    when there are fewer than MIN_RUNS."""
    if len(values) < MIN_RUNS:
        return {"runs": list(values)}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": list(values)}


def run(spec: Dict, progress=lambda partial: None) -> Dict:
    """The result of ``spec``'s runs; ``progress(result)`` gets the result of the runs
    finished so far (``"partial": True``) after every measured run but the last."""
    engine = ENGINES[spec["engine"]](spec)
    prompts = {int(n): ids for n, ids in spec["prompts"].items()}
    first = min(prompts)
    prefill = {n: [] for n in prompts}
    decode = []
    tokens = []
    for r in range(spec["runs"] + 1):   # run 0 is the warm-up
        for n, ids in sorted(prompts.items()):
            start = time.perf_counter()
            token = engine.prefill(ids)
            elapsed = time.perf_counter() - start
            if r:
                prefill[n].append(n / elapsed)
            if n != first:
                continue
            generated = [token]
            start = time.perf_counter()
            for _ in range(spec["decode_tokens"]):
                generated.append(engine.decode(generated[-1]))
            elapsed = time.perf_counter() - start
            if r:
                decode.append(spec["decode_tokens"] / elapsed)
            tokens = generated
        if 0 < r < spec["runs"]:
            progress(dict(_result(engine, prefill, decode, tokens, spec), partial=True))
    return _result(engine, prefill, decode, tokens, spec)


def _result(engine: Engine, prefill: Dict[int, List[float]], decode: List[float],
            tokens: List[int], spec: Dict) -> Dict:
    return {
        "version": engine.version,
        "threads": engine.threads,
        "prefill_tps": {str(n): summary(v) for n, v in prefill.items()},
        "decode_tps": summary(decode),
        "decode_tokens": spec["decode_tokens"],
        "peak_memory_gb": peak_memory_bytes() / 1e9,
        **({"kv_bytes": engine.kv_bytes} if getattr(engine, "kv_bytes", None) else {}),
        "greedy_tokens": tokens[:16],
    }


def emit(result: Dict) -> None:
    """Prints ``result`` as the tagged line the bench reads, at once (not when a
    pipe's buffer fills: a worker killed later keeps it)."""
    print(json.dumps({RESULT_KEY: result}), flush=True)


def main(argv: List[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    emit(run(spec, progress=emit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
