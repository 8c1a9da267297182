"""The RoPE family against float64 references (Su et al. 2021)."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, assert_matches, poisoned, rand
from metalrt import ops


def angles(positions, rotary_dim, base):
    inv_freq = float(base) ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    return np.outer(np.asarray(positions, np.float64), inv_freq)     # [T, rotary_dim/2]


def rotate(x, cos, sin, neox):
    """x [T, H, D] rotated by per-token cos/sin [T, rotary_dim/2]; the tail passes through."""
    half = cos.shape[1]
    out = x.astype(np.float64).copy()
    if neox:
        first, second = slice(0, half), slice(half, 2 * half)
    else:
        first, second = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
    a, b = x[..., first], x[..., second]
    c, s = cos[:, None, :], sin[:, None, :]
    out[..., first] = a * c - b * s
    out[..., second] = b * c + a * s
    return out


def reference(x, positions, rotary_dim, base, neox):
    theta = angles(positions, rotary_dim, base)
    return rotate(x, np.cos(theta), np.sin(theta), neox)


CASES = [  # tokens, heads, head_dim, rotary_dim, base, largest position
    (1, 1, 2, 2, 10000.0, 0),
    (5, 9, 64, 64, 100000.0, 4095),        # SmolLM2
    (3, 3, 33, 32, 10000.0, 31),           # odd head_dim, partial rotary tail of 1
    (33, 2, 128, 64, 1e6, 131072),         # partial rotary, long context
]


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tokens, heads, head_dim, rotary_dim, base, last", CASES)
def test_rope_matches_float64(neox, dtype, tokens, heads, head_dim, rotary_dim, base, last, device):
    x = rand((tokens, heads, head_dim), seed=tokens, dtype=dtype)
    positions = np.linspace(0, last, tokens).astype(np.int32)
    op = ops.rope_neox if neox else ops.rope_interleaved
    out = poisoned(x.shape, dtype, device)
    result = op(metalrt.asarray(x, device=device, dtype=dtype), positions, rotary_dim, base, out=out)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    expected = reference(x, positions, rotary_dim, base, neox)
    assert_matches(result, expected, dtype)
    if rotary_dim < head_dim:   # the pass-through tail is copied exactly
        np.testing.assert_array_equal(result.numpy()[..., rotary_dim:], x[..., rotary_dim:])


def test_rope_in_place_and_on_rows_of_a_view(device):
    x = rand((4, 2, 8), seed=7)
    t = metalrt.asarray(x, device=device)
    ops.rope_neox(t[1:3], np.array([5, 6], np.int32), 8, 10000.0, out=t[1:3])
    got = t.numpy()
    np.testing.assert_array_equal(got[[0, 3]], x[[0, 3]].astype(np.float32))
    assert_matches(got[1:3], reference(x[1:3], [5, 6], 8, 10000.0, True), "float32")
    assert not np.array_equal(got[1:3], x[1:3].astype(np.float32))


@pytest.mark.parametrize("rotary_dim, base", [(64, 100000.0), (2, 10000.0), (128, 1e6)])
def test_cos_sin_cache(rotary_dim, base, device):
    positions = np.array([0, 1, 31, 32, 33, 4096, 131071, 131072], np.int32)
    out = poisoned((len(positions), rotary_dim), "float32", device)
    cache = ops.rope_cos_sin_cache(metalrt.asarray(positions, device=device), rotary_dim, base,
                                   out=out)
    assert cache.dtype == "float32" and cache.shape == (8, rotary_dim)
    theta = angles(positions, rotary_dim, base)
    expected = np.concatenate([np.cos(theta), np.sin(theta)], axis=1)
    # Accurate cos/sin: a few float32 ulps even at position 131072.
    np.testing.assert_allclose(cache.numpy(), expected, rtol=0, atol=4e-7)


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rope_from_cache_applies_the_selected_rows(neox, dtype, device):
    rotary_dim, head_dim = 32, 33
    table_positions = np.arange(40)
    theta = angles(table_positions, rotary_dim, 10000.0)
    table = np.concatenate([np.cos(theta), np.sin(theta)], axis=1).astype(np.float32)
    rows = np.array([39, 0, 7, 7, 31], np.int32)
    x = rand((5, 3, head_dim), seed=11, dtype=dtype)
    out = poisoned(x.shape, dtype, device)
    result = ops.rope_from_cache(metalrt.asarray(x, device=device, dtype=dtype), table, rows,
                                 neox=neox, out=out)
    cos, sin = table[rows, :16].astype(np.float64), table[rows, 16:].astype(np.float64)
    assert_matches(result, rotate(x, cos, sin, neox), dtype)
    np.testing.assert_array_equal(result.numpy()[..., 32:], x[..., 32:])
    # The same rows through rope_cos_sin_cache give the same cache, hence the same output.
    cached = ops.rope_cos_sin_cache(rows, rotary_dim, 10000.0)
    direct = ops.rope_from_cache(metalrt.asarray(x, device=device, dtype=dtype), cached.to(device),
                                 np.arange(5, dtype=np.int32), neox=neox)
    np.testing.assert_array_equal(direct.numpy(), result.numpy())


def test_python_int_positions_become_int32(device):
    x = metalrt.asarray(rand((3, 2, 8), seed=9), device=device)
    positions = [0, 7, 2**31 - 1]
    for op in (ops.rope_neox, ops.rope_interleaved):
        from_list = op(x, positions, 8, 10000.0).numpy()
        np.testing.assert_array_equal(from_list, op(x, np.array(positions, np.int32), 8, 10000.0).numpy())
    np.testing.assert_array_equal(ops.rope_cos_sin_cache(positions, 8, 10000.0).numpy(),
                                  ops.rope_cos_sin_cache(np.array(positions, np.int32), 8, 1e4).numpy())
    with pytest.raises(ValueError, match=r"^\[rope_neox\] positions: 2147483648 does not fit in int32"):
        ops.rope_neox(x, [0, 1, 2**31], 8, 10000.0)


def test_bad_inputs(device):
    x = metalrt.zeros((2, 3, 8), device=device)
    pos = np.array([0, 1], np.int32)
    with pytest.raises(ValueError, match=r"^\[rope_neox\] rotary_dim must be positive and even"):
        ops.rope_neox(x, pos, 7, 10000.0)
    with pytest.raises(ValueError, match=r"^\[rope_interleaved\] rotary_dim 10 exceeds head_dim 8"):
        ops.rope_interleaved(x, pos, 10, 10000.0)
    with pytest.raises(ValueError, match=r"^\[rope_neox\] base must be positive"):
        ops.rope_neox(x, pos, 8, -1.0)
    with pytest.raises(ValueError, match=r"^\[rope_neox\] x must have rank 3"):
        ops.rope_neox(x.reshape(2, 24), pos, 8, 10000.0)
    with pytest.raises(ValueError, match=r"^\[rope_neox\] positions must have shape \[2\]"):
        ops.rope_neox(x, np.array([0, 1, 2], np.int32), 8, 10000.0)
    with pytest.raises(TypeError, match=r"^\[rope_neox\] positions must be int32, got int64"):
        ops.rope_neox(x, np.array([0, 1]), 8, 10000.0)
    with pytest.raises(TypeError, match=r"^\[rope_neox\] x must be float32, float16 or bfloat16"):
        ops.rope_neox(metalrt.zeros((2, 3, 8), dtype="int32", device=device), pos, 8, 1e4)
    with pytest.raises(TypeError, match=r"^\[rope_neox\] rotary_dim must be an int"):
        ops.rope_neox(x, pos, 8.0, 10000.0)
    with pytest.raises(TypeError, match=r"^\[rope_neox\] base must be a real number"):
        ops.rope_neox(x, pos, 8, None)
    with pytest.raises(TypeError, match=r"^\[rope_neox\] x must be a metalrt.Tensor"):
        ops.rope_neox("x", pos, 8, 10000.0)
    with pytest.raises(ValueError, match=r"^\[rope_from_cache\] position 5 of token 1 is outside"):
        ops.rope_from_cache(x, np.zeros((5, 8), np.float32), np.array([0, 5], np.int32))
    with pytest.raises(TypeError, match=r"^\[rope_from_cache\] cos_sin_cache must be float32"):
        ops.rope_from_cache(x, np.zeros((5, 8), np.float16), pos)
    with pytest.raises(TypeError, match=r"^\[rope_from_cache\] neox must be a bool"):
        ops.rope_from_cache(x, np.zeros((5, 8), np.float32), pos, neox="yes")
    with pytest.raises(TypeError, match=r"^\[rope_cos_sin_cache\] positions must be a metalrt"):
        ops.rope_cos_sin_cache(None, 8, 10000.0)
    with pytest.raises(TypeError, match=r"^\[rope_cos_sin_cache\] out must be float32"):
        ops.rope_cos_sin_cache(pos, 8, 1e4, out=metalrt.zeros((2, 8), dtype="float16", device=device))


metal_only = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")


@metal_only
@pytest.mark.parametrize("neox", [True, False])
def test_metal_kernels_serve_the_family_natively(neox):
    """On Metal the native kernels run (profiler rows, provider stats) and stay within
    float64's bars at position 131072 with Qwen3's base."""
    from test_metal_kernels import assert_native, profiled
    variant, op = ("neox", "rope_neox") if neox else ("interleaved", "rope_interleaved")
    positions = np.array([0, 1, 4095, 32768, 131071, 131072], np.int32)
    x = rand((6, 8, 128), seed=21)
    out = poisoned(x.shape, "float32", "metal")
    metalrt.providers.reset_stats()
    rows = profiled(lambda: getattr(ops, op)(metalrt.asarray(x, device="metal"),
                                             metalrt.asarray(positions, device="metal"), 128, 1e6,
                                             out=out))
    assert rows.get(f"rope_{variant}_f32") == 1
    assert_native(op, f"metal_{op}", 1)
    assert_matches(out, reference(x, positions, 128, 1e6, neox), "float32")

    cache = poisoned((6, 128), "float32", "metal")
    rows = profiled(lambda: ops.rope_cos_sin_cache(metalrt.asarray(positions, device="metal"),
                                                   128, 1e6, out=cache))
    assert rows.get("rope_cos_sin_cache_f32") == 1
    assert_native("rope_cos_sin_cache", "metal_rope_cos_sin_cache", 1)
    theta = angles(positions, 128, 1e6)
    np.testing.assert_allclose(cache.numpy(), np.concatenate([np.cos(theta), np.sin(theta)], 1),
                               rtol=0, atol=4e-7)

    applied = poisoned(x.shape, "float32", "metal")
    rows = profiled(lambda: ops.rope_from_cache(metalrt.asarray(x, device="metal"), cache,
                                                np.arange(6, dtype=np.int32), neox=neox,
                                                out=applied))
    assert rows.get(f"rope_from_cache_{variant}_f32") == 1
    assert_native("rope_from_cache", "metal_rope_from_cache", 1)
    # The oracle applied to the same cache gives the same bytes.
    expected = ops.rope_from_cache(x, cache.numpy(), np.arange(6, dtype=np.int32), neox=neox)
    np.testing.assert_array_equal(applied.numpy(), expected.numpy())
