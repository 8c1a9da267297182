"""The runner's per-request recurrent state for hybrid models (tiny Qwen3-Next of
``tiny_hybrid``, CPU and Metal): a state slot is taken at admission and freed on
finish and abort; with fewer slots than requests the rest wait (back-pressure) and
still get what they get alone; a reused slot starts from zero state; prefix caching
is off for these models (the GDN state cannot be rolled back to a prefix)."""
import numpy as np
import pytest

import metalrt
import tiny_hybrid
from conftest import DEVICES
from metalrt.cache import ModelCache, PagedKVLayer, RecurrentLayer, blocks_for
from metalrt.runner import Engine, SamplingParams

ARCH = "qwen3_next"


@pytest.fixture(scope="module", params=DEVICES)
def model(request):
    return metalrt.load(str(tiny_hybrid.path(ARCH)), device=request.param)[0]


def run(engine, prompts, max_tokens=6):
    requests = [engine.add_request(p, SamplingParams(), max_tokens) for p in prompts]
    while engine.has_work:
        engine.step()
    return [r.output for r in requests]


def alone(model, prompt, max_tokens=6):
    engine = Engine(model, model.new_cache(blocks_for(len(prompt) + max_tokens), num_slots=1))
    try:
        return run(engine, [prompt], max_tokens)[0]
    finally:
        engine.close()


def test_cache_holds_kv_for_attention_layers_and_state_for_gdn_layers(model):
    cache = model.new_cache(4, num_slots=3)
    assert isinstance(cache, ModelCache) and len(cache.layers) == len(model.layer_types)
    assert cache.num_blocks == 4 and cache.num_state_slots == 3
    g = model.gdn
    assert {"full_attention", "linear_attention"} == set(model.layer_types)
    for kind, layer in zip(model.layer_types, cache.layers):
        if kind == "full_attention":
            assert isinstance(layer, PagedKVLayer)
            assert layer.keys.shape == layer.values.shape == (4, 16, 2, 32)
        else:
            assert isinstance(layer, RecurrentLayer)
            assert layer.conv.shape == (3, g.conv_dim, g.conv_width - 1)
            assert layer.recurrent.shape == (3, g.v_heads, g.k_dim, g.v_dim)
            assert layer.recurrent.dtype == "float32"


def test_fewer_slots_than_requests_wait_and_match_alone(model):
    prompts = [tiny_hybrid.prompt(n, n) for n in (9, 20, 4)]
    engine = Engine(model, model.new_cache(64, num_slots=2), max_batched_tokens=8)
    try:
        got = run(engine, prompts)
        assert engine.stats.max_batch_size == 2
        assert engine.scheduler.state_slots.num_free == 2
    finally:
        engine.close()
    assert got == [alone(model, p) for p in prompts]


def test_abort_frees_the_slot_and_the_next_request_starts_from_zero_state(model):
    first, second = tiny_hybrid.prompt(30, 1), tiny_hybrid.prompt(12, 2)
    engine = Engine(model, model.new_cache(64, num_slots=1), max_batched_tokens=16)
    try:
        request = engine.add_request(first, SamplingParams(), 6)
        engine.step()                      # half of its prompt: its slot holds state now
        assert request.state_slot == 0 and engine.scheduler.state_slots.num_free == 0
        engine.abort(request)
        assert request.state_slot is None and engine.scheduler.state_slots.num_free == 1
        got = run(engine, [second])[0]
    finally:
        engine.close()
    assert got == alone(model, second)


def test_prefix_caching_is_off_for_hybrid_models(model):
    prompt = tiny_hybrid.prompt(40, 3)
    engine = Engine(model, model.new_cache(64), max_batched_tokens=64, prefix_caching=True)
    try:
        got = run(engine, [prompt, prompt])
        assert engine.stats.prompt_tokens_cached == 0
        assert not engine.cache.supports_prefix_caching and not engine.scheduler.pool.caching
    finally:
        engine.close()
    assert got == [alone(model, prompt)] * 2
