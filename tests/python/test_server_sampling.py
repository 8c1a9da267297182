"""``metalrt serve``'s sampling parity with OpenAI, through the official openai client on
loopback: ``n`` choices (sampled, greedy, streamed), ``seed``, ``logprobs`` /
``top_logprobs`` checked against the model's log-softmax computed in this process,
``echo`` for text completions (prompt text and prompt-token logprobs), and bad sampling
input answered 400 in OpenAI's shape while the server keeps serving."""
import json

import numpy as np
import openai
import pytest

import metalrt
from metalrt.runner.sampling import log_softmax
# f32_prefill (autouse): a choice after the first prefills only its prompt's uncached
# tail, the oracle the whole prompt.
from oracle_server import chat_ids, client, f32_prefill, oracle, server  # noqa: F401
from server_process import MODEL_ID

ASK = [{"role": "user", "content": "Name three colours."}]
PROMPT = "The capital of France is"
TOL = 1e-4


def logprob_rows(model, ids):
    """float32 [len(ids), V]: row i is the log-softmax of the logits after ids[:i + 1]."""
    return np.stack([log_softmax(row) for row in model.logits(ids)])


def test_n_sampled_choices_are_indexed_independent_and_counted(client):
    texts = []
    for seed in (1, 2, 3):
        reply = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=8,
                                          temperature=1.0, seed=seed, n=3, logprobs=0)
        assert [c.index for c in reply.choices] == [0, 1, 2]
        assert reply.usage.completion_tokens == sum(len(c.logprobs.tokens)
                                                    for c in reply.choices)
        assert reply.usage.prompt_tokens == 5    # the prompt is counted once
        texts.append([c.text for c in reply.choices])
    assert any(len(set(t)) >= 2 for t in texts), texts
    chat = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8,
                                          temperature=1.0, seed=4, n=3)
    assert [c.index for c in chat.choices] == [0, 1, 2]
    assert all(c.message.role == "assistant" and c.message.content for c in chat.choices)


def test_n_greedy_choices_equal_the_single_one(client):
    one = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8,
                                         temperature=0).choices[0].message.content
    three = client.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=8,
                                           temperature=0, n=3)
    assert [c.message.content for c in three.choices] == [one] * 3 and one
    assert three.usage.completion_tokens == 3 * 8
    text = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=6,
                                     temperature=0).choices[0].text
    texts = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=6,
                                      temperature=0, n=3).choices
    assert [c.text for c in texts] == [text] * 3


def test_seed_reproduces_every_choice_and_another_seed_differs(client):
    kwargs = dict(model=MODEL_ID, prompt=PROMPT, max_tokens=8, temperature=1.0, n=3)
    first = [c.text for c in client.completions.create(seed=11, **kwargs).choices]
    assert [c.text for c in client.completions.create(seed=11, **kwargs).choices] == first
    others = [[c.text for c in client.completions.create(seed=s, **kwargs).choices]
              for s in (12, 13)]
    assert any(o != first for o in others)
    # Choice 0 draws with the request's seed itself: n=1 with that seed is the same text.
    single = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=8,
                                       temperature=1.0, seed=11).choices[0].text
    assert single == first[0]


def test_streamed_n_reassembles_per_index_into_the_non_streamed_result(client):
    kwargs = dict(model=MODEL_ID, messages=ASK, max_tokens=10, temperature=1.0, seed=5, n=3)
    full = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True,
                                                 stream_options={"include_usage": True},
                                                 **kwargs))
    texts, reasons, roles = {}, {}, {}
    for chunk in chunks[:-1]:
        assert len(chunk.choices) == 1 and chunk.usage is None
        choice = chunk.choices[0]
        texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        roles[choice.index] = roles.get(choice.index) or choice.delta.role
        if choice.finish_reason:
            assert choice.index not in reasons     # one finish per choice
            reasons[choice.index] = choice.finish_reason
    assert texts == {c.index: c.message.content for c in full.choices}
    assert reasons == {c.index: c.finish_reason for c in full.choices}
    assert roles == {0: "assistant", 1: "assistant", 2: "assistant"}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        full.usage.completion_tokens
    text_kwargs = dict(model=MODEL_ID, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=6,
                       n=3, logprobs=2)
    text_full = client.completions.create(**text_kwargs)
    pieces, offsets = {}, {}
    for chunk in client.completions.create(stream=True, **text_kwargs):
        c = chunk.choices[0]
        pieces[c.index] = pieces.get(c.index, "") + c.text
        offsets.setdefault(c.index, []).extend(c.logprobs.text_offset if c.logprobs else [])
    assert pieces == {c.index: c.text for c in text_full.choices}
    assert offsets == {c.index: c.logprobs.text_offset for c in text_full.choices}


def _check_top(top, row, tokenizer, k):
    """``top`` (the server's [(text, logprob)]) is the k most probable tokens of ``row``,
    sorted, with their log-softmax values."""
    best = np.argsort(-row, kind="stable")[:k]
    assert [t for t, _ in top] == [tokenizer.decode([int(i)]) for i in best]
    assert np.allclose([lp for _, lp in top], row[best], atol=TOL, rtol=0)
    assert all(a >= b for (_, a), (_, b) in zip(top, top[1:]))


def in_process(oracle, prompt, **kwargs):
    """(token ids, float32 [V] logprobs of each step) of ``metalrt.stream_generate``:
    the engine's arithmetic, as the server's (a prefill of the whole prompt, then
    decode steps)."""
    steps = list(metalrt.stream_generate(*oracle, prompt, logprobs=True, **kwargs))
    return [s.token for s in steps], [s.logprobs for s in steps]


