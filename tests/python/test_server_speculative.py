"""``metalrt serve --spec-type ngram``: a reply (greedy, streamed or not) equals
``metalrt.generate`` without speculation, whose tokens it drafts by prompt lookup."""
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
