"""metalrt.asarray: default dtypes, conversions, bfloat16 rounding, bad inputs."""
import math
from fractions import Fraction

import numpy as np
import pytest

import metalrt
from conftest import bfloat16_bits


@pytest.mark.parametrize("source, expected", [
    (np.float64, "float32"), (np.float32, "float32"), (np.float16, "float16"),
    (np.int8, "int8"), (np.uint8, "uint8"), (np.int32, "int32"), (np.int64, "int64"),
    (np.uint32, "uint32"), (np.bool_, "uint8"),
])
def test_default_dtypes(source, expected, device):
    values = np.array([[0, 1, 1], [0, 1, 0]], dtype=source)
    t = metalrt.asarray(values, device=device)
    assert t.dtype == expected and t.device == device
    np.testing.assert_array_equal(t.numpy(), values.astype(expected))


def test_python_scalars_and_lists():
    assert metalrt.asarray(3).dtype == "int32"
    assert metalrt.asarray(2.5).numpy() == np.float32(2.5)
    t = metalrt.asarray([[1.5, 2.0], [3.0, 4.0]])
    assert t.shape == (2, 2) and t.dtype == "float32"
    assert metalrt.asarray([True, False]).dtype == "uint8"


def test_python_ints_are_int32_unless_a_value_needs_int64(device):
    """mlx's convention: Python ints become int32, int64 when a value does not fit;
    numpy arrays keep their dtype (an int64 array stays int64)."""
    for values, dtype in [([1, -2, 3], "int32"), ([[2**31 - 1], [-2**31]], "int32"),
                          (7, "int32"), ([1, 2**31], "int64"), ([-2**31 - 1], "int64"),
                          ([2**63 - 1, 0], "int64"), ([], "float32")]:
        t = metalrt.asarray(values, device=device)
        assert t.dtype == dtype, values
        assert t.numpy().tolist() == values
    assert metalrt.asarray(np.array([1, 2]), device=device).dtype == "int64"
    assert metalrt.asarray(np.int64(1), device=device).dtype == "int64"


def test_python_ints_are_range_checked(device):
    with pytest.raises(ValueError, match=r"^asarray: 9223372036854775808 does not fit in int64"):
        metalrt.asarray([0, 2**63], device=device)
    with pytest.raises(ValueError, match=r"^asarray: 2147483648 does not fit in int32 "
                                         r"\[-2147483648, 2147483647\]"):
        metalrt.asarray([2**31], dtype="int32", device=device)
    with pytest.raises(ValueError, match=r"^asarray: -1 does not fit in uint8"):
        metalrt.asarray([3, -1], dtype=np.uint8, device=device)
    assert metalrt.asarray([255, 0], dtype="uint8", device=device).numpy().tolist() == [255, 0]
    assert metalrt.asarray([2**31], dtype="uint32", device=device).numpy().tolist() == [2**31]
    assert metalrt.asarray([3, 5], dtype="float16", device=device).dtype == "float16"


def test_any_layout_is_made_contiguous(device):
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for view in (base.T, base[:, ::2, 1:], base[::-1]):
        t = metalrt.asarray(view, device=device)
        assert t.is_contiguous() and t.shape == view.shape
        np.testing.assert_array_equal(t.numpy(), view)


def test_explicit_dtypes(device):
    x = np.array([1.7, -2.2, 3.0])
    assert metalrt.asarray(x, dtype="int32", device=device).numpy().tolist() == [1, -2, 3]
    h = metalrt.asarray(x, dtype=np.float16, device=device)
    assert h.dtype == "float16"
    np.testing.assert_array_equal(h.numpy(), x.astype(np.float16))


def _bf16_nearest_even(value: float) -> float:
    """Independent reference: the nearest bfloat16 to `value` by exact rational
    comparison of its two neighbours (8 significant bits, subnormal spacing 2**-133),
    ties to the even one."""
    if value == 0.0:
        return value
    leading = math.frexp(value)[1] - 1                 # 2**leading <= |value|
    quantum = Fraction(2) ** (max(leading, -126) - 7)
    scaled = Fraction(value) / quantum
    low = math.floor(scaled)
    error = scaled - low
    keep_low = error < Fraction(1, 2) or (error == Fraction(1, 2) and low % 2 == 0)
    return float((low if keep_low else low + 1) * quantum)


def test_bfloat16_from_float64_rounds_once_to_nearest_even(device):
    one = 1.0
    ulp = 2.0 ** -7
    values = np.array([
        one + ulp / 2,                       # tie -> even (1.0)
        one + 3 * ulp / 2,                   # tie -> even (1 + 2 ulp)
        one + ulp / 2 + 2.0 ** -30,          # just above a tie: float32 would round it onto
                                             # the tie, then to even (down) -- wrong
        -(one + ulp / 2 + 2.0 ** -40),
        3.0e-39, 2.0 ** -133, 1.5 * 2.0 ** -133,   # subnormals
        65504.0, 1e30, -7.25, 0.0,
    ])
    t = metalrt.asarray(values, dtype="bfloat16", device=device)
    assert t.dtype == "bfloat16"
    expected = [_bf16_nearest_even(v) for v in values]
    np.testing.assert_array_equal(t.numpy().astype(np.float64), expected)


def test_bfloat16_from_float32_round_trip(device):
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(scale=100, size=997),
                             [np.inf, -np.inf, 3.4e38]]).astype(np.float32)
    t = metalrt.asarray(values, dtype="bfloat16", device=device)
    out = t.numpy()
    assert out.dtype == np.float32
    expected = (bfloat16_bits(values).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(out, expected)
    # bfloat16 -> float32 is exact, so a second round trip changes nothing.
    np.testing.assert_array_equal(metalrt.asarray(out, dtype="bfloat16", device=device).numpy(), out)
    assert np.isnan(metalrt.asarray([np.nan], dtype="bfloat16").numpy()[0])


def test_tensor_input(device):
    t = metalrt.asarray(np.arange(3, dtype=np.int32))
    assert metalrt.asarray(t) is t
    moved = metalrt.asarray(t, device=device)
    assert moved.device == device
    np.testing.assert_array_equal(moved.numpy(), [0, 1, 2])


@pytest.mark.parametrize("obj", [
    np.zeros(3, np.int16), np.zeros(3, np.uint64), np.zeros(3, np.complex64),
    np.array(["a", "b"]), None, "abc", [1, "a"], {"a": 1}, np.array([object()]),
])
def test_unsupported_inputs_raise_type_error(obj):
    with pytest.raises(TypeError, match="unsupported"):
        metalrt.asarray(obj)


def test_ragged_lists_raise_value_error_prefixed_with_asarray():
    with pytest.raises(ValueError, match=r"^asarray: cannot make an array of the list given: .*inhomogeneous"):
        metalrt.asarray([[1, 2], [3]])


def test_bad_dtype_and_device_arguments():
    with pytest.raises(TypeError, match="float64"):
        metalrt.asarray([1.0], dtype=np.float64)
    with pytest.raises(TypeError, match="'float8'"):
        metalrt.asarray([1.0], dtype="float8")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        metalrt.asarray([1.0], device="gpu")
    with pytest.raises(TypeError, match="device"):
        metalrt.asarray([1.0], device=0)
