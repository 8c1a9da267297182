"""ops.cast and Tensor.astype: rounding to nearest even, truncation toward zero."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, bfloat16_bits, poisoned, rand
from metalrt import ops


def float_values():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(scale=50, size=61), [0.0, -0.0, 1.0, -2.5, 65504.0,
                                                            1e-6, np.inf, -np.inf]]).astype(np.float32)


def bfloat16_of(values):
    return (bfloat16_bits(values).astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("target", FLOAT_DTYPES)
@pytest.mark.parametrize("source", FLOAT_DTYPES)
def test_float_to_float_rounds_to_nearest_even(source, target, device):
    x = metalrt.asarray(float_values(), device=device, dtype=source)
    seen = x.numpy()                       # the source values, exactly (as float32)
    out = poisoned(seen.shape, target, device)
    result = ops.cast(x, target, out=out)
    assert result.dtype == target and result.data_ptr() == out.data_ptr()
    with np.errstate(over="ignore"):    # beyond float16's range is +-inf, as intended
        expected = {"float32": seen, "float16": seen.astype(np.float16),
                    "bfloat16": bfloat16_of(seen)}[target]
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("target", ["int8", "uint8", "int32", "int64", "uint32"])
@pytest.mark.parametrize("source", FLOAT_DTYPES)
def test_float_to_int_truncates_toward_zero(source, target, device):
    values = np.array([0.0, 0.9, -0.9, 1.5, -1.5, 2.99, 100.7, -100.7, 127.0], np.float32)
    if target.startswith("uint"):
        values = np.abs(values)
    x = metalrt.asarray(values, device=device, dtype=source)
    result = ops.cast(x, target)
    np.testing.assert_array_equal(result.numpy(), np.trunc(x.numpy()).astype(target))


@pytest.mark.parametrize("source", ["int8", "uint8", "int32", "int64", "uint32"])
@pytest.mark.parametrize("target", FLOAT_DTYPES + ("int32", "int64"))
def test_int_sources(source, target, device):
    # Values every target holds exactly, then the source's extremes where the target
    # is float32 (rounded to nearest even) or a wider-or-equal integer.
    values = [0, 1, 33, 127, 100]
    if source.startswith("int"):
        values += [-1, -128]
    info = np.iinfo(source)
    if target == "float32" or (target.startswith("int") and np.iinfo(target).max >= info.max):
        values += [info.max, info.min]
    values = np.array(values, dtype=source)
    result = metalrt.asarray(values, device=device).astype(target)
    expected = values.astype(np.float32) if target in FLOAT_DTYPES else values.astype(target)
    np.testing.assert_array_equal(result.numpy(), expected)


def test_astype_accepts_numpy_dtypes_and_views(device):
    x = rand((4, 33), seed=1)
    t = metalrt.asarray(x, device=device)
    h = t[1:3].astype(np.float16)
    assert h.dtype == "float16" and h.device == device and h.shape == (2, 33)
    np.testing.assert_array_equal(h.numpy(), x[1:3].astype(np.float16))
    assert t.astype("bfloat16").dtype == "bfloat16"
    assert metalrt.asarray(t, dtype="float16").dtype == "float16"     # asarray casts too
    with pytest.raises(TypeError, match="float64"):
        t.astype(np.float64)


def test_bad_inputs(device):
    x = metalrt.zeros((2, 3), device=device)
    with pytest.raises(TypeError, match=r"^\[cast\] unsupported dtype 'float8'"):
        ops.cast(x, "float8")
    with pytest.raises(ValueError, match=r"^\[cast\] out must have shape \[2, 3\]"):
        ops.cast(x, "float16", out=metalrt.zeros((3, 2), dtype="float16", device=device))
    with pytest.raises(TypeError, match=r"^\[cast\] out must be float16, got float32"):
        ops.cast(x, "float16", out=metalrt.zeros((2, 3), device=device))
    with pytest.raises(TypeError, match=r"^\[cast\] x must be a metalrt.Tensor"):
        ops.cast("x", "float16")
    with pytest.raises(TypeError, match=r"^\[cast\] x must be a metalrt.Tensor"):
        ops.cast(None, "float16")
