"""The runner's per-request recurrent state for hybrid models (tiny Qwen3-Next of
``tiny_hybrid``, CPU and Metal): a state slot is taken at admission and freed on
finish and abort; with fewer slots than requests the rest wait (back-pressure) and
still get what they get alone; a reused slot starts from zero state; prefix caching
resumes from checkpoints of the GDN state at block boundaries."""
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


def test_hybrid_prefix_cache_resumes_from_the_last_checkpointed_boundary(model):
    """A second request sharing a 200-token prefix restores the state checkpointed at
    block boundary 192 (prompt chunks of 64 end at 64, 128, 192) and prefills only the
    tokens after it, with the output it gets without the cache."""
    shared = tiny_hybrid.prompt(200, 3)
    first, second = shared + tiny_hybrid.prompt(20, 4), shared + tiny_hybrid.prompt(9, 5)
    engine = Engine(model, model.new_cache(64), max_batched_tokens=64, prefix_caching=True)
    try:
        assert not engine.cache.supports_prefix_caching and engine.scheduler.pool.caching
        got = [run(engine, [first])[0]]
        computed = engine.stats.prompt_tokens_computed
        checkpoints = engine.scheduler.checkpoints
        # 64, 128, 192 and the first prompt's last boundary before its last token (208).
        assert len(checkpoints) == 4
        state_bytes = sum(l.conv[0:1].nbytes + l.recurrent[0:1].nbytes
                          for l in engine.cache.layers if l.num_slots)
        assert checkpoints.nbytes == 4 * state_bytes
        # Reported in the engine's stats (the server's /health "engine").
        assert (engine.stats.state_checkpoints, engine.stats.state_checkpoint_bytes) == \
            (4, 4 * state_bytes)
        got.append(run(engine, [second])[0])
        assert engine.stats.prompt_tokens_cached == 192
        assert engine.stats.prompt_tokens_computed - computed == len(second) - 192
    finally:
        engine.close()
    assert got == [alone(model, first), alone(model, second)]


def test_hybrid_prefix_cache_under_eviction_keeps_outputs_correct(model):
    """One checkpoint kept and a cache of few blocks: prefixes lose their checkpoints
    and their blocks to later requests, and every output stays what it is alone."""
    prompts = [tiny_hybrid.prompt(40, s) + tiny_hybrid.prompt(n, s + 10) for s, n in
               ((1, 3), (1, 5), (2, 7), (2, 2), (1, 4))]
    engine = Engine(model, model.new_cache(12, num_slots=2), max_batched_tokens=16,
                    prefix_caching=True, state_checkpoints=1)
    try:
        got = [run(engine, [p])[0] for p in prompts]
        assert len(engine.scheduler.checkpoints) == 1
        assert engine.stats.prompt_tokens_cached > 0
    finally:
        engine.close()
    assert got == [alone(model, p) for p in prompts]
