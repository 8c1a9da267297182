"""Scheduler: decode first, chunked prefill under a token budget, admission by free blocks."""
import pytest

from metalrt.cache import BlockAllocator, OutOfBlocksError
from metalrt.runner import Request, SamplingParams, Scheduler


def request(i, prompt_len, max_tokens=4):
    return Request(i, list(range(1, prompt_len + 1)), SamplingParams(), max_tokens, frozenset())


def test_prompt_longer_than_budget_is_prefilled_in_chunks():
    s = Scheduler(BlockAllocator(10), max_batched_tokens=8)
    r = request(0, 20)
    s.add(r)
    sizes = []
    for _ in range(3):
        (got, chunk), = s.schedule()
        assert got is r and chunk.start == r.num_computed
        sizes.append((len(chunk.token_ids), chunk.logits))
        r.num_computed += len(chunk.token_ids)
    assert sizes == [(8, "none"), (8, "none"), (4, "last")]
    assert len(r.blocks) == 2   # 20 + 4 - 1 = 23 tokens


def test_decodes_and_new_prefill_share_a_step():
    s = Scheduler(BlockAllocator(10), max_batched_tokens=6)
    a, b = request(0, 3), request(1, 9)
    s.add(a)
    ((_, chunk),) = s.schedule()
    a.num_computed += 3
    a.append(42)
    s.add(b)
    step = s.schedule()
    assert [(r.request_id, len(c.token_ids), c.start) for r, c in step] == [(0, 1, 3), (1, 5, 0)]
    assert step[0][1].token_ids == [42] and step[1][1].logits == "none"


def test_admission_waits_for_blocks_and_finish_frees_them():
    s = Scheduler(BlockAllocator(3), max_batched_tokens=100)
    a, b = request(0, 30, 3), request(1, 10, 2)     # a: 32 tokens = 2 blocks; b: 1 block
    c = request(2, 20, 1)                             # 2 blocks: must wait for a
    for r in (a, b, c):
        s.add(r)
    assert [r.request_id for r, _ in s.schedule()] == [0, 1]
    assert list(s.waiting) == [c]
    s.finish(a)
    assert s.allocator.num_free == 2 and a.blocks == []
    b.num_computed = 10
    b.append(7)
    assert [r.request_id for r, _ in s.schedule()] == [1, 2]


def test_request_that_can_never_fit_raises():
    s = Scheduler(BlockAllocator(2))
    with pytest.raises(OutOfBlocksError, match=r"^\[scheduler\] request 0 needs 4 blocks, the cache has 2"):
        s.add(request(0, 40, 10))


def test_request_validation():
    with pytest.raises(ValueError, match=r"^\[runner\] the prompt"):
        Request(0, [], SamplingParams(), 4, frozenset())
    with pytest.raises(ValueError, match=r"^\[runner\] max_tokens"):
        request(0, 3, 0)


def test_stop_conditions():
    r = Request(0, [1], SamplingParams(), 3, frozenset({9}))
    r.append(5)
    assert r.finish_reason is None
    r.append(9)
    assert r.finish_reason == "stop"
    r = Request(1, [1], SamplingParams(), 2, frozenset({9}))
    r.append(5), r.append(6)
    assert r.finish_reason == "length"
