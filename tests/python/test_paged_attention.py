"""ops.paged_attention against a float64 reference of causal GQA attention."""
import numpy as np
import pytest

import metalrt
from conftest import DEVICES, FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand
from metalrt import ops
from test_metal_kernels import assert_native, profiled


def reference(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale):
    """Causal attention per request over the context gathered through its block table."""
    heads, kv_heads = query.shape[1], key_cache.shape[2]
    block_size = key_cache.shape[1]
    out = np.zeros(query.shape)
    for b, context in enumerate(seq_lens):
        start, stop = query_start_loc[b], query_start_loc[b + 1]
        positions = np.arange(context)
        blocks = block_tables[b][positions // block_size]
        keys = key_cache[blocks, positions % block_size]        # [context, kv_heads, head_dim]
        values = value_cache[blocks, positions % block_size]
        for i, t in enumerate(range(start, stop)):
            visible = context - (stop - start) + i + 1
            for h in range(heads):
                g = h // (heads // kv_heads)
                scores = scale * keys[:visible, g] @ query[t, h]
                weights = np.exp(scores - scores.max())
                out[t, h] = weights @ values[:visible, g] / weights.sum()
    return out


def run_case(device, dtype, heads, kv_heads, head_dim, block_size, q_lens, seq_lens, seed=0,
             coarse_projections=False):
    rng = np.random.default_rng(seed)
    max_blocks = max(-(-s // block_size) for s in seq_lens) + 1
    num_blocks = len(seq_lens) * max_blocks + 2
    # Distinct, shuffled blocks per request: the block table's order matters.
    block_tables = rng.permutation(num_blocks)[:len(seq_lens) * max_blocks]
    block_tables = block_tables.reshape(len(seq_lens), max_blocks).astype(np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    query = rand((sum(q_lens), heads, head_dim), seed=seed + 1, dtype=dtype)
    key_cache = rand((num_blocks, block_size, kv_heads, head_dim), seed=seed + 2, dtype=dtype)
    value_cache = rand((num_blocks, block_size, kv_heads, head_dim), seed=seed + 3, dtype=dtype)
    scale = head_dim ** -0.5
    seq_lens = np.array(seq_lens, np.int32)
    out = poisoned(query.shape, dtype, device)
    as_dev = lambda a, dt=dtype: metalrt.asarray(a, device=device, dtype=dt)  # noqa: E731
    result = ops.paged_attention(as_dev(query), as_dev(key_cache), as_dev(value_cache),
                                 block_tables, seq_lens, query_start_loc, scale, out=out,
                                 coarse_projections=coarse_projections)
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    expected = reference(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                         scale)
    return result, expected


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("heads, kv_heads, head_dim, block_size, q_lens, seq_lens", [
    (1, 1, 1, 1, [1], [1]),
    (9, 3, 64, 16, [1], [33]),                  # SmolLM2 decode: GQA 3, one past a block
    (9, 3, 64, 16, [5, 1, 31], [5, 32, 40]),    # prefill, decode, chunked prefill with context
    (4, 2, 128, 16, [17, 2], [17, 18]),         # head_dim 128, GQA 2
    (3, 3, 33, 5, [3], [7]),                    # odd head_dim and block size, MHA
])
def test_matches_float64_reference(dtype, heads, kv_heads, head_dim, block_size, q_lens,
                                   seq_lens, device):
    result, expected = run_case(device, dtype, heads, kv_heads, head_dim, block_size, q_lens,
                                seq_lens)
    assert_matches(result, expected, dtype)


def test_rows_of_a_view(device):
    query = rand((2, 2, 8), seed=1)
    cache = rand((2, 4, 1, 8), seed=2)
    args = (np.array([[1, 0]], np.int32), np.array([5], np.int32), np.array([0, 2], np.int32))
    q = metalrt.asarray(query, device=device)
    assert_rows_view_written(lambda out: ops.paged_attention(q, cache, cache, *args, 0.5, out=out),
                             rand((4, 2, 8), seed=3), reference(query, cache, cache, *args, 0.5),
                             device)


def test_python_int_lists_become_int32(device):
    """block_tables, seq_lens and query_start_loc given as lists of Python ints."""
    query = rand((3, 2, 8), seed=4)
    cache = rand((3, 4, 1, 8), seed=5)
    tables, lens, loc = [[2, 0], [1, 0]], [6, 1], [0, 2, 3]
    out = poisoned(query.shape, "float32", device)
    ops.paged_attention(metalrt.asarray(query, device=device), cache, cache, tables, lens, loc,
                        0.5, out=out)
    expected = reference(query, cache, cache, np.array(tables), lens, loc, 0.5)
    assert_matches(out, expected, "float32")
    with pytest.raises(ValueError, match=r"^\[paged_attention\] seq_lens: 2147483648 does not fit"):
        ops.paged_attention(query, cache, cache, tables, [6, 2**31], loc, 0.5)


def test_bad_inputs(device):
    q = metalrt.zeros((3, 4, 8), device=device)
    cache = metalrt.zeros((4, 4, 2, 8), device=device)
    tables = np.array([[0, 1]], np.int32)
    lens = np.array([3], np.int32)
    loc = np.array([0, 3], np.int32)
    call = lambda **kw: ops.paged_attention(**{**dict(  # noqa: E731
        query=q, key_cache=cache, value_cache=cache, block_tables=tables, seq_lens=lens,
        query_start_loc=loc, scale=0.5), **kw})
    call()
    with pytest.raises(ValueError, match=r"^\[paged_attention\] heads \(4\) must be a multiple"):
        call(key_cache=metalrt.zeros((4, 4, 3, 8), device=device),
             value_cache=metalrt.zeros((4, 4, 3, 8), device=device))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] query must have rank 3"):
        call(query=q.reshape(3, 32))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] key_cache head_dim"):
        call(query=metalrt.zeros((3, 4, 16), device=device))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] query_start_loc must have shape \[2\]"):
        call(query_start_loc=np.array([0, 1, 3], np.int32))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] request 0: seq_len 2 is shorter"):
        call(seq_lens=np.array([2], np.int32))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] request 0: seq_len 9 exceeds"):
        call(seq_lens=np.array([9], np.int32))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] request 0: block 7 at block_tables"):
        call(block_tables=np.array([[7, 0]], np.int32))
    with pytest.raises(ValueError, match=r"^\[paged_attention\] scale must be finite"):
        call(scale=float("nan"))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] seq_lens must be int32"):
        call(seq_lens=np.array([3]))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] key_cache must have the dtype"):
        half = metalrt.zeros((4, 4, 2, 8), dtype="bfloat16", device=device)
        call(key_cache=half, value_cache=half)
    with pytest.raises(TypeError, match=r"^\[paged_attention\] scale must be a real number"):
        call(scale="0.5")
    for bad in ("q", None):
        with pytest.raises(TypeError, match=r"^\[paged_attention\] query must be a metalrt.Tensor"):
            call(query=bad)
    with pytest.raises(TypeError, match=r"^\[paged_attention\] coarse_projections must be a bool, got int"):
        call(coarse_projections=1)


