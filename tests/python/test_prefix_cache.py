"""Prefix caching of the paged KV cache: chained block keys, reference counts, LRU
eviction, the scheduler taking cached blocks at admission, and on the default model a
second request with the same 200-token prefix prefilling only its new tokens with the
same output as without the cache."""
import numpy as np
import pytest

import metalrt
from metalrt.cache import BLOCK_SIZE, BlockAllocator, OutOfBlocksError
from metalrt.runner import BlockPool, Engine, Request, SamplingParams, Scheduler
from metalrt.runner.prefix_cache import prefix_keys


def test_keys_chain_the_whole_prefix():
    a = list(range(40))
    b = [99] + a[1:]             # differs only in the first token
    ka, kb = prefix_keys(a), prefix_keys(b)
    assert len(ka) == 2          # 40 tokens: two full blocks, the partial one has no key
    assert ka[0] != kb[0] and ka[1] != kb[1]   # block 1 holds the same tokens, not the same prefix
    assert prefix_keys(a[:32] + [7] * 5) == ka
    assert len(set(ka)) == 2


def test_refcounts_keep_shared_blocks_and_lru_evicts_the_oldest():
    pool = BlockPool(BlockAllocator(4), caching=True)
    first = pool.acquire([], 2)
    pool.register(first[0], b"k0")
    pool.register(first[1], b"k1")
    shared = pool.acquire(pool.match([b"k0", b"k1", b"k2"]), 1)
    assert shared[:2] == first and pool.num_free == 1
    pool.release(first)                      # still held by the second table
    assert pool.num_free == 1 and pool.match([b"k0"]) == [first[0]]
    pool.release(shared)
    assert pool.num_free == 4 and pool.num_cached == 2   # cached blocks count as free
    # Taking 3 blocks: 2 from the free list, then the LRU cached block, which is the
    # sequence's last block (k1), released before its parent.
    taken = pool.acquire([], 3)
    assert pool.match([b"k0", b"k1"]) == [first[0]] and first[1] in taken
    with pytest.raises(OutOfBlocksError, match=r"^\[prefix_cache\] out of blocks: 2 needed, 0"):
        pool.acquire([first[0]], 2)          # k0 is evictable but matched: not available
    with pytest.raises(ValueError, match=rf"^\[prefix_cache\] block {first[0]} is not held"):
        pool.release([taken[0], first[0]])   # cached but evictable: no request holds it
    assert pool.num_free == 1                # the failed release changed nothing


def test_without_caching_a_released_block_is_free_again():
    pool = BlockPool(BlockAllocator(2))
    blocks = pool.acquire([], 2)
    pool.register(blocks[0], b"k")
    pool.release(blocks)
    assert pool.allocator.num_free == 2 and pool.num_cached == 0 and pool.match([b"k"]) == []


def run(scheduler, request):
    """Prefills and decodes ``request`` to its end (token 7 each step) without a model."""
    scheduler.add(request)
    while not request.finished:
        for r, chunk in scheduler.schedule():
            scheduler.advance(r, len(chunk.token_ids))
            if chunk.logits == "last":
                r.append(7)
    scheduler.finish(request)


def test_scheduler_admits_with_the_cached_prefix():
    s = Scheduler(BlockAllocator(8), max_batched_tokens=64, prefix_caching=True)
    prefix = list(range(1, 41))
    run(s, Request(0, prefix + [50, 51], SamplingParams(), 3, frozenset()))
    # 42 prompt + 2 fed outputs = 44 tokens: 2 full blocks keyed.
    assert s.pool.num_cached == 2 and s.pool.num_free == 8
    b = Request(1, prefix + [60], SamplingParams(), 2, frozenset())
    s.add(b)
    ((got, chunk),) = s.schedule()
    assert got is b and b.num_cached_tokens == 32 and chunk.start == 32
    assert list(chunk.token_ids) == prefix[32:] + [60]
    # A prompt that is entirely cached still computes its last token for its logits.
    s.advance(b, len(chunk.token_ids))
    s.finish(b)
    c = Request(2, prefix[:32], SamplingParams(), 1, frozenset())
    s.add(c)
    ((_, chunk),) = s.schedule()
    assert c.num_cached_tokens == 16 and list(chunk.token_ids) == prefix[16:32]


@pytest.fixture(scope="module")
def smollm2():
    return metalrt.load(device="cpu")


def greedy(model, ids, prefix_caching, earlier=()):
    """Greedy output of ``ids`` after the prompts ``earlier`` ran on the same engine,
    and the prompt tokens prefilled and taken from the cache for ``ids``."""
    engine = Engine(model, model.kv_cache(64), prefix_caching=prefix_caching)
    try:
        for prompt in earlier:
            engine.add_request(prompt, SamplingParams(), 4)
            while engine.has_work:
                engine.step()
        before = engine.stats.prompt_tokens_computed
        request = engine.add_request(ids, SamplingParams(), 6)
        while engine.has_work:
            engine.step()
        return (request.output, engine.stats.prompt_tokens_computed - before,
                request.num_cached_tokens)
    finally:
        engine.close()


def test_second_request_prefills_only_its_new_tokens(smollm2):
    model, tokenizer = smollm2
    words = "The history of the city is long and full of trade, rivers, bridges and markets. "
    prefix = (tokenizer.encode(words * 20))[:200]
    first = prefix + tokenizer.encode(" Tell me about the bridges.")
    second = prefix + tokenizer.encode(" What did the markets sell?")
    cached_blocks = 200 // BLOCK_SIZE
    output, computed, cached = greedy(model, second, True, earlier=[first])
    assert cached == cached_blocks * BLOCK_SIZE
    assert computed == len(second) - cached_blocks * BLOCK_SIZE
    reference, ref_computed, ref_cached = greedy(model, second, False, earlier=[first])
    assert ref_cached == 0 and ref_computed == len(second)
    assert output == reference and len(output) == 6
    assert np.unique(output).size > 1     # a real continuation, not one repeated id
