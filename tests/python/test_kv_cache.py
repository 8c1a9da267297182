"""Block allocator, the flattening of a step into slot mappings / block tables, the
paged layers' tensors (one allocation a side, in huge pages on the CPU) and the model
cache over per-layer caches (and device snapshots of a recurrent slot)."""
import sys

import numpy as np
import pytest

import metalrt
from conftest import DEVICES
from metalrt.cache import (BLOCK_SIZE, BlockAllocator, ModelCache, OutOfBlocksError, PagedKVLayer,
                           RecurrentLayer, ScheduledChunk, blocks_for, build_step, paged_kv_layers)


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
    with pytest.raises(ValueError, match=r"^\[build_step\] chunk of 2 tokens at 15"):
        build_step([ScheduledChunk([1, 2], BLOCK_SIZE - 1, [0], "last")], "cpu")
    with pytest.raises(ValueError, match=r"^\[build_step\] a step needs"):
        build_step([], "cpu")


def test_each_side_is_one_allocation_and_each_layer_a_view_of_it():
    from metalrt.plan import write_inputs
    keys, values = _sides(paged_kv_layers(num_layers=3, num_blocks=4, kv_heads=2, head_dim=8,
                                          device="cpu"))
    layer_bytes = 4 * BLOCK_SIZE * 2 * 8 * 4
    for side in (keys, values):
        assert [t.shape for t in side] == [(4, BLOCK_SIZE, 2, 8)] * 3
        assert [t.data_ptr() - side[0].data_ptr() for t in side] == [0, layer_bytes, 2 * layer_bytes]
    assert abs(values[0].data_ptr() - keys[0].data_ptr()) >= 3 * layer_bytes
    # A write to one layer's view is that layer's alone.
    write_inputs([(keys[1], np.full((4, BLOCK_SIZE, 2, 8), 7.0, np.float32))])
    assert [float(t.numpy().min()) for t in keys] == [0.0, 7.0, 0.0]
    assert [float(t.numpy().max()) for t in keys] == [0.0, 7.0, 0.0]
    assert all(float(abs(t.numpy()).max()) == 0.0 for t in values)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_cpu_cache_side_sits_in_zeroed_memory_advised_for_huge_pages(dtype):
    from linux_memory import smaps_region, thp_eligible, thp_mode
    layers = paged_kv_layers(num_layers=2, num_blocks=3, kv_heads=2, head_dim=8, device="cpu",
                             dtype=dtype)
    for side in _sides(layers):
        assert [(t.shape, t.dtype) for t in side] == [((3, BLOCK_SIZE, 2, 8), dtype)] * 2
        assert side[0].data_ptr() % (2 << 20) == 0
        assert "[heap]" not in "".join(smaps_region(side[0].data_ptr()))   # not the allocator's
        assert thp_eligible(side[0].data_ptr()) == ("0" if thp_mode() == "never" else "1")
        assert all(not t.numpy().view(np.uint8).any() for t in side)   # zero-filled


def test_a_metal_cache_is_device_memory_of_zeros():
    layers = paged_kv_layers(num_layers=2, num_blocks=2, kv_heads=1, head_dim=4, device="metal")
    for side in _sides(layers):
        assert [(t.device, t.shape) for t in side] == [("metal", (2, BLOCK_SIZE, 1, 4))] * 2
        assert all(float(abs(t.numpy()).max()) == 0.0 for t in side)


def test_a_cache_of_no_elements_and_one_too_large_to_map():
    # A hybrid model with no full-attention layer has no paged layers.
    assert paged_kv_layers(num_layers=0, num_blocks=4, kv_heads=2, head_dim=64, device="cpu") == []
    empty = paged_kv_layers(num_layers=2, num_blocks=4, kv_heads=2, head_dim=0, device="cpu")
    assert [layer.values.shape for layer in empty] == [(4, BLOCK_SIZE, 2, 0)] * 2
    with pytest.raises(MemoryError):   # as metalrt.zeros of that size
        paged_kv_layers(num_layers=30, num_blocks=1 << 40, kv_heads=3, head_dim=64, device="cpu")