def test_coarse_projections_stay_within_bf16_of_the_reference(device, monkeypatch):
    """coarse_projections=True (what a model with quantized weights passes): on a CPU with
    AVX-512 BF16 a prefill's products run on the bf16 GEMM (the provider says so), within
    bf16's bar of the float64 reference; METALRT_CPU_GEMM=f32 keeps the float32 sgemms,
    byte for byte the default call's."""
    geometry = (9, 3, 64, 16, [5, 1, 31], [5, 32, 40])
    result, expected = run_case(device, "float32", *geometry, coarse_projections=True)
    assert_matches(result, expected, "bfloat16")
    if device != "cpu":
        return
    served = metalrt.providers.stats("paged_attention", "cpu")["last_selected"]
    # Registered in builds with a BLAS; serves where the CPU has AVX-512 BF16 ("auto").
    bf16 = ("cpu_bf16_paged_attention" in metalrt.providers.list("paged_attention", "cpu")
            and metalrt.doctor()["cpu_prefill_gemm"] == "auto")
    assert served in (("cpu_bf16_paged_attention",) if bf16 else
                      ("cpu_blas_paged_attention", "cpu_paged_attention"))
    monkeypatch.setenv("METALRT_CPU_GEMM", "f32")
    pinned, _ = run_case(device, "float32", *geometry, coarse_projections=True)
    default, _ = run_case(device, "float32", *geometry)
    assert np.array_equal(pinned.numpy(), default.numpy())
    assert metalrt.providers.stats("paged_attention", "cpu")["last_selected"] != "cpu_bf16_paged_attention"


