"""ops.paged_attention against a float64 reference of causal GQA attention."""
import numpy as np
import pytest

import metalrt
from conftest import DEVICES, FLOAT_DTYPES, assert_matches, assert_rows_view_written, poisoned, rand
from metalrt import ops
from test_metal_kernels import assert_native, profiled


def reference(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
              window=0, sinks=None):
    """Causal attention per request over the context gathered through its block table;
    with a window, the query at position p sees positions p - window + 1 .. p
    (transformers' sliding_window_overlay); sinks [heads] join the softmax as one more
    logit whose weight is dropped (transformers' GptOssAttention)."""
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
            p = context - (stop - start) + i
            lo = max(0, p - window + 1) if window else 0
            for h in range(heads):
                g = h // (heads // kv_heads)
                logits = scale * keys[lo:p + 1, g].astype(np.float64) @ query[t, h]
                if sinks is not None:
                    logits = np.append(logits, sinks[h])
                weights = np.exp(logits - logits.max())
                out[t, h] = weights[:p + 1 - lo] @ values[lo:p + 1, g] / weights.sum()
    return out


def run_case(device, dtype, heads, kv_heads, head_dim, block_size, q_lens, seq_lens, seed=0,
             coarse_projections=False, window=0, sinks=None):
    """With a window, the cache rows no query of a request sees are NaN and the
    block-table entries holding only such rows are -1: a kernel that reads them (or
    masks after reading) cannot pass."""
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
    expected = reference(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                         scale, window, sinks)
    if window:
        for b, (q_len, context) in enumerate(zip(q_lens, seq_lens)):
            unseen = max(0, context - q_len - window + 1)   # before the first query's window
            for position in range(unseen):
                key_cache[block_tables[b, position // block_size], position % block_size] = np.nan
                value_cache[block_tables[b, position // block_size], position % block_size] = np.nan
            block_tables[b, :unseen // block_size] = -1
    out = poisoned(query.shape, dtype, device)
    as_dev = lambda a, dt=dtype: metalrt.asarray(a, device=device, dtype=dt)  # noqa: E731
    result = ops.paged_attention(as_dev(query), as_dev(key_cache), as_dev(value_cache),
                                 block_tables, seq_lens, query_start_loc, scale, out=out,
                                 coarse_projections=coarse_projections, window=window,
                                 sinks=None if sinks is None else as_dev(sinks, "float32"))
    assert result.data_ptr() == out.data_ptr() and result.dtype == dtype
    return result, expected


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("heads, kv_heads, head_dim, block_size, q_lens, seq_lens", [
    (1, 1, 1, 1, [1], [1]),
    (9, 3, 64, 16, [1], [33]),                  # SmolLM2 decode: GQA 3, one past a block
    (9, 3, 64, 16, [5, 1, 31], [5, 32, 40]),    # prefill, decode, chunked prefill with context
    (4, 2, 128, 16, [17, 2], [17, 18]),         # head_dim 128, GQA 2
    (3, 3, 33, 5, [3], [7]),                    # odd head_dim and block size, MHA
    (12, 1, 64, 16, [1, 1], [40, 300]),         # GQA 12: decode chunks of 8 and 4 heads, split-KV
])
def test_matches_float64_reference(dtype, heads, kv_heads, head_dim, block_size, q_lens,
                                   seq_lens, device):
    result, expected = run_case(device, dtype, heads, kv_heads, head_dim, block_size, q_lens,
                                seq_lens)
    assert_matches(result, expected, dtype)


# Sinks: gpt-oss's trained sinks sit around the scores' range; 6.0 outweighs every score.
SINKS = (0.5, -1.0, 2.0, 6.0, -30.0, 0.0, 1.5, -0.25)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("heads, kv_heads, head_dim, block_size, q_lens, seq_lens, window, sinks", [
    (4, 2, 64, 16, [1], [100], 32, None),                  # decode, window inside the context
    (4, 2, 64, 16, [1, 1], [20, 300], 128, None),          # window past one context, not the other
    (4, 2, 64, 16, [40, 1, 7], [40, 90, 60], 16, None),   # prefill, decode, chunked prefill
    (8, 1, 32, 4, [9, 1], [9, 33], 5, None),               # window not a block multiple
    (8, 2, 64, 16, [1, 1], [1, 70], 0, SINKS),              # sinks, decode (a context of one)
    (8, 2, 64, 16, [33, 5], [33, 50], 0, SINKS),             # sinks, prefill
    (8, 4, 64, 16, [21, 1], [21, 160], 8, SINKS),            # gpt-oss: window and sinks together
    (4, 2, 64, 16, [1, 12], [50, 12], 1, None),              # window 1: each query sees itself
    (4, 2, 64, 16, [45, 1], [80, 80], 37, SINKS),            # prefill tiles across the window's edge
    (8, 2, 64, 16, [1, 9], [40, 9], 64, SINKS),              # window past every context, sinks
    (4, 2, 64, 16, [1, 1], [1000, 700], 600, None),          # split-KV over the window: 2 partitions
    (8, 2, 64, 5, [1, 3], [900, 530], 513, SINKS),           # split-KV, partitions mid-block, sinks
    (4, 1, 256, 16, [21, 1], [60, 600], 16, None),           # Gemma 3 1B's heads: prefill, window 16
    (4, 1, 256, 16, [1], [1100], 512, SINKS),                # Gemma 3's window 512: one partition, sinks
    (4, 1, 256, 16, [1], [1100], 0, SINKS),                  # head_dim 256, split-KV, sinks
])
def test_windows_and_sinks(dtype, heads, kv_heads, head_dim, block_size, q_lens, seq_lens,
                           window, sinks, device):
    """A sliding window (positions before it NaN in the cache, their blocks -1: never
    read) and per-head sinks against the float64 reference; each changes the result. On
    Metal the native kernels serve every call (the reference tier is never hit)."""
    metalrt.providers.reset_stats()
    result, expected = run_case(device, dtype, heads, kv_heads, head_dim, block_size, q_lens,
                                seq_lens, seed=3, window=window,
                                sinks=None if sinks is None else np.float32(sinks[:heads]))
    if device == "metal":
        assert_native("paged_attention", "metal_paged_attention", 1)
    assert_matches(result, expected, dtype)
    _, plain = run_case("cpu", dtype, heads, kv_heads, head_dim, block_size, q_lens, seq_lens,
                        seed=3)
    assert np.max(np.abs(expected - plain)) > 1e-2


def test_window_beyond_the_context_is_full_attention(device):
    """A window at least as long as every context is full attention (within f32's bar:
    the two may run on different providers)."""
    geometry = (4, 2, 32, 16, [5, 1], [5, 40])
    metalrt.providers.reset_stats()
    windowed, expected = run_case(device, "float32", *geometry, window=40)
    if device == "metal":
        assert_native("paged_attention", "metal_paged_attention", 1)
    full, _ = run_case(device, "float32", *geometry)
    assert_matches(windowed, full.numpy(), "float32")
    assert_matches(windowed, expected, "float32")


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
    with pytest.raises(ValueError, match=r"^\[paged_attention\] key_cache must be \[num_blocks, block_size, "
                                         r"kv_heads, 16\] of float32, float16 or bfloat16"):
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
    with pytest.raises(ValueError, match=r"^\[paged_attention\] value_cache must be \[num_blocks, block_size, "
                                         r"kv_heads, 8\] of float32, float16 or bfloat16 .* got int32"):
        call(value_cache=metalrt.zeros((4, 4, 2, 8), dtype="int32", device=device))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] scale must be a real number"):
        call(scale="0.5")
    for bad in ("q", None):
        with pytest.raises(TypeError, match=r"^\[paged_attention\] query must be a metalrt.Tensor"):
            call(query=bad)
    with pytest.raises(TypeError, match=r"^\[paged_attention\] coarse_projections must be a bool, got int"):
        call(coarse_projections=1)
    with pytest.raises(ValueError, match=r"^\[paged_attention\] window must be >= 0 \(0: full attention\), got -1"):
        call(window=-1)
    with pytest.raises(TypeError, match=r"^\[paged_attention\] window must be an int, got float"):
        call(window=4.0)
    with pytest.raises(ValueError, match=r"^\[paged_attention\] sinks must have shape \[4\], got \[2\]"):
        call(sinks=metalrt.zeros((2,), device=device))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] sinks must be float32, got bfloat16"):
        call(sinks=metalrt.zeros((4,), dtype="bfloat16", device=device))
    with pytest.raises(TypeError, match=r"^\[paged_attention\] sinks must be a metalrt.Tensor"):
        call(sinks="0")
    with pytest.raises(ValueError, match=r"^\[paged_attention\] request 0: block 7 at block_tables"):
        # With a window the blocks a query can see are still checked.
        call(block_tables=np.array([[7, 0]], np.int32), window=1)


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


def check_metal_kernels(dtype, geometry, kernels, seed, **options):
    """run_case on Metal dispatches exactly `kernels` (once each, the profiler's names),
    served natively, and matches the CPU oracle and the float64 reference."""
    suffix = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    cpu, expected = run_case("cpu", dtype, *geometry, seed=seed, **options)
    metal = []
    metalrt.providers.reset_stats()
    rows = profiled(lambda: metal.append(run_case("metal", dtype, *geometry, seed=seed, **options)[0]))
    assert {name: n for name, n in rows.items() if name.startswith("paged_attention")} == {
        f"paged_attention_{kernel}_{suffix}": 1 for kernel in kernels}
    assert_native("paged_attention", "metal_paged_attention", 1)
    assert_matches(metal[0], cpu.numpy(), dtype)
    assert_matches(metal[0], expected, dtype)


@pytest.mark.skipif("metal" not in DEVICES, reason="no Metal device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("q_lens, seq_lens, kernels", [
    ([1, 1, 1, 1], [1, 17, 128, 512], ["decode"]),          # decode batch, one partition
    ([1, 1, 1, 1], [1, 17, 128, 513], ["decode_split", "decode_merge"]),   # split-KV
    ([5, 19], [5, 56], ["prefill"]),                         # OPT-style prefill, prior context
    ([13, 1, 0, 9], [53, 77, 4, 9], ["decode", "prefill"]),  # mixed, with an empty request
])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(16, 8, 128), (16, 2, 256)])
def test_metal_kernels_match_the_cpu(dtype, q_lens, seq_lens, kernels, heads, kv_heads, head_dim):
    """The native Metal kernels (decode for one-query requests: single pass when every
    context fits one 512-position partition, else split and merge; prefill for longer
    ones) against the CPU oracle on the same inputs, at the Qwen3 geometry (GQA 2:1, head_dim
    128) and the Qwen3-Next / Qwen3.5 full-attention one (GQA 8:1, head_dim 256); the
    profiler names the kernels that ran."""
    check_metal_kernels(dtype, (heads, kv_heads, head_dim, 16, q_lens, seq_lens), kernels, seed=7)


