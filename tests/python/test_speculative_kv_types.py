"""Speculative decoding gives plain decoding's tokens whatever the KV cache type and the
batch (decode rows, ``ops.decode_rows``: a verify step's rows are computed as decode steps'
rows, and a decode row never shares a forward pass with a long prompt chunk). Greedy:
prompt lookup, a draft model and MTP, single and batched (requests with and without
speculation in one step, 21 rows: past the CPU GEMV's 16 and Metal's 8), dense and hybrid,
on the CPU for float32, float16, bfloat16, q8_0 and q4_0 caches and on the simulated device
for float16 and q4_0 (the Qwen3-Next MTP twin on the CPU only); on the CPU also the
default model (Q4_1 weights) over a q4_0 cache.
Seeded sampling: a request's text with speculation is the same alone and beside requests
that arrive while it decodes."""
import pytest

import metalrt
import tiny_hf
import tiny_hybrid
from metalrt.cache import blocks_for
from metalrt.runner import Engine, SamplingParams
from metalrt.runner.speculative import SpeculativeConfig
from test_decode_rows import KV_CASES
from test_speculative import run

PROMPTS = [tiny_hf.prompt(n, seed) for seed, n in enumerate([9, 20, 4, 13, 7])]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec-kv")
    for name in ("qwen3", "qwen2"):   # qwen3: head_dim 128 (quantized caches need 32 | head_dim)
        tiny_hf.build(name, root / name)
    return root


@pytest.mark.parametrize("device,kv_type", KV_CASES)
def test_greedy_speculation_equals_plain_decoding_for_every_kv_type(device, kv_type, dirs):
    draft = metalrt.load(str(dirs / "qwen2"), device=device)[0]
    ngram = SpeculativeConfig("ngram", 4)
    drafting = SpeculativeConfig("draft", 4, draft_model=draft)
    cases = [(dirs / "qwen3", (ngram, drafting)), (tiny_hybrid.path("qwen3_5"), (ngram, drafting)),
             (tiny_hybrid.path("qwen3_5_mtp"), (SpeculativeConfig("mtp", 4),))]
    if device == "cpu":   # the sim's MTP steps: test_mtp.py (its default float16 cache)
        cases.append((tiny_hybrid.path("qwen3_next_mtp"), (SpeculativeConfig("mtp", 4),)))
    for path, specs in cases:
        target = metalrt.load(str(path), device=device, kv_type=kv_type)[0]
        plain, _ = run(target, PROMPTS, max_tokens=10)
        for spec in specs:
            where = f"{path.name} {spec.method} {kv_type}"
            got, stats = run(target, PROMPTS, spec, max_tokens=10, speculating=lambda i: i != 1)
            assert got == plain, where
            assert stats.verify_steps > 0 and stats.max_batch_size == len(PROMPTS), where
            alone, _ = run(target, PROMPTS[:1], spec, max_tokens=10)
            assert alone == plain[:1], where


def test_default_model_over_a_q4_0_cache_speculates_plain_decodings_tokens():
    """The default model's output over a q4_0 cache repeats itself with near-tied logits.
    On 9c247a8 a verify row's projections ran the GEMV's multi-row kernel instead of its
    one-row kernel, and its attention the prefill attention: last-bit differences, which
    q4_0's coarse rounding of the K/V rows turned into other codes (verify logits up to
    0.57 off decode's), and the ngram output diverged at its 13th token."""
    model, tokenizer = metalrt.load(device="cpu", kv_type="q4_0")
    prompts = [tokenizer.encode(p) for p in (
        "Repeat this list: apple, banana, cherry, apple, banana, cherry, apple, banana,",
        "Rewrite this code with one change: def add(a, b): return a + b")]
    plain, _ = run(model, prompts, max_tokens=16)
    got, stats = run(model, prompts, SpeculativeConfig("ngram", 4), max_tokens=16)
    assert got == plain and stats.accepted_tokens > 0
    alone, _ = run(model, prompts[:1], SpeculativeConfig("ngram", 4), max_tokens=16)
    assert alone == plain[:1]


def sampled(model, prompts, arrivals):
    """The output of one seeded, sampled, speculating request of ``prompts[0]``, with the
    other prompts added at the steps ``arrivals`` (their prefills share steps with its
    verify steps)."""
    prompt = prompts[0]
    engine = Engine(model, model.new_cache(3 * blocks_for(len(prompt) + 16 + 16)),
                    speculative=SpeculativeConfig("ngram", 4))
    try:
        request = engine.add_request(prompt, SamplingParams(temp=0.8, seed=7), 16)
        pending, steps = list(zip(arrivals, prompts[1:])), 0
        while engine.has_work:
            while pending and pending[0][0] == steps:
                engine.add_request(pending.pop(0)[1], SamplingParams(temp=0.7, seed=3), 16)
            engine.step()
            steps += 1
        return request.output
    finally:
        engine.close()


def test_a_seed_gives_the_same_text_alone_and_beside_other_requests():
    """Sampling with speculation: the request alone, with two others in its first step,
    and with them arriving while it verifies drafts (a step of its verify rows and their
    prompts: two forward passes), gives the same tokens (on 9c247a8 the third diverged at
    its fourth token: its verify rows shared the prompts' bf16 GEMMs)."""
    model, tokenizer = metalrt.load(device="cpu")
    prompts = [tokenizer.encode(p) for p in (
        "Repeat this list: apple, banana, cherry, apple, banana, cherry, apple, banana,",
        "Write a short poem about the sea and the wind, in four lines.",
        "List the planets of the solar system in order from the sun outwards.")]
    alone = sampled(model, prompts[:1], [])
    assert len(alone) == 16
    for arrivals in ((0, 0), (3, 5)):
        assert sampled(model, prompts, arrivals) == alone, arrivals
