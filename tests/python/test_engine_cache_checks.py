"""An Engine refuses a cache that is not its model's, and a closed Engine refuses work.

A cache made for another model ran silently wrong where its shapes fit (fewer layers:
the model's last layers were skipped) and failed deep in an op or with an
AttributeError where they did not; a closed engine kept writing into the cache the
next engine holds."""
import pytest

import metalrt
import tiny_hybrid
from metalrt.cache import ModelCache, blocks_for, paged_kv_layers
from metalrt.runner import Engine, SamplingParams

PROMPT = list(range(100, 120))


@pytest.fixture(scope="module")
def model():
    return metalrt.load(device="cpu")[0]


def kv_cache(model, num_layers=None, kv_heads=None, head_dim=None, device="cpu", dtype=None):
    layers = paged_kv_layers(num_layers or model.num_layers, 4, kv_heads or model.num_kv_heads,
                             head_dim or model.head_dim, device, dtype or model.dtype)
    return ModelCache(layers, 4)


@pytest.mark.parametrize("change, message", [
    (dict(num_layers=29), "the cache has 29 layers, the model 30"),
    (dict(kv_heads=2), r"keys cache \(4, 16, 2, 64\) float32 on cpu does not hold the layer's rows \(16, 3, 64\)"),
    (dict(head_dim=32), r"rows \(16, 3, 64\) float32 on cpu"),
    (dict(dtype="float16"), r"float16 on cpu does not hold the layer's rows \(16, 3, 64\) float32"),
    (dict(device="metal"), r"float32 on metal does not hold the layer's rows \(16, 3, 64\) float32 on cpu"),
])
def test_a_cache_of_another_geometry_is_refused(model, change, message):
    cache = kv_cache(model, **change)
    with pytest.raises(ValueError, match=message):
        Engine(model, cache)
    assert not cache.in_use   # refused before it was taken


def test_a_hybrid_cache_is_refused_by_a_dense_model_and_the_reverse(model):
    hybrid = metalrt.load(str(tiny_hybrid.path("qwen3_next")), device="cpu")[0]
    dense_cache = model.new_cache(4)
    hybrid_cache = hybrid.new_cache(4, num_slots=1)
    with pytest.raises((TypeError, ValueError), match=r"\[cache\]|layers"):
        Engine(model, hybrid_cache)
    with pytest.raises((TypeError, ValueError), match=r"\[cache\]|layers"):
        Engine(hybrid, dense_cache)
    # Same layer count, other kinds: the kind is named.
    swapped = ModelCache(hybrid_cache.layers[1:] + hybrid_cache.layers[:1], 4)
    with pytest.raises(TypeError, match=r"reads a (PagedKVLayer|RecurrentLayer), got "):
        Engine(hybrid, swapped)
    with pytest.raises(TypeError, match="expected a ModelCache"):
        Engine(model, dense_cache.layers)


def test_its_own_cache_is_accepted_and_runs(model):
    engine = Engine(model, model.new_cache(blocks_for(len(PROMPT) + 4)))
    request = engine.add_request(PROMPT, SamplingParams(), 4)
    while engine.has_work:
        engine.step()
    engine.close()
    assert len(request.output) == 4


def test_a_closed_engine_refuses_work_and_a_second_close_keeps_the_next_engines_hold(model):
    cache = model.new_cache(blocks_for(len(PROMPT) + 4))
    first = Engine(model, cache)
    first.close()
    second = Engine(model, cache)
    with pytest.raises(RuntimeError, match="closed"):
        first.add_request(PROMPT, SamplingParams(), 4)
    with pytest.raises(RuntimeError, match="closed"):
        first.step()
    first.close()
    assert cache.in_use   # still the second engine's
    with pytest.raises(ValueError, match="already held"):
        Engine(model, cache)
    second.close()
    assert not cache.in_use


@pytest.mark.parametrize("prompt, eos, bad", [([1, 2.7], (), "2.7"), ([1, 2], ["a"], "'a'"),
                                              ([1, True], (), "True")])
def test_token_ids_that_are_not_ints_are_refused_not_truncated(model, prompt, eos, bad):
    engine = Engine(model, model.new_cache(4))
    try:
        with pytest.raises(TypeError, match=f"must be int token ids, got {bad}"):
            engine.add_request(prompt, SamplingParams(), 4, eos_ids=eos)
    finally:
        engine.close()


@pytest.mark.parametrize("value", [2.5, "8", None])
def test_max_batched_tokens_must_be_an_int(model, value):
    cache = model.new_cache(4)
    with pytest.raises(TypeError, match="max_batched_tokens must be an int"):
        Engine(model, cache, max_batched_tokens=value)
    assert not cache.in_use   # refused before it was taken
