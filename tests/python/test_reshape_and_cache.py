"""ops.reshape_and_cache: bit-exact paged KV-cache writes, padded slots skipped."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_native, assert_same_bytes, profiled, rand, random_of,
                      requires_metal)
from metalrt import ops


def reference(cache, rows, slots):
    """cache [num_blocks, block_size, kv_heads, head_dim] with rows[t] at slot t."""
    expected = cache.copy()
    flat = expected.reshape(-1, *cache.shape[2:])
    for row, slot in zip(rows, slots):
        if slot >= 0:
            flat[slot] = row
    return expected


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("num_blocks, block_size, kv_heads, head_dim, slots", [
    (1, 1, 1, 1, [0]),
    (4, 16, 3, 64, [17, -1, 0, 63, 16]),      # padded slot, block boundaries
    (3, 16, 1, 33, list(range(31, 0, -1))),   # 31 tokens in reverse order
    (2, 5, 2, 32, [9, -1, -1, 4]),            # block_size not a power of two
])
def test_writes_exactly_and_only_the_slots(dtype, num_blocks, block_size, kv_heads, head_dim,
                                           slots, device):
    tokens = len(slots)
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k_rows, v_rows = (rand((tokens, kv_heads, head_dim), seed=s, dtype=dtype) for s in (1, 2))
    k_init, v_init = (rand(shape, seed=s, dtype=dtype) for s in (3, 4))
    key_cache = metalrt.asarray(k_init, device=device, dtype=dtype)
    value_cache = metalrt.asarray(v_init, device=device, dtype=dtype)
    result = ops.reshape_and_cache(metalrt.asarray(k_rows, device=device, dtype=dtype),
                                   metalrt.asarray(v_rows, device=device, dtype=dtype),
                                   key_cache, value_cache, np.array(slots, np.int64))
    assert result is None
    # The whole caches, untouched rows included.
    np.testing.assert_array_equal(key_cache.numpy(), reference(k_init, k_rows, slots))
    np.testing.assert_array_equal(value_cache.numpy(), reference(v_init, v_rows, slots))


def test_bad_slots_leave_the_cache_untouched(device):
    init = rand((2, 4, 1, 8), seed=5)
    cache = metalrt.asarray(init, device=device)
    rows = metalrt.asarray(rand((2, 1, 8), seed=6), device=device)
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] slot 8 of token 1 is beyond"):
        ops.reshape_and_cache(rows, rows, cache, cache, np.array([0, 8], np.int64))
    np.testing.assert_array_equal(cache.numpy(), init.astype(np.float32))


def test_python_int_slots_become_int64(device):
    """slot_mapping is int64 (vLLM's dtype), so Python ints become int64 there, not
    int32: a slot beyond int32 is reported as beyond the cache, not as an overflow."""
    init = rand((3, 16, 2, 8), seed=7)
    cache = metalrt.asarray(init, device=device)
    rows = rand((3, 2, 8), seed=8)
    slots = [47, -1, 16]
    ops.reshape_and_cache(rows, rows, cache, cache, slots)
    np.testing.assert_array_equal(cache.numpy(), reference(init, rows, slots).astype(np.float32))
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] slot 2147483648 of token 1 is beyond"):
        ops.reshape_and_cache(rows[:2], rows[:2], cache, cache, [0, 2**31])
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] slot_mapping: 9223372036854775808 "
                                         r"does not fit in int64"):
        ops.reshape_and_cache(rows[:2], rows[:2], cache, cache, [0, 2**63])


def test_bad_inputs(device):
    cache = metalrt.zeros((2, 4, 2, 8), device=device)
    rows = metalrt.zeros((3, 2, 8), device=device)
    slots = np.array([0, 1, 2], np.int64)
    with pytest.raises(TypeError, match=r"^\[reshape_and_cache\] slot_mapping must be int64"):
        ops.reshape_and_cache(rows, rows, cache, cache, slots.astype(np.int32))
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] slot_mapping must have shape \[3\]"):
        ops.reshape_and_cache(rows, rows, cache, cache, slots[:2])
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] key must have rank 3"):
        ops.reshape_and_cache(rows.reshape(3, 16), rows, cache, cache, slots)
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] key_cache must be \[num_blocks"):
        ops.reshape_and_cache(rows, rows, metalrt.zeros((2, 4, 1, 16), device=device),
                              metalrt.zeros((2, 4, 1, 16), device=device), slots)
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] value must have shape"):
        ops.reshape_and_cache(rows, metalrt.zeros((3, 2, 7), device=device), cache, cache, slots)
    # A cache of another float dtype is written rounded (KV cache types, test_kv_types.py);
    # a uint8 cache must hold q8_0 / q4_0 rows, which need head_dim a multiple of 32.
    byte_cache = metalrt.zeros((2, 4, 2, 8), dtype="uint8", device=device)
    with pytest.raises(ValueError, match=r"^\[reshape_and_cache\] key_cache must be \[num_blocks, block_size, "
                                         r"kv_heads, 8\] of float32, float16 or bfloat16 \(q8_0 / q4_0 caches"):
        ops.reshape_and_cache(rows, rows, byte_cache, byte_cache, slots)
    for bad in ("cache", None):
        with pytest.raises(TypeError, match=r"^\[reshape_and_cache\] value_cache must be a metalrt"):
            ops.reshape_and_cache(rows, rows, cache, bad, slots)


@requires_metal
@pytest.mark.parametrize("dtype", list(SUFFIX))
@pytest.mark.parametrize("kv_heads, head_dim, slots", [
    (12, 64, [17, -1, 3, 95]),              # OPT-125m, batched decode with a padded row
    (8, 128, list(range(30, 63)) + [-1]),   # Qwen3, a prefill across blocks, padded
])
def test_metal_kernel_equals_the_cpu_byte_for_byte(dtype, kv_heads, head_dim, slots):
    shape = (6, 16, kv_heads, head_dim)
    k_rows, v_rows = (random_of((len(slots), kv_heads, head_dim), dtype, seed) for seed in (1, 2))
    k_init, v_init = (random_of(shape, dtype, seed) for seed in (3, 4))
    slot_mapping = np.array(slots, np.int64)
    caches = {}
    for device in ("cpu", "metal"):
        caches[device] = [metalrt.asarray(init, device=device, dtype=dtype) for init in (k_init, v_init)]
        keys, values = (metalrt.asarray(r, device=device, dtype=dtype) for r in (k_rows, v_rows))
        metalrt.providers.reset_stats()
        rows = profiled(lambda: ops.reshape_and_cache(keys, values, *caches[device], slot_mapping))
        if device == "metal":
            assert rows == {f"reshape_and_cache_{SUFFIX[dtype]}": 1, "total": 1}
            assert_native("reshape_and_cache", "metal_reshape_and_cache", 1)
    for metal_cache, cpu_cache in zip(caches["metal"], caches["cpu"]):
        assert_same_bytes(metal_cache, cpu_cache)   # the whole caches, untouched bytes included
