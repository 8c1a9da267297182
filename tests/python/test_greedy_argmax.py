"""ops.greedy_argmax: bit-exact selection, lowest index on ties, NaN never wins."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_native, assert_same_bytes, poisoned, profiled, rand,
                      requires_metal)
from metalrt import ops


def reference(logits):
    """numpy.argmax with NaN treated as -inf (an all-NaN row gives 0)."""
    return np.argmax(np.where(np.isnan(logits), -np.inf, logits), axis=1).astype(np.int32)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("rows, vocab", [(1, 1), (3, 31), (2, 32), (5, 33), (2, 50272)])
def test_matches_numpy(dtype, rows, vocab, device):
    logits = rand((rows, vocab), seed=vocab, scale=4.0, dtype=dtype)
    out = poisoned((rows,), "int32", device)
    result = ops.greedy_argmax(metalrt.asarray(logits, device=device, dtype=dtype), out=out)
    assert result.dtype == "int32" and result.data_ptr() == out.data_ptr()
    np.testing.assert_array_equal(result.numpy(), reference(logits))


def test_ties_and_nan(device):
    logits = np.array([
        [1.0, 5.0, 5.0, 5.0],               # tie -> lowest index
        [np.nan, 2.0, np.nan, 2.0],         # NaN ignored, then the tie
        [np.nan, np.nan, np.nan, np.nan],   # all NaN -> 0
        [-np.inf, -np.inf, -np.inf, -np.inf],
        [3.0, 3.0, 3.0, 3.0],               # all equal -> 0
        [np.inf, 1.0, np.nan, np.inf],
    ], dtype=np.float32)
    for dtype in FLOAT_DTYPES:
        result = ops.greedy_argmax(metalrt.asarray(logits, device=device, dtype=dtype))
        np.testing.assert_array_equal(result.numpy(), [1, 1, 0, 0, 0, 0])


def test_a_deliberate_tie_across_a_large_vocabulary(device):
    logits = np.zeros((1, 50272), np.float32)
    logits[0, [40000, 777, 50271]] = 9.0
    assert ops.greedy_argmax(metalrt.asarray(logits, device=device)).numpy()[0] == 777


def test_rows_of_a_view(device):
    logits = rand((4, 33), seed=2)
    base = metalrt.asarray(np.full(4, 99, np.int32), device=device)
    ops.greedy_argmax(metalrt.asarray(logits, device=device)[1:3], out=base[1:3])
    np.testing.assert_array_equal(base.numpy(), [99, *reference(logits[1:3]), 99])


def test_bad_inputs(device):
    with pytest.raises(ValueError, match=r"^\[greedy_argmax\] logits must have rank 2"):
        ops.greedy_argmax(metalrt.zeros((3,), device=device))
    with pytest.raises(ValueError, match=r"^\[greedy_argmax\] logits must have a non-empty"):
        ops.greedy_argmax(metalrt.zeros((3, 0), device=device))
    with pytest.raises(TypeError, match=r"^\[greedy_argmax\] logits must be float32, float16"):
        ops.greedy_argmax(metalrt.zeros((3, 4), dtype="int32", device=device))
    with pytest.raises(TypeError, match=r"^\[greedy_argmax\] out must be int32"):
        ops.greedy_argmax(metalrt.zeros((3, 4), device=device), out=metalrt.zeros(3, device=device))
    with pytest.raises(TypeError, match=r"^\[greedy_argmax\] logits must be a metalrt.Tensor"):
        ops.greedy_argmax("logits")
    with pytest.raises(TypeError, match=r"^\[greedy_argmax\] logits must be a metalrt.Tensor"):
        ops.greedy_argmax(None)


@requires_metal
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("rows, vocab", [(1, 50272), (5, 50272), (1, 49152), (5, 49152)])
def test_metal_kernel_equals_the_cpu_byte_for_byte(dtype, rows, vocab):
    logits = rand((rows, vocab), seed=rows, scale=4.0, dtype=dtype)
    logits[0, [1000, 1010]] = 40.0            # a tie inside one SIMD-group (threads 232, 242)
    logits[-1, [3100, 3000]] = 40.0           # across SIMD-groups, the lower index in the later one
    logits[:, ::7] = np.nan                   # NaN never wins
    if rows > 2:
        logits[1] = 1.5                       # all equal: index 0
        logits[2] = -np.inf                   # only -inf: index 0
    expected = ops.greedy_argmax(metalrt.asarray(logits, dtype=dtype))
    x = metalrt.asarray(logits, device="metal", dtype=dtype)
    out = poisoned((rows,), "int32", "metal")
    metalrt.providers.reset_stats()
    # Past 4,096 columns, two levels: a threadgroup per chunk of a row, then a merge.
    assert profiled(lambda: ops.greedy_argmax(x, out=out)) == {
        f"greedy_argmax_row_{SUFFIX[dtype]}": 1, "greedy_argmax_merge": 1, "total": 2}
    assert_native("greedy_argmax", "metal_greedy_argmax", 1)
    assert_same_bytes(out, expected)
    np.testing.assert_array_equal(out.numpy(), reference(logits))
