"""``metalrt serve`` through the official openai client on a loopback port, against
``metalrt.generate`` in this process as the oracle: chat and text completions,
streamed and not, stop strings, seeds, usage, logprobs, UTF-8 across SSE chunks,
prefix caching, and bad input answered 4xx in OpenAI's error shape."""
import json
import subprocess
import sys

import numpy as np
import openai
import pytest

import metalrt
from metalrt.cache import BLOCK_SIZE
from oracle_server import chat_ids, client, f32_prefill, oracle, server  # noqa: F401
from server_process import MODEL_ID

HELLO = [{"role": "user", "content": "Tell me a long story about a dragon."}]


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL_ID]


def test_chat_equals_generate_with_usage(client, oracle):
    model, tokenizer = oracle
    ids = chat_ids(tokenizer, HELLO)
    expected = metalrt.generate(model, tokenizer, ids, max_tokens=8)
    reply = client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=8,
                                           temperature=0)
    assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == expected and expected
    assert reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(ids), 8)
    assert reply.usage.total_tokens == len(ids) + 8


def test_chat_stream_matches_and_ends_with_usage(client, oracle):
    model, tokenizer = oracle
    expected = metalrt.generate(model, tokenizer, chat_ids(tokenizer, HELLO), max_tokens=8)
    chunks = list(client.chat.completions.create(
        model=MODEL_ID, messages=HELLO, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(texts) == expected and sum(1 for t in texts if t) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_streamed_and_not(client, oracle):
    model, tokenizer = oracle
    expected = metalrt.generate(model, tokenizer, "Once upon a time", max_tokens=6)
    reply = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=6,
                                      temperature=0)
    assert reply.object == "text_completion" and reply.choices[0].text == expected
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (4, 6)
    pieces = [c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt=tokenizer.encode("Once upon a time"), max_tokens=6,
        temperature=0, stream=True)]
    assert "".join(pieces) == expected


def test_stop_string_cuts_the_text(client, oracle):
    model, tokenizer = oracle
    full = metalrt.generate(model, tokenizer, chat_ids(tokenizer, HELLO), max_tokens=8)
    stop = full.split()[2]          # a word inside the greedy reply
    reply = client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=8,
                                           temperature=0, stop=[stop, "never-seen"])
    assert reply.choices[0].message.content == full[:full.index(stop)]
    assert reply.choices[0].finish_reason == "stop" and reply.usage.completion_tokens < 8


def test_seeded_sampling_is_reproducible(client, oracle):
    model, tokenizer = oracle
    kwargs = dict(model=MODEL_ID, prompt="My favourite animal is", max_tokens=8, temperature=1.0)
    first = client.completions.create(seed=7, **kwargs).choices[0].text
    assert client.completions.create(seed=7, **kwargs).choices[0].text == first
    assert first == metalrt.generate(model, tokenizer, "My favourite animal is", max_tokens=8,
                                     temp=1.0, seed=7)
    others = {client.completions.create(seed=s, **kwargs).choices[0].text for s in (8, 9)}
    assert others - {first}     # another seed draws another text


def test_utf8_character_split_across_tokens_is_intact(client, oracle):
    model, tokenizer = oracle
    prompt = "A smiley face emoji:"
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, prompt, max_tokens=7)]
    # The emoji comes as three byte tokens, none a character by itself.
    assert sum("\ufffd" in tokenizer.decode([t]) for t in tokens) >= 2
    pieces = [c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt=prompt, max_tokens=7, temperature=0, stream=True)]
    assert "".join(pieces) == tokenizer.decode(tokens) and "\U0001F44C" in "".join(pieces)
    assert not any("\ufffd" in p for p in pieces)


def test_logprobs_of_greedy_tokens(client):
    reply = client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=4,
                                           temperature=0, logprobs=True, top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == 4
    assert "".join(e.token for e in content) == reply.choices[0].message.content
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].token == entry.token          # greedy: the best one
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    assert np.exp(content[0].logprob) > 0.01


def test_repeated_prefix_prefills_only_new_tokens(server, client, oracle):
    model, tokenizer = oracle
    prefix = tokenizer.encode("The river town traded salt, wool and timber with its neighbours. " * 20)[:200]
    first = prefix + tokenizer.encode(" Tell me about the salt.")
    second = prefix + tokenizer.encode(" Who bought the timber?")
    client.completions.create(model=MODEL_ID, prompt=first, max_tokens=2, temperature=0)
    before = server.stats()["prompt_tokens_computed"]
    reply = client.completions.create(model=MODEL_ID, prompt=second, max_tokens=6, temperature=0)
    cached = reply.usage.prompt_tokens_details.cached_tokens
    assert cached == 200 // BLOCK_SIZE * BLOCK_SIZE
    assert server.stats()["prompt_tokens_computed"] - before == len(second) - cached
    assert reply.choices[0].text == metalrt.generate(model, tokenizer, second, max_tokens=6)


