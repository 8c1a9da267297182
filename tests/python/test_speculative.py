"""Speculative decoding in the engine (``runner.speculative``): prompt lookup and a draft
model, verified in one forward step of the target. Greedy output equals plain decoding
(single and batched, requests with and without speculation in one step, with and
without decode plans, chunked prefill, CPU and the simulated Metal device); sampled
output keeps the target's distribution (chi-square over seeded draws); bad settings
are refused."""
import numpy as np
import pytest
from scipy import stats

import metalrt
import tiny_hf
from conftest import DEVICES
from metalrt.cache import blocks_for
from metalrt.runner import Engine, SamplingParams
from metalrt.runner.sampling import Sampler, log_softmax
from metalrt.runner.speculative import SpeculativeConfig, prompt_lookup
from tiny_models import TinyLlama, write_llama_gguf

PROMPTS = [tiny_hf.prompt(n, seed) for seed, n in enumerate([5, 17, 40, 3])]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    for name in ("llama", "qwen2"):
        tiny_hf.build(name, root / name)
    return root


@pytest.fixture(scope="module", params=DEVICES)
def models(request, dirs):
    """(target, another model of the same vocabulary) on one device."""
    return tuple(metalrt.load(str(dirs / name), device=request.param)[0]
                 for name in ("llama", "qwen2"))


def run(model, prompts, spec=None, max_tokens=24, params=SamplingParams(), plans=True,
        max_batched_tokens=512, speculating=lambda i: True):
    blocks = sum(blocks_for(len(p) + max_tokens) for p in prompts)
    engine = Engine(model, model.new_cache(blocks), max_batched_tokens, decode_plans=plans,
                    speculative=spec)
    try:
        requests = [engine.add_request(p, params, max_tokens, speculative=speculating(i))
                    for i, p in enumerate(prompts)]
        while engine.has_work:
            engine.step()
        return [r.output for r in requests], engine.stats
    finally:
        engine.close()


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    tokens = [1, 2, 3, 9, 1, 2, 3, 8, 7, 5, 1, 2, 3]
    assert prompt_lookup(tokens, 2, 1, 3) == [8, 7]        # latest [1, 2, 3] is at 4
    assert prompt_lookup(tokens, 9, 1, 3) == [8, 7, 5, 1, 2, 3]
    assert prompt_lookup([4, 5, 6, 5], 3, 1, 3) == [6, 5]  # only the 1-gram [5] recurs
    assert prompt_lookup([4, 5, 6, 5], 3, 2, 3) == []
    assert prompt_lookup([7], 3, 1, 3) == []


def configs(models):
    target, other = models
    return {"ngram": SpeculativeConfig("ngram", 4),
            "self-draft": SpeculativeConfig("draft", 3, draft_model=target),
            "other-draft": SpeculativeConfig("draft", 5, draft_model=other)}


@pytest.mark.parametrize("name", ["ngram", "self-draft", "other-draft"])
def test_greedy_output_equals_plain_decoding_single_and_batched(models, name):
    target = models[0]
    spec = configs(models)[name]
    plain, _ = run(target, PROMPTS)
    combos = [(True, 512), (False, 8)] if target.device == "cpu" else [(True, 512)]
    for plans, budget in combos:
        # Batched: requests 0 and 2 speculate, 1 and 3 decode plainly in the same steps.
        got, stats = run(target, PROMPTS, spec, plans=plans, max_batched_tokens=budget,
                         speculating=lambda i: i % 2 == 0)
        assert got == plain
        assert stats.verify_steps > 0 and stats.draft_tokens >= stats.accepted_tokens
        alone, _ = run(target, PROMPTS[2:3], spec, plans=plans, max_batched_tokens=budget)
        assert alone == plain[2:3]
    if name == "self-draft":
        # The target as its own draft: every drafted token is the target's (acceptance 1).
        assert stats.accepted_tokens == stats.draft_tokens
    if name == "other-draft":
        assert stats.accepted_tokens < stats.draft_tokens   # rejections were rolled back


