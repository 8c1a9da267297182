"""Sliding-window layers keep only their window's blocks (issues #32, #36): a Gemma 3
twin (test_gemma3's: 5 sliding : 1 global layers, window 16) whose sliding layers take
their blocks from a pool of their own, freed as they fall out of the window.

Gates: greedy ids and logprobs identical with the window pool and without it (every
layer keeping every position, main's one block table), single and batched requests,
a long decode, the prefix cache and speculative rollback; the bytes a 32k-token context
holds against the formula; admission by the blocks of each layer type."""
import numpy as np
import pytest
import torch  # test dependency (the "test" extra)

import metalrt
from metalrt.cache import BLOCK_SIZE, OutOfBlocksError, blocks_for
from metalrt.runner import Engine
from metalrt.runner import prompt_cache as engine_cache
from metalrt.runner.sampling import SamplingParams
from metalrt.runner.speculative import SpeculativeConfig

from test_gemma3 import WINDOW, randomize_norms, save, text_config

STEP = 16   # max_batched_tokens: prompt chunks cross the window


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import transformers as tf

    torch.manual_seed(3)
    reference = tf.Gemma3ForCausalLM(text_config()).eval()
    randomize_norms(reference, 4)
    return metalrt.load(save(reference, tmp_path_factory.mktemp("gemma3")), device="cpu")[0]


def prompts(*lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, 300, n)] for n in lengths]


def run(model, cache, requests, logprobs=False, prefix_caching=False, speculative=None,
        rounds=1):
    """Outputs (ids, logprobs) of each (prompt, max_tokens), ``rounds`` times over one
    engine; the engine."""
    engine = Engine(model, cache, STEP, prefix_caching=prefix_caching, speculative=speculative)
    outputs = []
    for _ in range(rounds):
        added = [engine.add_request(p, SamplingParams(logprobs=logprobs), n) for p, n in requests]
        logs = {id(r): [] for r in added}
        while engine.has_work:
            for out in engine.step():
                logs[id(out.request)].append(out.logprobs)
        outputs += [(r.output, logs[id(r)]) for r in added]
    engine.close()
    return outputs, engine


def assert_same(model, requests, window_blocks, **kw):
    """The window pool's outputs equal those of one table for all layers; its engine."""
    full, _ = run(model, model.new_cache(96, window_blocks=None), requests, **kw)
    pooled, engine = run(model, model.new_cache(96, window_blocks=window_blocks), requests, **kw)
    assert engine.cache.window == WINDOW and engine.cache.num_window_blocks == window_blocks
    for (ids, logs), (ids_full, logs_full) in zip(pooled, full):
        assert ids == ids_full and len(ids) > 0
        for a, b in zip(logs, logs_full):
            if a is not None:
                np.testing.assert_array_equal(a, b)
    return engine


def test_single_request_long_decode_equal(model):
    # 40-token prompt, 200 decoded tokens: the window slides over 15 blocks.
    engine = assert_same(model, [(prompts(40)[0], 200)], 4)
    assert engine.stats.plan_replays > 0 and engine.stats.pipelined_steps > 0


def test_logprobs_equal(model):
    assert_same(model, [(p, 30) for p in prompts(70, 130)], 8, logprobs=True)


def test_batched_requests_equal(model):
    engine = assert_same(model, [(p, 60) for p in prompts(50, 90, 130)], 12)
    assert engine.stats.max_batch_size == 3


