"""The MoE ops against torch / numpy computations of transformers 5.24's routing
(Qwen3MoeSparseMoeBlock, Qwen3NextSparseMoeBlock: softmax in float32, topk, optional
renormalisation) and against the blocks themselves, on each device: moe_router,
moe_matmul_bt (float and quantized expert weights; only the selected experts are read,
proven by NaN-poisoning the others), moe_combine; NaN router rows, ties; bad input."""
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from transformers import Qwen3MoeConfig, Qwen3NextConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextSparseMoeBlock

import metalrt
from conftest import (FLOAT_DTYPES, assert_matches, assert_native, poisoned, profiled, rand, requires_metal,
                      summation_bar)
from metalrt import ops
from test_quantized import GGUF, random_affine, random_blocks

TORCH_DTYPE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_router(logits, top_k, renormalize):
    """transformers' Qwen3MoeTopKRouter / Qwen3NextTopKRouter after the gate linear. torch
    orders equal probabilities arbitrarily; metalrt puts the lower index first, so the
    reference ids are torch's probabilities ranked (value desc, index asc) — the values
    are torch.topk's either way."""
    probs = torch.softmax(torch.tensor(logits, dtype=torch.float32), dim=-1, dtype=torch.float)
    values, _ = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        values /= values.sum(dim=-1, keepdim=True)
    p = probs.numpy()
    order = np.stack([np.lexsort((np.arange(p.shape[1]), -row))[:top_k] for row in p])
    return values.numpy(), order


# (tokens, experts, top_k): a small MoE, Qwen3-MoE's 128 top-8, Qwen3-Next's 512 top-10.
ROUTERS = [(1, 8, 2), (3, 8, 2), (17, 8, 2), (3, 128, 8), (17, 128, 8), (1, 512, 10), (3, 512, 10)]


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_router_matches_transformers(dtype, tokens, experts, top_k, renormalize, device):
    logits = rand((tokens, experts), seed=experts + tokens, scale=2.0, dtype=dtype)
    weights, ids = ops.moe_router(metalrt.asarray(logits, device=device, dtype=dtype), top_k,
                                  renormalize=renormalize)
    want_weights, want_ids = torch_router(logits, top_k, renormalize)
    assert weights.dtype == "float32" and ids.dtype == "int32"
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    assert_matches(weights, want_weights, "float32", worst_bar=summation_bar(experts))
    if renormalize:
        np.testing.assert_allclose(weights.numpy().sum(axis=1), 1.0, rtol=1e-6)


