"""KV cache types (issue #36): q8_0 and q4_0 caches (GGML's block layouts,
metalrt.cache.kv_types) and float caches of another dtype than the model's, K and V each
of its own type.

Gates: the cache write (reshape_and_cache, qkv_rope_cache; CPU oracle, CPU fast tier,
Metal) is bit-exact with a numpy rendering of GGML's reference quantizers; attention over a
quantized cache (CPU oracle, CPU fast decode and prefill, the Metal decode, split and
prefill kernels, NaN-poisoned outputs, the kernels proven by the profiler with no
reference-tier call) matches float64 attention over the dequantized cache, and moves when
one block's scale is altered (the blocks are read, not a copy); the default model's logits
against the float32 cache at a 1k context (NMSE bars per type) and its greedy reference
with each type on the CPU and Metal; bad types are refused naming the expected ones."""
import numpy as np
import pytest

import metalrt
from conftest import nmse, poisoned, profiled, rand, requires_metal
from metalrt import ops
from metalrt.cache import kv_types
from test_paged_attention import reference

QUANTIZED = ("q8_0", "q4_0")
BLOCK = kv_types.QUANT_BLOCK


def quantize(rows: np.ndarray, kv_type: str) -> np.ndarray:
    """GGML's reference quantizer of rows [..., head_dim] (float32 values) to uint8
    [..., row_bytes]: q8_0 d = max|x| / 127, q = round-half-away(x / d); q4_0 d = (the x of
    largest |x|) / -8, q = min(15, trunc(x / d + 8.5)); x / d as x * (1 / d) in float32."""
    x = np.asarray(rows, np.float32).reshape(-1, BLOCK)
    if kv_type == "q8_0":
        d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    else:
        d = (x[np.arange(len(x)), np.abs(x).argmax(axis=1)] / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (x * inverse[:, None]).astype(np.float32)
    if kv_type == "q8_0":
        codes = (np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)).astype(np.int8).view(np.uint8)
    else:
        q = np.minimum(15, np.trunc((v + np.float32(8.5)).astype(np.float32))).astype(np.uint8)
        codes = q[:, :BLOCK // 2] | (q[:, BLOCK // 2:] << 4)
    blocks = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2), codes], axis=1)
    return blocks.reshape(*rows.shape[:-1], -1)


def dequantize(data: np.ndarray, kv_type: str, head_dim: int) -> np.ndarray:
    """float32 rows [..., head_dim] of uint8 [..., row_bytes]: x = d q (q8_0), d (q - 8) (q4_0)."""
    blocks = np.asarray(data, np.uint8).reshape(-1, kv_types.row_bytes(kv_type, BLOCK))
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    if kv_type == "q8_0":
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
    else:
        q = np.concatenate([blocks[:, 2:] & 15, blocks[:, 2:] >> 4], axis=1).astype(np.float32) - 8
    return (d * q).reshape(*data.shape[:-1], head_dim)


def test_bytes_per_token_formula():
    # SmolLM2-135M: 30 layers x 3 kv heads x head_dim 64, keys and values.
    per_token = {t: kv_types.bytes_per_token((t, t), 3, 64, 30) for t in kv_types.KV_TYPES}
    assert per_token == {"float32": 46080, "float16": 23040, "bfloat16": 23040, "q8_0": 12240,
                         "q4_0": 6480}
    assert kv_types.bytes_per_token(("q8_0", "float16"), 3, 64, 30) == 6120 + 11520


