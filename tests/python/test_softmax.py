"""ops.softmax against a numpy float64 reference."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand,
                      summation_bar)
from metalrt import ops


def reference(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(1,), (1, 1), (3, 31), (2, 32), (4, 33), (2, 3, 50272)])
def test_matches_float64(dtype, shape, device):
    x = rand(shape, seed=shape[-1], scale=5.0, dtype=dtype)
    out = poisoned(shape, dtype, device)
    result = ops.softmax(metalrt.asarray(x, device=device, dtype=dtype), out=out)
    assert result.data_ptr() == out.data_ptr()
    # The denominator is a float32 sum over the row: long rows get its error bound.
    assert_matches(result, reference(x), dtype, worst_bar=summation_bar(shape[-1]))


def test_large_logits_do_not_overflow(device):
    x = np.array([[1000.0, 999.0, -1000.0], [-1e30, -1e30, -1e30]])
    assert_matches(ops.softmax(metalrt.asarray(x, device=device)), reference(x), "float32")


def test_rows_of_a_view(device):
    x = rand((4, 9), seed=1)
    rows = metalrt.asarray(x, device=device)[1:3]
    assert_rows_view_written(lambda out: ops.softmax(rows, out=out), rand((4, 9), seed=2),
                             reference(x[1:3]), device)


def test_bad_inputs(device):
    with pytest.raises(ValueError, match=r"^\[softmax\] x must have rank >= 1"):
        ops.softmax(metalrt.zeros((), device=device))
    with pytest.raises(TypeError, match=r"^\[softmax\] x must be float32"):
        ops.softmax(np.zeros(3, np.int32))
    x = metalrt.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match=r"^\[softmax\] out overlaps x"):
        ops.softmax(x, out=x)
    with pytest.raises(TypeError, match=r"^\[softmax\] x must be a metalrt.Tensor"):
        ops.softmax("x")
