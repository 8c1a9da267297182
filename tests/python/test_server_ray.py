"""``metalrt serve --ray``: two engine replicas under Ray Serve behind one endpoint, on a
local Ray cluster, with the official ``openai`` client (issue: beyond one machine).

The gate sends 16 concurrent greedy streams and compares them with one plain server's
outputs, kills one replica's process while its streams are in flight (they end with an
error event, the others complete), sends a new request, and waits for Ray to restart
the dead replica; ``/metrics`` then lists both live replicas. The Ray server runs with
``--api-key``, which every path but ``/health`` needs there as on a single server."""
import asyncio
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metalrt.server.asgi_stream import asgi_stream
from metalrt.server.launch import ServerProcess as Launched
from metalrt.server.launch import free_port, metalrt_command
from metalrt.server.metrics_merge import merge_metrics
from server_process import MODEL_ID, STARTUP_SECONDS

STREAMS = 16
MAX_TOKENS = 96
SMOL_EOS = 2   # SmolLM2's <|im_end|>: banned so every stream runs its MAX_TOKENS
PROMPTS = [f"Story {i}: once upon a time" for i in range(STREAMS)]
RESTART_SECONDS = 180
API_KEY = "ray-gate-key"


def _environment() -> dict:
    # Same arithmetic as the plain server (f32 GEMM: batch composition cannot move a
    # greedy id), one CPU thread per replica on a 2-core machine.
    return {**os.environ, "METALRT_CPU_GEMM": "f32", "METALRT_CPU_THREADS": "1",
            "RAY_DEDUP_LOGS": "0"}


def _client(url: str, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0,
                         http_client=openai.DefaultHttpxClient(trust_env=False, timeout=120))


def _request(prompt: str) -> dict:
    return dict(model=MODEL_ID, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                logit_bias={str(SMOL_EOS): -100})


@pytest.fixture(scope="module")
def single_outputs():
    """The plain server's greedy completion of each prompt."""
    port = free_port()
    server = Launched(metalrt_command(port, "--device", "cpu", "--kv-cache-tokens", "4096",
                                      "--log-level", "warning"),
                      port, STARTUP_SECONDS, env=_environment())
    try:
        client = _client(server.url)
        return [client.completions.create(**_request(p)).choices[0].text for p in PROMPTS]
    finally:
        server.close()