@pytest.mark.skipif("metal" not in DEVICES, reason="no Metal device")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("q_lens, seq_lens, window, sinks, kernels", [
    ([1, 1], [600, 40], 512, None, ["decode"]),          # 600 positions, one partition seen
    ([1, 1], [600, 40], 0, SINKS, ["decode_split", "decode_merge"]),
    ([1, 1], [2000, 300], 600, SINKS, ["decode_split", "decode_merge"]),
    ([13, 1, 9], [70, 77, 9], 20, None, ["decode", "prefill"]),
    ([13, 1, 9], [70, 77, 9], 20, SINKS, ["decode", "prefill"]),
])
def test_metal_window_and_sink_kernels(dtype, q_lens, seq_lens, window, sinks, kernels):
    """Windows and sinks on the native kernels (the profiler names them; 0 reference-tier
    calls) against the CPU oracle, at the Gemma 3 1B head geometry (GQA 4, head_dim 256);
    a decode at context 600 with window 512 needs the single pass only."""
    check_metal_kernels(dtype, (4, 1, 256, 16, q_lens, seq_lens), kernels, seed=9, window=window,
                        sinks=None if sinks is None else np.float32(sinks[:4]))


@pytest.mark.skipif("metal" not in DEVICES, reason="no Metal device")
def test_metal_decode_reads_only_the_window():
    """A decode at context 4,096 (SmolLM2's 9 heads / 3 kv heads, head_dim 64, float16):
    the split-KV grid covers the positions the query sees, so window 1,024 runs 2 partitions
    of 512 positions per query head (9 x 2 threadgroups: 1,024 positions) where full
    attention runs 8 (4,096 positions). Every cache row before the window is NaN and its
    block-table entry -1."""
    def grid(window):
        rows = []
        metalrt.profiler.reset()
        metalrt.profiler.enable(True)
        try:
            result, expected = run_case("metal", "float16", 9, 3, 64, 16, [1], [4096], seed=5,
                                        window=window)
            metalrt.synchronize("metal")
            rows = {row["name"]: row for row in metalrt.profiler.rows()}
        finally:
            metalrt.profiler.enable(False)
            metalrt.profiler.reset()
        assert_matches(result, expected, "float16")
        split = rows["paged_attention_decode_split_f16"]
        assert rows["paged_attention_decode_merge_f16"]["threadgroups"] == 9
        return split["threadgroups"], tuple(split["last_grid"])

    assert grid(1024) == (9 * 2, (1, 9, 2))
    assert grid(0) == (9 * 8, (1, 9, 8))