def test_chat_top_logprobs_match_the_in_process_log_softmax(client, oracle):
    model, tokenizer = oracle
    # A system message of its own (the template's default one starts every other chat
    # prompt): no block is in the prefix cache, the server prefills all of the prompt.
    ask = [{"role": "system", "content": "Sea poet."},
           {"role": "user", "content": "Write one line about the sea."}]
    reply = client.chat.completions.create(model=MODEL_ID, messages=ask, max_tokens=6,
                                           temperature=1.0, seed=3, logprobs=True,
                                           top_logprobs=5)
    content = reply.choices[0].logprobs.content
    tokens, rows = in_process(oracle, chat_ids(tokenizer, ask), max_tokens=6, temp=1.0, seed=3)
    assert [e.token for e in content] == [tokenizer.decode([t]) for t in tokens]
    assert len(content) == 6
    for entry, token, row in zip(content, tokens, rows):
        assert abs(entry.logprob - row[token]) < TOL
        assert entry.bytes == list(entry.token.encode("utf-8"))
        _check_top([(x.token, x.logprob) for x in entry.top_logprobs], row, tokenizer, 5)


def test_completion_logprobs_hold_the_sampled_token_and_the_top_k(client, oracle):
    model, tokenizer = oracle
    reply = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=8,
                                      temperature=2.0, seed=1, logprobs=5)
    lp = reply.choices[0].logprobs
    tokens, rows = in_process(oracle, PROMPT, max_tokens=8, temp=2.0, seed=1)
    assert lp.tokens == [tokenizer.decode([t]) for t in tokens]
    assert "".join(lp.tokens) == reply.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    outside = 0
    for token, value, top, sampled, row in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs,
                                               tokens, rows):
        assert abs(value - row[sampled]) < TOL
        assert top[token] == value     # the sampled token is always there (k + 1 at most)
        best = [(k, v) for k, v in top.items() if k != token or len(top) == 5]
        _check_top(sorted(best, key=lambda kv: -kv[1])[:5], row, tokenizer, 5)
        outside += len(top) == 6
    assert outside >= 1     # at temperature 2, some sampled token is not among the top 5


def test_echo_prepends_the_prompt_with_its_token_logprobs(client, oracle):
    model, tokenizer = oracle
    plain = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=4,
                                      temperature=0, logprobs=3).choices[0]
    echoed = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=4,
                                       temperature=0, logprobs=3, echo=True).choices[0]
    assert echoed.text == PROMPT + plain.text
    prompt = tokenizer.encode(PROMPT)
    lp = echoed.logprobs
    n = len(prompt)
    assert lp.tokens == [tokenizer.decode([t]) for t in prompt] + plain.logprobs.tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    rows = logprob_rows(model, prompt)
    for i in range(1, n):
        assert abs(lp.token_logprobs[i] - rows[i - 1][prompt[i]]) < TOL
        top = sorted(((k, v) for k, v in lp.top_logprobs[i].items()), key=lambda kv: -kv[1])
        assert lp.top_logprobs[i][lp.tokens[i]] == lp.token_logprobs[i]
        _check_top([kv for kv in top if kv[0] != lp.tokens[i] or len(top) == 3][:3],
                   rows[i - 1], tokenizer, 3)
    assert np.allclose(lp.token_logprobs[n:], plain.logprobs.token_logprobs, atol=TOL)
    assert lp.text_offset[:n] == [len(tokenizer.decode(prompt[:i])) for i in range(n)]
    assert lp.text_offset[n:] == [len(PROMPT) + o for o in plain.logprobs.text_offset]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt=prompt, max_tokens=4, temperature=0, echo=True, stream=True))
    assert streamed == tokenizer.decode(prompt) + plain.text
    bare = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=4,
                                     temperature=0, echo=True).choices[0]
    assert bare.text == PROMPT + plain.text and bare.logprobs is None


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": "hi", "n": 0}, "n"),
    ("/v1/completions", {"prompt": "hi", "n": 17}, "n"),
    ("/v1/chat/completions", {"messages": ASK, "n": 17}, "n"),
    ("/v1/chat/completions", {"messages": ASK, "logprobs": True, "top_logprobs": 21},
     "top_logprobs"),
    ("/v1/chat/completions", {"messages": ASK, "top_logprobs": 3}, "top_logprobs"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 21}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "echo": "yes"}, "echo"),
])
def test_bad_sampling_input_is_a_400_and_the_server_keeps_serving(server, client, path,
                                                                 body, param):
    status, reply = server.request("POST", path, json.dumps(
        {"model": MODEL_ID, "max_tokens": 2, **body}).encode())
    assert status == 400, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["param"] == param, reply
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2, n=0)
    ok = client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2, temperature=0)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_n_choices_share_the_prompt_prefill_through_the_prefix_cache(server, client, oracle):
    _, tokenizer = oracle
    ask = [{"role": "system", "content": "Counting helper."},
           {"role": "user", "content": "Count from one to ten, please."}]
    ids = chat_ids(tokenizer, ask)
    before = server.stats()
    client.chat.completions.create(model=MODEL_ID, messages=ask, max_tokens=3, n=3,
                                   temperature=1.0, seed=2)
    after = server.stats()
    tail = len(ids) - (len(ids) - 1) // 16 * 16   # after the prompt's last full block
    assert len(ids) > 16
    assert after["prompt_tokens_computed"] - before["prompt_tokens_computed"] == \
        len(ids) + 2 * tail
    assert after["prompt_tokens_cached"] - before["prompt_tokens_cached"] == \
        2 * (len(ids) - tail)