def test_router_nan_rows_give_valid_distinct_ids(device):
    e, k = 16, 4
    logits = rand((5, e), seed=1, scale=2.0)
    logits[0] = np.nan                    # a garbage / padded row (vllm#39391)
    logits[1, ::2] = np.nan               # half NaN: only the finite half is routed to
    logits[2] = -np.inf
    logits[3, [3, 9]] = np.inf            # +inf logits share the mass
    weights, ids = ops.moe_router(metalrt.asarray(logits, device=device), k, renormalize=False)
    w, i = weights.numpy(), ids.numpy()
    for row in i:
        assert len(set(row)) == k and row.min() >= 0 and row.max() < e
    np.testing.assert_array_equal(i[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(w[0], 0.0)
    np.testing.assert_array_equal(i[2], [0, 1, 2, 3])
    np.testing.assert_array_equal(w[2], 0.0)
    finite = logits[1, 1::2]
    order = 1 + 2 * np.argsort(-finite, kind="stable")[:k]
    np.testing.assert_array_equal(i[1], order)
    p = np.exp(finite - finite.max()) / np.exp(finite - finite.max()).sum()
    np.testing.assert_allclose(w[1], p[(order - 1) // 2], rtol=2e-6)
    assert list(i[3, :2]) == [3, 9] and np.allclose(w[3], [0.5, 0.5, 0, 0])
    assert np.all(np.isfinite(w))


def test_router_ties_go_to_the_lower_index(device):
    logits = np.array([[1.0, 3.0, 3.0, 0.5, 3.0, 1.0], [2.0] * 6], np.float32)
    weights, ids = ops.moe_router(metalrt.asarray(logits, device=device), 4, renormalize=True)
    np.testing.assert_array_equal(ids.numpy(), [[1, 2, 4, 0], [0, 1, 2, 3]])
    np.testing.assert_allclose(weights.numpy()[1], 0.25, rtol=1e-6)


def expert_reference(x, w, ids, num_experts):
    """float64 y[t, j] = x_tj @ W_e^T with W_e = rows e*N .. e*N+N-1 of w [E*N, K]."""
    n = w.shape[0] // num_experts
    tokens, slots = ids.shape
    y = np.zeros((tokens, slots, n))
    for t in range(tokens):
        for j in range(slots):
            row = x[t, j] if x.ndim == 3 else x[t]
            y[t, j] = w[ids[t, j] * n:(ids[t, j] + 1) * n].astype(np.float64) @ row
    return y


def random_ids(tokens, slots, experts, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(experts)[:slots] for _ in range(tokens)]).astype(np.int32)


# (tokens, top_k, experts, K = hidden, N = intermediate): decode and batches of the small
# MoE of the issue (8 experts top-2, H = 64..256, I = 32..128), one row per slot or shared.
SHAPES = [(1, 2, 8, 64, 32), (3, 2, 8, 128, 64), (17, 2, 8, 256, 128), (5, 8, 16, 64, 40)]


@pytest.mark.parametrize("per_slot", [False, True])
@pytest.mark.parametrize("tokens,top_k,experts,k,n", SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_float_weights(dtype, tokens, top_k, experts, k, n, per_slot, device):
    x = rand((tokens, top_k, k) if per_slot else (tokens, k), seed=k, dtype=dtype)
    w = rand((experts * n, k), seed=n, scale=0.1, dtype=dtype)
    ids = random_ids(tokens, top_k, experts, seed=tokens)
    out = poisoned((tokens, top_k, n), dtype, device)
    got = ops.moe_matmul_bt(metalrt.asarray(x, device=device, dtype=dtype),
                            metalrt.asarray(w, device=device, dtype=dtype),
                            metalrt.asarray(ids, device=device), num_experts=experts, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_matches(got, expert_reference(x, w, ids, experts), dtype, worst_bar=summation_bar(k))


def quantized_experts(fmt, rows, k, seed, scale_dtype=np.float16):
    """(QuantizedTensor builder args, float32 dequantized reference) of random weights."""
    if fmt == "affine":
        words, scales, biases, ref = random_affine(4, 64, rows, k, seed, scale_dtype)
        return (words, scales, biases), dict(bits=4, group_size=64), ref
    data = random_blocks(fmt, rows, k, seed)
    return (data,), {}, quants.dequantize(data, getattr(GGMLQuantizationType, fmt.upper()))


@pytest.mark.parametrize("fmt", sorted(GGUF) + ["affine"])
@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_matmul_quantized_weights_read_only_selected_experts(fmt, tokens, device):
    experts, top_k, n = 8, 2, 32
    k = 256
    parts, kw, w_ref = quantized_experts(fmt, experts * n, k, seed=tokens + len(fmt))
    x = rand((tokens, k), seed=tokens, dtype="float32")
    ids = random_ids(tokens, top_k, experts, seed=tokens)
    ids[:, 0] = ids[:, 0] % 4   # experts 4..7 may or may not be chosen; poison the unused ones
    ids[:, 1] = 4 + ids[:, 1] % 2
    unused = sorted(set(range(experts)) - set(ids.ravel()))
    assert unused
    parts = [p.copy() for p in parts]
    for e in unused:   # NaN scales: any read of these experts' rows makes the output NaN
        rows = slice(e * n, (e + 1) * n)
        if fmt == "affine":
            parts[1][rows] = np.nan
        else:
            _, size, halves = GGUF[fmt]
            blocks = parts[0][rows].reshape(n, -1, size)
            for offset in halves:
                blocks[:, :, offset:offset + 2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
            parts[0][rows] = blocks.reshape(n, -1)
    # Copies on the device (a zero-copy wrap of these short-lived arrays could alias the
    # memory of an earlier test's wrapped arrays).
    w = metalrt.quantized_tensor(fmt, (experts * n, k), *(metalrt.asarray(p, device=device) for p in parts), **kw)
    reference = expert_reference(x, w_ref, ids, experts)
    # On the CPU the oracle, then the fast provider (int8 activations: the quantized
    # GEMV's bar, NMSE 1e-7 and 2e-4 of the largest |y|, docs/cpu.md).
    for fast in (False, True) if device == "cpu" else (True,):
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", fast)
        try:
            metalrt.providers.reset_stats()
            out = poisoned((tokens, top_k, n), "float32", device)
            got = ops.moe_matmul_bt(metalrt.asarray(x, device=device), w, metalrt.asarray(ids, device=device),
                                    num_experts=experts, out=out)
        finally:
            metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True)
        assert np.all(np.isfinite(got.numpy()))
        if device == "cpu":
            served = metalrt.providers.stats("moe_matmul_bt", "cpu")["last_selected"]
            assert served == ("cpu_fast_moe_matmul_bt" if fast else "cpu_moe_matmul_bt")
        assert_matches(got, reference, "float32",
                       worst_bar=2e-4 if device == "cpu" and fast else summation_bar(k))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_float_weights_read_only_selected_experts(dtype, device):
    experts, n, k = 8, 16, 64
    w = rand((experts * n, k), seed=2, scale=0.1, dtype=dtype)
    ids = np.array([[1, 6], [6, 2], [1, 2]], np.int32)
    poisoned_w = w.copy()
    for e in set(range(experts)) - {1, 2, 6}:
        poisoned_w[e * n:(e + 1) * n] = np.nan
    x = rand((3, k), seed=3, dtype=dtype)
    got = ops.moe_matmul_bt(metalrt.asarray(x, device=device, dtype=dtype),
                            metalrt.asarray(poisoned_w, device=device, dtype=dtype),
                            metalrt.asarray(ids, device=device), num_experts=experts)
    assert_matches(got, expert_reference(x, w, ids, experts), dtype, worst_bar=summation_bar(k))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shared", [None, "plain", "gated"])
def test_combine(dtype, shared, device):
    tokens, slots, n = 17, 8, 72
    y = rand((tokens, slots, n), seed=5, dtype=dtype)
    weights, _ = torch_router(rand((tokens, 32), seed=6), slots, True)
    s = rand((tokens, n), seed=7, dtype=dtype) if shared else None
    g = rand((tokens, 1), seed=8, scale=3.0, dtype=dtype) if shared == "gated" else None
    want = np.einsum("tj,tjn->tn", weights.astype(np.float64), y)
    if shared:
        want = want + (1.0 / (1.0 + np.exp(-g)) if g is not None else 1.0) * s
    on = lambda a: None if a is None else metalrt.asarray(a, device=device, dtype=dtype)
    out = poisoned((tokens, n), dtype, device)
    got = ops.moe_combine(on(y), metalrt.asarray(weights, device=device), shared=on(s), shared_gate=on(g),
                          out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_matches(got, want, dtype, worst_bar=summation_bar(slots + 1))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("tokens,slots,experts,n", [(1, 4, 32, 5760), (17, 4, 6, 72), (3, 2, 3, 1)])
def test_bias_add(dtype, tokens, slots, experts, n, device):
    """gpt-oss's expert biases: the selected expert's row added to each pair, into a
    poisoned out and in place."""
    y = rand((tokens, slots, n), seed=11, dtype=dtype)
    bias = rand((experts, n), seed=12, dtype=dtype)
    ids = np.random.default_rng(13).integers(0, experts, (tokens, slots)).astype(np.int32)
    want = y + bias[ids]
    on = lambda a: metalrt.asarray(a, device=device, dtype=dtype)
    metalrt.providers.reset_stats()
    out = poisoned((tokens, slots, n), dtype, device)
    got = ops.moe_bias_add(on(y), on(bias), metalrt.asarray(ids, device=device), out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_matches(got, want, dtype)
    same = on(y)
    got = ops.moe_bias_add(same, on(bias), metalrt.asarray(ids, device=device), out=same)
    assert got.data_ptr() == same.data_ptr()
    assert_matches(got, want, dtype)
    stats = metalrt.providers.stats("moe_bias_add", device)
    fast = dtype == "float32"
    assert stats["last_selected"] == ("metal_moe_bias_add" if device == "metal" else
                                      "cpu_fast_moe_bias_add" if fast else "cpu_moe_bias_add")
    assert stats["reference_hits"] == 0


def test_bias_add_bad_ids(device):
    """An id outside [0, E): ValueError on the CPU (out untouched), a NaN row on Metal."""
    y, bias = np.ones((2, 2, 8), np.float32), np.ones((3, 8), np.float32)
    ids = metalrt.asarray(np.array([[0, 3], [1, 2]], np.int32), device=device)
    if device == "cpu":
        with pytest.raises(ValueError, match=r"^\[moe_bias_add\] expert id 3 at \[0, 1\] is "
                                             r"outside \[0, 3\)"):
            ops.moe_bias_add(y, bias, ids)
        return
    got = ops.moe_bias_add(metalrt.asarray(y, device=device), metalrt.asarray(bias, device=device),
                           ids).numpy()
    assert np.isnan(got[0, 1]).all() and np.isfinite(np.delete(got.reshape(4, 8), 1, 0)).all()


def test_bias_add_bad_shapes(device):
    z = lambda shape, dtype="float32": metalrt.zeros(shape, dtype=dtype, device=device)
    ids = metalrt.asarray(np.zeros((2, 2), np.int32), device=device)
    with pytest.raises(ValueError, match=r"^\[moe_bias_add\] bias must be \[E, 8\]"):
        ops.moe_bias_add(z((2, 2, 8)), z((3, 7)), ids)
    with pytest.raises(ValueError, match=r"^\[moe_bias_add\] expert_ids must have shape \[2, 3\]"):
        ops.moe_bias_add(z((2, 3, 8)), z((3, 8)), ids)
    with pytest.raises(TypeError, match=r"^\[moe_bias_add\] bias must have the dtype of y \(float32\), got float16"):
        ops.moe_bias_add(z((2, 2, 8)), z((3, 8), "float16"), ids)
    with pytest.raises(TypeError, match=r"^\[moe_bias_add\] expert_ids must be int32"):
        ops.moe_bias_add(z((2, 2, 8)), z((3, 8)), z((2, 2), "int64"))


def moe_forward(block, hidden, top_k, renormalize, device, shared=False, dtype="float32"):
    """The block's forward pass composed of metalrt ops in `dtype` (the routing weights
    stay float32 into moe_combine, which transformers casts to the hidden dtype first)."""
    experts = block.gate.weight.shape[0]
    t = lambda a: metalrt.asarray(a.detach().float().numpy(), device=device, dtype=dtype)
    x = t(hidden)
    logits = ops.matmul_bt(x, t(block.gate.weight))
    weights, ids = ops.moe_router(logits, top_k, renormalize=renormalize)
    gate_up = block.experts.gate_up_proj.detach()   # [E, 2I, H], gate rows first
    down = block.experts.down_proj.detach()         # [E, H, I]
    h = ops.moe_matmul_bt(x, t(gate_up.reshape(-1, gate_up.shape[-1])), ids, num_experts=experts)
    y = ops.moe_matmul_bt(ops.silu_and_mul(h), t(down.reshape(-1, down.shape[-1])), ids, num_experts=experts)
    if not shared:
        return ops.moe_combine(y, weights).numpy()
    mlp = block.shared_expert
    up = ops.silu_and_mul(ops.matmul_bt(x, t(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))))
    s = ops.matmul_bt(up, t(mlp.down_proj.weight))
    g = ops.matmul_bt(x, t(block.shared_expert_gate.weight))
    return ops.moe_combine(y, weights, shared=s, shared_gate=g).numpy()


def randomize(block, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.2)


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_qwen3_moe_block_matches_transformers(tokens, renormalize, device):
    config = Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                            norm_topk_prob=renormalize)
    block = Qwen3MoeSparseMoeBlock(config).eval()
    randomize(block, tokens)
    hidden = torch.randn(tokens, 64, generator=torch.Generator().manual_seed(tokens))
    with torch.no_grad():
        want = block(hidden[None]).reshape(tokens, 64).numpy()
    assert_matches(moe_forward(block, hidden, 2, renormalize, device), want, "float32", worst_bar=1e-5)


@pytest.mark.parametrize("tokens", [3, 17])
def test_qwen3_moe_block_in_bfloat16_matches_transformers(tokens, device):
    config = Qwen3MoeConfig(hidden_size=128, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                            norm_topk_prob=True)
    block = Qwen3MoeSparseMoeBlock(config).eval()
    randomize(block, tokens + 2)
    block = block.to(torch.bfloat16)
    hidden = torch.randn(tokens, 128, generator=torch.Generator().manual_seed(tokens)).to(torch.bfloat16)
    with torch.no_grad():
        want = block(hidden[None]).reshape(tokens, 128).float().numpy()
    got = moe_forward(block, hidden, 2, True, device, dtype="bfloat16")
    # Both round every projection to bfloat16; transformers also rounds the routing
    # weights and each expert's weighted output before summing (metalrt sums in f32):
    # measured worst 0.008 of the largest output, NMSE 2.5e-5.
    assert_matches(got, want, "bfloat16")


@pytest.mark.parametrize("tokens", [1, 17])
def test_qwen3_next_block_with_shared_expert_matches_transformers(tokens, device):
    config = Qwen3NextConfig(hidden_size=128, moe_intermediate_size=48, shared_expert_intermediate_size=80,
                             num_experts=16, num_experts_per_tok=4, norm_topk_prob=True)
    block = Qwen3NextSparseMoeBlock(config).eval()
    randomize(block, tokens + 1)
    hidden = torch.randn(tokens, 128, generator=torch.Generator().manual_seed(tokens))
    with torch.no_grad():
        want = block(hidden[None]).reshape(tokens, 128).numpy()
    got = moe_forward(block, hidden, 4, True, device, shared=True)
    assert_matches(got, want, "float32", worst_bar=1e-5)


def test_bad_inputs(device):
    z = lambda shape, dtype="float32": metalrt.zeros(shape, device=device, dtype=dtype)
    ids = metalrt.asarray(np.zeros((2, 2), np.int32), device=device)
    with pytest.raises(ValueError, match=r"^\[moe_router\] top_k must be in \[1, E=8\], got 9"):
        ops.moe_router(z((2, 8)), 9, renormalize=True)
    with pytest.raises(ValueError, match=r"^\[moe_router\] top_k must be in \[1, E=8\], got 0"):
        ops.moe_router(z((2, 8)), 0, renormalize=True)
    with pytest.raises(TypeError, match=r"^\[moe_router\] renormalize must be a bool"):
        ops.moe_router(z((2, 8)), 2, renormalize=1)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] num_experts 3 must divide the 16 rows of w"):
        ops.moe_matmul_bt(z((2, 4)), z((16, 4)), ids, num_experts=3)
    with pytest.raises(TypeError, match=r"^\[moe_matmul_bt\] expert_ids must be int32, got int64"):
        ops.moe_matmul_bt(z((2, 4)), z((16, 4)), z((2, 2), "int64"), num_experts=4)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] expert_ids must have rank 2"):
        ops.moe_matmul_bt(z((2, 4)), z((16, 4)), metalrt.asarray(np.zeros(4, np.int32), device=device),
                          num_experts=4)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] x must be \[T, K\] or \[T, k, K\] with T, k"):
        ops.moe_matmul_bt(z((3, 4)), z((16, 4)), ids, num_experts=4)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] x must have K=4 columns"):
        ops.moe_matmul_bt(z((2, 5)), z((16, 4)), ids, num_experts=4)
    with pytest.raises(TypeError, match=r"^\[moe_matmul_bt\] w must have the dtype of x"):
        ops.moe_matmul_bt(z((2, 4)), z((16, 4), "float16"), ids, num_experts=4)
    w = metalrt.quantized_tensor("q8_0", (16, 32), random_blocks("q8_0", 16, 32, 1), device=device)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] num_experts 5 must divide the 16 rows of w q8_0"):
        ops.moe_matmul_bt(z((2, 32)), w, ids, num_experts=5)
    with pytest.raises(ValueError, match=r"^\[moe_combine\] weights must have shape \[2, 3\]"):
        ops.moe_combine(z((2, 3, 4)), z((2, 2)))
    with pytest.raises(TypeError, match=r"^\[moe_combine\] weights must be float32"):
        ops.moe_combine(z((2, 3, 4)), z((2, 3), "float16"))
    with pytest.raises(ValueError, match=r"^\[moe_combine\] shared_gate given without shared"):
        ops.moe_combine(z((2, 3, 4)), z((2, 3)), shared_gate=z((2, 1)))
    with pytest.raises(ValueError, match=r"^\[moe_combine\] shared_gate must have shape \[2, 1\]"):
        ops.moe_combine(z((2, 3, 4)), z((2, 3)), shared=z((2, 4)), shared_gate=z((2, 4)))


