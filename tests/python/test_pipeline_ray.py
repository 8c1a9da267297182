"""Pipeline parallel across processes (issue: beyond one machine): the default model's
30 layers split over Ray actors on loopback, driven by the runner's Engine.

In-process (no Ray): models built from a range of layers, chained, give the whole
model's logits bit for bit; a step cut into micro-batches rebuilds the steps of its
sequences. Under a local Ray cluster (one per module, ~30 s to start and load here):
2 stages give the single-process model's logits bit for bit and its greedy ids for 4
batched requests (2 micro-batches a step), each stage's resident bytes of the model
file are its own layers' tensors only, and ``build_app(pipeline_stages=2)`` (``metalrt
serve --pipeline-stages 2``) answers a greedy completion as the single server does."""
import sys

import numpy as np
import pytest

import metalrt
from metalrt.cache import ScheduledChunk, StepBuffers, blocks_for, build_step
from metalrt.default_model import default_model_path
from metalrt.loaders import file_map
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.models import build_model
from metalrt.pipeline import load_pipeline, stage_ranges
from metalrt.pipeline import micro_batches
from metalrt.runner import Engine, SamplingParams

LAYERS = 30          # SmolLM2-135M
PROMPTS = [f"Story {i}: once upon a time" for i in range(4)]
NEW_TOKENS = 24
FAULT_AROUND = 64 << 10


@pytest.fixture(scope="module")
def whole():
    return metalrt.load(None, device="cpu")


def _prefill(chunk_ids):
    return ScheduledChunk(chunk_ids, 0, list(range(blocks_for(len(chunk_ids)))), "all")


def test_stage_models_chained_give_the_whole_models_logits_bit_for_bit(whole):
    model, tokenizer = whole
    ids = tokenizer.encode("The capital of France is Paris, and the capital of Spain is")
    ranges = stage_ranges(LAYERS, 3)
    assert ranges == [(0, 10), (10, 20), (20, 30)]
    stages = [metalrt.load(None, device="cpu", layers=r)[0] for r in ranges]
    assert [len(s.layers) for s in stages] == [10, 10, 10]
    # Only what a stage uses is built: the embedding at the ends (tied: the last stage's
    # LM head), the final norm at the last stage.
    assert [hasattr(s, "embed_tokens") for s in stages] == [True, False, True]
    assert [hasattr(s, "final_norm") for s in stages] == [False, False, True]
    h = None
    for stage in stages:
        step = build_step([_prefill(ids)], "cpu")
        h = stage.forward(step, stage.new_cache(blocks_for(len(ids))), hidden=h)
        if not stage.last_stage:
            assert h.shape == (len(ids), model.shape.hidden)
    assert np.array_equal(h.numpy(), model.logits(ids))


def test_bad_layer_ranges_and_hidden_states_are_errors(whole):
    model, _ = whole
    for layers in ((0, 0), (5, 31), (-1, 3), (4, 2)):
        with pytest.raises(ValueError, match=r"layers .* must satisfy 0 <= start < stop <= 30"):
            metalrt.load(None, device="cpu", layers=layers)
    for layers in ((1,), "0:3", (0.0, 2)):
        with pytest.raises(TypeError, match=r"layers must be a \(start, stop\) pair of ints"):
            metalrt.load(None, device="cpu", layers=layers)
    ids = [1, 2, 3]
    step = build_step([_prefill(ids)], "cpu")
    with pytest.raises(ValueError, match="embeds the ids itself"):
        model.forward(step, model.new_cache(1), hidden=metalrt.zeros((3, 576)))
    middle = metalrt.load(None, device="cpu", layers=(10, 20))[0]
    with pytest.raises(ValueError, match="needs the previous stage's hidden states"):
        middle.forward(step, middle.new_cache(1))
    with pytest.raises(ValueError, match="'opt' is built whole only.*llama"):
        build_model({"model_type": "opt"}, {}, "cpu", layers=(0, 1))
    for use, call in (("logits", lambda: middle.logits(ids)),
                      ("an Engine", lambda: Engine(middle, middle.new_cache(4), 64))):
        with pytest.raises(ValueError, match=rf"{use}.* needs logits: this model holds layers "
                           r"10..19 of 30, a pipeline stage that returns hidden states"):
            call()
    first = metalrt.load(None, device="cpu", layers=(0, 15))[0]
    with pytest.raises(ValueError, match="a pipeline stage that returns hidden states"):
        first.logits(ids)
    for stages in (0, 31, 2.0):
        with pytest.raises(ValueError, match=r"stages must be an int in 1..30"):
            stage_ranges(LAYERS, stages)


