"""``metalrt serve`` with several models (``--model`` twice): the default SmolLM2 and
a tiny random Llama 3 GGUF (``family_gguf_fixtures``), on loopback through the
official openai client, against ``metalrt.generate`` in this process as the oracle.
The second model loads on first use; under a ``--max-memory`` that fits one model,
alternating requests evict and reload the least recently used one; a model with a
stream in flight is not evicted (the other model's request gets 503); an unknown id
is a 404 in OpenAI's and Anthropic's shapes; a bad ``--max-memory`` is a CLI error;
``--prompt-cache-dir`` keeps each model's prefixes in its own subdirectory; ``/metrics``
labels each sample with its model.
The registry's own rules (one load for concurrent first requests, LRU order, sizes)
are checked in-process with a stand-in loader."""
import asyncio
import json
import subprocess
import sys
import time

import openai
import pytest

import family_gguf_fixtures
import metalrt
from metalrt.default_model import default_model_path
from server_process import MODEL_ID, ServerProcess

TINY = "tiny-llama3"
PROMPT = "Once upon a time"


@pytest.fixture(scope="module", autouse=True)
def f32_prefill():
    """Server and oracle on the same CPU GEMM arithmetic (as test_server.py)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("METALRT_CPU_GEMM", "f32")
        yield


@pytest.fixture(scope="module")
def tiny_path():
    return str(family_gguf_fixtures.fixture("llama3")["q8_0"])


@pytest.fixture(scope="module")
def oracles(f32_prefill, tiny_path):
    """{model id: its greedy completion of PROMPT, 8 tokens}, and SmolLM2's eos ids."""
    smol, smol_tok = metalrt.load(device="cpu")
    tiny, tiny_tok = metalrt.load(tiny_path, device="cpu")
    return ({MODEL_ID: metalrt.generate(smol, smol_tok, PROMPT, max_tokens=8),
             TINY: metalrt.generate(tiny, tiny_tok, PROMPT, max_tokens=8)},
            smol_tok.eos_token_ids)


def _models(server) -> dict:
    status, body = server.request("GET", "/v1/models")
    assert status == 200 and body["object"] == "list"
    return {m["id"]: m for m in body["data"]}


def _engines(server) -> dict:
    """/health's engine stats of each loaded model."""
    status, body = server.request("GET", "/health")
    assert status == 200
    return body["models"]


def _complete(client, model: str) -> str:
    reply = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    assert reply.model == model
    return reply.choices[0].text


def _serve(tiny_path: str, *settings: str) -> ServerProcess:
    """A server of SmolLM2 (first, so loaded at start-up) and the tiny model."""
    return ServerProcess("--kv-cache-tokens", "1024", *settings,
                         "--model", f"{MODEL_ID}={default_model_path()}",
                         "--model", f"{TINY}={tiny_path}")


@pytest.fixture(scope="module")
def server(f32_prefill, tiny_path):
    process = _serve(tiny_path)
    yield process
    process.close()


def test_second_model_loads_on_first_use_and_each_id_gets_its_model(server, oracles):
    expected, _ = oracles
    before = _models(server)
    assert list(before) == [MODEL_ID, TINY]
    assert before[MODEL_ID]["state"] == "loaded" and before[MODEL_ID]["memory_bytes"] > 0
    assert before[TINY]["state"] == "not-loaded" and before[TINY]["memory_bytes"] is None
    assert {m["object"] for m in before.values()} == {"model"}   # OpenAI's required fields
    assert all(m["owned_by"] == "metalrt" and "created" in m for m in before.values())
    client = server.client(timeout=120)
    assert _complete(client, TINY) == expected[TINY]
    assert _complete(client, MODEL_ID) == expected[MODEL_ID]
    assert expected[TINY] != expected[MODEL_ID]
    after = _models(server)
    assert after[TINY]["state"] == after[MODEL_ID]["state"] == "loaded"   # no budget: both
    status, health = server.request("GET", "/health")
    assert status == 200 and set(health["models"]) == {MODEL_ID, TINY}


