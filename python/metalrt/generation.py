"""Text generation with the shape of mlx-lm's API: ``load``, ``generate``,
``stream_generate``, ``batch_generate``.

Prompts are strings (encoded with the tokenizer, which adds BOS when the model wants
one; no chat template is applied) or lists of token ids. Sampling arguments are
those of ``metalrt.runner.SamplingParams`` (see ``metalrt.runner.sampling`` for the
order in which they apply). Stop conditions: an eos id of the tokenizer, a stop
string (the text is cut before it), or ``max_tokens``.
"""
from __future__ import annotations

import collections.abc
import resource
import sys
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

import metalrt

from .cache import BLOCK_SIZE, blocks_for
from .loaders import load_model_files
from .models import CausalLM, build_model
from .prompt_cache import PromptCache
from .runner import Engine, SamplingParams
from .runner.speculative import SpeculativeConfig
from .runner.stopping import TextStream
from .tensor import check_int_range, is_int

Prompt = Union[str, Sequence[int]]


@dataclass(frozen=True)
class GenerationResponse:
    """One step of ``stream_generate``.

    text: the new text of this step (may be empty while a UTF-8 character or a
    possible stop string is incomplete); token: the sampled id; logprobs: float32 [V]
    log-softmax of the logits after the repetition penalty, or None unless asked;
    prompt_tokens / prompt_tps: prompt length and prefill speed (tokens/s);
    generation_tokens / generation_tps: tokens generated so far and their speed
    (tokens/s, first token excluded from the time); peak_memory: the process's peak
    resident memory in GB (1e9 bytes); finish_reason: "stop" (eos or stop string),
    "length" (max_tokens) or None while generation goes on; prompt_cached_tokens: prompt
    tokens taken from a ``prompt_cache`` instead of prefilled (not in mlx-lm).
    """

    text: str
    token: int
    logprobs: Optional[np.ndarray]
    prompt_tokens: int
    prompt_tps: float
    generation_tokens: int
    generation_tps: float
    peak_memory: float
    finish_reason: Optional[str]
    prompt_cached_tokens: int = 0


def resolve_device(device: str) -> str:
    """"cpu" and "metal" are taken as given; "auto" is "metal" when a Metal backend is
    available *and* it is a real Apple GPU (its name starts with "Apple"), else "cpu":
    the simulated Metal device is for testing kernels, not for speed. Raises
    ValueError for any other name."""
    if device not in ("auto", "cpu", "metal"):
        raise ValueError(f"[load] device must be 'auto', 'cpu' or 'metal', got '{device}'")
    if device != "auto":
        return device
    if metalrt.is_available("metal") and metalrt.device_info("metal")["name"].startswith("Apple"):
        return "metal"
    return "cpu"


_MODEL_DTYPES = ("float32", "float16", "bfloat16")


def load(path: Optional[str] = None, device: str = "auto", dtype: str = "float32",
         verbose: Optional[bool] = None, kv_type=None,
         layers: Optional[Tuple[int, int]] = None):
    """(model, tokenizer) from a ``.gguf`` file or a Hugging Face model directory
    (``config.json``, ``*.safetensors``, ``tokenizer.json``); ``path=None`` loads the
    default model (SmolLM2-135M-Instruct, fetched on first use). Weights are uploaded
    once to ``device`` ("auto" | "cpu" | "metal", see ``resolve_device``) in ``dtype``.
    ``verbose``: a ``tqdm`` bar on standard error of the weight files' bytes read and
    the rate: True always, None (the default) only when standard error is a terminal,
    False never (``metalrt.loaders.load_progress``). ``kv_type``: the KV cache's element
    types (llama.cpp's -ctk / -ctv): None (float16 on Metal for a float32 model, else the
    model's dtype: ``kv_types.device_default``), one of "float32",
    "float16", "bfloat16", "q8_0", "q4_0" (or f32 / f16 / bf16) for keys and values, or
    a (key, value) pair such as ("q8_0", "f16") (``metalrt.cache.kv_types``).
    ``layers``: (start, stop), build only those layers (a pipeline stage:
    ``models.CausalLM.stage_layers``).

    Raises FileNotFoundError for a missing path; PermissionError (an OSError) for a
    file without read permission; ValueError for truncated or corrupt files, unknown
    architectures (the model's own errors, a missing or mis-shaped tensor, end with
    "(in <path>)"), bad devices and a dtype other than "float32", "float16" or
    "bfloat16" (the dtypes the models compute in), an unknown ``kv_type`` or a quantized
    one for a head_dim that is not a multiple of 32; TypeError for a ``verbose`` that is
    not a bool or None.
    """
    if dtype not in _MODEL_DTYPES:
        raise ValueError(f"[load] dtype must be one of {', '.join(_MODEL_DTYPES)}, got {dtype!r}")
    device = resolve_device(device)
    files = load_model_files(path, verbose)
    try:
        model = build_model(files.config, files.weights, device, dtype, layers)
    except ValueError as e:
        # The model names the tensor or key; the file is the loader's to name.
        raise ValueError(f"{e} (in {files.source})") from None
    model.source = files.source   # a prompt cache's identity hashes these files
    model.set_kv_type(kv_type)
    return model, files.tokenizer