def test_micro_batches_are_the_steps_of_their_sequences():
    chunks = [ScheduledChunk(list(range(1, 6)), 0, [3], "last", 0),
              ScheduledChunk([7], 20, [0, 5], "last", 1),
              ScheduledChunk(list(range(10, 17)), 16, [1, 2], "all", 2),
              ScheduledChunk([9, 9], 0, [4], "none", 3)]
    arrays = micro_batches.host_arrays(build_step(chunks, "cpu"))
    parts = micro_batches.split(arrays, 2)
    # 15 tokens: the cut at 7.5 falls after the third sequence's start (6), at its end.
    groups = [chunks[:3], chunks[3:]]
    assert len(parts) == 2
    for part, group in zip(parts, groups):
        got, want = micro_batches.step_inputs(part, StepBuffers("cpu")), build_step(group, "cpu")
        for name in ("token_ids", "positions", "slot_mapping", "seq_lens", "query_start_loc",
                     "state_slots"):
            assert np.array_equal(getattr(got, name).numpy(), getattr(want, name).numpy()), name
        width = want.block_tables.shape[1]
        assert np.array_equal(got.block_tables.numpy()[:, :width], want.block_tables.numpy())
        assert (got.logit_rows is None) == (want.logit_rows is None)
        if want.logit_rows is not None:
            assert np.array_equal(got.logit_rows.numpy(), want.logit_rows.numpy())
        assert (got.num_logit_rows, got.max_position) == (want.num_logit_rows, want.max_position)
        assert got.decode_rows is want.decode_rows is True   # every chunk <= 16 tokens
    # The engine's choice of arithmetic travels with each micro-batch (a stage that
    # dropped it would compute decode rows as a prefill's GEMMs).
    for decode_rows in (False, True):
        step = build_step(chunks, "cpu", decode_rows=decode_rows)
        assert [micro_batches.step_inputs(p, StepBuffers("cpu")).decode_rows
                for p in micro_batches.split(micro_batches.host_arrays(step), 2)] == [decode_rows] * 2
    assert [len(p["token_ids"]) for p in micro_batches.split(arrays, 8)] == [5, 1, 7, 2]
    assert len(micro_batches.split(arrays, 1)) == 1
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        micro_batches.split(arrays, 0)
    # A LongRoPE step's rows (a sequence on the long factors: positions + the switch)
    # travel with their tokens.
    chunks[2] = ScheduledChunk(list(range(10, 17)), 16, [1, 2], "all", 2, rope_offset=64)
    parts = micro_batches.split(micro_batches.host_arrays(build_step(chunks, "cpu")), 2)
    rows = [micro_batches.step_inputs(p, StepBuffers("cpu")).rope_rows.numpy() for p in parts]
    assert rows[0].tolist() == [0, 1, 2, 3, 4, 20, *range(80, 87)] and rows[1].tolist() == [0, 1]


def test_a_stage_hands_the_engine_its_long_rope_switch(tmp_path):
    """The pipeline's engine recomputes LongRoPE requests as a single process's does:
    the first stage says where (load_pipeline passes it to the PipelineModel)."""
    import tiny_hf
    from metalrt.pipeline.model import PipelineModel
    from metalrt.pipeline.stage import PipelineStage

    tiny_hf.build("phi4_mini", tmp_path)
    stage = PipelineStage(str(tmp_path), (0, 1), "cpu", "float32", 4)
    assert stage.rope_switch() == 64
    assert PipelineStage(None, (0, 15), "cpu", "float32", 4).rope_switch() is None
    config = {"model_type": "phi3", "vocab_size": 300, "num_hidden_layers": 2}
    assert PipelineModel([], config, 1, "float32", [(0, 1), (1, 2)], 64).rope_switch == 64


def test_load_pipeline_without_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RuntimeError, match=r"pip install 'metalrt\[ray\]'"):
        load_pipeline(None, stages=2)