@pytest.mark.parametrize("device", ["cpu", pytest.param("metal", marks=requires_metal)])
@pytest.mark.parametrize("kv_type", QUANTIZED)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reshape_and_cache_quantizes_bit_exact(device, kv_type, dtype):
    kv_heads, head_dim, num_blocks = 3, 64, 4
    key = rand((6, kv_heads, head_dim), seed=1, dtype=dtype)
    value = rand((6, kv_heads, head_dim), seed=2, dtype=dtype)
    key[0, 1, :BLOCK] = 0.0                              # a block of zeros: d = 0
    slots = np.array([0, 17, -1, 63, 5, 40], np.int64)   # -1: padding, skipped
    width = kv_types.row_bytes(kv_type, head_dim)
    caches = [metalrt.zeros((num_blocks, 16, kv_heads, width), "uint8", device) for _ in range(2)]
    rows = profiled(lambda: ops.reshape_and_cache(
        metalrt.asarray(key, device=device, dtype=dtype), metalrt.asarray(value, device=device, dtype=dtype),
        caches[0], caches[1], slots)) if device == "metal" else ops.reshape_and_cache(
        metalrt.asarray(key, dtype=dtype), metalrt.asarray(value, dtype=dtype), caches[0], caches[1], slots)
    if device == "metal":
        assert rows[f"reshape_and_cache_kv_{'f32' if dtype == 'float32' else 'f16'}"] == 1
    for cache, source in zip(caches, (key, value)):
        expected = np.zeros((num_blocks * 16, kv_heads, width), np.uint8)
        keep = slots >= 0
        expected[slots[keep]] = quantize(source[keep].astype(np.float32), kv_type)
        np.testing.assert_array_equal(cache.numpy().reshape(expected.shape), expected)
    assert dequantize(caches[0].numpy().reshape(-1, kv_heads, width)[0], kv_type, head_dim)[1, :BLOCK].max() == 0


def attention_case(device, dtype, k_type, v_type, q_lens, seq_lens, head_dim=64, heads=9, kv_heads=3,
                   window=0, seed=0):
    """(result, float64 reference over the dequantized caches, run) of paged_attention over
    caches of k_type / v_type; run(key_bytes) reruns it over other key-cache contents."""
    rng = np.random.default_rng(seed)
    max_blocks = max(-(-s // 16) for s in seq_lens)
    num_blocks = len(seq_lens) * max_blocks + 1
    tables = rng.permutation(num_blocks)[:len(seq_lens) * max_blocks].reshape(len(seq_lens), max_blocks)
    tables = tables.astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    query = rand((sum(q_lens), heads, head_dim), seed=seed + 1, dtype=dtype)
    sides = []
    for kv_type, s in ((k_type, seed + 2), (v_type, seed + 3)):
        rows = rand((num_blocks, 16, kv_heads, head_dim), seed=s, dtype="float32")
        if kv_type in QUANTIZED:
            data = quantize(rows, kv_type)
            sides.append((data, dequantize(data, kv_type, head_dim), "uint8"))
        else:
            held = metalrt.asarray(rows, dtype=kv_type).numpy().astype(np.float32)
            sides.append((held, held, kv_type))
    seq_lens = np.array(seq_lens, np.int32)
    scale = head_dim ** -0.5

    def run(key_data):
        out = poisoned(query.shape, dtype, device)
        result = ops.paged_attention(metalrt.asarray(query, device=device, dtype=dtype),
                                     metalrt.asarray(key_data, device=device, dtype=sides[0][2]),
                                     metalrt.asarray(sides[1][0], device=device, dtype=sides[1][2]),
                                     tables, seq_lens, starts, scale, out=out, window=window)
        assert result.data_ptr() == out.data_ptr()
        return result.numpy().astype(np.float64)

    expected = reference(query.astype(np.float64), sides[0][1], sides[1][1], tables, seq_lens, starts, scale,
                         window)
    return run(sides[0][0]), expected, run, sides[0][0]


# Requests with one query (decode: one partition at 40, split partitions at 600), a
# prefill and a chunked prefill with context; the window case cuts the context.
# The second and third need the split decode: more than 512 positions (kDecodePartition).
BATCHES = [([1], [40]), ([1, 1], [600, 33]), ([20, 1, 7], [20, 700, 50])]


# The CPU paged_attention providers each tier case leaves on: the oracle; the fast decode
# (which serves prefills too when the prefill providers are off); the BLAS prefill
# provider (its batches' decode requests alone go to the fast decode).
TIERS = {"oracle": ("cpu_paged_attention",), "fast": ("cpu_fast_paged_attention",),
         "blas": ("cpu_blas_paged_attention", "cpu_fast_paged_attention")}


def cpu_providers(tier):
    names = metalrt.providers.list("paged_attention", "cpu")
    for name in names:
        metalrt.providers.set_enabled(name, name in TIERS[tier])
    return names


@pytest.mark.parametrize("tier", sorted(TIERS))
@pytest.mark.parametrize("k_type, v_type", [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "float16"),
                                             ("float16", "q4_0"), ("bfloat16", "bfloat16")])
def test_cpu_attention_reads_the_cache_types(tier, k_type, v_type):
    if tier == "blas" and "cpu_blas_paged_attention" not in metalrt.providers.list("paged_attention", "cpu"):
        pytest.skip("this build has no BLAS prefill attention")
    names = cpu_providers(tier)
    try:
        for q_lens, seq_lens in BATCHES:
            metalrt.providers.reset_stats()
            result, expected, run, keys = attention_case("cpu", "float32", k_type, v_type, q_lens, seq_lens)
            assert nmse(result, expected) <= 1e-10, (q_lens, seq_lens)
            if max(q_lens) > 1:
                assert metalrt.providers.stats("paged_attention", "cpu")["last_selected"] == TIERS[tier][0]
            if k_type in QUANTIZED:
                altered = keys.copy()
                altered[..., 1] ^= 0x40            # every key block's scale: the f16's exponent
                moved = run(altered)
                assert nmse(moved, expected) > 1e-3
        result, expected, _, _ = attention_case("cpu", "float32", k_type, v_type, [3, 1], [90, 70], window=24)
        assert nmse(result, expected) <= 1e-10
    finally:
        for name in names:
            metalrt.providers.set_enabled(name, True)


@requires_metal
@pytest.mark.parametrize("k_type, v_type", [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "float16")])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_metal_attention_kernels_read_the_cache_types(k_type, v_type, dtype):
    suffix = "f32" if dtype == "float32" else "f16"
    bar = 1e-10 if dtype == "float32" else 5e-6        # an f16 query and output add their rounding
    for (q_lens, seq_lens), kernels in zip(BATCHES, (["decode"], ["decode_split", "decode_merge"],
                                                      ["prefill", "decode_split", "decode_merge"])):
        metalrt.providers.reset_stats()
        box = {}
        rows = profiled(lambda: box.update(case=attention_case("metal", dtype, k_type, v_type, q_lens, seq_lens)))
        result, expected, run, keys = box["case"]
        assert nmse(result, expected) <= bar, (q_lens, seq_lens)
        for kernel in kernels:
            assert rows.get(f"paged_attention_{kernel}_{suffix}", 0) >= 1, (kernel, rows)
        assert metalrt.providers.stats("paged_attention", "metal")["reference_hits"] == 0
        altered = keys.copy()
        altered[..., 1] ^= 0x40
        assert nmse(run(altered), expected) > 1e-3