def peak_memory_gb() -> float:
    """Peak resident set size of this process in GB (ru_maxrss: KiB on Linux, bytes
    on macOS). macOS may account Metal buffers outside the resident set."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024) / 1e9


def prompt_ids(tokenizer, prompt: Prompt) -> List[int]:
    """Token ids of a string prompt (tokenizer.encode) or a sequence of int ids as given.
    TypeError for anything else (e.g. None or float ids); ValueError for an empty prompt
    or an id outside int32 (the runner's id dtype)."""
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, (collections.abc.Sequence, np.ndarray)) and all(is_int(t) for t in prompt):
        ids = [int(t) for t in prompt]
    else:
        raise TypeError("[generate] the prompt must be a str or a sequence of int token ids, "
                        f"got {type(prompt).__name__}")
    if not ids:
        raise ValueError("[generate] the prompt is empty")
    check_int_range(min(ids), max(ids), "int32", "[generate] prompt token id")
    return ids


def token_budget(model: CausalLM, ids: Sequence[int], max_tokens: int) -> int:
    """``max_tokens`` capped so the prompt and its continuation fit the model's context
    length (``max_position_embeddings``; llama.cpp likewise stops at its context), so a
    huge max_tokens cannot size a KV cache beyond what the model can attend to.
    TypeError for a max_tokens that is not an int; ValueError for max_tokens < 1 or a
    prompt that fills the context by itself."""
    if not is_int(max_tokens):
        raise TypeError(f"[generate] max_tokens must be an int, got {type(max_tokens).__name__}")
    if max_tokens < 1:
        raise ValueError(f"[generate] max_tokens must be >= 1, got {max_tokens}")
    context = model.context_length
    if context is None:
        return max_tokens
    if len(ids) >= context:
        raise ValueError(f"[generate] the prompt has {len(ids)} tokens; the model's context "
                         f"length is {context}, so no token can follow it")
    return min(max_tokens, context - len(ids))


def speculative_config(model: CausalLM, spec_type: Optional[str], draft_model,
                       num_draft_tokens: int, max_batched_tokens: int,
                       cache_tokens: int) -> Optional[SpeculativeConfig]:
    """The engine's speculation for the generation keywords: ``spec_type`` "ngram" |
    "draft" | "mtp" (None: "draft" when a ``draft_model`` is given, else no speculation),
    ``num_draft_tokens`` per verify step. ValueError / TypeError as
    ``SpeculativeConfig`` and ``Engine`` raise them (a draft of another vocabulary, "mtp"
    on a model without MTP tensors, a num_draft_tokens above the room of a step of
    ``max_batched_tokens`` or of the ``cache_tokens`` generation's cache), checked before
    any output."""
    if spec_type is None and draft_model is None:
        return None
    config = SpeculativeConfig(spec_type or "draft", num_draft_tokens, draft_model)
    Engine.check_speculative(model, config)
    Engine.check_room(num_draft_tokens, max_batched_tokens, cache_tokens)
    return config


def _engine(model: CausalLM, prompts: Sequence[Sequence[int]], budgets: Sequence[int],
            max_batched_tokens: int, speculative: Optional[SpeculativeConfig] = None,
            prompt_cache: Optional[PromptCache] = None) -> Engine:
    """An engine with room for the prompts and their budgets, and, with ``prompt_cache``,
    prefix caching with the cache's prefix in it (ValueError for a cache of another
    model or KV type)."""
    blocks = sum(blocks_for(len(p) + b) for p, b in zip(prompts, budgets))
    if prompt_cache is None:
        return Engine(model, model.kv_cache(blocks), max_batched_tokens, speculative=speculative)
    # Prompt caches hold every block of a prefix: sliding-window layers keep every position.
    engine = Engine(model, model.kv_cache(blocks + prompt_cache.num_blocks, window_blocks=None),
                    max_batched_tokens,
                    prefix_caching=True, speculative=speculative)
    try:
        prompt_cache.fill(engine)
    except BaseException:
        engine.close()
        raise
    return engine