def test_prefix_cache_equal(model):
    shared = prompts(100)[0]
    requests = [(shared + tail, 20) for tail in prompts(9, 23, seed=1)]
    engine = assert_same(model, requests, 40, prefix_caching=True, rounds=2)
    # The second round found the shared prefix's window still in the window pool.
    assert engine.stats.prompt_tokens_cached >= 2 * (100 // BLOCK_SIZE) * BLOCK_SIZE


def test_prefix_cut_back_to_held_window(model):
    """A prefix whose window blocks were evicted from the window pool is used only up to
    where the pool still holds the window (here: not at all), with the same ids."""
    shared = prompts(100)[0]
    first, second = (shared + tail for tail in prompts(9, 23, seed=1))
    full, _ = run(model, model.new_cache(96, window_blocks=None), [(second, 20)])
    cache = model.new_cache(96, window_blocks=3)
    engine = Engine(model, cache, STEP, prefix_caching=True)
    for prompt, max_tokens in ((first, 60), (second, 20)):
        request = engine.add_request(prompt, SamplingParams(), max_tokens)
        while engine.has_work:
            engine.step()
    engine.close()
    assert request.output == full[0][0]
    # The global blocks of the 96-token prefix are cached; the 3-block window pool (one
    # request's reservation) reused the prefix's window blocks while the first request
    # decoded 60 tokens, so nothing of it is usable.
    assert engine.scheduler.pool.match(
        engine_cache.prefix_keys(second[:-1]))[:6] and request.num_cached_tokens == 0


def test_speculative_rollback_equal(model):
    # Repetitive prompts: prompt lookup drafts, some drafts are rejected and rolled back.
    base = prompts(24)[0]
    requests = [(base * 5, 60), ((base[:12] + base) * 3, 60)]
    spec = SpeculativeConfig(method="ngram", num_draft_tokens=4)
    engine = assert_same(model, requests, 12, speculative=spec)
    assert engine.stats.draft_tokens > engine.stats.accepted_tokens > 0


def test_32k_context_holds_window_blocks_only(tmp_path):
    """A Gemma-3-style twin at a 32k-token context, window 512: the global layer holds
    2048 blocks, the 5 sliding layers a window and one 512-token step each."""
    import transformers as tf
    from metalrt.cache.window import window_blocks_per_sequence

    torch.manual_seed(5)
    twin = tf.Gemma3ForCausalLM(text_config(max_position_embeddings=32768,
                                            sliding_window=512)).eval()
    model = metalrt.load(save(twin, tmp_path), device="cpu")[0]
    context, window, step = 32768, 512, 512
    ring = window_blocks_per_sequence(window, context, step)
    assert ring == 65     # (512 + 512 + 15) // 16
    cache = model.new_cache(blocks_for(context), window_blocks=ring)
    block_bytes = 2 * BLOCK_SIZE * model.num_kv_heads * model.head_dim * 4   # K and V, f32
    assert cache.nbytes == block_bytes * (1 * 2048 + 5 * 65)
    full = model.new_cache(blocks_for(context), window_blocks=None)
    assert full.nbytes == block_bytes * 6 * 2048
    print(f"32k context: {cache.nbytes} KV bytes with window blocks, {full.nbytes} keeping "
          f"every position ({full.nbytes / cache.nbytes:.2f}x)")
    # A 2,500-token request (157 blocks) runs in that pool of one sequence's window
    # (the default new_cache keeps 8 such sequences).
    engine = Engine(model, cache, step)
    request = engine.add_request(prompts(2500)[0], SamplingParams(), 10)
    while engine.has_work:
        engine.step()
    assert len(request.output) == 10 and engine.scheduler.window_pool.num_free == ring
    engine.close()
    assert model.new_cache_window_blocks(blocks_for(context)) == 8 * 65


def test_admission_counts_blocks_per_layer_type(model):
    """Two requests of 189 cache rows: one table for all six layers in 12 blocks (72
    layer-blocks) runs them one after the other; 24 global blocks and a 6-block window
    pool (54 layer-blocks) runs them together, with the same ids."""
    requests = [(p, 40) for p in prompts(150, 150, seed=2)]
    old, old_engine = run(model, model.new_cache(12, window_blocks=None), requests)
    cache = model.new_cache(24, window_blocks=6)
    new, new_engine = run(model, cache, requests)
    assert cache.nbytes * 72 == model.new_cache(12, window_blocks=None).nbytes * 54
    assert (old_engine.stats.max_batch_size, new_engine.stats.max_batch_size) == (1, 2)
    assert [ids for ids, _ in new] == [ids for ids, _ in old]


def test_admission_waits_for_the_window_pool(model):
    # Global blocks for both, window blocks (3 each) for one: the second waits.
    requests = [(p, 40) for p in prompts(150, 150, seed=2)]
    _, engine = run(model, model.new_cache(24, window_blocks=3), requests)
    assert engine.stats.max_batch_size == 1
    engine = Engine(model, model.new_cache(24, window_blocks=2), STEP)
    with pytest.raises(OutOfBlocksError, match="needs 3 sliding-window blocks, the cache's "
                                               "window pool has 2"):
        engine.add_request(requests[0][0], SamplingParams(), 40)
    engine.close()


def test_prompt_files_refused_with_window_pool(model):
    engine = Engine(model, model.new_cache(24, window_blocks=6), STEP, prefix_caching=True)
    with pytest.raises(ValueError, match="keep only their window's blocks"):
        engine_cache.capture(engine, prompts(40)[0])
    engine.close()


@pytest.mark.parametrize("bad", [0, -3, 2.5, "some"])
def test_bad_window_blocks(model, bad):
    with pytest.raises(ValueError, match=r"window_blocks must be an int >= 1"):
        model.new_cache(8, window_blocks=bad)
