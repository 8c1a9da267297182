"""ops.rms_norm (Zhang & Sennrich 2019) against a numpy float64 reference."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, assert_matches, assert_rows_view_written, on_grid, poisoned, rand
from metalrt import ops


def reference(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


# Weights around 0, and around 1 (a (1 + w) norm's weight, 1 added at load).
@pytest.mark.parametrize("weight_offset", [0.0, 1.0])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape, eps", [((1, 1), 1e-6), ((3, 31), 1e-5), ((2, 32), 1e-6),
                                        ((33, 576), 1e-5), ((2, 3, 64), 1e-6), ((7,), 0.0)])
def test_matches_float64(weight_offset, dtype, shape, eps, device):
    x = rand(shape, seed=shape[-1], scale=2.0, dtype=dtype)
    weight = on_grid(rand(shape[-1:], seed=1, dtype=dtype) + weight_offset, dtype)
    out = poisoned(shape, dtype, device)
    result = ops.rms_norm(metalrt.asarray(x, device=device, dtype=dtype),
                          metalrt.asarray(weight, device=device, dtype=dtype), eps=eps, out=out)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    assert_matches(result, reference(x, weight, eps), dtype)


def test_default_eps_and_rows_of_a_view(device):
    x = rand((4, 33), seed=2)
    weight = rand((33,), seed=3)
    rows = metalrt.asarray(x, device=device)[1:3]
    assert_rows_view_written(lambda out: ops.rms_norm(rows, weight, out=out), rand((4, 33), seed=4),
                             reference(x[1:3], weight, 1e-6), device)


def test_bad_inputs(device):
    x = metalrt.zeros((2, 576), device=device)
    with pytest.raises(ValueError, match=r"^\[rms_norm\] weight must have shape \[576\], got \[512\]"):
        ops.rms_norm(x, metalrt.zeros(512, device=device))
    with pytest.raises(TypeError, match=r"^\[rms_norm\] weight must have the dtype of x"):
        ops.rms_norm(x, metalrt.zeros(576, dtype="bfloat16", device=device))
    with pytest.raises(TypeError, match=r"^\[rms_norm\] x must be float32"):
        ops.rms_norm(np.zeros((2, 4), np.int32), np.zeros(4, np.int32))
    with pytest.raises(ValueError, match=r"^\[rms_norm\] eps must be finite and >= 0"):
        ops.rms_norm(x, metalrt.zeros(576, device=device), eps=-1.0)
    with pytest.raises(ValueError, match=r"^\[rms_norm\] x must have rank >= 1"):
        ops.rms_norm(metalrt.zeros((), device=device), metalrt.zeros(1, device=device))
    with pytest.raises(TypeError, match=r"^\[rms_norm\] eps must be a real number"):
        ops.rms_norm(x, metalrt.zeros(576, device=device), eps="small")
    for bad in ("w", None):
        with pytest.raises(TypeError, match=r"^\[rms_norm\] weight must be a metalrt.Tensor"):
            ops.rms_norm(x, bad)