def test_out_of_range_expert_id_raises_on_the_cpu():
    ids = np.array([[0, 4]], np.int32)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] expert id 4 at \[0, 1\] is outside \[0, 4\)"):
        ops.moe_matmul_bt(np.zeros((1, 8), np.float32), np.zeros((16, 8), np.float32), ids, num_experts=4)


@requires_metal
@pytest.mark.parametrize("tokens,variant", [(1, "gemv"), (17, "gemm")])
def test_metal_kernels_serve_a_moe_layer(tokens, variant):
    """Router, expert GEMV (decode) or grouped GEMM (batch) and combine run natively on
    Metal: the profiler names the kernels, the provider stats the native providers."""
    experts, top_k, h, i = 8, 2, 64, 32
    logits = metalrt.asarray(rand((tokens, experts), seed=1), device="metal")
    w = metalrt.quantized_tensor("q4_k", (experts * i, 256), random_blocks("q4_k", experts * i, 256, 2),
                                 device="metal")
    down = metalrt.asarray(rand((experts * h, i), seed=3, scale=0.1), device="metal")
    x = metalrt.asarray(rand((tokens, 256), seed=4), device="metal")
    result = {}

    def layer():
        weights, ids = ops.moe_router(logits, top_k, renormalize=True)
        y = ops.moe_matmul_bt(x, w, ids, num_experts=experts)
        z = ops.moe_matmul_bt(y, down, ids, num_experts=experts)
        result["out"] = ops.moe_combine(z, weights)

    def measured_layer():
        layer()
        # The ids stay on the device (no host wait); after warm-up every buffer, the
        # grouping's scratch included, comes from the buffer cache.
        result["waits"], result["allocations"] = metalrt.profiler.waits(), metalrt.profiler.allocations()

    for _ in range(2):
        layer()
    metalrt.providers.reset_stats()
    rows = profiled(measured_layer)
    assert (result["waits"], result["allocations"]) == (0, 0)
    group = {"moe_group_pairs_f32": 2} if variant == "gemm" else {}
    assert {k: v for k, v in rows.items() if k.startswith("moe_")} == {
        "moe_router_row_f32": 1, f"moe_matmul_bt_{variant}_q4_k_f32": 1,
        f"moe_matmul_bt_{variant}_float_f32": 1, "moe_combine_f32": 1, **group}
    assert_native("moe_router", "metal_moe_router", 1)
    assert_native("moe_matmul_bt", "metal_moe_matmul_bt", 2)
    assert_native("moe_combine", "metal_moe_combine", 1)
    assert np.all(np.isfinite(result["out"].numpy()))