def error_of(call):
    """The status and OpenAI error object of a call that must fail with a 4xx."""
    with pytest.raises(openai.APIStatusError) as info:
        call()
    body = info.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return info.value.status_code, body["error"]


def test_bad_input_is_a_4xx_in_openai_shape(server, client):
    status, error = error_of(lambda: client.chat.completions.create(
        model="gpt-nonexistent", messages=HELLO))
    assert (status, error["code"], error["param"]) == (404, "model_not_found", "model")
    status, error = error_of(lambda: client.chat.completions.create(
        model=MODEL_ID, messages=HELLO, max_tokens=-1))
    assert (status, error["param"]) == (400, "max_tokens")
    status, error = error_of(lambda: client.chat.completions.create(
        model=MODEL_ID, messages=[{"content": "no role"}]))
    assert (status, error["param"]) == (400, "messages.0.role")
    status, error = error_of(lambda: client.chat.completions.create(
        model=MODEL_ID, messages="Hello"))
    assert (status, error["param"]) == (400, "messages")
    status, error = error_of(lambda: client.completions.create(
        model=MODEL_ID, prompt=[1] * 8192, max_tokens=1))
    assert (status, error["code"]) == (400, "context_length_exceeded")
    assert "context length is 8192" in error["message"]

    # A token id outside the vocabulary is the client's error, found before the engine
    # (it used to fail the shared forward step: a 500 for every request batched with it).
    for bad in (49152, -1):
        status, error = error_of(lambda: client.completions.create(
            model=MODEL_ID, prompt=[1, bad], max_tokens=1))
        assert (status, error["param"]) == (400, "prompt")
        assert error["message"] == (f"prompt token id {bad} is outside the model's "
                                    "vocabulary [0, 49152)")

    # Was pydantic's union dump ("Input should be a valid string"): say what a prompt may be.
    for prompt, got in (([1.5], "a list holding float 1.5 at index 0"),
                        ([3, True], "a list holding bool True at index 1"), (7, "int 7"),
                        (["a", "b"], "a list holding str 'a' at index 0")):
        status, body = server.request("POST", "/v1/completions",
                                      json.dumps({"model": MODEL_ID, "prompt": prompt}).encode())
        assert (status, body["error"]["param"]) == (400, "prompt")
        assert body["error"]["message"] == ("prompt: must be a string or a list of token ids "
                                            f"(integers); got {got}")
    status, body = server.request("POST", "/v1/chat/completions", b'{"model": "x", "messages": [')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    status, body = server.request("POST", "/v1/completions", json.dumps({"model": MODEL_ID}).encode())
    assert status == 400 and body["error"]["param"] == "prompt"
    status, body = server.request("GET", "/v1/nothing")
    assert status == 404 and body["error"]["type"] == "not_found_error"

    # Still serving, nothing left running.
    reply = client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2, temperature=0)
    assert reply.usage.completion_tokens == 2
    assert server.wait_for(lambda s: s["running"] == 0 and s["waiting"] == 0)


def test_a_port_in_use_fails_before_loading():
    # Before, the model loaded first and uvicorn then exited with status 3 and its own
    # "ERROR: [Errno 98] error while attempting to bind" line.
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "metalrt.server", "--port", str(port),
                               "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (f"metalrt: error: [serve] cannot listen on 127.0.0.1:{port}: "
                           "Address already in use\n")


@pytest.mark.parametrize("flag, value", [("--kv-cache-tokens", "0"), ("--max-queue", "-1"),
                                         ("--port", "0")])
def test_bad_settings_fail_before_loading(flag, value):
    proc = subprocess.run([sys.executable, "-m", "metalrt.server", flag, value],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"metalrt: error: [serve] {flag} must be")
    assert f"got {value}" in proc.stderr


def test_a_chat_template_that_does_not_parse_fails_at_startup(tmp_path):
    # Before, the server started and every chat request answered 400 instead.
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }\n{% endfor %}")
    proc = subprocess.run([sys.executable, "-m", "metalrt.server", "--chat-template",
                           str(template)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (f"metalrt: error: [serve] --chat-template {template} is not a "
                           f"valid jinja2 template: line 1: unexpected '}}'\n")