def test_greedy_with_logprobs_and_penalty_equals_plain(models):
    target = models[0]
    params = SamplingParams(repetition_penalty=1.3, logprobs=True)
    plain, _ = run(target, PROMPTS[:2], params=params)
    got, stats = run(target, PROMPTS[:2], SpeculativeConfig("draft", 4, draft_model=models[1]),
                     params=params)
    assert got == plain and stats.verify_steps > 0


def test_a_stop_string_inside_a_verify_step_ends_generation_there():
    """The default model as its own draft (every draft kept: a verify step gives 5
    tokens): with a stop string met inside a step, generate, stream_generate and
    batch_generate return what plain decoding returns, and no token past it."""
    model, tokenizer = metalrt.load(device="cpu")
    prompt = "Repeat this list: apple, banana, cherry, apple, banana, cherry, apple, banana,"
    spec = dict(spec_type="draft", draft_model=model, num_draft_tokens=4)
    whole = metalrt.generate(model, tokenizer, prompt, max_tokens=40)
    for start in (9, 14, 21):   # stops met at several places within the verify steps
        stop = whole[start:start + 8]
        plain = list(metalrt.stream_generate(model, tokenizer, prompt, max_tokens=40, stop=stop))
        got = list(metalrt.stream_generate(model, tokenizer, prompt, max_tokens=40, stop=stop,
                                           **spec))
        assert [r.token for r in got] == [r.token for r in plain]
        assert [r.generation_tokens for r in got] == list(range(1, len(plain) + 1))
        assert got[-1].finish_reason == "stop"
        text = "".join(r.text for r in plain)
        assert metalrt.generate(model, tokenizer, prompt, max_tokens=40, stop=stop,
                                **spec) == text
        assert metalrt.batch_generate(model, tokenizer, [prompt, prompt[:40]], max_tokens=40,
                                      stop=stop, **spec)[0] == text