def _interleaved(gate, up, experts):
    """Per expert its gate rows then its up rows: the one stack the loader used to copy."""
    g, u = (a.reshape(experts, -1, *a.shape[1:]) for a in (gate, up))
    return np.concatenate([g, u], axis=1).reshape(-1, *gate.shape[1:])


def _stack(fmt, parts, kw, rows, k, device):
    if fmt == "float":
        return metalrt.asarray(parts[0], device=device)
    return metalrt.quantized_tensor(fmt, (rows, k), *(metalrt.asarray(p, device=device) for p in parts), **kw)


@pytest.mark.parametrize("fmt", sorted(GGUF) + ["affine", "float"])
@pytest.mark.parametrize("tokens", [1, 3, 17])   # GEMV (decode, batch) and grouped GEMM
def test_matmul_gate_and_up_stacks_equal_the_interleaved_stack(fmt, tokens, device):
    """Two stacks as two operands (up=) give bit for bit what the one interleaved stack
    gave: each value is the same dot product of the same row."""
    experts, top_k, n, k = 8, 2, 40, 256   # N = 40: a partial row block / column tile
    if fmt == "float":
        gate, up, kw = (rand((experts * n, k), seed=5, scale=0.1),), (rand((experts * n, k), seed=6, scale=0.1),), {}
    else:
        gate, kw, _ = quantized_experts(fmt, experts * n, k, seed=7)
        up, _, _ = quantized_experts(fmt, experts * n, k, seed=8)
    both = [_interleaved(g, u, experts) for g, u in zip(gate, up)]
    x = metalrt.asarray(rand((tokens, k), seed=tokens), device=device)
    ids = metalrt.asarray(random_ids(tokens, top_k, experts, seed=tokens), device=device)
    out = poisoned((tokens, top_k, 2 * n), "float32", device)
    got = ops.moe_matmul_bt(x, _stack(fmt, gate, kw, experts * n, k, device), ids, num_experts=experts,
                            up=_stack(fmt, up, kw, experts * n, k, device), out=out)
    assert got.data_ptr() == out.data_ptr() and got.shape == (tokens, top_k, 2 * n)
    want = ops.moe_matmul_bt(x, _stack(fmt, both, kw, 2 * experts * n, k, device), ids, num_experts=experts)
    assert np.all(np.isfinite(got.numpy()))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_matmul_up_stack_must_match_the_gate_stack():
    gate = metalrt.quantized_tensor("q8_0", (64, 64), random_blocks("q8_0", 64, 64, 1))
    up = metalrt.quantized_tensor("q4_0", (64, 64), random_blocks("q4_0", 64, 64, 2))
    x, ids = np.zeros((1, 64), np.float32), np.array([[0, 1]], np.int32)
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] the up stack must match the gate stack q8_0"):
        ops.moe_matmul_bt(x, gate, ids, num_experts=8, up=up)
    with pytest.raises(TypeError, match=r"^\[moe_matmul_bt\] up must be a QuantizedTensor"):
        ops.moe_matmul_bt(x, gate, ids, num_experts=8, up=np.zeros((64, 64), np.float32))
    with pytest.raises(ValueError, match=r"^\[moe_matmul_bt\] up must have shape"):
        ops.moe_matmul_bt(x, np.zeros((64, 64), np.float32), ids, num_experts=8, up=np.zeros((32, 64), np.float32))


