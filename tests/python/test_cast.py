"""ops.cast and Tensor.astype: rounding to nearest even, truncation toward zero."""
import numpy as np
import pytest

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_native, assert_same_bytes, bfloat16_bits, poisoned,
                      profiled, rand, requires_metal)
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


def every_kind_of_value(dtype):
    """Values of `dtype` reaching every rule of cast: specials, each integer type's
    range edges, truncation, ties and integers that double rounding would change."""
    if dtype in FLOAT_DTYPES:
        specials = [0.0, -0.0, 0.9, -0.9, 2.5, -2.99, 127.5, 128.0, -128.5, -129.0, 255.5, 256.0,
                    65519.0, 65520.0, 2.0**31, -2.0**31, -2.0**31 - 256, 2.0**32, 2.0**63, -2.0**63,
                    -1e19, 1e30, 1e-40, 3e-8, 1.0009765625, 1.01171875, np.inf, -np.inf, np.nan]
        moderate = np.random.default_rng(7).normal(0.0, 300.0, size=200)
        return np.concatenate([specials, moderate]).astype(np.float32)
    info = np.iinfo(dtype)
    specials = [0, 1, -1, 127, -128, 255, 2049, 65519, 65520, 65535, 2**24 + 1, 2**30 + 2**22 + 1,
                2**31 - 1, -2**31, 2**32 - 1, 2**62 + 2**54 + 1, 2**63 - 1, -2**63]
    rng = np.random.default_rng(8)
    values = [v for v in specials if info.min <= v <= info.max]
    values += list(rng.integers(info.min, info.max, size=200, endpoint=True, dtype=dtype))
    return np.array(values, dtype=dtype)


@requires_metal
@pytest.mark.parametrize("target", list(SUFFIX))
@pytest.mark.parametrize("source", list(SUFFIX))
def test_metal_kernel_equals_the_cpu_byte_for_byte(source, target):
    values = every_kind_of_value(source)
    with np.errstate(over="ignore"):    # beyond float16's range is +-inf, as intended
        expected = ops.cast(metalrt.asarray(values, device="cpu", dtype=source), target)
        x = metalrt.asarray(values, device="metal", dtype=source)
    out = poisoned(values.shape, target, "metal")
    metalrt.providers.reset_stats()
    rows = profiled(lambda: ops.cast(x, target, out=out))
    assert rows == {f"cast_{SUFFIX[source]}_{SUFFIX[target]}": 1, "total": 1}
    assert_native("cast", "metal_cast", 1)
    assert_same_bytes(out, expected)