def test_unknown_model_is_a_404_in_each_apis_shape(server):
    with pytest.raises(openai.NotFoundError) as e:
        server.client().completions.create(model="nope", prompt=PROMPT, max_tokens=2)
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    assert TINY in e.value.body["message"] and MODEL_ID in e.value.body["message"]
    status, body = server.request("POST", "/v1/messages", json.dumps(
        {"model": "nope", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    ).encode())
    assert status == 404 and body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert _models(server)[TINY]["id"] == TINY   # still serving


def _metrics(server) -> dict:
    """{(sample name, model): value} of /metrics, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    with server.opener.open(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            key = (sample.name, labels.pop("model"), *sorted(labels.items()))
            out[key] = sample.value
    return out


def test_metrics_count_each_models_requests_under_its_label(server):
    client = server.client(timeout=120)
    prompt = PROMPT * 12      # whole 16-token blocks: the prefix cache holds them
    for model in (MODEL_ID, TINY):          # both loaded: each has its engine gauges
        client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    before, prompts = _metrics(server), {MODEL_ID: 0, TINY: 0}
    for model, tokens in ((MODEL_ID, 3), (TINY, 5), (TINY, 5)):
        reply = client.completions.create(model=model, prompt=prompt, max_tokens=tokens,
                                          temperature=0)
        assert reply.usage.completion_tokens == tokens
        prompts[model] += reply.usage.prompt_tokens
    after = _metrics(server)

    def grew(name, model, *labels):
        return after[(name, model, *labels)] - before.get((name, model, *labels), 0)

    length = ("finish_reason", "length")
    assert (grew("metalrt_requests_total", MODEL_ID, length),
            grew("metalrt_requests_total", TINY, length)) == (1, 2)
    assert (grew("metalrt_generation_tokens_total", MODEL_ID),
            grew("metalrt_generation_tokens_total", TINY)) == (3, 10)
    assert (grew("metalrt_time_to_first_token_seconds_count", MODEL_ID),
            grew("metalrt_time_to_first_token_seconds_count", TINY)) == (1, 2)
    assert (grew("metalrt_inter_token_latency_seconds_count", MODEL_ID),
            grew("metalrt_inter_token_latency_seconds_count", TINY)) == (2, 8)
    assert {m: grew("metalrt_prompt_tokens_total", m) for m in prompts} == prompts
    for gauge in ("metalrt_requests_running", "metalrt_requests_waiting",
                  "metalrt_kv_cache_usage_ratio", "metalrt_prefix_cache_hit_ratio"):
        assert {k[1] for k in after if k[0] == gauge} == {MODEL_ID, TINY}, gauge
    assert after[("metalrt_requests_waiting", TINY)] == 0
    assert after[("metalrt_prefix_cache_hit_ratio", TINY)] > 0     # the prompt came again


@pytest.fixture(scope="module")
def budget_server(server, tiny_path):
    """A server whose --max-memory fits the larger model but not both."""
    sizes = [m["memory_bytes"] for m in _models(server).values()]
    assert None not in sizes, "the first server loads both models first"
    budget = max(sizes) + min(sizes) // 2
    process = _serve(tiny_path, "--max-memory", str(budget))
    yield process
    process.close()


def test_alternating_requests_evict_and_reload_lru(budget_server, oracles):
    expected, _ = oracles
    client = budget_server.client(timeout=120)
    for model, other in ((TINY, MODEL_ID), (MODEL_ID, TINY), (TINY, MODEL_ID),
                         (MODEL_ID, TINY)):
        assert _complete(client, model) == expected[model]
        states = {k: m["state"] for k, m in _models(budget_server).items()}
        assert states == {model: "loaded", other: "not-loaded"}


def test_a_model_with_a_stream_in_flight_is_not_evicted(budget_server, oracles):
    expected, eos = oracles
    client = budget_server.client(timeout=300)
    _complete(client, MODEL_ID)   # SmolLM2 loaded, the tiny model evicted
    # eos forbidden: the stream runs its whole max_tokens, certainly past the 503.
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=300,
                                       temperature=0, stream=True,
                                       logit_bias={str(t): -100 for t in eos})
    chunks = iter(stream)
    first = next(chunks)
    with pytest.raises(openai.APIStatusError) as e:
        _complete(client, TINY)
    assert e.value.status_code == 503 and e.value.body["code"] == "model_unavailable"
    assert MODEL_ID in e.value.body["message"]
    rest = list(chunks)
    assert rest[-1].choices[0].finish_reason == "length"
    assert (first.choices[0].text + "".join(c.choices[0].text for c in rest)).startswith(
        expected[MODEL_ID])
    assert _complete(client, TINY) == expected[TINY]   # now it is idle: evicted for TINY
    assert _models(budget_server)[MODEL_ID]["state"] == "not-loaded"


def test_each_model_keeps_its_prompt_cache_in_its_own_subdirectory(tiny_path, tmp_path):
    settings = ("--prompt-cache-dir", str(tmp_path), "--prompt-cache-min-tokens", "16")
    prompt = PROMPT * 12      # well past one 16-token block for either tokenizer
    server = _serve(tiny_path, *settings)
    try:
        client = server.client(timeout=120)
        first = client.completions.create(model=TINY, prompt=prompt, max_tokens=4,
                                          temperature=0)
        deadline = time.monotonic() + 60     # written on the engine thread after the reply
        while _engines(server)[TINY]["prompt_cache_files_written"] == 0:
            assert time.monotonic() < deadline, "no prompt-cache file was written"
            time.sleep(0.05)
        assert _engines(server)[MODEL_ID]["prompt_cache_files_written"] == 0
    finally:
        server.close()
    assert len(list((tmp_path / TINY).glob("*.safetensors"))) == 1
    assert list((tmp_path / MODEL_ID).iterdir()) == []
    server = _serve(tiny_path, *settings)
    try:
        # SmolLM2 loads at start-up and reads none of the tiny model's files (in one
        # shared directory it would refuse each with a warning).
        start = server.stats()
        assert (start["prompt_cache_files_loaded"], start["prompt_cache_files_refused"]) == (0, 0)
        second = server.client(timeout=120).completions.create(
            model=TINY, prompt=prompt, max_tokens=4, temperature=0)
        assert second.usage.prompt_tokens_details.cached_tokens >= 16   # from disk
        assert second.choices[0].text == first.choices[0].text
        tiny = _engines(server)[TINY]
        assert (tiny["prompt_cache_files_loaded"], tiny["prompt_cache_files_refused"]) == (1, 0)
        assert "prompt cache file skipped" not in server.output()
    finally:
        server.close()


def test_a_reply_ends_only_once_its_model_is_idle(tiny_path):
    """The registry evicts only idle models: a client that has seen its reply end and
    asks for another model must find this one idle, not still finishing (a spurious 503)."""
    from metalrt.runner import SamplingParams
    from metalrt.server.engine_loop import EngineLoop

    model, tokenizer = metalrt.load(tiny_path, device="cpu")
    loop = EngineLoop(model, tokenizer, 64)
    seen = []   # (finish_reason, busy) of each event, on the engine thread as it is pushed
    loop.observer = lambda _, event: seen.append((event.finish_reason, loop.busy))

    async def run():
        generation = loop.submit(tokenizer.encode(PROMPT), SamplingParams(temp=0), 3)
        return [event async for event in generation.events()]

    try:
        events = asyncio.run(run())
    finally:
        loop.close()
    assert events[-1].finish_reason == "length" and len(seen) == len(events) == 3
    assert seen == [(None, True), (None, True), ("length", False)]


@pytest.mark.parametrize("value", ["8Q", "-1G", "0", "lots"])
def test_a_bad_max_memory_is_a_cli_error(value):
    proc = subprocess.run([sys.executable, "-m", "metalrt.server", f"--max-memory={value}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "argument --max-memory: " in proc.stderr
    assert ("expected a size such as 8G" in proc.stderr
            or "the size must be positive" in proc.stderr)


def test_parse_bytes():
    from metalrt.server.model_registry import parse_bytes

    assert parse_bytes("8G") == 8 << 30
    assert parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("512m") == 512 << 20
    assert parse_bytes("4096") == 4096
    assert parse_bytes("2KB") == 2048


class _Stub:
    """A stand-in ServedModel of ``memory_bytes``."""

    def __init__(self, memory_bytes):
        self.memory_bytes, self.busy, self.closed = memory_bytes, False, False

    def close(self):
        self.closed = True


def test_registry_loads_once_and_evicts_lru_idle(tmp_path):
    from metalrt.server.model_registry import (ModelRegistry, ModelUnavailableError,
                                               UnknownModelError)

    paths = {}
    for name in "abc":
        (tmp_path / f"{name}.gguf").write_bytes(b"x" * 100)
        paths[name] = str(tmp_path / f"{name}.gguf")
    loads = []

    def load(name, path):
        loads.append(name)
        return _Stub(100)

    async def scenario():
        registry = ModelRegistry(paths, load, max_memory=250)
        first = await asyncio.gather(registry.acquire("a"), registry.acquire("a"))
        assert first[0] is first[1] and loads == ["a"]          # concurrent: one load
        b = await registry.acquire("b")
        await registry.acquire("a")                              # a is now the most recent
        await registry.acquire("c")                              # evicts b, the LRU
        assert b.closed and list(registry.loaded) == ["a", "c"]
        registry.loaded["a"].busy = registry.loaded["c"].busy = True
        with pytest.raises(ModelUnavailableError, match="retry when they finish"):
            await registry.acquire("b")                          # nothing idle to evict
        with pytest.raises(UnknownModelError):
            await registry.acquire("z")
        assert loads == ["a", "b", "c"]

    asyncio.run(scenario())


def test_model_entries_ids_paths_and_directories(tmp_path):
    from metalrt.server.model_registry import model_entries

    (tmp_path / "zoo").mkdir()
    for name in ("b.gguf", "a.gguf", "notes.txt"):
        (tmp_path / "zoo" / name).write_bytes(b"x")
    (tmp_path / "zoo" / "hf").mkdir()
    (tmp_path / "zoo" / "hf" / "config.json").write_text("{}")
    zoo = str(tmp_path / "zoo")
    assert model_entries([zoo]) == {"a": f"{zoo}/a.gguf", "b": f"{zoo}/b.gguf",
                                    "hf": f"{zoo}/hf"}
    assert model_entries([f"mine={zoo}/a.gguf", f"{zoo}/b.gguf"]) == {
        "mine": f"{zoo}/a.gguf", "b": f"{zoo}/b.gguf"}
    with pytest.raises(ValueError, match="the model id 'a' is given twice"):
        model_entries([f"{zoo}/a.gguf", zoo])
    with pytest.raises(ValueError, match="no such file or directory"):
        model_entries([f"x={zoo}/missing.gguf"])
    with pytest.raises(ValueError, match="a directory of models"):
        model_entries([f"x={zoo}"])   # ID= names one model, not a directory of them