@requires_metal
@pytest.mark.parametrize("tokens,variant", [(1, "gemv"), (17, "gemm")])
def test_metal_fused_gate_up_kernel_reads_two_buffers(tokens, variant):
    """The gate and up stacks in two separate device buffers (as the no-copy windows of a
    file may put them) are served by one native dispatch, no reference tier."""
    experts, top_k, n = 8, 2, 32
    gate = metalrt.quantized_tensor("q4_k", (experts * n, 256), random_blocks("q4_k", experts * n, 256, 2),
                                    device="metal")
    up = metalrt.quantized_tensor("q4_k", (experts * n, 256), random_blocks("q4_k", experts * n, 256, 3),
                                  device="metal")
    assert gate.data.data_ptr() != up.data.data_ptr()
    x = metalrt.asarray(rand((tokens, 256), seed=4), device="metal")
    ids = metalrt.asarray(random_ids(tokens, top_k, experts, seed=1), device="metal")
    result = {}
    metalrt.providers.reset_stats()
    rows = profiled(lambda: result.update(y=ops.moe_matmul_bt(x, gate, ids, num_experts=experts, up=up)))
    assert {k: v for k, v in rows.items() if k.startswith("moe_matmul")} == {
        f"moe_matmul_bt_{variant}_q4_k_f32": 1}
    assert_native("moe_matmul_bt", "metal_moe_matmul_bt", 1)
    # Against the CPU oracle (the fast provider's int8 activations have their own bar).
    metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", False)
    try:
        cpu = ops.moe_matmul_bt(x.to("cpu"), gate.to("cpu"), ids.to("cpu"), num_experts=experts, up=up.to("cpu"))
    finally:
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True)
    assert_matches(result["y"], cpu.numpy(), "float32", worst_bar=summation_bar(256))
