"""ops.layer_norm (Ba et al. 2016) against a numpy float64 reference."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand
from metalrt import ops


def reference(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)     # biased, as in PyTorch
    y = (x - mean) / np.sqrt(var + eps) * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 31), (2, 32), (5, 33), (2, 768), (2, 3, 64)])
def test_matches_float64(with_bias, dtype, shape, device):
    x = rand(shape, seed=shape[-1], scale=3.0, dtype=dtype) + 1.5   # a non-zero mean
    weight = rand(shape[-1:], seed=1, dtype=dtype)
    bias = rand(shape[-1:], seed=2, dtype=dtype) if with_bias else None
    as_dev = lambda a: None if a is None else metalrt.asarray(a, device=device, dtype=dtype)  # noqa: E731
    out = poisoned(shape, dtype, device)
    result = ops.layer_norm(as_dev(x), as_dev(weight), as_dev(bias), eps=1e-5, out=out)
    assert result.data_ptr() == out.data_ptr()
    # x + 1.5 may leave the dtype grid: the op sees x rounded to it.
    x_seen = np.asarray(metalrt.asarray(x, dtype=dtype), np.float64)
    assert_matches(result, reference(x_seen, weight, bias, 1e-5), dtype)


def test_rows_of_a_view(device):
    x = rand((4, 16), seed=1)
    weight, bias = rand((16,), seed=2), rand((16,), seed=3)
    rows = metalrt.asarray(x, device=device)[1:3]
    assert_rows_view_written(lambda out: ops.layer_norm(rows, weight, bias, out=out),
                             rand((4, 16), seed=4), reference(x[1:3], weight, bias, 1e-5), device)


def test_bad_inputs(device):
    x = metalrt.zeros((2, 8), device=device)
    w = metalrt.zeros(8, device=device)
    with pytest.raises(ValueError, match=r"^\[layer_norm\] bias must have shape \[8\], got \[7\]"):
        ops.layer_norm(x, w, metalrt.zeros(7, device=device))
    with pytest.raises(ValueError, match=r"^\[layer_norm\] weight must have shape \[8\]"):
        ops.layer_norm(x, metalrt.zeros((1, 8), device=device))
    with pytest.raises(TypeError, match=r"^\[layer_norm\] bias must have the dtype of x"):
        ops.layer_norm(x, w, metalrt.zeros(8, dtype="float16", device=device))
    with pytest.raises(ValueError, match=r"^\[layer_norm\] eps must be finite"):
        ops.layer_norm(x, w, eps=float("inf"))
    with pytest.raises(TypeError, match=r"^\[layer_norm\] bias must be a metalrt.Tensor"):
        ops.layer_norm(x, w, "bias")
    with pytest.raises(TypeError, match=r"^\[layer_norm\] weight must be a metalrt.Tensor"):
        ops.layer_norm(x, None)
