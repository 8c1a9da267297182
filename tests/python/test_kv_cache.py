"""Block allocator and the flattening of a step into slot mappings / block tables."""
import numpy as np
import pytest

from metalrt.runner import BLOCK_SIZE, BlockAllocator, OutOfBlocksError, ScheduledChunk, build_step, blocks_for


def test_allocator_hands_out_distinct_blocks_and_reuses_freed_ones():
    a = BlockAllocator(5)
    first = a.allocate(3)
    assert sorted(first) == [0, 1, 2] and a.num_free == 2
    second = a.allocate(2)
    assert set(first).isdisjoint(second) and a.num_free == 0
    with pytest.raises(OutOfBlocksError, match=r"^\[kv_cache\] out of blocks: 1 needed, 0 of 5 free"):
        a.allocate(1)
    a.free(first[:2])
    again = a.allocate(2)
    assert sorted(again) == sorted(first[:2])


def test_allocator_rejects_double_free_and_foreign_ids():
    a = BlockAllocator(3)
    blocks = a.allocate(2)
    a.free(blocks)
    with pytest.raises(ValueError, match=r"^\[kv_cache\] block"):
        a.free(blocks[:1])
    with pytest.raises(ValueError, match=r"^\[kv_cache\] block 7"):
        a.free([7])
    with pytest.raises(ValueError, match=r"^\[kv_cache\] num_blocks"):
        BlockAllocator(0)


@pytest.mark.parametrize("tokens,blocks", [(1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)])
def test_blocks_for(tokens, blocks):
    assert blocks_for(tokens) == blocks


def test_build_step_mixes_prefill_and_decode():
    # Request 0: prefill of 17 tokens in blocks [4, 2]; request 1: one decode token at
    # position 33 in blocks [0, 5, 3]; request 2: a middle prompt chunk without logits.
    chunks = [ScheduledChunk(list(range(100, 117)), 0, [4, 2], "last"),
              ScheduledChunk([7], 33, [0, 5, 3], "last"),
              ScheduledChunk([1, 2, 3], 16, [6, 1], "none")]
    step = build_step(chunks, "cpu")
    assert step.token_ids.numpy().tolist() == list(range(100, 117)) + [7, 1, 2, 3]
    assert step.positions.numpy().tolist() == list(range(17)) + [33, 16, 17, 18]
    expected_slots = [4 * 16 + p for p in range(16)] + [2 * 16 + 0] + [3 * 16 + 1] + \
                     [1 * 16 + 0, 1 * 16 + 1, 1 * 16 + 2]
    assert step.slot_mapping.numpy().tolist() == expected_slots
    assert step.slot_mapping.dtype == "int64" and step.token_ids.dtype == "int32"
    assert step.block_tables.numpy().tolist() == [[4, 2, 0], [0, 5, 3], [6, 1, 0]]
    assert step.seq_lens.numpy().tolist() == [17, 34, 19]
    assert step.query_start_loc.numpy().tolist() == [0, 17, 18, 21]
    assert step.logit_rows.numpy().tolist() == [16, 17] and step.num_logit_rows == 2
    assert step.max_position == 33


def test_build_step_all_rows_and_errors():
    step = build_step([ScheduledChunk([5, 6, 7], 0, [0], "all")], "cpu")
    assert step.logit_rows is None and step.num_logit_rows == 3
    step = build_step([ScheduledChunk([5, 6, 7], 0, [0], "none")], "cpu")
    assert step.num_logit_rows == 0
    with pytest.raises(ValueError, match=r"^\[runner\] chunk of 2 tokens at 15"):
        build_step([ScheduledChunk([1, 2], BLOCK_SIZE - 1, [0], "last")], "cpu")
    with pytest.raises(ValueError, match=r"^\[runner\]"):
        build_step([], "cpu")
