"""ops.add, mul, relu, gelu against numpy float64 references.

add/mul/relu are correctly rounded float32 operations followed by one rounding to
the dtype, so the bar is bit-exact; gelu (tanh) uses the per-dtype bars."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, assert_matches, on_grid, poisoned, rand
from metalrt import ops

SHAPES = [((1,), (1,)), ((3, 31), (31,)), ((2, 32), (2, 32)), ((4, 3, 33), (3, 33)),
          ((5, 7), ())]


def stored(values, dtype):
    """float64 values as the op stores them: float32 arithmetic, then dtype rounding."""
    return on_grid(np.asarray(values, np.float64).astype(np.float32), dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
@pytest.mark.parametrize("name, fn", [("add", np.add), ("mul", np.multiply)])
def test_binary_is_exact(name, fn, dtype, a_shape, b_shape, device):
    a = rand(a_shape, seed=1, dtype=dtype)
    b = rand(b_shape, seed=2, dtype=dtype)
    out = poisoned(a_shape, dtype, device)
    op = getattr(ops, name)
    result = op(metalrt.asarray(a, device=device, dtype=dtype),
                metalrt.asarray(b, device=device, dtype=dtype), out=out)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    np.testing.assert_array_equal(result.numpy(), stored(fn(a, b), dtype))


def test_add_in_place_on_rows_of_a_view(device):
    a = rand((4, 33), seed=3)
    bias = rand((33,), seed=4)
    t = metalrt.asarray(a, device=device)
    rows = t[1:3]
    ops.add(rows, bias, out=rows)
    expected = a.astype(np.float32)
    expected[1:3] = stored(a[1:3] + bias, "float32")
    np.testing.assert_array_equal(t.numpy(), expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_relu_is_exact(dtype, device):
    x = np.concatenate([rand((65,), seed=5, dtype=dtype), [0.0, -0.0, np.inf, -np.inf]])
    result = ops.relu(metalrt.asarray(x, device=device, dtype=dtype))
    np.testing.assert_array_equal(result.numpy(), np.maximum(x, 0.0))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(1,), (31,), (32, 33), (3, 1, 64)])
def test_gelu_tanh(dtype, shape, device):
    x = rand(shape, seed=6, scale=3.0, dtype=dtype)
    expected = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    out = poisoned(shape, dtype, device)
    assert_matches(ops.gelu(metalrt.asarray(x, device=device, dtype=dtype), out=out), expected, dtype)


def test_bad_inputs(device):
    a = metalrt.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match=r"^\[add\] b must have the shape of a \[2, 3\]"):
        ops.add(a, metalrt.zeros((2,), device=device))
    with pytest.raises(TypeError, match=r"^\[mul\] b must have the dtype of a"):
        ops.mul(a, metalrt.zeros((3,), dtype="bfloat16", device=device))
    with pytest.raises(TypeError, match=r"^\[add\] a must be float32, float16 or bfloat16"):
        ops.add(metalrt.zeros((3,), dtype="int32", device=device), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"^\[add\] out overlaps b"):
        ops.add(a[0], a[1], out=a[1])
    with pytest.raises(ValueError, match=r"^\[relu\] out overlaps x"):
        ops.relu(a, out=a)
    with pytest.raises(ValueError, match=r"^\[gelu\] out must have shape \[2, 3\]"):
        ops.gelu(a, out=metalrt.zeros((3, 2), device=device))
    for bad in ("a", None, b"bytes"):
        with pytest.raises(TypeError, match=r"^\[add\] b must be a metalrt.Tensor"):
            ops.add(a, bad)
        with pytest.raises(TypeError, match=r"^\[relu\] x must be a metalrt.Tensor"):
            ops.relu(bad)