@pytest.fixture(scope="module")
def ray_server(single_outputs):
    port = free_port()
    server = Launched(metalrt_command(port, "--ray", "--ray-replicas", "2", "--device", "cpu",
                                      # half the streams each: both replicas serve some
                                      "--ray-max-ongoing-requests", str(STREAMS // 2),
                                      "--kv-cache-tokens", "4096", "--log-level", "warning",
                                      "--api-key", API_KEY),
                      port, STARTUP_SECONDS, env=_environment(), start_new_session=True,
                      api_key=API_KEY)
    try:
        yield server
    finally:
        server.close()


def _replicas(url: str, opener) -> set:
    with opener.open(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(s.labels["replica"] for s in family.samples)
    return names


def test_streams_match_a_plain_server_and_survive_a_replica_killed_mid_stream(
        ray_server, single_outputs):
    client = _client(ray_server.url, API_KEY)
    replicas, results = [None] * STREAMS, [None] * STREAMS
    started = [threading.Event() for _ in range(STREAMS)]

    def stream(i: int) -> None:
        try:
            with client.completions.with_streaming_response.create(
                    stream=True, **_request(PROMPTS[i])) as response:
                replicas[i], text = response.headers["x-metalrt-replica"], ""
                try:
                    for chunk in response.parse():
                        text += chunk.choices[0].text
                        started[i].set()
                    results[i] = (text, None)
                except openai.APIError as e:
                    results[i] = (text, e)
        finally:
            started[i].set()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for event in started:
        assert event.wait(STARTUP_SECONDS)
    assert all(r is None for r in results), f"a stream ended before the kill: {results}"
    victim = replicas[0]
    os.kill(int(victim.rsplit(":", 1)[1]), signal.SIGKILL)
    for t in threads:
        t.join(STARTUP_SECONDS)
    on_victim = [i for i in range(STREAMS) if replicas[i] == victim]
    assert len(on_victim) == STREAMS // 2, replicas
    for i in range(STREAMS):
        text, error = results[i]
        if i in on_victim:
            assert isinstance(error, openai.APIError), (i, text)
            assert "replica" in str(error)
            assert single_outputs[i].startswith(text) and len(text) < len(single_outputs[i])
        else:
            assert error is None and text == single_outputs[i], (i, text, error)

    reply = client.completions.create(**_request(PROMPTS[1]))
    assert reply.choices[0].text == single_outputs[1]

    # Ray restarts the dead replica: /metrics lists two live replicas, the victim gone.
    deadline = time.monotonic() + RESTART_SECONDS
    while True:
        names = _replicas(ray_server.url, ray_server.opener)
        if len(names) == 2 and victim not in names:
            break
        assert time.monotonic() < deadline, f"no restart in {RESTART_SECONDS} s: {names}"
        time.sleep(1)


def test_metrics_add_up_over_replicas(ray_server, single_outputs):
    client = _client(ray_server.url, API_KEY)
    before = _settled_generated(ray_server)
    for prompt in PROMPTS[:4]:
        client.completions.create(**{**_request(prompt), "max_tokens": 8})
    assert _settled_generated(ray_server) - before == 4 * 8


def _settled_generated(server) -> float:
    """The generated-token total once two readings a push interval apart agree."""
    last = None
    for _ in range(30):
        value = _generated(server)
        if value == last:
            return value
        last = value
        time.sleep(2.5)
    raise AssertionError("the replicas' metrics did not settle")


def _generated(server) -> float:
    with server.opener.open(f"{server.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text)
               for s in f.samples if s.name == "metalrt_generation_tokens_total")


def _status(url: str, path: str, headers: dict) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url + path, headers=headers), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_api_key_guards_every_path_but_health_as_on_a_single_server(ray_server,
                                                                        single_outputs):
    # The replicas read their own /metrics with the key: the merged text lists both.
    deadline = time.monotonic() + RESTART_SECONDS
    while len(_replicas(ray_server.url, ray_server.opener)) != 2:
        assert time.monotonic() < deadline, "the replicas' /metrics never reached the router"
        time.sleep(1)
    url = ray_server.url
    for path in ("/metrics", "/v1/models"):
        assert _status(url, path, {}) == 401, path
        assert _status(url, path, {"Authorization": "Bearer wrong"}) == 401, path
        assert _status(url, path, {"x-api-key": API_KEY}) == 200, path
        assert _status(url, path, {"Authorization": f"Bearer {API_KEY}"}) == 200, path
    assert _status(url, "/health", {}) == 200
    with pytest.raises(openai.AuthenticationError):
        _client(url, "wrong").completions.create(**{**_request(PROMPTS[0]), "max_tokens": 1})


def test_merge_metrics_labels_every_sample_with_its_replica():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    texts = {}
    for name, count in (("a", 3), ("b", 5)):
        registry = CollectorRegistry()
        Counter("requests", "Requests", ["reason"], registry=registry).labels("stop").inc(count)
        texts[name] = generate_latest(registry).decode()
    merged = list(text_string_to_metric_families(merge_metrics(texts)))
    samples = {(s.labels["replica"], s.labels["reason"]): s.value
               for f in merged if f.name == "requests" for s in f.samples
               if s.name == "requests_total"}
    assert samples == {("a", "stop"): 3.0, ("b", "stop"): 5.0}
    assert [f.type for f in merged if f.name == "requests"] == ["counter"]
    with pytest.raises(ValueError, match="replica b's /metrics does not parse"):
        merge_metrics({"a": texts["a"], "b": "requests_total{ 1"})


def test_asgi_stream_yields_the_reply_as_sent_and_disconnects_when_closed():
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    app, seen = FastAPI(), {}

    @app.post("/echo")
    async def echo(http: Request):
        body = await http.body()

        async def parts():
            for i in range(3):
                yield body + str(i).encode()
                await asyncio.sleep(0)
            seen["disconnected"] = await http.is_disconnected()
        return StreamingResponse(parts(), headers={"x-q": http.url.query})

    async def run():
        items = [i async for i in asgi_stream(app, "POST", "/echo", "a=1",
                                               [("Content-Type", "text/plain")], b"hi")]
        return items

    items = asyncio.run(run())
    assert items[0]["status"] == 200 and ("x-q", "a=1") in items[0]["headers"]
    assert items[1:] == [b"hi0", b"hi1", b"hi2"]
    assert seen["disconnected"] is False


def test_serve_ray_without_ray_names_the_extra(monkeypatch):
    import sys

    from metalrt.server import ray_serve

    monkeypatch.setitem(sys.modules, "ray", None)
    import metalrt.server

    # An earlier test may have imported ray_app: `from . import ray_app` would then find
    # it as the package's attribute and not import it again.
    monkeypatch.delitem(sys.modules, "metalrt.server.ray_app", raising=False)
    monkeypatch.delattr(metalrt.server, "ray_app", raising=False)
    with pytest.raises(RuntimeError, match=r"pip install 'metalrt\[ray\]'"):
        ray_serve.import_ray_app()


def test_cli_without_ray_is_an_error_naming_the_extra():
    import subprocess
    import sys

    code = ("import sys; sys.modules['ray'] = None; from metalrt.cli import main; "
            "sys.exit(main(['serve', '--ray', '--port', str(%d)]))" % free_port())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "metalrt: error: [serve] --ray needs Ray Serve" in done.stderr
    assert "pip install 'metalrt[ray]'" in done.stderr


@pytest.mark.parametrize("replicas, max_replicas, ongoing, cpus, flag", [
    (0, 0, 0, 1, "--ray-replicas"), (3, 2, 0, 1, "--ray-max-replicas"),
    (1, 0, -1, 1, "--ray-max-ongoing-requests"), (1, 0, 0, -1, "--ray-cpus-per-replica")])
def test_bad_replica_counts_are_value_errors(replicas, max_replicas, ongoing, cpus, flag):
    from metalrt.server import ray_app
    from metalrt.server.main import build_app

    with pytest.raises(ValueError, match=flag):
        ray_app.application(build_app, {}, replicas, max_replicas, max_ongoing_requests=ongoing,
                            cpus_per_replica=cpus)


@pytest.mark.parametrize("flags, message", [
    (["--model", "/nonexistent.gguf"], "--model /nonexistent.gguf: no such file or directory"),
    (["--kv-cache-tokens", "0"], "--kv-cache-tokens must be >= 1, got 0"),
    (["--pipeline-stages", "2", "--spec-type", "ngram"], "--pipeline-stages runs without"),
    (["--ray-cpus-per-replica", "-1"], "--ray-cpus-per-replica must be >= 0, got -1.0")])
def test_serve_ray_checks_the_settings_before_ray_starts(flags, message):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "metalrt.cli", "serve", "--ray", "--port",
                           str(free_port()), *flags], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()   # one line: no Ray start, no replica's traceback
    assert len(lines) == 1 and lines[0].startswith("metalrt: error: [serve] "), done.stderr
    assert message in lines[0], done.stderr


def _bare_replica(app=None):
    """An ``EngineReplica`` object outside Ray Serve (``__init__`` not run)."""
    from metalrt.server import ray_app

    cls = ray_app.EngineReplica.func_or_class
    replica = cls.__new__(cls)
    if app is not None:
        replica.app, replica.name = app, "r1:1"
    return replica


def test_check_health_raises_when_the_application_is_not_healthy():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    for status in (200, 503):
        app = FastAPI()
        app.get("/health")(lambda status=status: JSONResponse({"status": "x"}, status))
        check = _bare_replica(app).check_health()
        if status == 200:
            assert asyncio.run(check) is None
        else:
            with pytest.raises(RuntimeError, match="replica r1:1: /health answered 503"):
                asyncio.run(check)


def test_a_replica_whose_init_failed_is_deleted_quietly():
    asyncio.run(_bare_replica().__del__())
