"""The generation API on a small random Llama: batching equals running alone (on the
CPU and the Metal device), streamed fields, logprobs, stop strings, eos, seeds."""
import numpy as np
import pytest

import metalrt
import tiny_hf
from metalrt.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    tiny_hf.build("llama", directory)
    return str(directory)


@pytest.fixture(scope="module")
def llama(llama_dir):
    return metalrt.load(llama_dir, device="cpu")


@pytest.fixture(scope="module")
def llama_metal(llama_dir):
    return metalrt.load(llama_dir, device="metal")


PROMPTS = [tiny_hf.prompt(n, seed) for seed, n in enumerate([1, 15, 17, 40])]


@pytest.mark.parametrize("device,max_batched_tokens", [("cpu", 512), ("cpu", 16), ("metal", 16)])
def test_batch_generate_equals_each_prompt_alone(request, device, max_batched_tokens):
    model, tokenizer = request.getfixturevalue("llama" if device == "cpu" else "llama_metal")
    assert model.device == device
    alone = [metalrt.generate(model, tokenizer, p, max_tokens=12) for p in PROMPTS]
    assert len(set(alone)) == 4 and all(len(t.split()) == 12 for t in alone)
    # With a 16-token budget the 40-token prompt is prefilled in chunks while the
    # shorter requests already decode in the same steps.
    batch = metalrt.batch_generate(model, tokenizer, PROMPTS, max_tokens=12,
                                   max_batched_tokens=max_batched_tokens)
    assert batch == alone


def test_metal_matches_cpu(llama, llama_metal):
    ids = tiny_hf.prompt(37, 5)
    expected = llama[0].logits(ids)
    got = llama_metal[0].logits(ids)
    assert np.abs(got - expected).max() <= 1e-3 * (expected.max() - expected.min())
    assert [metalrt.generate(m, t, PROMPTS[3], max_tokens=12) for m, t in (llama, llama_metal)] \
        == [metalrt.generate(*llama, PROMPTS[3], max_tokens=12)] * 2


def test_string_prompt_equals_its_ids(llama):
    model, tokenizer = llama
    text = " ".join(f"t{i}" for i in PROMPTS[2])
    assert metalrt.generate(model, tokenizer, text, max_tokens=5) == \
        metalrt.generate(model, tokenizer, PROMPTS[2], max_tokens=5)


def test_stream_fields_and_logprobs(llama):
    model, tokenizer = llama
    responses = list(metalrt.stream_generate(model, tokenizer, PROMPTS[3], max_tokens=6,
                                             logprobs=True))
    assert [r.generation_tokens for r in responses] == [1, 2, 3, 4, 5, 6]
    assert [r.finish_reason for r in responses] == [None] * 5 + ["length"]
    assert all(r.prompt_tokens == 40 and r.prompt_tps > 0 and r.peak_memory > 0 for r in responses)
    assert responses[-1].generation_tps > 0
    assert "".join(r.text for r in responses).split() == [f"t{r.token}" for r in responses]
    # logprobs of step 1 = log-softmax of the last prompt row (float64 reference).
    row = model.logits(PROMPTS[3])[-1].astype(np.float64)
    expected = row - row.max() - np.log(np.exp(row - row.max()).sum())
    assert responses[0].logprobs.shape == (tiny_hf.VOCAB,)
    assert np.abs(responses[0].logprobs - expected).max() < 1e-5
    assert responses[0].token == int(np.argmax(row))
    plain = list(metalrt.stream_generate(model, tokenizer, PROMPTS[3], max_tokens=2))
    assert plain[0].logprobs is None and [r.token for r in plain] == [r.token for r in responses[:2]]


