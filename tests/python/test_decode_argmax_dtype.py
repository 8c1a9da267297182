"""Greedy decode steps of a float16/bfloat16 model take the argmax straight on the
logits (issue #19 item 2): greedy_argmax reads the model's dtype, so the step has no
cast dispatch (one dispatch fewer than with float32 logits), in the op-by-op engine and
in the replayed decode plan; the greedy tokens equal those a host sampler picks from the
float32 logits (logprobs requested), which still pay for the cast."""
import pytest

import metalrt
import tiny_hf
from conftest import SUFFIX
from metalrt import profiler
from metalrt.cache import blocks_for
from metalrt.runner import Engine, SamplingParams

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="needs a Metal device")

PROMPT = tiny_hf.prompt(7, 5)
STEPS = 5


@pytest.fixture(scope="module", params=["float16", "bfloat16"])
def model(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    tiny_hf.build("llama", directory)
    return metalrt.load(str(directory), device="metal", dtype=request.param)[0]


def generate(model, params, decode_plans):
    """The tokens of a run, and the dispatches of all its steps by kernel name."""
    engine = Engine(model, model.new_cache(blocks_for(len(PROMPT) + STEPS)), max_batched_tokens=64,
                    decode_plans=decode_plans)
    request = engine.add_request(PROMPT, params, max_tokens=STEPS)
    was = profiler.enabled()
    profiler.enable(True)
    profiler.reset()
    try:
        while engine.has_work:
            engine.step()
        metalrt.synchronize("metal")
        dispatches = {row["name"]: row["dispatches"] for row in profiler.rows()}
    finally:
        profiler.enable(was)
        engine.close()
    return list(request.output), dispatches


def casts(dispatches):
    return {name: n for name, n in dispatches.items() if name.startswith("cast_")}


@pytest.mark.parametrize("decode_plans", [False, True])
def test_greedy_steps_take_the_argmax_without_a_logits_cast(model, decode_plans):
    # One prefill and STEPS - 1 decode steps (with plans, each decode step is committed
    # during the step before it): STEPS argmax dispatches over the logits' own dtype.
    suffix = SUFFIX[model.dtype]
    tokens, greedy = generate(model, SamplingParams(), decode_plans)
    assert len(tokens) == STEPS
    assert casts(greedy) == {}
    assert greedy[f"greedy_argmax_row_{suffix}"] == STEPS
    assert "greedy_argmax_row_f32" not in greedy
    # Logits a sampler reads reach the host as float32: one cast per step, the same tokens.
    sampled, host = generate(model, SamplingParams(logprobs=True), decode_plans)
    assert sampled == tokens
    assert casts(host) == {f"cast_{suffix}_f32": STEPS}
    # A decode plan records its argmax whatever the request samples with (its ids feed
    # the step after); the op-by-op engine runs none.
    planned = STEPS - 1 if decode_plans else 0
    assert sum(n for name, n in host.items() if name.startswith("greedy_argmax")) == planned
    # Each step's cast in the sampling run is an argmax in the greedy run: the same
    # dispatch count less the plans' argmaxes (with the cast before the argmax, the
    # greedy run had STEPS more).
    assert greedy["total"] == host["total"] - planned