def test_degenerate_geometry(device):
    """A cache with 0-slot blocks is rejected (every block lookup divides by block_size);
    head_dim 0 leaves nothing to attend and returns an empty result, as heads 0 does."""
    call = lambda query, cache, lens=(3,), loc=(0, 3): ops.paged_attention(  # noqa: E731
        query, cache, cache, np.array([[0, 1]], np.int32), np.array(lens, np.int32),
        np.array(loc, np.int32), 0.5)
    with pytest.raises(ValueError, match=r"^\[paged_attention\] key_cache must have "
                                         r"block_size >= 1, got shape \[4, 0, 2, 8\]"):
        call(metalrt.zeros((0, 4, 8), device=device), metalrt.zeros((4, 0, 2, 8), device=device),
             lens=(0,), loc=(0, 0))
    result = call(metalrt.zeros((3, 4, 0), device=device), metalrt.zeros((4, 4, 2, 0), device=device))
    assert result.shape == (3, 4, 0) and result.numpy().size == 0
    result = call(metalrt.zeros((3, 0, 8), device=device), metalrt.zeros((4, 4, 2, 8), device=device))
    assert result.shape == (3, 0, 8)


def test_query_start_loc_far_below_the_previous_start(device):
    """A start that drops by more than int32 can hold is non-decreasing's violation, not
    a huge query count (the difference is taken in 64 bits)."""
    q = metalrt.zeros((3, 4, 8), device=device)
    cache = metalrt.zeros((4, 4, 2, 8), device=device)
    with pytest.raises(ValueError, match=r"^\[paged_attention\] request 1: query_start_loc "
                                         r"must be non-decreasing"):
        ops.paged_attention(q, cache, cache, np.zeros((3, 2), np.int32),
                            np.array([3, 8, 8], np.int32),
                            np.array([0, 3, -2**31 + 1, 3], np.int32), 0.5)


@pytest.mark.skipif("metal" not in DEVICES, reason="no Metal device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("q_lens, seq_lens, kernels", [
    ([1, 1, 1, 1], [1, 17, 128, 256], ["decode"]),          # decode batch, one partition
    ([1, 1, 1, 1], [1, 17, 128, 300], ["decode_split", "decode_merge"]),   # split-KV
    ([5, 19], [5, 56], ["prefill"]),                         # OPT-style prefill, prior context
    ([13, 1, 0, 9], [53, 77, 4, 9], ["decode", "prefill"]),  # mixed, with an empty request
])
def test_metal_kernels_match_the_cpu(dtype, q_lens, seq_lens, kernels):
    """The native Metal kernels (decode for one-query requests: single pass when every
    context fits one 256-position partition, else split and merge; prefill for longer
    ones) against the CPU oracle on the same inputs, at the Qwen3 geometry (GQA 2:1, head_dim
    128); the profiler names the kernels that ran."""
    suffix = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    cpu, expected = run_case("cpu", dtype, 16, 8, 128, 16, q_lens, seq_lens, seed=7)
    metal = []
    metalrt.providers.reset_stats()
    rows = profiled(lambda: metal.append(
        run_case("metal", dtype, 16, 8, 128, 16, q_lens, seq_lens, seed=7)[0]))
    assert {name: n for name, n in rows.items() if name.startswith("paged_attention")} == {
        f"paged_attention_{kernel}_{suffix}": 1 for kernel in kernels}
    assert_native("paged_attention", "metal_paged_attention", 1)
    assert_matches(metal[0], cpu.numpy(), dtype)
    assert_matches(metal[0], expected, dtype)
