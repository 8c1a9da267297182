"""Metal-path counters of the runner (the goals of `python -m bench`) on the Metal device, for a
small random Llama with float32 weights and quantized to MLX 4-bit, and the tiny hybrid MoE
Qwen3-Next of ``tiny_hybrid`` (GDN and gated-attention layers, MoE blocks with a shared
expert, a dense layer): a warmed-up decode step allocates 0 device bytes (its inputs are
written into persistent tensors, its activations come from the buffer cache), makes
exactly one host wait (the read of the sampled token ids) and commits every command
buffer at the dispatch cap but the one committed by the synchronize before that read
(the profiler counts each commit under its cause), the step inputs are views of the same allocations every step, and the
counters that ``bench/counters.py`` reports equal what the profiler counts around the
same step, every op runs natively, and the step reads each weight once except the experts
its tokens did not select."""
import sys
from pathlib import Path

import numpy as np
import pytest

import metalrt
import tiny_hf
import tiny_hybrid
import tiny_quant
from metalrt import profiler
from metalrt.cache import StepBuffers, blocks_for
from metalrt.models.sparse_moe import SparseMoE
from metalrt.runner import Engine, SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import counters  # noqa: E402

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

PROMPT = tiny_hf.prompt(9, 3)


@pytest.fixture(scope="module", params=["float32", "mlx_4bit_g32", "qwen3_next"])
def model(request, tmp_path_factory):
    """The tiny Llama with float32 weights, and quantized to MLX affine 4-bit (every
    projection, the embedding and the tied head through the quantized ops); the tiny
    hybrid MoE Qwen3-Next (untied)."""
    if request.param == "qwen3_next":
        return metalrt.load(str(tiny_hybrid.path("qwen3_next")), device="metal")[0]
    directory = tmp_path_factory.mktemp("llama")
    tiny_hf.build("llama", directory)
    if request.param != "float32":
        tiny_quant.quantize_hf_dir(directory, bits=4, gs=32)
    return metalrt.load(str(directory), device="metal")[0]


def projection_op(model) -> str:
    return "matmul_bt" if isinstance(model.lm_head, metalrt.Tensor) else "quantized_matmul_bt"


def decode_weight_bytes(model, resident: int) -> int:
    """What one decode step reads of the ``resident`` weight bytes: every weight once,
    but of the embedding table only the token's row (unless tied: then the LM head
    reads it whole) and of each MoE layer only top_k experts."""
    table = model.embed_tokens.table
    total = resident + table.nbytes // table.shape[0]
    if model.lm_head is not table:
        total -= table.nbytes
    for moe in (layer.mlp for layer in model.layers if isinstance(layer.mlp, SparseMoE)):
        experts = sum(t.nbytes for t in (moe.gate, moe.up, moe.down) if t is not None)
        total -= experts - experts // moe.experts * moe.top_k
    return total


@pytest.fixture
def profiling():
    was = profiler.enabled()
    profiler.enable(True)
    profiler.reset()
    yield
    profiler.enable(was)


def engine_for(model, steps, decode_plans=False):
    """An engine whose decode steps run op by op (what bench/counters.py instruments)
    unless ``decode_plans``; the replayed steps' counters: test_decode_pipeline.py."""
    engine = Engine(model, model.new_cache(blocks_for(len(PROMPT) + steps)), max_batched_tokens=64,
                    decode_plans=decode_plans)
    engine.add_request(PROMPT, SamplingParams(), max_tokens=steps)
    return engine


@pytest.mark.parametrize("decode_plans", [False, True])
def test_decode_step_allocates_nothing_after_warm_up(model, profiling, decode_plans):
    engine = engine_for(model, 8, decode_plans)
    try:
        per_step = []
        while engine.has_work:
            before = profiler.allocated_bytes(), profiler.allocations()
            engine.step()
            per_step.append((profiler.allocated_bytes() - before[0], profiler.allocations() - before[1]))
    finally:
        engine.close()
    assert len(per_step) == 8
    # The prefill and the first decode step meet new sizes; from then on, nothing.
    assert per_step[2:] == [(0, 0)] * 6


