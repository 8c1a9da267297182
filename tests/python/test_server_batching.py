"""Continuous batching in ``metalrt serve``: concurrent streams get exactly their solo
tokens while sharing forward steps, a disconnected stream frees its KV blocks at once,
a full KV cache queues requests and a full queue answers 503, and 200 sequential
requests leave the server's memory flat."""
import threading
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil
import pytest

from server_process import MODEL_ID, ServerProcess

PROMPTS = ["Hi", "Once upon a time", "The three primary colours are red,",
           "Write a haiku about the sea and the wind over the harbour:",
           "List the planets of the solar system in order from the sun, starting with",
           "Question: what is seven times eight? Answer:",
           "In the beginning of the twentieth century, the city of Paris was known for its",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"]

STORY = "Once upon a time"   # its greedy continuation runs on past 200 tokens


@pytest.fixture(scope="module")
def server():
    # A step's rows share each matmul call, whose provider is chosen by the call's row
    # count: a prompt of <= 16 tokens is prefilled by the quantized GEMV alone but by the
    # prefill GEMM when batched with others (docs/cpu.md, "Batched and solo rows"), so its
    # logits differ by the distance between the two: 3e-3 for the f32 sgemm, 0.28 for the
    # bf16 GEMM on "Write a haiku..." (measured), which turns its continuation "The sea" into
    # "The sun". The solo-token gate holds the scheduler to the f32 sgemm, where that distance
    # is within the greedy margins of these prompts.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("METALRT_CPU_GEMM", "f32")
        process = ServerProcess("--kv-cache-tokens", "4096", "--no-prefix-cache")
    yield process
    process.close()


def stream_text(client, prompt, max_tokens=6, start=None):
    """(text, completion tokens) of a greedy streamed completion."""
    if start is not None:
        start.wait()
    chunks = list(client.completions.create(
        model=MODEL_ID, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage.completion_tokens


def test_concurrent_streams_get_their_solo_tokens_and_share_steps(server):
    client = server.client()
    before = server.stats()["steps"]
    alone = [stream_text(client, p) for p in PROMPTS]
    solo_steps = server.stats()["steps"] - before
    assert len(set(alone)) == len(PROMPTS)          # distinct continuations

    start = threading.Barrier(len(PROMPTS))
    before = server.stats()["steps"]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: stream_text(server.client(), p, start=start), PROMPTS))
    stats = server.stats()
    assert together == alone
    # Alone, a request takes one step per token (the prefill samples the first one);
    # batched they overlap: at least 4 sequences in one step and half the steps.
    assert solo_steps == sum(n for _, n in alone)
    assert stats["steps"] - before <= solo_steps // 2
    assert stats["max_batch_size"] >= 4


def test_disconnected_stream_frees_its_blocks(server):
    client = server.client()
    free = server.wait_for(lambda s: s["running"] == 0)["kv_blocks_free"]
    generated = server.stats()["generated_tokens"]
    stream = client.completions.create(model=MODEL_ID, prompt=STORY, max_tokens=500,
                                       temperature=0, stream=True)
    chunks = iter(stream)
    received = [next(chunks).choices[0].text for _ in range(3)]
    assert all(received)
    assert server.stats()["kv_blocks_free"] < free          # it holds blocks now
    stream.close()
    stats = server.wait_for(lambda s: s["running"] == 0 and s["kv_blocks_free"] == free)
    assert stats["generated_tokens"] - generated < 500        # cancelled, not finished


def test_client_gone_before_a_full_answer_cancels_it(server):
    # 2,000 greedy tokens (the story meets no eos before them) take seconds at any decode
    # speed this machine reaches; the client hangs up after half a second. (500 tokens
    # against a 2 s timeout stopped holding once the CPU decode passed ~250 tok/s.)
    free = server.wait_for(lambda s: s["running"] == 0)["kv_blocks_free"]
    generated = server.stats()["generated_tokens"]
    with pytest.raises(openai.APITimeoutError):     # the client gives up and hangs up
        server.client(timeout=0.5).completions.create(model=MODEL_ID, prompt=STORY,
                                                      max_tokens=2000, temperature=0)
    stats = server.wait_for(lambda s: s["running"] == 0 and s["kv_blocks_free"] == free)
    assert stats["generated_tokens"] - generated < 2000        # cancelled, not finished


def test_200_sequential_requests_keep_memory_flat(server):
    client = server.client()
    process = psutil.Process(server.proc.pid)

    def run(n):
        for i in range(n):
            reply = client.completions.create(model=MODEL_ID, prompt=f"Count: {i}",
                                              max_tokens=1, temperature=0)
            assert reply.usage.completion_tokens == 1

    run(20)                      # warm-up: step buffers, caches of the web stack
    rss = process.memory_info().rss
    run(200)
    grown = process.memory_info().rss / rss - 1
    assert grown < 0.05, f"RSS grew by {grown:.1%} over 200 requests"


def first_piece(client):
    """The first text of a long greedy stream, which is then dropped."""
    stream = client.completions.create(model=MODEL_ID, prompt=STORY, max_tokens=200,
                                       temperature=0, stream=True)
    with stream:
        return next(iter(stream)).choices[0].text


def test_full_cache_queues_and_full_queue_answers_503():
    # 16 blocks: one request of 200 + 6 tokens (13 blocks) at a time; 1 may wait.
    small = ServerProcess("--kv-cache-tokens", "256", "--max-queue", "1")
    try:
        client = small.client()
        running = client.completions.create(model=MODEL_ID, prompt=STORY, max_tokens=200,
                                            temperature=0, stream=True)
        next(iter(running))
        with ThreadPoolExecutor(1) as pool:
            queued = pool.submit(first_piece, small.client())
            small.wait_for(lambda s: s["running"] == 1 and s["waiting"] == 1)
            with pytest.raises(openai.APIStatusError) as info:
                client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
            assert info.value.status_code == 503
            assert info.value.response.json()["error"]["code"] == "queue_full"
            running.close()                  # the queued request gets the blocks
            assert queued.result(timeout=60)
        status, body = small.request("POST", "/v1/completions",
                                     b'{"model": "%s", "prompt": "Hi", "max_tokens": 300}'
                                     % MODEL_ID.encode())
        assert status == 400 and "the server's cache has 16" in body["error"]["message"]
    finally:
        small.close()