def test_stop_string_cuts_text(llama):
    model, tokenizer = llama
    full = metalrt.generate(model, tokenizer, PROMPTS[1], max_tokens=10)
    words = full.split()
    stop = f" {words[4]} "   # the text stops right before the 5th word
    responses = list(metalrt.stream_generate(model, tokenizer, PROMPTS[1], max_tokens=10, stop=[stop]))
    text = "".join(r.text for r in responses)
    assert text == full[:full.index(stop)] and stop not in text
    assert responses[-1].finish_reason == "stop" and len(responses) < 10
    assert metalrt.generate(model, tokenizer, PROMPTS[1], max_tokens=10, stop="zz") == full


def test_eos_token_stops_with_reason_stop(llama):
    model, tokenizer = llama
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, PROMPTS[0], max_tokens=8)]
    eos = tokens[3]
    with_eos = Tokenizer(tokenizer.backend, bos_token_id=None, eos_token_ids=[eos])
    responses = list(metalrt.stream_generate(model, with_eos, PROMPTS[0], max_tokens=8))
    assert [r.token for r in responses] == tokens[:tokens.index(eos) + 1]
    assert responses[-1].finish_reason == "stop" and responses[-1].text == ""


def test_sampling_is_seeded(llama):
    model, tokenizer = llama
    kwargs = dict(max_tokens=8, temp=1.0, top_p=0.9, top_k=50, min_p=0.02, repetition_penalty=1.3)
    a = metalrt.generate(model, tokenizer, PROMPTS[1], seed=11, **kwargs)
    assert a == metalrt.generate(model, tokenizer, PROMPTS[1], seed=11, **kwargs)
    assert a != metalrt.generate(model, tokenizer, PROMPTS[1], seed=12, **kwargs)
    batch = metalrt.batch_generate(model, tokenizer, PROMPTS[:2], seed=10, **kwargs)
    assert batch[1] == a


def test_bad_arguments(llama):
    model, tokenizer = llama
    with pytest.raises(ValueError, match=r"^\[generate\] the prompt is empty"):
        metalrt.generate(model, tokenizer, [])
    for bad in (0, -1):
        with pytest.raises(ValueError, match=r"^\[generate\] max_tokens must be >= 1"):
            metalrt.generate(model, tokenizer, [1, 2], max_tokens=bad)
    with pytest.raises(ValueError, match=r"^\[generate\] the prompt has 256 tokens; the model's context length is 256"):
        metalrt.generate(model, tokenizer, [1] * 256)
    with pytest.raises(ValueError, match=r"^\[sampling\] top_p"):
        metalrt.generate(model, tokenizer, [1, 2], top_p=0.0)
    with pytest.raises(ValueError, match=r"^\[load\] device must be"):
        metalrt.load("unused", device="gpu")
    with pytest.raises(ValueError, match=r"^\[load\] dtype must be one of float32, float16, bfloat16, got 'int8'"):
        metalrt.load("unused", dtype="int8")
    with pytest.raises(ValueError, match=r"^\[embedding\]"):
        model.logits([tiny_hf.VOCAB])


def test_a_prompt_id_outside_the_vocabulary_is_refused_before_any_step(llama):
    # Before the check, the id reached the embedding inside the shared forward step, so
    # one bad prompt failed every request batched with it (the server's 500 for all).
    model, tokenizer = llama
    for bad in (tiny_hf.VOCAB, -1):
        with pytest.raises(ValueError, match=rf"^\[engine\] prompt token id {bad} is outside "
                                             rf"the model's vocabulary \[0, {tiny_hf.VOCAB}\)"):
            metalrt.batch_generate(model, tokenizer, [[1, 2], [3, bad]], max_tokens=2)
    assert metalrt.generate(model, tokenizer, [1, tiny_hf.VOCAB - 1], max_tokens=1) is not None


@pytest.mark.parametrize("prompt", [None, [1.5, 2], [True, 2], 7])
def test_a_prompt_that_is_neither_text_nor_ids_is_a_type_error(llama, prompt):
    model, tokenizer = llama
    with pytest.raises(TypeError, match=r"^\[generate\] the prompt must be a str or a sequence of int token ids"):
        metalrt.generate(model, tokenizer, prompt, max_tokens=2)