def _sides(layers):
    """([keys of every layer], [values of every layer])."""
    return [layer.keys for layer in layers], [layer.values for layer in layers]


def test_a_model_cache_of_paged_layers_shares_prefixes_and_holds_no_state():
    layers = paged_kv_layers(num_layers=2, num_blocks=5, kv_heads=1, head_dim=4, device="cpu")
    cache = ModelCache(layers, num_blocks=5)
    assert cache.layers == layers and all(isinstance(l, PagedKVLayer) for l in cache.layers)
    assert (cache.num_blocks, cache.num_state_slots, cache.in_use) == (5, 0, False)
    assert cache.supports_prefix_caching and cache.decode_plans is None


def test_a_model_cache_with_recurrent_layers_resets_one_slot_of_each():
    kv = paged_kv_layers(num_layers=1, num_blocks=2, kv_heads=1, head_dim=4, device="cpu")
    state = [RecurrentLayer(3, conv_dim=6, conv_width=4, v_heads=2, k_dim=3, v_dim=5,
                            device="cpu") for _ in range(2)]
    cache = ModelCache([state[0], kv[0], state[1]], num_blocks=2)
    assert cache.num_state_slots == 3 and not cache.supports_prefix_caching
    assert [(l.conv.shape, l.recurrent.shape, l.recurrent.dtype) for l in state] == \
        [((3, 6, 3), (3, 2, 3, 5), "float32")] * 2
    for layer in state:
        layer.conv.copy_from(np.ones((3, 6, 3), np.float32))
        layer.recurrent.copy_from(np.ones((3, 2, 3, 5), np.float32))
    cache.reset(1)
    for layer in state:
        assert layer.conv.numpy()[:, 0, 0].tolist() == [1.0, 0.0, 1.0]
        assert layer.recurrent.numpy()[:, 0, 0, 0].tolist() == [1.0, 0.0, 1.0]
        assert not layer.conv.numpy()[1].any() and not layer.recurrent.numpy()[1].any()
    with pytest.raises(ValueError, match=r"^\[recurrent_state\] slot 3 is outside \[0, 3\)"):
        cache.reset(3)
    with pytest.raises(ValueError, match=r"^\[recurrent_state\] num_slots must be >= 1"):
        RecurrentLayer(0, 6, 4, 2, 3, 5, "cpu")
    other = RecurrentLayer(2, 6, 4, 2, 3, 5, "cpu")
    with pytest.raises(ValueError, match=r"^\[cache\] the layers' per-request state has \[2, 3\]"):
        ModelCache([state[0], other], num_blocks=2)



@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_device_snapshot_of_a_slot_restores_it_bit_exactly(device, dtype):
    """``snapshot(slot, on_device=True)`` (a speculative step's rollback point) copies the
    slot's conv and delta-rule rows on the device; ``restore`` writes them back into
    that slot or another, bit-exactly, leaving the other slots alone."""
    layer = RecurrentLayer(3, conv_dim=6, conv_width=4, v_heads=2, k_dim=3, v_dim=5,
                           device=device, dtype=dtype)
    rng = np.random.default_rng(0)
    conv = rng.standard_normal((3, 6, 3)).astype(np.float32)
    if dtype == "bfloat16":   # values a bfloat16 holds exactly
        conv = (conv.view(np.uint32) & 0xFFFF0000).view(np.float32)
    layer.conv.copy_from(conv)
    layer.recurrent.copy_from(rng.standard_normal((3, 2, 3, 5)).astype(np.float32))
    before = layer.conv.numpy(), layer.recurrent.numpy()
    snap = layer.snapshot(1, on_device=True)
    assert all(isinstance(t, metalrt.Tensor) and t.device == device for t in snap)
    layer.conv.copy_from(np.zeros((3, 6, 3), np.float32))
    layer.recurrent.copy_from(np.zeros((3, 2, 3, 5), np.float32))
    layer.restore(1, snap)
    layer.restore(2, snap)
    for pool, old in zip((layer.conv, layer.recurrent), before):
        now = pool.numpy()
        assert np.array_equal(now[1], old[1]) and np.array_equal(now[2], old[1])
        assert not now[0].any()
