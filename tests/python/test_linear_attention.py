"""Gates of the Gated-DeltaNet ops (metalrt.ops.causal_conv1d, gdn_gating,
gated_delta_rule) against transformers' own torch code for Qwen3-Next
(torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule, causal_conv1d_update;
torch and transformers are the test extra), on random inputs, on every device; and
their bad-input errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_next import modeling_qwen3_next as hf

import metalrt
from conftest import DEVICES, FLOAT_DTYPES, assert_matches, on_grid, poisoned, profiled, SUFFIX

# (Hk, Dk, Hv, Dv): a small Qwen3-Next-like geometry (r = 2) and unusual ones.
GEOMETRIES = {"r2": (2, 32, 4, 32), "equal_heads_dk_lt_dv": (2, 16, 2, 32),
              "dk_gt_dv": (1, 32, 3, 16)}


def _batch(geometry, lens, seed, dtype="float32", a_shift=0.0, a_range=(1.0, 16.0)):
    """Random GDN inputs for requests of `lens` tokens: A = exp(A_log) uniform in
    a_range per head (the init's), a uniform in [-4, 4) + a_shift, beta = sigmoid of
    uniform [-3, 3), states uniform in scattered slots of a pool of 2R + 1."""
    hk, dk, hv, dv = geometry
    rng = np.random.default_rng(seed)
    tokens, requests = sum(lens), len(lens)
    qkv = on_grid(rng.uniform(-1, 1, (tokens, 2 * hk * dk + hv * dv)), dtype)
    a = rng.uniform(-4, 4, (tokens, hv)) + a_shift
    a_log = np.log(rng.uniform(*a_range, hv))
    g = -np.exp(a_log) * F.softplus(torch.tensor(a + 1.0)).numpy()
    beta = 1 / (1 + np.exp(-rng.uniform(-3, 3, (tokens, hv))))
    pool = 2 * requests + 1
    state = rng.uniform(-0.5, 0.5, (pool, hv, dk, dv)).astype(np.float32)
    slots = rng.permutation(pool)[:requests].astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return qkv, g.astype(np.float32), beta.astype(np.float32), state, starts, slots


def _hf_reference(geometry, qkv, g, beta, state, starts, slots, chunked):
    """transformers' GDN core per request (B = 1), from each request's slot; returns
    (o [T, Hv, Dv], the state pool after) in float64."""
    hk, dk, hv, dv = geometry
    o = np.zeros((qkv.shape[0], hv, dv))
    pool = state.astype(np.float64).copy()
    for r in range(len(slots)):
        rows = slice(starts[r], starts[r + 1])
        if starts[r + 1] == starts[r]:
            continue
        x = torch.tensor(qkv[rows], dtype=torch.float32)[None]
        q = x[..., :hk * dk].reshape(1, -1, hk, dk)
        k = x[..., hk * dk:2 * hk * dk].reshape(1, -1, hk, dk)
        v = x[..., 2 * hk * dk:].reshape(1, -1, hv, dv)
        # Each q/k head serves hv // hk consecutive value heads. transformers 5.24 repeats
        # them inside these functions; older releases (5.17) leave it to the modeling
        # code: repeated here, the call is the same computation on both.
        q, k = q.repeat_interleave(hv // hk, dim=2), k.repeat_interleave(hv // hk, dim=2)
        fn = hf.torch_chunk_gated_delta_rule if chunked else hf.torch_recurrent_gated_delta_rule
        out, final = fn(q, k, v, torch.tensor(g[rows])[None], torch.tensor(beta[rows])[None],
                        initial_state=torch.tensor(state[slots[r]])[None],
                        output_final_state=True, use_qk_l2norm_in_kernel=True)
        o[rows] = out[0].double().numpy()
        pool[slots[r]] = final[0].double().numpy()
    return o, pool


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["recurrent", "chunked", "auto"])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_gated_delta_rule_matches_transformers(device, mode, geometry):
    geo = GEOMETRIES[geometry]
    lens = [1, 65, 0, 2, 130]   # decode, one past a chunk, empty, short, two chunks and two
    qkv, g, beta, state, starts, slots = _batch(geo, lens, seed=len(mode) + geo[1])
    ref_o, ref_state = _hf_reference(geo, qkv, g, beta, state, starts, slots,
                                     chunked=mode == "chunked")
    hk, dk, hv, dv = geo
    pool = metalrt.asarray(state, device=device)
    out = poisoned((qkv.shape[0], hv, dv), device=device)
    metalrt.ops.gated_delta_rule(
        metalrt.asarray(qkv.astype(np.float32), device=device), metalrt.asarray(g, device=device),
        metalrt.asarray(beta, device=device), pool, starts, slots, num_k_heads=hk,
        head_k_dim=dk, num_v_heads=hv, head_v_dim=dv, mode=mode, out=out)
    # transformers computes in f32 too (another order, another algorithm for "chunked"
    # against "recurrent"): the chunked solve's f32 rounding bounds both.
    assert_matches(out.numpy(), ref_o, "float32", worst_bar=1e-4)
    assert_matches(pool.numpy(), ref_state, "float32", worst_bar=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gated_delta_rule_output_dtype_and_default_scale(device, dtype):
    geo = GEOMETRIES["r2"]
    qkv, g, beta, state, starts, slots = _batch(geo, [3, 70], seed=5, dtype=dtype)
    ref_o, ref_state = _hf_reference(geo, qkv, g, beta, state, starts, slots, chunked=True)
    pool = metalrt.asarray(state, device=device)
    out = metalrt.ops.gated_delta_rule(
        metalrt.asarray(qkv, device=device, dtype=dtype), metalrt.asarray(g, device=device),
        metalrt.asarray(beta, device=device), pool, starts.tolist(), slots.tolist(),
        num_k_heads=2, head_k_dim=32, num_v_heads=4, head_v_dim=32)
    assert out.dtype == dtype and out.shape == (73, 4, 32)
    assert_matches(out.numpy(), ref_o, dtype, worst_bar=1e-4)
    assert_matches(pool.numpy(), ref_state, "float32", worst_bar=1e-4)


def _tiled(hk, hv, dv):
    """Value-head permutation of llama.cpp's qwen35 converter (grouped -> tiled): tiled
    head v * hk + g is grouped head g * (hv // hk) + v."""
    r = hv // hk
    return np.arange(hv).reshape(hk, r).T.reshape(-1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["recurrent", "chunked"])
def test_gated_delta_rule_tiled_value_heads(device, mode):
    """v_heads_tiled: the value heads in llama.cpp's tiled order give transformers'
    result in that order (value head j reads key head j % Hk)."""
    geo = (2, 16, 6, 16)   # r = 3: tiled and grouped differ for every head but 0 and 5
    hk, dk, hv, dv = geo
    qkv, g, beta, state, starts, slots = _batch(geo, [1, 70, 3], seed=21)
    ref_o, ref_state = _hf_reference(geo, qkv, g, beta, state, starts, slots,
                                     chunked=mode == "chunked")
    perm = _tiled(hk, hv, dv)
    v = qkv[:, 2 * hk * dk:].reshape(-1, hv, dv)[:, perm].reshape(len(qkv), -1)
    tiled_qkv = np.concatenate([qkv[:, :2 * hk * dk], v], axis=1).astype(np.float32)
    pool = metalrt.asarray(np.ascontiguousarray(state[:, perm]), device=device)
    out = poisoned((qkv.shape[0], hv, dv), device=device)
    metalrt.ops.gated_delta_rule(
        metalrt.asarray(tiled_qkv, device=device),
        metalrt.asarray(np.ascontiguousarray(g[:, perm]), device=device),
        metalrt.asarray(np.ascontiguousarray(beta[:, perm]), device=device), pool, starts,
        slots, num_k_heads=hk, head_k_dim=dk, num_v_heads=hv, head_v_dim=dv, mode=mode,
        v_heads_tiled=True, out=out)
    assert not np.array_equal(perm, np.arange(hv))
    assert_matches(out.numpy(), ref_o[:, perm], "float32", worst_bar=1e-4)
    assert_matches(pool.numpy(), ref_state[:, perm], "float32", worst_bar=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_fast_decaying_heads_stay_finite(device):
    geo = GEOMETRIES["equal_heads_dk_lt_dv"]
    # A = 16 (A_log = log 16, the init's upper end) and a + dt_bias up to 45.
    qkv, g, beta, state, starts, slots = _batch(geo, [150], seed=9, a_shift=40.0, a_range=(16.0, 16.0))
    assert g.min() < -500   # exp(g) underflows; the chunk's cumulative decay far more
    ref_o, ref_state = _hf_reference(geo, qkv, g, beta, state, starts, slots, chunked=True)
    for mode in ("recurrent", "chunked"):
        pool = metalrt.asarray(state, device=device)
        out = metalrt.ops.gated_delta_rule(
            metalrt.asarray(qkv.astype(np.float32), device=device), metalrt.asarray(g, device=device),
            metalrt.asarray(beta, device=device), pool, starts, slots, num_k_heads=2,
            head_k_dim=16, num_v_heads=2, head_v_dim=32, mode=mode)
        assert np.all(np.isfinite(out.numpy())) and np.all(np.isfinite(pool.numpy()))
        assert_matches(out.numpy(), ref_o, "float32", worst_bar=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_causal_conv1d_matches_transformers(device, dtype):
    channels, width = 40, 4
    lens = [1, 2, 0, 7, 3]   # two requests shorter than K - 1 = 3 (vllm#56196), one empty
    rng = np.random.default_rng(3)
    tokens, pool = sum(lens), 2 * len(lens) + 1
    x = on_grid(rng.uniform(-2, 2, (tokens, channels)), dtype)
    w = on_grid(rng.uniform(-1, 1, (channels, width)), dtype)
    state = on_grid(rng.uniform(-2, 2, (pool, channels, width - 1)), dtype)
    slots = rng.permutation(pool)[:len(lens)].astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ref_y, ref_state = np.zeros_like(x), state.copy()
    for r, slot in enumerate(slots):
        if lens[r] == 0:
            continue
        hs = torch.tensor(x[starts[r]:starts[r + 1]].T[None])
        cs = torch.tensor(state[slot][None])
        y = hf.causal_conv1d_update(hs, cs, torch.tensor(w), activation="silu")
        ref_y[starts[r]:starts[r + 1]] = y[0].T.numpy()
        ref_state[slot] = cs[0].numpy()
    pool_t = metalrt.asarray(state, device=device, dtype=dtype)
    out = poisoned((tokens, channels), dtype, device)
    metalrt.ops.causal_conv1d(metalrt.asarray(x, device=device, dtype=dtype),
                              metalrt.asarray(w, device=device, dtype=dtype), pool_t, starts,
                              slots, out=out)
    assert_matches(out.numpy(), ref_y, dtype, worst_bar=1e-5)
    np.testing.assert_array_equal(pool_t.numpy(), ref_state)   # moved inputs, never rounded


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gdn_gating_matches_transformers(device, dtype):
    rng = np.random.default_rng(4)
    a = on_grid(np.concatenate([rng.uniform(-8, 8, (6, 8)), [[30.0, -30.0] * 4]]), dtype)
    b = on_grid(rng.uniform(-8, 8, a.shape), dtype)
    a_log = np.log(rng.uniform(0.01, 16, 8))
    dt_bias = rng.uniform(0, 2, 8)
    ref_g = (-torch.tensor(a_log).float().exp() *
             F.softplus(torch.tensor(a).float() + torch.tensor(dt_bias).float())).numpy()
    ref_beta = torch.tensor(b).float().sigmoid().numpy()
    g, beta = metalrt.ops.gdn_gating(metalrt.asarray(a, device=device, dtype=dtype),
                                     metalrt.asarray(b, device=device, dtype=dtype),
                                     metalrt.asarray(a_log.astype(np.float32), device=device),
                                     metalrt.asarray(dt_bias.astype(np.float32), device=device))
    assert g.dtype == "float32" and beta.dtype == "float32" and g.device == device
    assert_matches(g.numpy(), ref_g, "float32", worst_bar=1e-6)
    assert_matches(beta.numpy(), ref_beta, "float32", worst_bar=1e-6)


def _delta_args(hk=2, dk=8, hv=4, dv=8, tokens=3, pool=2):
    rng = np.random.default_rng(0)
    return dict(mixed_qkv=rng.uniform(-1, 1, (tokens, 2 * hk * dk + hv * dv)).astype(np.float32),
                g=np.zeros((tokens, hv), np.float32), beta=np.ones((tokens, hv), np.float32),
                state=metalrt.asarray(np.zeros((pool, hv, dk, dv), np.float32)),
                query_start=[0, tokens], state_slots=[1])


@pytest.mark.parametrize("change, error, message", [
    (dict(num_k_heads=3), ValueError, r"num_v_heads \(4\) must be a multiple of num_k_heads \(3\)"),
    (dict(head_v_dim=4), ValueError, r"mixed_qkv must have 2\*num_k_heads\*head_k_dim"),
    (dict(state=((2, 4, 8, 4), np.float32)), ValueError,
     r"state must have shape \[slots, num_v_heads, head_k_dim, head_v_dim\]"),
    (dict(state=((2, 4, 8, 8), np.float16)), TypeError,
     r"state must be float32"),
    (dict(state_slots=[2]), ValueError, r"state_slots value 2 is outside the state pool of 2"),
    (dict(query_start=[0, 2]), ValueError, r"query_start must run from 0 to the 3 tokens"),
    (dict(mode="parallel"), ValueError, r"mode must be 'recurrent', 'chunked' or 'auto'"),
])
def test_gated_delta_rule_bad_input(change, error, message):
    args = _delta_args()
    heads = dict(num_k_heads=2, head_k_dim=8, num_v_heads=4, head_v_dim=8)
    for key, value in change.items():
        if key == "state":   # (shape, dtype): built here, not at import
            value = metalrt.asarray(np.zeros(value[0], value[1]))
        (heads if key in heads or key == "mode" else args)[key] = value
    with pytest.raises(error, match=r"^\[gated_delta_rule\] .*" + message):
        metalrt.ops.gated_delta_rule(*args.values(), **heads)


def test_causal_conv1d_bad_input():
    x = np.zeros((4, 6), np.float32)
    w = np.zeros((6, 4), np.float32)
    state = metalrt.asarray(np.zeros((2, 6, 3), np.float32))
    with pytest.raises(ValueError, match=r"^\[causal_conv1d\] weight must have one row per channel of x \(6\)"):
        metalrt.ops.causal_conv1d(x, np.zeros((5, 4), np.float32), state, [0, 4], [0])
    with pytest.raises(ValueError, match=r"^\[causal_conv1d\] conv_state must have shape \[slots, 6, 3\]"):
        metalrt.ops.causal_conv1d(x, w, metalrt.asarray(np.zeros((2, 7, 3), np.float32)), [0, 4], [0])
    with pytest.raises(ValueError, match=r"state slot 1 is used by an earlier request"):
        metalrt.ops.causal_conv1d(x, w, state, [0, 2, 4], [1, 1])
    with pytest.raises(ValueError, match=r"activation must be 'silu' or None"):
        metalrt.ops.causal_conv1d(x, w, state, [0, 4], [0], activation="gelu")
    before = state.numpy().copy()
    with pytest.raises(ValueError):
        metalrt.ops.causal_conv1d(x, w, state, [0, 4], [5])
    np.testing.assert_array_equal(state.numpy(), before)   # refused before anything ran


def test_empty_batches_as_python_lists():
    # An empty list for an index argument is int32 like any list of Python ints: R = 0
    # requests (query_start [0], state_slots []) run, and query_start [] is refused by
    # the op's own check. numpy inferred float64 for [] ("state_slots must be int32, got
    # float32").
    args = _delta_args(tokens=0)
    heads = dict(num_k_heads=2, head_k_dim=8, num_v_heads=4, head_v_dim=8)
    args.update(query_start=[0], state_slots=[])
    assert metalrt.ops.gated_delta_rule(*args.values(), **heads).shape == (0, 4, 8)
    x, state = np.zeros((0, 6), np.float32), metalrt.zeros((2, 6, 3))
    assert metalrt.ops.causal_conv1d(x, np.zeros((6, 4), np.float32), state, [0], []).shape == (0, 6)
    with pytest.raises(ValueError, match=r"^\[causal_conv1d\] query_start must hold R \+ 1 >= 1 "
                                         r"offsets, got shape \[0\]"):
        metalrt.ops.causal_conv1d(x, np.zeros((6, 4), np.float32), state, [], [])
    assert metalrt.ops.embedding(np.zeros((5, 3), np.float32), []).shape == (0, 3)
