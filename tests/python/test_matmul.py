"""ops.matmul and ops.matmul_bt against numpy float64 products."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand,
                      summation_bar)
from metalrt import ops

SHAPES = [(1, 1, 1), (1, 576, 576), (1, 33, 31), (31, 32, 33), (32, 64, 32), (37, 333, 201),
          (2, 576, 1536)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("transposed", [False, True])
def test_matches_float64(transposed, m, k, n, dtype, device):
    a = rand((m, k), seed=m + k, dtype=dtype)
    w = rand((n, k), seed=n, scale=k ** -0.5, dtype=dtype)    # nn.Linear layout [N, K]
    op, b = (ops.matmul_bt, w) if transposed else (ops.matmul, np.ascontiguousarray(w.T))
    out = poisoned((m, n), dtype, device)
    result = op(metalrt.asarray(a, device=device, dtype=dtype),
                metalrt.asarray(b, device=device, dtype=dtype), out=out)
    assert result.shape == (m, n) and result.data_ptr() == out.data_ptr()
    # A float32 dot product over K terms: its summation bound, at least the dtype's bar.
    assert_matches(result, a @ w.T, dtype, worst_bar=summation_bar(k))


def test_float32_gemv_and_gemm_are_within_1e_10_nmse_of_float64(device):
    for m in (1, 16):
        a, w = rand((m, 2048), seed=m), rand((2048, 2048), seed=7, scale=2048 ** -0.5)
        result = ops.matmul_bt(metalrt.asarray(a, device=device), metalrt.asarray(w, device=device))
        diff = np.asarray(result, np.float64) - a @ w.T
        assert np.sum(diff ** 2) / np.sum((a @ w.T) ** 2) <= 1e-10


def test_rows_of_a_view(device):
    a, w = rand((4, 33), seed=1), rand((5, 33), seed=2)
    rows = metalrt.asarray(a, device=device)[1:3]
    weight = metalrt.asarray(w, device=device)
    assert_rows_view_written(lambda out: ops.matmul_bt(rows, weight, out=out), rand((4, 5), seed=3),
                             a[1:3] @ w.T, device)


def test_bad_inputs(device):
    a = metalrt.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match=r"^\[matmul\] a \[2, 3\] and b \[4, 5\] disagree on K"):
        ops.matmul(a, metalrt.zeros((4, 5), device=device))
    with pytest.raises(ValueError, match=r"^\[matmul_bt\] a \[2, 3\] and b \[5, 4\] disagree on K"):
        ops.matmul_bt(a, metalrt.zeros((5, 4), device=device))
    with pytest.raises(ValueError, match=r"^\[matmul_bt\] b must have rank 2"):
        ops.matmul_bt(a, metalrt.zeros((3,), device=device))
    with pytest.raises(TypeError, match=r"^\[matmul\] b must have the dtype of a"):
        ops.matmul(a, metalrt.zeros((3, 4), dtype="float16", device=device))
    with pytest.raises(TypeError, match=r"^\[matmul_bt\] a must be float32"):
        ops.matmul_bt(np.zeros((2, 3), np.int32), np.zeros((4, 3), np.int32))
    with pytest.raises(ValueError, match=r"^\[matmul_bt\] out must have shape \[2, 4\]"):
        ops.matmul_bt(a, metalrt.zeros((4, 3), device=device), out=metalrt.zeros((4, 2), device=device))
    for bad in ("w", None):
        with pytest.raises(TypeError, match=r"^\[matmul_bt\] b must be a metalrt.Tensor"):
            ops.matmul_bt(a, bad)