def qkv_case(device, dtype, k_type, v_type, fused=True):
    """(q, key cache bytes, value cache bytes) of qkv_rope_cache over caches of k_type /
    v_type, or (fused False) of qkv_split, rope_neox of q and k and reshape_and_cache."""
    heads, kv_heads, head_dim, tokens = 9, 3, 64, 5
    qkv = metalrt.asarray(rand((tokens, (heads + 2 * kv_heads) * head_dim), seed=4, dtype=dtype),
                          device=device, dtype=dtype)
    positions = np.array([0, 7, 100, 4095, 3], np.int32)
    slots = np.array([3, -1, 20, 47, 0], np.int64)
    caches = []
    for kv_type in (k_type, v_type):
        width, side_dtype = kv_types.storage(kv_type, head_dim)
        caches.append(metalrt.zeros((3, 16, kv_heads, width), side_dtype, device))
    if fused:
        q = ops.qkv_rope_cache(qkv, positions, caches[0], caches[1], slots, heads, head_dim, 10000.0,
                               out=poisoned((tokens, heads, head_dim), dtype, device))
    else:
        q, k, v = ops.qkv_split(qkv, heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)
        q = ops.rope_neox(q.reshape(tokens, heads, head_dim), positions, head_dim, 10000.0)
        k = ops.rope_neox(k.reshape(tokens, kv_heads, head_dim), positions, head_dim, 10000.0)
        ops.reshape_and_cache(k, v.reshape(tokens, kv_heads, head_dim), caches[0], caches[1], slots)
    return q.numpy(), caches[0].numpy(), caches[1].numpy()


