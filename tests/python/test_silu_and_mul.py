"""ops.silu_and_mul (SwiGLU, and gpt-oss's clamped swiglu_oai variant, on interleaved
pairs and on halves) against numpy float64 references; swiglu_oai's also against transformers' own GptOssExperts._apply_gate."""
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


def reference_oai(x, alpha=1.702, limit=7.0):
    """transformers 5.25 GptOssExperts._apply_gate, in float64."""
    gate, up = np.minimum(x[..., ::2], limit), np.clip(x[..., 1::2], -limit, limit)
    return (up + 1) * gate / (1.0 + np.exp(-alpha * gate))


def interleave(x):
    """The interleaved pairs of a gate | up halves input."""
    n = x.shape[-1] // 2
    return np.stack([x[..., :n], x[..., n:]], axis=-1).reshape(x.shape)


# Pair counts around the AVX-512 row's 16 lanes and the released intermediate (2880).
OAI_SHAPES = [(1, 2), (3, 30), (2, 32), (4, 34), (2, 5, 66), (3, 5760)]


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", OAI_SHAPES)
def test_swiglu_oai_matches_float64(dtype, shape, device, interleaved):
    # scale 6: a good share of the values lie past the limit (7), so both clamps run.
    x = rand(shape, seed=shape[-1] + 1, scale=6.0, dtype=dtype)
    out_shape = shape[:-1] + (shape[-1] // 2,)
    out = poisoned(out_shape, dtype, device)
    metalrt.providers.reset_stats()
    result = ops.silu_and_mul(metalrt.asarray(x, device=device, dtype=dtype), out=out,
                              activation="swiglu_oai", interleaved=interleaved)
    assert result.data_ptr() == out.data_ptr()
    assert_matches(result, reference_oai(x if interleaved else interleave(x)), dtype)
    fast = device == "cpu" and dtype == "float32" and metalrt._metalrt._cpu_facts()["gemv_isa"] == "avx512_vnni"
    provider = {"metal": "metal_silu_and_mul", "cpu": "cpu_fast_silu_and_mul" if fast
                else "cpu_silu_and_mul"}[device]
    assert metalrt.providers.stats("silu_and_mul", device)["last_selected"] == provider
    assert metalrt.providers.stats("silu_and_mul", device)["reference_hits"] == 0


def test_swiglu_oai_is_transformers_gate(device):
    """Bit for bit transformers' formula on f32 inputs up to the exp (NMSE 1e-10), with
    other alpha and limit too."""
    import torch
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    for alpha, limit in ((1.702, 7.0), (1.0, 2.5)):
        experts = GptOssExperts(GptOssConfig(hidden_size=8, intermediate_size=8, num_local_experts=1,
                                             swiglu_alpha=alpha, swiglu_limit=limit))
        x = rand((9, 48), seed=4, scale=5.0)
        want = experts._apply_gate(torch.tensor(x, dtype=torch.float32)).double().numpy()
        got = ops.silu_and_mul(metalrt.asarray(x, device=device), activation="swiglu_oai",
                               alpha=alpha, limit=limit)
        assert_matches(got, want, "float32")


@pytest.mark.parametrize("interleaved", [True, False])
def test_swiglu_oai_keeps_nan(device, interleaved):
    """A NaN gate or up gives NaN (the clamps do not turn it into the limit)."""
    x = np.zeros((2, 40), np.float32)
    if interleaved:
        x[0, 6], x[1, 33] = np.nan, np.nan   # gate of pair 3, up of pair 16
    else:
        x[0, 3], x[1, 36] = np.nan, np.nan
    got = ops.silu_and_mul(metalrt.asarray(x, device=device), activation="swiglu_oai",
                           interleaved=interleaved).numpy()
    assert np.isnan(got[0, 3]) and np.isnan(got[1, 16])
    assert np.isnan(got).sum() == 2


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
    with pytest.raises(ValueError, match=r"^\[silu_and_mul\] activation must be one of "):
        ops.silu_and_mul(metalrt.zeros((2, 8), device=device), activation="gelu")
    with pytest.raises(ValueError, match=r"^\[silu_and_mul\] swiglu_oai limit must be finite and > 0"):
        ops.silu_and_mul(metalrt.zeros((2, 8), device=device), activation="swiglu_oai", limit=0.0)
    with pytest.raises(ValueError, match=r"^\[silu_and_mul\] x must have an even last dim"):
        ops.silu_and_mul(metalrt.zeros((2, 7), device=device), activation="swiglu_oai")
    with pytest.raises(TypeError, match=r"^\[silu_and_mul\] interleaved must be a bool, got int"):
        ops.silu_and_mul(metalrt.zeros((2, 8), device=device), activation="swiglu_oai", interleaved=0)