def test_load_pipeline_refuses_bad_counts_before_starting_ray():
    import ray

    with pytest.raises(ValueError, match="stages must be an int in 1..30"):
        load_pipeline(None, stages=31)
    with pytest.raises(ValueError, match="micro_batches_per_step must be an int >= 1"):
        load_pipeline(None, stages=2, micro_batches_per_step=0)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def pipeline():
    import ray

    # 4 logical CPUs: this pipeline's 2 stages and the served one's; a cluster of our
    # own ("local"), not one a `ray start` left running on the machine.
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        model, _ = load_pipeline(None, stages=2, micro_batches_per_step=2, device="cpu")
        yield model
        model.close()
    finally:
        ray.shutdown()


def _greedy(model, tokenizer):
    engine = Engine(model, model.kv_cache(64), 512)
    requests = [engine.add_request(tokenizer.encode(p), SamplingParams(), NEW_TOKENS)
                for p in PROMPTS]
    while engine.has_work:
        engine.step()
    engine.close()
    return [r.output for r in requests], engine.stats


def test_two_stages_give_the_single_process_logits_and_greedy_ids(pipeline, whole):
    model, tokenizer = whole
    assert pipeline.ranges == [(0, 15), (15, 30)]
    ids = tokenizer.encode("The capital of France is Paris, and the capital of Spain is")
    assert np.array_equal(pipeline.logits(ids), model.logits(ids))
    want, _ = _greedy(model, tokenizer)
    got, stats = _greedy(pipeline, tokenizer)
    assert got == want
    assert all(len(o) == NEW_TOKENS for o in got)
    # The 4 requests decoded together: each step went to the stages as 2 micro-batches.
    assert stats.max_batch_size == 4 and stats.plan_replays == 0


def _tensor_bytes(path, layers, embedding: bool, head: bool):
    """(bytes, count) of the file's tensors of ``layers``, and of the embedding and the
    head where asked; with the header (metadata: the tokenizer) counted as one."""
    with file_map.mapped():
        tensors = GGUFFile(str(path)).tensors
    own = [name for name in tensors
           if (name.startswith("blk.") and int(name.split(".")[1]) in range(*layers))
           or (embedding and name == "token_embd.weight")
           or (head and name in ("output_norm.weight", "output.weight"))]
    header = min(t.offset for t in tensors.values())
    return header + sum(tensors[n].nbytes for n in own), len(own) + 1


def test_each_stage_holds_only_its_layers_of_the_file(pipeline):
    path = default_model_path()
    memory = pipeline.memory()
    assert [m["layers"] for m in memory] == [(0, 15), (15, 30)]
    assert len({m["pid"] for m in memory}) == 2
    for m in memory:
        first, last = m["layers"][0] == 0, m["layers"][1] == LAYERS
        layers_only, _ = _tensor_bytes(path, m["layers"], False, False)
        # The tied embedding: the first stage reads the rows of its ids, the last all
        # of it (its LM head). A page fault maps up to 64 KiB of cached pages around
        # it (Linux's fault-around): that much more at each tensor's edges.
        own, count = _tensor_bytes(path, m["layers"], first or last, last)
        assert layers_only * 0.9 < m["file_rss"] <= own + count * FAULT_AROUND, m
        assert m["file_rss"] < 0.75 * path.stat().st_size, m
        assert m["VmHWM"] >= m["VmRSS"] > m["rss_before_load"]


def _completion(app) -> dict:
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        reply = client.post("/v1/completions", json={
            "model": "SmolLM2-135M-Instruct.Q4_1", "prompt": PROMPTS[0], "max_tokens": 16,
            "temperature": 0})
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]


def test_the_server_with_pipeline_stages_answers_as_the_single_server(pipeline):
    from metalrt.server.main import build_app

    want = _completion(build_app(device="cpu", kv_cache_tokens=1024))
    got = _completion(build_app(device="cpu", kv_cache_tokens=1024, pipeline_stages=2))
    assert got["text"] == want["text"] and got["finish_reason"] == "length"
    assert len(got["text"]) > 16