@pytest.mark.parametrize("device", ["cpu", pytest.param("metal", marks=requires_metal)])
@pytest.mark.parametrize("k_type, v_type", [("q8_0", "q8_0"), ("q4_0", "float16"), ("float16", "q4_0")])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_qkv_rope_cache_quantizes_as_the_unfused_ops(device, k_type, v_type, dtype):
    """The CPU fast tier / the Metal kernel, byte for byte the unfused ops on that device
    (qkv_split, rope, reshape_and_cache: on the CPU, the oracle's composition)."""
    metalrt.providers.reset_stats()
    box = {} if device == "metal" else {"out": qkv_case(device, dtype, k_type, v_type)}
    if device == "metal":
        rows = profiled(lambda: box.update(out=qkv_case(device, dtype, k_type, v_type)))
        assert rows[f"qkv_rope_cache_kv_neox_{'f32' if dtype == 'float32' else 'f16'}"] == 1
        assert metalrt.providers.stats("qkv_rope_cache", "metal")["reference_hits"] == 0
    else:
        assert metalrt.providers.stats("qkv_rope_cache", "cpu")["last_selected"] == "cpu_fast_qkv_rope_cache"
    unfused = qkv_case(device, dtype, k_type, v_type, fused=False)
    for a, b in zip(box["out"], unfused):
        np.testing.assert_array_equal(a, b)
    assert unfused[1].any() and unfused[2].any()


def test_bad_kv_types_are_refused():
    with pytest.raises(ValueError, match=r"unknown KV cache type 'q5_0'; expected one of float32, float16, "
                                         r"bfloat16, q8_0, q4_0"):
        kv_types.parse_kv_type("q5_0", 64, "float32")
    with pytest.raises(ValueError, match=r"q4_0 needs head_dim a multiple of 32 .* the model's is 80; "
                                         r"expected float32, float16 or bfloat16"):
        kv_types.parse_kv_type(("f16", "q4_0"), 80, "float32")
    with pytest.raises(TypeError, match=r"a \(key, value\) pair"):
        kv_types.parse_kv_type(("q8_0",), 64, "float32")
    model, _ = metalrt.load(device="cpu")
    with pytest.raises(ValueError, match=r"unknown KV cache type 'int4'"):
        metalrt.load(device="cpu", kv_type="int4")
    # An op given a uint8 cache of no quantized layout names the layouts it takes.
    with pytest.raises(ValueError, match=r"key_cache must be .* or uint8 \[num_blocks, block_size, kv_heads, "
                                         r"68 \(q8_0\) or 36 \(q4_0\)\]"):
        ops.reshape_and_cache(np.zeros((1, 3, 64), np.float32), np.zeros((1, 3, 64), np.float32),
                              metalrt.zeros((1, 16, 3, 64), "uint8"), metalrt.zeros((1, 16, 3, 68), "uint8"), [0])
    assert model.kv_type == ("float32", "float32")


# NMSE of the default model's logits (last 64 positions of a 1,024-token prompt, one
# prefill) against the float32 cache, ~3x what bench/kv_types.py measured (float16
# 1.8e-5, q8_0 2.7e-5, q4_0 2.8e-3; bfloat16 0: the prefill's bf16 attention products
# round K and V to bfloat16 already, docs/cpu.md).
LOGIT_BARS = {"float16": 6e-5, "bfloat16": 1e-6, "q8_0": 8e-5, "q4_0": 8e-3}


@pytest.fixture(scope="module")
def f32_logits():
    """(model, prompt, logits with the float32 cache)."""
    model, _ = metalrt.load(device="cpu")
    prompt = [int(t) for t in np.random.default_rng(7).integers(100, 40000, 1024)]
    return model, prompt, model.logits(prompt)[-64:]


@pytest.mark.parametrize("kv_type", sorted(LOGIT_BARS))
def test_default_model_logits_per_kv_type(kv_type, f32_logits):
    model, prompt, base = f32_logits
    model.set_kv_type(kv_type)
    try:
        assert model.new_cache(1).layers[0].kv_type == (kv_type, kv_type)
        error = nmse(model.logits(prompt)[-64:], base)
    finally:
        model.set_kv_type(None)
    assert error <= LOGIT_BARS[kv_type]
    if kv_type != "bfloat16":
        assert error > 0.0


