"""The references of the real-geometry twins (``real_geometry``): the prompts and the
loop that records each implementation's logits and greedy ids, importable both here and
in the bench's peers venv (numpy only), where ``run`` drives llama.cpp or mlx-lm."""
from __future__ import annotations

import numpy as np

VOCAB = 4096
PROMPT_LENGTHS = (40, 150)
GREEDY_STEPS = 8


def prompt(length: int) -> list[int]:
    """The prompt of ``length`` tokens every reference is computed on."""
    return np.random.default_rng(length).integers(0, VOCAB, length).tolist()


def reference_loop(step) -> dict:
    """``step(ids, fresh)`` -> logits [len(ids), VOCAB] of ``ids`` after what came before
    (``fresh``: from an empty cache). Returns ``logits_<L>`` float32 for every prompt of
    PROMPT_LENGTHS and ``greedy``: GREEDY_STEPS ids continuing the first."""
    out = {f"logits_{n}": np.asarray(step(prompt(n), True), np.float32) for n in PROMPT_LENGTHS}
    logits, greedy = step(prompt(PROMPT_LENGTHS[0]), True), []
    for _ in range(GREEDY_STEPS):
        greedy.append(int(np.argmax(np.asarray(logits)[-1])))
        logits = step([greedy[-1]], False)
    out["greedy"] = np.array(greedy)
    return out


def _llama_cpp_step(model: str):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model, n_ctx=256, n_threads=2, logits_all=True, verbose=False)

    def step(ids, fresh):
        if fresh:
            llm.reset()
        start = llm.n_tokens
        llm.eval(ids)
        return np.array(llm.scores[start:llm.n_tokens])
    return step


def _mlx_step(model: str):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    net, _ = load(model)
    state = {}

    def step(ids, fresh):
        if fresh:
            state["cache"] = make_prompt_cache(net)
        return np.array(net(mx.array([ids]), cache=state["cache"])[0].astype(mx.float32))
    return step


def run(model: str, peer: str) -> dict:
    """reference_loop of ``peer`` ("llama.cpp" or "mlx") on ``model``."""
    return reference_loop({"llama.cpp": _llama_cpp_step, "mlx": _mlx_step}[peer](model))
