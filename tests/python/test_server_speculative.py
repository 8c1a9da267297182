"""``metalrt serve --spec-type ngram`` (and ``mtp`` on a twin with an MTP head): a reply
(greedy, streamed or not) equals ``metalrt.generate`` without speculation."""
import json
import urllib.request

import pytest

import metalrt
from server_process import MODEL_ID, ServerProcess

# A prompt whose answer repeats it: prompt lookup drafts from it.
PROMPT = "Repeat exactly: the cat sat on the mat. the cat sat on the mat. the cat sat on"


@pytest.fixture(scope="module")
def server():
    with pytest.MonkeyPatch.context() as env:
        env.setenv("METALRT_CPU_GEMM", "f32")   # as test_server: the f32 prefill arithmetic
        process = ServerProcess("--kv-cache-tokens", "1024", "--spec-type", "ngram",
                                "--num-draft-tokens", "4")
        yield process
        process.close()


def test_speculating_server_equals_plain_generate(server, monkeypatch):
    monkeypatch.setenv("METALRT_CPU_GEMM", "f32")
    model, tokenizer = metalrt.load(device="cpu")
    expected = metalrt.generate(model, tokenizer, PROMPT, max_tokens=24)
    client = server.client()
    reply = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=24, temperature=0)
    assert reply.choices[0].text == expected and reply.usage.completion_tokens == 24
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=24,
                                       temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == expected


def test_a_stop_string_inside_a_verify_step_ends_the_reply_there(server, monkeypatch):
    """A verify step gives a request several tokens: the reply and its token count stop
    at the stop string, as without speculation."""
    monkeypatch.setenv("METALRT_CPU_GEMM", "f32")
    model, tokenizer = metalrt.load(device="cpu")
    prompt = "Repeat this list: apple, banana, cherry, apple, banana, cherry, apple, banana,"
    whole = metalrt.generate(model, tokenizer, prompt, max_tokens=40)
    for start in (9, 14, 21):   # stops met at several places within the verify steps
        stop = whole[start:start + 8]
        plain = list(metalrt.stream_generate(model, tokenizer, prompt, max_tokens=40,
                                             stop=stop))
        reply = server.client().completions.create(model=MODEL_ID, prompt=prompt,
                                                   max_tokens=40, temperature=0, stop=stop)
        assert reply.choices[0].text == "".join(r.text for r in plain)
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage.completion_tokens == len(plain) < 40


def test_mtp_server_equals_plain_generate():
    """``--spec-type mtp`` on the Qwen3.5 twin with an MTP head (``tiny_hybrid``): the
    greedy reply equals ``metalrt.generate`` without speculation, and the server's
    engine verified drafts."""
    import openai

    import tiny_hybrid
    from metalrt.server.launch import ServerProcess as Launched
    from metalrt.server.launch import free_port, metalrt_command
    from server_process import STARTUP_SECONDS

    path = str(tiny_hybrid.path("qwen3_5_mtp"))
    model, tokenizer = metalrt.load(path, device="cpu")
    prompt = tokenizer.decode(tiny_hybrid.prompt(20, 20))
    expected = metalrt.generate(model, tokenizer, prompt, max_tokens=16)
    port = free_port()
    process = Launched(metalrt_command(port, "--device", "cpu", "--log-level", "warning",
                                       "--model", path, "--spec-type", "mtp",
                                       "--num-draft-tokens", "3"), port, STARTUP_SECONDS)
    try:
        client = openai.OpenAI(base_url=f"{process.url}/v1", api_key="unused",
                               http_client=openai.DefaultHttpxClient(trust_env=False, timeout=60))
        reply = client.completions.create(model=process.model, prompt=prompt, max_tokens=16,
                                          temperature=0)
        assert reply.choices[0].text == expected and reply.usage.completion_tokens == 16
        with urllib.request.urlopen(f"{process.url}/health") as response:
            stats = json.loads(response.read())["engine"]
        assert stats["verify_steps"] > 0 and stats["accepted_tokens"] > 0
    finally:
        process.close()
