"""ops.qk_norm_rope: the composite of rms_norm and rope_neox, and float64."""
import numpy as np
import pytest

import metalrt
from conftest import FLOAT_DTYPES, WORST_BAR, assert_matches, rand
from metalrt import ops
from test_rms_norm import reference as rms_norm_reference
from test_rope import reference as rope_reference


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tokens, heads, kv_heads, head_dim, rotary_dim", [
    (1, 1, 1, 2, 2), (5, 9, 3, 64, 64), (33, 16, 8, 128, 128), (3, 4, 2, 33, 16)])
def test_composite_and_float64(dtype, tokens, heads, kv_heads, head_dim, rotary_dim, device):
    q = rand((tokens, heads, head_dim), seed=1, scale=3.0, dtype=dtype)
    k = rand((tokens, kv_heads, head_dim), seed=2, scale=3.0, dtype=dtype)
    q_weight, k_weight = rand((head_dim,), seed=3, dtype=dtype), rand((head_dim,), seed=4, dtype=dtype)
    positions = np.linspace(0, 131072, tokens).astype(np.int32)
    as_dev = lambda a: metalrt.asarray(a, device=device, dtype=dtype)  # noqa: E731
    q_out, k_out = ops.qk_norm_rope(as_dev(q), as_dev(k), as_dev(q_weight), as_dev(k_weight),
                                    positions, 1e-6, rotary_dim, 1e6)
    for x, w, out in ((q, q_weight, q_out), (k, k_weight, k_out)):
        assert out.shape == x.shape and out.dtype == dtype and out.device == device
        composite = ops.rope_neox(ops.rms_norm(as_dev(x), as_dev(w), 1e-6), positions,
                                  rotary_dim, 1e6)
        np.testing.assert_array_equal(out.numpy(), composite.numpy())
        expected = rope_reference(rms_norm_reference(x, w, 1e-6), positions, rotary_dim,
                                  1e6, True)
        # Two dtype roundings (the stored intermediate and the output).
        assert_matches(out, expected, dtype, worst_bar=2 * WORST_BAR[dtype])


def test_bad_inputs(device):
    q = metalrt.zeros((2, 4, 8), device=device)
    k = metalrt.zeros((2, 2, 8), device=device)
    w = metalrt.zeros(8, device=device)
    pos = np.array([0, 1], np.int32)
    with pytest.raises(ValueError, match=r"^\[qk_norm_rope\] k_weight must have shape \[8\]"):
        ops.qk_norm_rope(q, k, w, metalrt.zeros(7, device=device), pos, 1e-6, 8, 1e4)
    with pytest.raises(ValueError, match=r"^\[qk_norm_rope\] k must have rank 3"):
        ops.qk_norm_rope(q, k.reshape(2, 16), w, w, pos, 1e-6, 8, 1e4)
    with pytest.raises(TypeError, match=r"^\[qk_norm_rope\] positions must be int32"):
        ops.qk_norm_rope(q, k, w, w, np.array([0, 1]), 1e-6, 8, 1e4)
    with pytest.raises(TypeError, match=r"^\[qk_norm_rope\] eps must be a real number"):
        ops.qk_norm_rope(q, k, w, w, pos, None, 8, 1e4)
    with pytest.raises(TypeError, match=r"^\[qk_norm_rope\] q_weight must be a metalrt.Tensor"):
        ops.qk_norm_rope(q, k, "w", w, pos, 1e-6, 8, 1e4)


@pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")
@pytest.mark.parametrize("dtype, suffix", [("float32", "f32"), ("float16", "f16"),
                                           ("bfloat16", "bf16")])
def test_metal_runs_one_fused_kernel(dtype, suffix):
    """Qwen3 geometry (16 q heads, 8 kv heads, head_dim 128): one dispatch of the fused
    kernel serves q and k, natively, within the composite's float64 bars."""
    from test_metal_kernels import assert_native, profiled
    q = rand((37, 16, 128), seed=5, scale=3.0, dtype=dtype)
    k = rand((37, 8, 128), seed=6, scale=3.0, dtype=dtype)
    q_weight, k_weight = rand((128,), seed=7, dtype=dtype), rand((128,), seed=8, dtype=dtype)
    positions = np.linspace(0, 131072, 37).astype(np.int32)
    as_metal = lambda a: metalrt.asarray(a, device="metal", dtype=dtype)  # noqa: E731
    result = []
    metalrt.providers.reset_stats()
    rows = profiled(lambda: result.extend(ops.qk_norm_rope(
        as_metal(q), as_metal(k), as_metal(q_weight), as_metal(k_weight), positions, 1e-6, 128,
        1e6)))
    assert rows == {f"qk_norm_rope_fused_{suffix}": 1, "total": 1}
    assert_native("qk_norm_rope", "metal_qk_norm_rope", 1)
    for x, w, out in ((q, q_weight, result[0]), (k, k_weight, result[1])):
        expected = rope_reference(rms_norm_reference(x, w, 1e-6), positions, 128, 1e6, True)
        assert_matches(out, expected, dtype, worst_bar=2 * WORST_BAR[dtype])