def test_batch_generate_wants_a_non_empty_list(llama):
    model, tokenizer = llama
    with pytest.raises(TypeError, match=r"^\[batch_generate\] prompts must be a list of prompts .*got str"):
        metalrt.batch_generate(model, tokenizer, "Hello", max_tokens=2)
    with pytest.raises(ValueError, match=r"^\[batch_generate\] prompts is empty"):
        metalrt.batch_generate(model, tokenizer, [], max_tokens=2)
    with pytest.raises(TypeError, match=r"^\[generate\] max_tokens must be an int, got str"):
        metalrt.batch_generate(model, tokenizer, [[1, 2]], max_tokens="5")


def test_arguments_are_checked_before_any_output(llama, capsys):
    """stream_generate raises when called (not at the first next), so generate(verbose)
    prints nothing, not even its "==========" banner, for bad settings."""
    model, tokenizer = llama
    for kwargs, message in [(dict(temp=-1), r"^\[sampling\] temp must be >= 0"),
                            (dict(max_tokens=0), r"^\[generate\] max_tokens must be >= 1"),
                            (dict(repetition_penalty=0), r"^\[sampling\] repetition_penalty")]:
        with pytest.raises(ValueError, match=message):
            metalrt.stream_generate(model, tokenizer, [1, 2], **kwargs)
        with pytest.raises(ValueError, match=message):
            metalrt.generate(model, tokenizer, [1, 2], verbose=True, **kwargs)
        assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match=r"^\[generate\] prompt token id: 2147483648 does not fit in int32"):
        metalrt.stream_generate(model, tokenizer, [1, 2**31])
    with pytest.raises(ValueError, match=r"^\[logits\] token id: -2147483649 does not fit in int32"):
        model.logits([-2**31 - 1])


@pytest.mark.parametrize("penalty, window", [(1.5, 20), (0.7, 3), (2.0, 0)])
def test_repetition_penalty_matches_a_numpy_reference(llama, penalty, window):
    """Greedy decoding with the CTRL penalty (Keskar et al. 2019) over the last `window`
    tokens of prompt + output, against a reference that recomputes every step's logits
    with model.logits and penalises them in float64: a positive logit of a recent token
    is divided by the penalty, a negative one multiplied (mlx-lm's rule)."""
    model, tokenizer = llama
    prompt = tiny_hf.prompt(9, 7) * 2          # repeated tokens, so the penalty bites
    got = [r.token for r in metalrt.stream_generate(
        model, tokenizer, prompt, max_tokens=8, repetition_penalty=penalty,
        repetition_context_size=window)]
    tokens = list(prompt)
    for _ in range(8):
        logits = model.logits(tokens)[-1].astype(np.float64)
        for t in set(tokens[len(tokens) - window:] if window else []):
            logits[t] = logits[t] / penalty if logits[t] >= 0 else logits[t] * penalty
        tokens.append(int(np.argmax(logits)))
    assert got == tokens[len(prompt):]
    plain = [r.token for r in metalrt.stream_generate(model, tokenizer, prompt, max_tokens=8)]
    assert (got != plain) == (window > 0)      # the penalty changed the continuation


def test_generation_stops_at_the_context_length(llama):
    """A max_tokens far beyond the context (256 positions in tiny_hf) neither sizes a
    huge KV cache nor runs past the positions the model has: the continuation stops
    exactly where the context is full, with finish_reason "length"."""
    model, tokenizer = llama
    eos = tokenizer.eos_token_ids
    tokenizer.eos_token_ids = ()     # so only the context length can end it
    try:
        responses = list(metalrt.stream_generate(model, tokenizer, [1] * 250, max_tokens=10**9))
    finally:
        tokenizer.eos_token_ids = eos
    assert len(responses) == 6
    assert responses[-1].finish_reason == "length"