def stream_generate(model: CausalLM, tokenizer, prompt: Prompt, max_tokens: int = 100, *,
                    temp: float = 0.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
                    repetition_penalty: float = 1.0, repetition_context_size: int = 20,
                    seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                    logprobs: bool = False, max_batched_tokens: int = 512,
                    spec_type: Optional[str] = None, draft_model=None, num_draft_tokens: int = 4,
                    prompt_cache: Optional[PromptCache] = None) -> Iterator[GenerationResponse]:
    """Generates up to ``max_tokens`` tokens after ``prompt``, yielding one
    GenerationResponse per token; the last has ``finish_reason`` set. The prompt is
    prefilled in chunks of at most ``max_batched_tokens`` tokens.

    Generation stops at the model's context length (``max_position_embeddings``) even
    when ``max_tokens`` would go further; ``finish_reason`` is then "length".

    The arguments are checked when ``stream_generate`` is called, before it returns the
    iterator (mlx-lm checks them at the first ``next``), so a bad setting fails before
    any output. Speculative decoding (``spec_type``, ``draft_model``,
    ``num_draft_tokens``: ``speculative_config``) changes the speed, not the greedy
    output nor the sampled distribution. ``prompt_cache`` (``make_prompt_cache``,
    ``load_prompt_cache``): the longest prefix of the prompt it holds is not prefilled,
    and after the generation it holds this prompt's (``metalrt.prompt_cache`` states how
    this differs from mlx-lm). Raises ValueError for an empty prompt, a prompt id outside int32, a
    prompt as long as the context, max_tokens < 1 or out-of-range sampling arguments, and
    TypeError for a max_tokens or sampling argument of the wrong type; OutOfBlocksError
    cannot occur (the cache is sized for the request). A ``prompt_cache`` of another
    model or KV type raises ValueError at the first ``next``, TypeError for one that is
    not a PromptCache at the call.
    """
    ids = prompt_ids(tokenizer, prompt)
    params = SamplingParams(temp, top_p, top_k, min_p, repetition_penalty,
                            repetition_context_size, seed, logprobs)
    budget = token_budget(model, ids, max_tokens)
    spec = speculative_config(model, spec_type, draft_model, num_draft_tokens, max_batched_tokens,
                              blocks_for(len(ids) + budget) * BLOCK_SIZE)
    if prompt_cache is not None and not isinstance(prompt_cache, PromptCache):
        raise TypeError("[generate] prompt_cache must be a PromptCache (make_prompt_cache, "
                        f"load_prompt_cache), got {type(prompt_cache).__name__}")
    return _stream(model, tokenizer, ids, params, budget, TextStream(tokenizer, stop),
                   max_batched_tokens, spec, prompt_cache)


def _stream(model: CausalLM, tokenizer, ids: List[int], params: SamplingParams, budget: int,
            text: TextStream, max_batched_tokens: int,
            spec: Optional[SpeculativeConfig],
            prompt_cache: Optional[PromptCache] = None) -> Iterator[GenerationResponse]:
    """The generator behind ``stream_generate``; its KV cache is allocated at the first
    ``next`` and freed when the generator ends or is closed."""
    engine = _engine(model, [ids], [budget], max_batched_tokens, spec, prompt_cache)
    try:
        request = engine.add_request(ids, params, budget, tokenizer.eos_token_ids)
        start = time.perf_counter()
        prompt_tps, first_token_time = 0.0, 0.0
        while not request.finished:
            for out in engine.step():
                n = out.generated
                now = time.perf_counter()
                if n == 1:
                    first_token_time = now
                    prompt_tps = len(ids) / (now - start)
                piece, stopped = text.add(out.token, out.finish_reason is not None)
                if stopped:
                    engine.abort(request, "stop")
                yield GenerationResponse(
                    text=piece, token=out.token, logprobs=out.logprobs,
                    prompt_tokens=len(ids), prompt_tps=prompt_tps, generation_tokens=n,
                    generation_tps=(n - 1) / (now - first_token_time) if n > 1 else 0.0,
                    peak_memory=peak_memory_gb(), finish_reason=request.finish_reason,
                    prompt_cached_tokens=request.num_cached_tokens)
                if stopped:   # a verify step's later tokens lie past the stop string
                    break
        if prompt_cache is not None:
            prompt_cache.update(engine, ids)
    finally:
        engine.close()