def test_step_inputs_reuse_their_allocations(model):
    buffers = StepBuffers("metal")
    first = buffers.write("positions", np.array([5], np.int32))
    again = buffers.write("positions", np.array([6], np.int32))
    assert again.data_ptr() == first.data_ptr()
    np.testing.assert_array_equal(again.numpy(), [6])
    table = buffers.write("block_tables", np.arange(6, dtype=np.int32).reshape(2, 3))
    assert table.shape == (2, 3) and table.is_contiguous()
    np.testing.assert_array_equal(table.numpy(), np.arange(6).reshape(2, 3))
    grown = buffers.write("positions", np.arange(40, dtype=np.int32))   # past the capacity
    np.testing.assert_array_equal(grown.numpy(), np.arange(40))
    assert buffers.write("slot_mapping", np.array([3, -1])).dtype == "int64"


def test_bench_counters_equal_the_profiler(model, profiling):
    report = counters.run(model, PROMPT, decode_steps=3)
    # The same steps measured directly around engine.step().
    engine = engine_for(model, 4)
    direct = []
    try:
        for _ in range(4):
            profiler.reset()
            engine.step()
            total = profiler.rows()[-1]
            direct.append({k: total[k] for k in ("commits", *counters.COMMIT_CAUSES, "waits",
                                                 "dispatches")})
            assert total["commits"] == profiler.commits() and total["waits"] == profiler.waits()
    finally:
        engine.close()
    for measured, reported in zip(direct, [report["prefill"]] + report["decode_warmup"] + [report["decode"]]):
        assert {k: reported[k] for k in measured} == measured
    decode = report["decode"]
    assert decode["allocated_bytes"] == 0 and report["goal"]["zero_bytes_after_warmup"] is True
    assert (decode["commits_at_synchronize"], decode["commits_at_flush"]) == (1, 0)
    assert decode["commits_at_cap"] == decode["commits"] - 1
    assert report["goal"]["commits_at_cap_but_one_synchronize"] is True
    # One count when every layer dispatches alike, else the distinct counts (hybrids).
    per_layer = decode["dispatches_per_layer"]
    least = per_layer * report["num_layers"] if isinstance(per_layer, int) else \
        sum(per_layer) + min(per_layer) * (report["num_layers"] - len(per_layer))
    assert least <= decode["dispatches"]
    assert decode["waits"] >= 1
    # Every wait is accounted for: in an op's calls, or the read of the sampled ids.
    assert sum(r["waits"] for r in decode["ops"].values()) + decode["waits_outside_ops"] == decode["waits"]
    op = projection_op(model)
    assert decode["ops"][op]["provider"] == f"metal_{op}"
    assert all(row["native"] for row in decode["ops"].values()), decode["ops"]
    assert decode["weight_bytes"] == decode_weight_bytes(model, report["weight_bytes_resident"])
    assert decode["weight_bytes"] < report["weight_bytes_resident"] or \
        model.lm_head is model.embed_tokens.table


def test_prefill_commits_after_every_layer(model, profiling):
    """A prefill step commits each decoder layer's command buffer (a flush per layer),
    so no command buffer holds more than one layer of prompt-sized GEMMs and attention;
    the decode steps keep their counts (test_decode_step_makes_one_host_wait)."""
    engine = engine_for(model, 2)
    try:
        engine.step()   # the prompt's prefill
        total = profiler.rows()[-1]
    finally:
        engine.close()
    assert total["commits_at_flush"] == model.num_layers
    assert total["commits"] == total["commits_at_flush"] + total["commits_at_cap"] + \
        total["commits_at_synchronize"]


def test_decode_step_makes_one_host_wait(model, profiling):
    """Every op of a decode step runs natively on Metal, so the step's only host wait
    is the read of the sampled token ids, and every commit but the synchronize before
    that read is at the dispatch cap (one per 48 dispatches), none at a flush."""
    engine = engine_for(model, 5)
    try:
        for _ in range(3):          # the prefill and two warm-up decode steps
            engine.step()
        profiler.reset()
        engine.step()
        total = profiler.rows()[-1]
    finally:
        engine.close()
    assert total["waits"] == 1
    assert total["commits_at_synchronize"] == 1
    assert total["commits_at_flush"] == 0
    assert total["commits_at_cap"] == total["commits"] - 1
    assert total["commits_at_cap"] == total["dispatches"] // counters.DEFAULT_MAX_DISPATCHES
    assert total["allocated_bytes"] == 0
