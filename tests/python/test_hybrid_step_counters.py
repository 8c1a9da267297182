"""Metal-path counters of a hybrid MoE model's decode step (tiny Qwen3-Next of
``tiny_hybrid``: GDN and gated-attention layers, MoE blocks with a shared expert, a
dense layer): after warm-up a decode step allocates 0 device bytes and makes one host
wait (the read of the sampled ids), every op runs natively, and the bench's per-step
weight bytes count only the experts the step's tokens selected."""
import sys
from pathlib import Path

import pytest

import metalrt
import tiny_hybrid
from metalrt import profiler
from metalrt.models.sparse_moe import SparseMoE
from metalrt.runner import Engine, SamplingParams, blocks_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's bench/
from bench import counters  # noqa: E402

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

PROMPT = tiny_hybrid.prompt(9, 3)


@pytest.fixture(scope="module")
def model():
    return metalrt.load(str(tiny_hybrid.path("qwen3_next")), device="metal")[0]


@pytest.fixture
def profiling():
    was = profiler.enabled()
    profiler.enable(True)
    profiler.reset()
    yield
    profiler.enable(was)


def test_decode_step_makes_one_host_wait_and_allocates_nothing(model, profiling):
    engine = Engine(model, model.new_cache(blocks_for(len(PROMPT) + 6)), max_batched_tokens=64)
    engine.add_request(PROMPT, SamplingParams(), max_tokens=6)
    try:
        for _ in range(3):          # the prefill and two warm-up decode steps
            engine.step()
        profiler.reset()
        engine.step()
        total = profiler.rows()[-1]
    finally:
        engine.close()
    assert total["waits"] == 1
    assert total["commits_at_synchronize"] == 1 and total["commits_at_flush"] == 0
    assert total["allocated_bytes"] == 0


def test_decode_reads_only_the_selected_experts(model, profiling):
    report = counters.run(model, PROMPT, decode_steps=3)
    decode = report["decode"]
    assert decode["allocated_bytes"] == 0 and decode["waits"] == 1
    for op in ("moe_router", "moe_matmul_bt", "moe_combine", "causal_conv1d",
               "gated_delta_rule", "gdn_gating", "gated_rms_norm"):
        assert decode["ops"][op]["native"], (op, decode["ops"][op])
    experts = [layer.mlp for layer in model.layers if isinstance(layer.mlp, SparseMoE)]
    assert experts, "the fixture has MoE layers"
    all_expert_bytes = sum(m.gate_up.nbytes + m.down.nbytes for m in experts)
    # One token selects top_k of the experts in each MoE layer; the rest is never read.
    selected = sum((m.gate_up.nbytes + m.down.nbytes) // m.experts * m.top_k for m in experts)
    # The untied embedding table: only the token's row is gathered.
    table = model.embed_tokens.table
    dense = (report["weight_bytes_resident"] - all_expert_bytes - table.nbytes
             + table.nbytes // table.shape[0])
    assert decode["weight_bytes"] == dense + selected
    assert decode["weight_bytes"] < report["weight_bytes_resident"]