def generate(model: CausalLM, tokenizer, prompt: Prompt, max_tokens: int = 100,
             verbose: bool = False, **kwargs) -> str:
    """The text generated after ``prompt`` (``stream_generate``'s pieces joined).
    ``kwargs``: temp, top_p, top_k, min_p, repetition_penalty, seed, stop, ... as for
    ``stream_generate``. verbose: stream the text to stdout, then print prompt and
    generation tokens-per-sec and peak memory as mlx-lm does."""
    pieces = []
    last = None
    # Created first: bad arguments raise here, before the banner is printed.
    responses = stream_generate(model, tokenizer, prompt, max_tokens, **kwargs)
    if verbose:
        print("=" * 10)
    for last in responses:
        pieces.append(last.text)
        if verbose:
            print(last.text, end="", flush=True)
    if verbose and last is not None:
        print()
        print("=" * 10)
        print(f"Prompt: {last.prompt_tokens} tokens, {last.prompt_tps:.3f} tokens-per-sec")
        print(f"Generation: {last.generation_tokens} tokens, "
              f"{last.generation_tps:.3f} tokens-per-sec")
        print(f"Peak memory: {last.peak_memory:.3f} GB")
    return "".join(pieces)


def batch_generate(model: CausalLM, tokenizer, prompts: Sequence[Prompt], max_tokens: int = 100, *,
                   temp: float = 0.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
                   repetition_penalty: float = 1.0, repetition_context_size: int = 20,
                   seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                   max_batched_tokens: int = 512, verbose: bool = False,
                   spec_type: Optional[str] = None, draft_model=None,
                   num_draft_tokens: int = 4) -> List[str]:
    """Generates for all ``prompts`` together (prefill and decode of different prompts
    share forward steps) and returns one text per prompt, in order. With a seed,
    prompt i samples with seed + i, so it draws what it would draw alone with that
    seed; greedy results equal those of each prompt alone. TypeError when ``prompts`` is
    not a list (a str is one prompt: pass [text]) and ValueError when it is empty; each
    prompt and setting is checked as in ``stream_generate``."""
    if isinstance(prompts, str) or not isinstance(prompts, collections.abc.Sequence):
        raise TypeError("[batch_generate] prompts must be a list of prompts (str or token ids), "
                        f"got {type(prompts).__name__}")
    if not prompts:
        raise ValueError("[batch_generate] prompts is empty")
    all_ids = [prompt_ids(tokenizer, p) for p in prompts]
    budgets = [token_budget(model, ids, max_tokens) for ids in all_ids]
    spec = speculative_config(model, spec_type, draft_model, num_draft_tokens, max_batched_tokens,
                              sum(blocks_for(len(p) + b) for p, b in zip(all_ids, budgets))
                              * BLOCK_SIZE)
    engine = _engine(model, all_ids, budgets, max_batched_tokens, spec)
    try:
        requests, streams, texts = [], [], [[] for _ in all_ids]
        for i, ids in enumerate(all_ids):
            params = SamplingParams(temp, top_p, top_k, min_p, repetition_penalty,
                                    repetition_context_size, None if seed is None else seed + i)
            requests.append(engine.add_request(ids, params, budgets[i], tokenizer.eos_token_ids))
            streams.append(TextStream(tokenizer, stop))
        start, generated, ended = time.perf_counter(), 0, set()
        while engine.has_work:
            for out in engine.step():
                i = out.request.request_id   # the engine numbers requests 0, 1, ... in order
                if i in ended:   # a verify step's tokens past the stop string
                    continue
                piece, stopped = streams[i].add(out.token, out.finish_reason is not None)
                texts[i].append(piece)
                generated += 1
                if stopped:
                    engine.abort(out.request, "stop")
                    ended.add(i)
        if verbose:
            elapsed = time.perf_counter() - start
            print(f"Prompts: {len(all_ids)}, {sum(map(len, all_ids))} tokens; generation: "
                  f"{generated} tokens, {generated / elapsed:.3f} tokens-per-sec overall")
            print(f"Peak memory: {peak_memory_gb():.3f} GB")
        return ["".join(t) for t in texts]
    finally:
        engine.close()
