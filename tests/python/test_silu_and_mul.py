"""ops.silu_and_mul (SwiGLU) against a numpy float64 reference."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand
from metalrt import ops


def reference(x):
    n = x.shape[-1] // 2
    gate, up = x[..., :n], x[..., n:]
    return gate / (1.0 + np.exp(-gate)) * up


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 62), (32, 64), (2, 33, 66), (5, 3072)])
def test_matches_float64(dtype, shape, device):
    x = rand(shape, seed=shape[-1], scale=3.0, dtype=dtype)
    out_shape = shape[:-1] + (shape[-1] // 2,)
    out = poisoned(out_shape, dtype, device)
    result = ops.silu_and_mul(metalrt.asarray(x, device=device, dtype=dtype), out=out)
    assert result.shape == out_shape and result.data_ptr() == out.data_ptr()
    assert_matches(result, reference(x), dtype)


def test_rows_of_a_view(device):
    x = rand((4, 10), seed=1)
    rows = metalrt.asarray(x, device=device)[1:3]
    assert_rows_view_written(lambda out: ops.silu_and_mul(rows, out=out), rand((4, 5), seed=2),
                             reference(x[1:3]), device)


def test_bad_inputs(device):
    with pytest.raises(ValueError, match=r"^\[silu_and_mul\] x must have an even last dim"):
        ops.silu_and_mul(metalrt.zeros((2, 7), device=device))
    with pytest.raises(ValueError, match=r"^\[silu_and_mul\] out must have shape \[2, 4\]"):
        ops.silu_and_mul(metalrt.zeros((2, 8), device=device), out=metalrt.zeros((2, 8), device=device))
    with pytest.raises(TypeError, match=r"^\[silu_and_mul\] x must be float32"):
        ops.silu_and_mul(np.zeros((2, 8), np.int8))
    with pytest.raises(TypeError, match=r"^\[silu_and_mul\] x must be a metalrt.Tensor"):
        ops.silu_and_mul(None)
