"""ops.gated_rms_norm, gated_query_split and sigmoid_mul against transformers 5.24's own
modules and numpy (Qwen3NextRMSNormGated; Qwen3NextAttention's per-head query|gate
layout and sigmoid output gate), on each device, with NaN-poisoned outputs."""
import numpy as np
import pytest
import torch
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated

import metalrt
from conftest import (FLOAT_DTYPES, SUFFIX, assert_matches, assert_native, assert_same_bytes, poisoned, profiled,
                      rand, requires_metal)
from metalrt import ops

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_of(values, dtype):
    return torch.tensor(np.asarray(values, np.float32)).to(TORCH_DTYPE[dtype])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("rows,dim", [(1, 128), (3 * 32, 128), (5, 33), (2, 256)])
def test_gated_rms_norm_matches_transformers(dtype, rows, dim, device):
    x, z = rand((rows, dim), seed=dim, scale=2.0, dtype=dtype), rand((rows, dim), seed=dim + 1, scale=2.0, dtype=dtype)
    weight = rand((dim,), seed=dim + 2, dtype=dtype)
    norm = Qwen3NextRMSNormGated(dim, eps=1e-6).to(TORCH_DTYPE[dtype])
    with torch.no_grad():
        norm.weight.copy_(torch_of(weight, dtype))
        want = norm(torch_of(x, dtype), torch_of(z, dtype)).float().numpy()
    out = poisoned((rows, dim), dtype, device)
    got = ops.gated_rms_norm(metalrt.asarray(x, device=device, dtype=dtype),
                             metalrt.asarray(z, device=device, dtype=dtype),
                             metalrt.asarray(weight, device=device, dtype=dtype), 1e-6, out=out)
    assert got.data_ptr() == out.data_ptr()
    # Both round n and w * n to the dtype; the sum of squares is ordered differently, so
    # a rounded intermediate may land one ulp away (two more roundings than the bar's one).
    assert_matches(got, want, dtype, worst_bar={"float32": 1e-5, "float16": 4e-3, "bfloat16": 3.2e-2}[dtype])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tokens,heads,dim", [(1, 16, 256), (3, 2, 33), (17, 4, 64)])
def test_gated_query_split_is_the_per_head_chunk(dtype, tokens, heads, dim, device):
    q_gate = rand((tokens, heads * 2 * dim), seed=heads, scale=30.0, dtype=dtype)
    q, gate = ops.gated_query_split(metalrt.asarray(q_gate, device=device, dtype=dtype), heads, dim)
    # transformers: q_proj(x).view(..., heads, 2 * head_dim) then chunk(2, dim=-1).
    per_head = q_gate.reshape(tokens, heads, 2 * dim)
    assert q.shape == (tokens, heads, dim) and gate.shape == (tokens, heads * dim)
    np.testing.assert_array_equal(q.numpy(), per_head[..., :dim])
    np.testing.assert_array_equal(gate.numpy(), per_head[..., dim:].reshape(tokens, heads * dim))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(1, 4096), (3, 33), (17, 2, 64)])
def test_sigmoid_mul_matches_float64(dtype, shape, device):
    x, gate = rand(shape, seed=3, scale=3.0, dtype=dtype), rand(shape, seed=4, scale=6.0, dtype=dtype)
    out = poisoned(shape, dtype, device)
    got = ops.sigmoid_mul(metalrt.asarray(x, device=device, dtype=dtype),
                          metalrt.asarray(gate, device=device, dtype=dtype), out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_matches(got, x / (1.0 + np.exp(-gate)), dtype)


def test_sigmoid_mul_in_place(device):
    x, gate = rand((5, 40), seed=5), rand((5, 40), seed=6)
    t = metalrt.asarray(x, device=device)
    ops.sigmoid_mul(t, metalrt.asarray(gate, device=device), out=t)
    assert_matches(t, x / (1.0 + np.exp(-gate)), "float32")


@requires_metal
def test_cpu_and_metal_split_agree_bit_for_bit():
    q_gate = rand((9, 3 * 2 * 40), seed=8, dtype="bfloat16")
    cpu = ops.gated_query_split(metalrt.asarray(q_gate, dtype="bfloat16"), 3, 40)
    metal = ops.gated_query_split(metalrt.asarray(q_gate, device="metal", dtype="bfloat16"), 3, 40)
    for a, b in zip(metal, cpu):
        assert_same_bytes(a, b)


def test_bad_inputs(device):
    x = metalrt.zeros((2, 8), device=device)
    with pytest.raises(ValueError, match=r"^\[gated_rms_norm\] z must have shape \[2, 8\], got \[2, 4\]"):
        ops.gated_rms_norm(x, metalrt.zeros((2, 4), device=device), metalrt.zeros((8,), device=device))
    with pytest.raises(ValueError, match=r"^\[gated_rms_norm\] weight must have shape \[8\]"):
        ops.gated_rms_norm(x, x, metalrt.zeros((4,), device=device))
    with pytest.raises(TypeError, match=r"^\[gated_rms_norm\] z must have the dtype of x"):
        ops.gated_rms_norm(x, metalrt.zeros((2, 8), device=device, dtype="float16"),
                           metalrt.zeros((8,), device=device))
    with pytest.raises(ValueError, match=r"^\[gated_query_split\] q_gate must have num_heads \* 2 \* head_dim = 12"):
        ops.gated_query_split(x, 2, 3)
    with pytest.raises(ValueError, match=r"^\[gated_query_split\] num_heads and head_dim must be >= 1"):
        ops.gated_query_split(x, 0, 4)
    with pytest.raises(TypeError, match=r"^\[gated_query_split\] num_heads must be an int"):
        ops.gated_query_split(x, 2.0, 2)
    with pytest.raises(ValueError, match=r"^\[sigmoid_mul\] gate must have shape \[2, 8\]"):
        ops.sigmoid_mul(x, metalrt.zeros((8,), device=device))
    rows = metalrt.zeros((4, 8), device=device)
    with pytest.raises(ValueError, match=r"^\[sigmoid_mul\] out overlaps x"):
        ops.sigmoid_mul(rows[0:2], x, out=rows[1:3])


@requires_metal
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_metal_kernels_serve_the_gates(dtype):
    """The profiler names each gate kernel once; the provider stats the native providers."""
    t = lambda shape, seed: metalrt.asarray(rand(shape, seed=seed, dtype=dtype), device="metal", dtype=dtype)
    x, z, w, q_gate = t((32, 128), 1), t((32, 128), 2), t((128,), 3), t((2, 2 * 4 * 64), 4)
    metalrt.providers.reset_stats()
    rows = profiled(lambda: (ops.gated_rms_norm(x, z, w, 1e-6), ops.sigmoid_mul(x, z),
                             ops.gated_query_split(q_gate, 4, 64)))
    suffix = SUFFIX[dtype]
    assert {k: v for k, v in rows.items() if k != "total"} == {
        f"gated_rms_norm_row_{suffix}": 1, f"sigmoid_mul_{suffix}": 1, f"gated_query_split_{suffix}": 1}
    for op in ("gated_rms_norm", "sigmoid_mul", "gated_query_split"):
        assert_native(op, f"metal_{op}", 1)
