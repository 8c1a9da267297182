"""The fixtures of the server gates that check ``metalrt serve`` against this process:
the server with the default model (4096 KV-cache tokens), its openai client, the same
model loaded here as the oracle, all on the f32 prefill arithmetic."""
import pytest

import metalrt
from server_process import ServerProcess


@pytest.fixture(scope="module", autouse=True)
def f32_prefill():
    """Server and oracle on the f32 prefill arithmetic: with prefix caching the server
    prefills a repeated prompt's uncached tail alone (up to 16 tokens: the f32 GEMV and
    attention) where the oracle prefills the whole prompt (on bf16 by default, GEMMs and
    attention), and bf16's distance turns the dragon story's "There was" into "There's".
    On f32 that distance (~3e-3 in the logits) is within these prompts' greedy margins."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("METALRT_CPU_GEMM", "f32")
        yield


@pytest.fixture(scope="module")
def server(f32_prefill):
    process = ServerProcess("--kv-cache-tokens", "4096")
    yield process
    process.close()


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=120)


@pytest.fixture(scope="module")
def oracle():
    return metalrt.load(device="cpu")


def chat_ids(tokenizer, messages):
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)