def test_verify_draws_the_target_distribution():
    """Sampler.verify with a one-hot draft, many seeded draws: chi-square against the
    tempered, top-k-filtered softmax, for a likely and an unlikely draft."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, 12).astype(np.float32)
    params = dict(temp=0.8, top_k=8)
    lp = log_softmax(logits).astype(np.float64)
    keep = np.argsort(-lp)[:8]
    expected = np.zeros(12)
    expected[keep] = np.exp(lp[keep] / 0.8)
    expected /= expected.sum()
    n = 20000
    for draft in (int(keep[0]), int(keep[7])):
        counts = np.zeros(12)
        for seed in range(n):
            token, _ = Sampler(SamplingParams(seed=seed, **params)).verify(logits, [], draft)
            counts[token] += 1
        assert counts[expected == 0].sum() == 0
        chi2 = ((counts[keep] - n * expected[keep]) ** 2 / (n * expected[keep])).sum()
        assert stats.chi2.sf(chi2, len(keep) - 1) > 1e-3


def test_sampled_speculative_decoding_matches_the_target_distribution(dirs):
    """End to end on the tiny model: 3000 seeded requests with the model as its own
    draft (its greedy token is drafted, so verify accepts and rejects). The second token
    given the first is compared with the target's top-k softmax after prompt + first
    token (model.logits), by a chi-square over every first token seen often enough. (On
    the CPU: sampling is host code whatever the device; the device's part is the greedy
    gate.)"""
    target = metalrt.load(str(dirs / "llama"), device="cpu")[0]
    prompt, k, temp, n = tiny_hf.prompt(12, 3), 6, 1.0, 3000
    spec = SpeculativeConfig("draft", 2, draft_model=target)
    engine = Engine(target, target.new_cache(n * blocks_for(len(prompt) + 3)), 512,
                    speculative=spec)
    try:
        requests = [engine.add_request(prompt, SamplingParams(temp=temp, top_k=k, seed=s), 3)
                    for s in range(n)]
        while engine.has_work:
            engine.step()
        st = engine.stats
    finally:
        engine.close()
    assert 0 < st.accepted_tokens < st.draft_tokens
    pairs = np.array([r.output[:2] for r in requests])
    chi2, dof = 0.0, 0
    for first in np.unique(pairs[:, 0]):
        seconds = pairs[pairs[:, 0] == first, 1]
        if len(seconds) < 200:
            continue
        lp = log_softmax(target.logits(prompt + [int(first)])[-1]).astype(np.float64)
        top = np.argsort(-lp)[:k]
        p = np.exp(lp[top] / temp)
        p /= p.sum()
        counts = np.array([(seconds == t).sum() for t in top])
        assert counts.sum() == len(seconds)               # nothing outside the top-k
        chi2 += ((counts - len(seconds) * p) ** 2 / (len(seconds) * p)).sum()
        dof += k - 1
    assert dof >= 2 * (k - 1)
    assert stats.chi2.sf(chi2, dof) > 1e-3


def test_bad_settings_are_refused(models, tmp_path):
    target = models[0]
    cache = target.new_cache(2)
    with pytest.raises(ValueError, match=r"^\[speculative\] num_draft_tokens must be >= 1"):
        SpeculativeConfig("ngram", 0)
    with pytest.raises(ValueError, match=r"^\[speculative\] method must be one of"):
        SpeculativeConfig("eagle", 2)
    with pytest.raises(ValueError, match=r"method 'draft' needs a draft model \(draft_model=, "
                                         r"--draft-model\)"):
        SpeculativeConfig("draft", 2)
    with pytest.raises(ValueError, match=r"used by method 'draft' only, got method 'ngram'"):
        SpeculativeConfig("ngram", 2, draft_model=target)
    for wrong in (str(tmp_path / "draft.gguf"), tmp_path, 123):   # a path is the CLI's
        with pytest.raises(TypeError, match=r"draft_model must be a model from metalrt.load, "
                                            rf"got {type(wrong).__name__}"):
            SpeculativeConfig("draft", 2, draft_model=wrong)
    with pytest.raises(ValueError, match=r"above the KV cache's room: it holds 32 tokens"):
        Engine(target, cache, speculative=SpeculativeConfig("ngram", 32))
    with pytest.raises(ValueError, match=r"does not fit a step.*max_batched_tokens is 4"):
        Engine(target, cache, 4, speculative=SpeculativeConfig("ngram", 4))
    with pytest.raises(ValueError, match=r"'mtp' needs a multi-token-prediction head; this "
                                         r"llama model has none"):
        Engine(target, cache, speculative=SpeculativeConfig("mtp", 2))
    other_vocab = tmp_path / "other.gguf"
    write_llama_gguf(other_vocab, TinyLlama())
    draft = metalrt.load(str(other_vocab), device=target.device)[0]
    assert draft.vocab_size != target.vocab_size
    with pytest.raises(ValueError, match=rf"draft model has a vocabulary of {draft.vocab_size} "
                                         rf"tokens, the target {target.vocab_size}"):
        Engine(target, cache, speculative=SpeculativeConfig("draft", 2, draft_model=draft))
    assert not cache.in_use                 # a refused engine leaves the cache free


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5"])
def test_hybrid_greedy_output_equals_plain_decoding(arch, device, dirs, monkeypatch):
    """Hybrid Gated-DeltaNet twins: a rejected draft restores the request's conv and
    delta-rule state from the snapshot before the step and re-runs the kept tokens.
    Prompt lookup and a draft model, then a drafter that knows the plain output and
    corrupts every third token (so steps keep some drafts and reject the rest)."""
    import tiny_hybrid
    from metalrt.runner import engine as engine_module

    target = metalrt.load(str(tiny_hybrid.path(arch)), device=device)[0]
    other = metalrt.load(str(dirs / "qwen2"), device=device)[0]
    prompts = [tiny_hybrid.prompt(n, n) for n in (9, 20, 4)]
    plain, _ = run(target, prompts)
    for spec in (SpeculativeConfig("ngram", 3), SpeculativeConfig("draft", 4, draft_model=other)):
        got, stats = run(target, prompts, spec, speculating=lambda i: i != 1)
        assert got == plain and stats.state_reruns > 0

    def knowing(tokens, k, *_):
        i = next(i for i, p in enumerate(prompts) if tokens[:len(p)] == p)
        done = len(tokens) - len(prompts[i])
        future = plain[i][done:done + k]
        return [(t + 1) % tiny_hf.VOCAB if (done + j) % 3 == 2 else t for j, t in enumerate(future)]

    monkeypatch.setattr(engine_module, "prompt_lookup", knowing)
    got, stats = run(target, prompts, SpeculativeConfig("ngram", 4), speculating=lambda i: i != 1)
    assert got == plain
    assert 0 < stats.accepted_tokens < stats.draft_tokens and stats.state_reruns > 0


def test_generate_and_the_cli_speculate_with_the_same_text(dirs, tmp_path, capsys):
    from metalrt import cli

    model, tokenizer = metalrt.load(str(dirs / "llama"), device="cpu")
    draft = metalrt.load(str(dirs / "qwen2"), device="cpu")[0]
    prompt = PROMPTS[2]
    plain = metalrt.generate(model, tokenizer, prompt, max_tokens=20)
    assert metalrt.generate(model, tokenizer, prompt, max_tokens=20, spec_type="ngram") == plain
    assert metalrt.generate(model, tokenizer, prompt, max_tokens=20, draft_model=draft) == plain
    assert metalrt.batch_generate(model, tokenizer, PROMPTS, max_tokens=20, spec_type="ngram",
                                  num_draft_tokens=2) == \
        metalrt.batch_generate(model, tokenizer, PROMPTS, max_tokens=20)
    with pytest.raises(ValueError, match=r"above the KV cache's room: it holds 64 tokens"):
        metalrt.stream_generate(model, tokenizer, prompt, max_tokens=20, spec_type="ngram",
                                num_draft_tokens=64)
    text = tokenizer.decode(prompt)
    base = ["generate", "--model", str(dirs / "llama"), "--prompt", text, "--max-tokens", "20",
            "--device", "cpu"]
    assert cli.main(base) == 0
    plain_out = capsys.readouterr().out.split("Prompt:")[0]
    assert cli.main(base + ["--draft-model", str(dirs / "qwen2"), "--num-draft-tokens", "3"]) == 0
    assert capsys.readouterr().out.split("Prompt:")[0] == plain_out
    other_vocab = tmp_path / "other.gguf"
    write_llama_gguf(other_vocab, TinyLlama())
    for extra, message in ((["--spec-type", "ngram", "--num-draft-tokens", "0"],
                            "num_draft_tokens must be >= 1, got 0"),
                           (["--spec-type", "ngram", "--num-draft-tokens", "100"],
                            "num_draft_tokens 100 is above the KV cache's room"),
                           (["--spec-type", "mtp"], "'mtp' needs a multi-token-prediction head"),
                           (["--draft-model", str(other_vocab)],
                            "a draft model must share the tokenizer")):
        assert cli.main(base + extra) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err
    # Drafting settings without speculation would be ignored: a usage error, argparse's 2.
    with pytest.raises(SystemExit) as usage:
        cli.main(base + ["--num-draft-tokens", "3"])
    assert usage.value.code == 2
    assert "error: --num-draft-tokens needs --spec-type or --draft-model" in capsys.readouterr().err


@pytest.mark.parametrize("device", DEVICES)
def test_verify_steps_replay_decode_plans(device, dirs):
    """A step in which every request verifies k drafts replays a verify plan (k + 1
    rows a request, ``decode_plans``): with a draft model, every step after the prefill
    is a plan's (recorded or replayed), and the output is plain decoding's — dense
    (the model as its own draft: all accepted) and hybrid (another draft: rejections,
    the state restored and re-run outside the plan)."""
    import tiny_hybrid

    dense = metalrt.load(str(dirs / "llama"), device=device)[0]
    hybrid = metalrt.load(str(tiny_hybrid.path("qwen3_5")), device=device)[0]
    other = metalrt.load(str(dirs / "qwen2"), device=device)[0]
    for target, draft, prompts in ((dense, dense, PROMPTS[:3]), (dense, dense, PROMPTS[1:2]),
                                   (hybrid, other, PROMPTS[1:2])):
        plain, _ = run(target, prompts)
        got, stats = run(target, prompts, SpeculativeConfig("draft", 3, draft_model=draft))
        assert got == plain
        assert stats.plan_replays > 0 and stats.steps - stats.plan_records - stats.plan_replays == 1
        if target is hybrid:
            assert stats.state_reruns > 0