def test_a_stage_killed_breaks_the_server_visibly(pipeline):
    import os
    import signal

    from fastapi.testclient import TestClient

    from metalrt.server.main import build_app

    app = build_app(device="cpu", kv_cache_tokens=1024, pipeline_stages=2)
    body = {"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": PROMPTS[0], "max_tokens": 4}
    with TestClient(app) as client:
        assert client.get("/health").json()["status"] == "ok"
        model = app.state.registry.loaded["SmolLM2-135M-Instruct.Q4_1"].model
        os.kill(model.memory()[1]["pid"], signal.SIGKILL)   # as `kill -9` of ray::PipelineStage
        # The request in flight ends with the error; the next ones are refused with it,
        # and /health says so (503: a host's health check replaces the server).
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 500
        assert "a pipeline stage died" in reply.json()["error"]["message"]
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 503
        assert reply.json()["error"]["message"].startswith("[pipeline] a pipeline stage died;")
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "broken"
        assert "a pipeline stage died" in health.json()["errors"]["SmolLM2-135M-Instruct.Q4_1"]
    assert model.broken.startswith("[pipeline] a pipeline stage died;")


def test_too_few_free_ray_cpus_is_an_error_naming_the_numbers(pipeline):
    import ray

    import time

    # The fixture's 2 stages hold 2 of the cluster's 4 CPUs (once the stages of the
    # tests before are gone: Ray frees them a moment after the kill): 2 x 2 more do not
    # fit, and Ray would wait for them without a word.
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) != 2:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)
    with pytest.raises(ValueError, match=r"2 stages of 2 Ray CPUs each \(--pipeline-stages, "
                       r"--pipeline-cpus-per-stage\) need 4 CPUs; the Ray cluster has 2 free "
                       r"of 4"):
        load_pipeline(None, stages=2, cpus_per_stage=2)
    with pytest.raises(ValueError, match=r"cpus_per_stage \(--pipeline-cpus-per-stage\) must "
                       r"be a number >= 0, got -1"):
        load_pipeline(None, stages=2, cpus_per_stage=-1)
    from metalrt.server.ray_serve import check_cluster_cpus

    check_cluster_cpus(2, 1.0, 1, 1.0)   # 4 of 4
    # serve --ray --ray-replicas 2 --pipeline-stages 2: 6 CPUs.
    with pytest.raises(ValueError, match=r"2 replicas x \(1 \+ 2 stages x 1\) Ray CPUs "
                       r"\(--ray-replicas, --ray-cpus-per-replica, --pipeline-stages, "
                       r"--pipeline-cpus-per-stage\) need 6 CPUs; the Ray cluster has 4"):
        check_cluster_cpus(2, 1.0, 2, 1.0)


def test_the_ray_metrics_board_has_a_fixed_name_and_is_killed(pipeline):
    import time

    import ray

    from metalrt.server import ray_app

    # On this module's cluster (serve --ray's board outlives a run on a kept cluster).
    ray.get(ray_app.metrics_board().put.remote("r", "text"))
    assert ray.get(ray_app.metrics_board().snapshot.remote()) == {"r": "text"}   # the same
    ray.get_actor("metrics-board:metalrt", namespace="metalrt")
    ray_app.kill_metrics_board()
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get_actor("metrics-board:metalrt", namespace="metalrt")
        except ValueError:
            break
        assert time.monotonic() < deadline, "the board outlived kill_metrics_board"
        time.sleep(0.2)
    ray_app.kill_metrics_board()   # none left: nothing to do


def test_a_closed_pipeline_is_a_runtime_error(pipeline):
    model, _ = load_pipeline(None, stages=2, device="cpu")
    model.close()
    for call in (lambda: model.logits([1, 2, 3]), model.memory, lambda: model.new_cache(1)):
        with pytest.raises(RuntimeError, match="the pipeline is closed"):
            call()


def test_serve_pipeline_stages_refusals():
    import subprocess

    from metalrt.server.launch import free_port
    from metalrt.server.main import build_app

    with pytest.raises(ValueError, match="--pipeline-stages must be >= 0"):
        build_app(device="cpu", pipeline_stages=-1)
    with pytest.raises(ValueError, match="--pipeline-stages runs without speculation"):
        build_app(device="cpu", pipeline_stages=2, spec_type="ngram")
    code = ("import sys; sys.modules['ray'] = None; from metalrt.cli import main; "
            "sys.exit(main(['serve', '--pipeline-stages', '2', '--port', str(%d)]))"
            % free_port())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "metalrt: error: [pipeline] pipeline stages run on Ray" in done.stderr
    assert "pip install 'metalrt[ray]'" in done.stderr
