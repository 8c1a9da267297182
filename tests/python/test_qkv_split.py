"""ops.qkv_split: bit-exact split of a fused QKV projection."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_native, assert_same_bytes, profiled, rand, random_of,
                      requires_metal)
from metalrt import ops


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tokens, widths", [(1, (1, 1, 1)), (33, (576, 192, 192)),
                                            (31, (64, 32, 33)), (32, (3, 5, 7))])
def test_splits_exactly(dtype, tokens, widths, device):
    fused = rand((tokens, sum(widths)), seed=tokens, dtype=dtype)
    qkv = metalrt.asarray(fused, device=device, dtype=dtype)
    q, k, v = ops.qkv_split(qkv, *widths)
    q_w, k_w, _ = widths
    for part, expected in zip((q, k, v), np.split(fused, [q_w, q_w + k_w], axis=1)):
        assert part.dtype == dtype and part.device == device and part.is_contiguous()
        np.testing.assert_array_equal(part.numpy(), expected.astype(np.float32))


def test_rows_of_a_view(device):
    fused = rand((4, 9), seed=1)
    qkv = metalrt.asarray(fused, device=device)
    q, k, v = ops.qkv_split(qkv[1:3], np.int64(2), 3, 4)
    np.testing.assert_array_equal(v.numpy(), fused[1:3, 5:].astype(np.float32))


def test_bad_inputs(device):
    qkv = metalrt.zeros((2, 9), device=device)
    with pytest.raises(ValueError, match=r"^\[qkv_split\] q \+ k \+ v widths"):
        ops.qkv_split(qkv, 3, 3, 4)
    with pytest.raises(ValueError, match=r"^\[qkv_split\] widths must be positive"):
        ops.qkv_split(qkv, 9, 0, 0)
    with pytest.raises(ValueError, match=r"^\[qkv_split\] qkv must have rank 2"):
        ops.qkv_split(qkv.reshape(18), 3, 3, 3)
    with pytest.raises(TypeError, match=r"^\[qkv_split\] k_width must be an int, got float"):
        ops.qkv_split(qkv, 3, 3.0, 3)
    with pytest.raises(TypeError, match=r"^\[qkv_split\] qkv must be a metalrt.Tensor"):
        ops.qkv_split("qkv", 3, 3, 3)
    with pytest.raises(TypeError, match=r"^\[qkv_split\] qkv must be a metalrt.Tensor"):
        ops.qkv_split(None, 3, 3, 3)


@requires_metal
@pytest.mark.parametrize("dtype", list(SUFFIX))
@pytest.mark.parametrize("tokens, widths", [(1, (1, 1, 1)), (5, (7, 3, 5)), (2, (2048, 512, 512))])
def test_metal_kernel_equals_the_cpu_byte_for_byte(dtype, tokens, widths):
    fused = random_of((tokens, sum(widths)), dtype, seed=tokens)
    expected = ops.qkv_split(metalrt.asarray(fused, dtype=dtype), *widths)
    qkv = metalrt.asarray(fused, device="metal", dtype=dtype)
    metalrt.providers.reset_stats()
    parts = []
    rows = profiled(lambda: parts.extend(ops.qkv_split(qkv, *widths)))
    assert rows == {f"qkv_split_{SUFFIX[dtype]}": 1, "total": 1}
    assert_native("qkv_split", "metal_qkv_split", 1)
    for part, reference in zip(parts, expected):
        assert_same_bytes(part, reference)