@pytest.mark.parametrize("device, kv_type", [("cpu", "float16"), ("cpu", "bfloat16"), ("cpu", "q8_0"),
                                              pytest.param("metal", "q8_0", marks=requires_metal)])
def test_greedy_reference_per_kv_type(device, kv_type):
    """test_default_model_generation's hidden-prompt reference with each KV type (on
    Metal, ~65 s on the simulated device, q8_0 alone: float16 is the Metal default, which
    test_default_model_generation runs, and bfloat16 takes the same kernels' float loads
    and held there too when run)."""
    model, tokenizer = metalrt.load(device=device, kv_type=kv_type)
    metalrt.providers.reset_stats()
    tokens = [r.token for r in metalrt.stream_generate(model, tokenizer, "Once upon a time", max_tokens=10)]
    assert tokens == [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228]
    if device == "metal":
        assert [op for op in metalrt.providers.ops()
                if metalrt.providers.stats(op, "metal")["reference_hits"]] == []


def test_prompt_cache_file_records_the_kv_type(tmp_path):
    """A q8_0 cache's prefix round-trips through a file into a q8_0 model (the blocks as
    uint8, the prefix taken from the file) and is refused by a float32 / q8_0,f16 one."""
    model, tokenizer = metalrt.load(device="cpu", kv_type="q8_0")
    ids = [int(t) for t in np.random.default_rng(3).integers(100, 40000, 70)]
    cache = metalrt.make_prompt_cache(model)
    reference = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, 4, prompt_cache=cache)]
    path = str(tmp_path / "q8.safetensors")
    metalrt.save_prompt_cache(path, cache)
    again, _ = metalrt.load(device="cpu", kv_type="q8_0")
    out = list(metalrt.stream_generate(again, tokenizer, ids, 4, prompt_cache=metalrt.load_prompt_cache(path, model=again)))
    assert [r.token for r in out] == reference and out[-1].prompt_cached_tokens == 64
    for other, name in (("float32", "float32"), (("q8_0", "f16"), "q8_0,float16")):
        foreign, _ = metalrt.load(device="cpu", kv_type=other)
        with pytest.raises(ValueError, match=rf"{path} is refused: its KV type is 'q8_0', this model's "
                                             rf"cache has '{name}'"):
            metalrt.load_prompt_cache(path, model=foreign)


def test_serve_kv_type_setting():
    """``metalrt serve --kv-type`` parses TYPE or KEY,VALUE and reaches metalrt.load: a bad
    one is refused while the first model loads, before anything listens."""
    import argparse

    from metalrt.server.main import add_arguments, build_app

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--kv-type", "q8_0,f16"]).kv_type == ("q8_0", "f16")
    assert parser.parse_args([]).kv_type is None
    with pytest.raises(ValueError, match=r"unknown KV cache type 'q5_0'"):
        build_app(device="cpu", kv_type="q5_0")


def test_metal_default_kv_type_is_float16_for_a_float32_model():
    """Issue 40 cause 2: half the K/V bytes a Metal decode step reads; the CPU and models
    computing in 16 bits keep their dtype."""
    assert kv_types.device_default("metal", "float32") == "float16"
    assert kv_types.device_default("metal", "bfloat16") == "bfloat16"
    assert kv_types.device_default("cpu", "float32") == "float32"
    cpu, _ = metalrt.load(device="cpu")
    assert cpu.kv_type == ("float32", "float32")
    if metalrt.is_available("metal"):
        model, _ = metalrt.load(device="metal")
        assert model.kv_type == ("float16", "float16")
        cache = model.new_cache(4)
        assert cache.nbytes == 4 * 16 * kv_types.bytes_per_token(("float16", "float16"), 3, 64, 30)
        model.set_kv_type("float32")
        assert model.kv_type == ("float32", "float32")
        model.set_kv_type(None)
        assert model.kv_type == ("float16", "float16")
