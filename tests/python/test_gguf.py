"""GGUF gates: dequantization against float64 references on synthetic blocks, the Llama
Q/K un-permute (a tool: the loader keeps the stored rows), metadata → config, and every
bad-file error. Files are written in the
test with the ``gguf`` package's writer."""
import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from metalrt.loaders import load_model_files
from metalrt.loaders.gguf import dequantize_tensor, unpermute_qk
from metalrt.loaders.gguf_file import GGUFFile
from tiny_models import TinyLlama, gguf_name, llama_cpp_qk_rows, write_llama_gguf

SHAPES = [(1, 32), (3, 96), (33, 64), (7, 288)]


def write_tensors(path, tensors):
    """GGUF with only ``tensors``: name → (array, raw_dtype or None)."""
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (data, qtype) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile(path)


def f16_bytes(x):
    return x.astype(np.float16).reshape(*x.shape, 1).view(np.uint8)


def q4_1_case(rng, rows, cols):
    """(raw bytes [rows, cols/32·20], float64 reference): d, m and every nibble random,
    one all-zero scale block, extremes 0 and 15 present."""
    nb = cols // 32
    d = rng.uniform(-0.05, 0.05, (rows, nb)).astype(np.float16)
    d[0, 0] = 0
    m = rng.uniform(-1, 1, (rows, nb)).astype(np.float16)
    q = rng.integers(0, 16, (rows, nb, 32)).astype(np.uint8)
    q[-1, -1, :2] = [0, 15]
    packed = q[..., :16] | (q[..., 16:] << 4)  # byte j: element j low, j + 16 high
    raw = np.concatenate([f16_bytes(d), f16_bytes(m), packed], axis=-1).reshape(rows, nb * 20)
    ref = d.astype(np.float64)[..., None] * q + m.astype(np.float64)[..., None]
    return raw, ref.reshape(rows, cols)


def q8_0_case(rng, rows, cols):
    nb = cols // 32
    d = rng.uniform(-0.02, 0.02, (rows, nb)).astype(np.float16)
    q = rng.integers(-128, 128, (rows, nb, 32)).astype(np.int8)
    raw = np.concatenate([f16_bytes(d), q.view(np.uint8)], axis=-1).reshape(rows, nb * 34)
    return raw, (d.astype(np.float64)[..., None] * q).reshape(rows, cols)


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_q4_1_matches_float64_reference(tmp_path, rows, cols):
    raw, ref = q4_1_case(np.random.default_rng(rows * cols), rows, cols)
    gf = write_tensors(tmp_path / "q.gguf", {"w": (raw, T.Q4_1)})
    got = dequantize_tensor(gf, "w")
    assert got.dtype == np.float32 and got.shape == (rows, cols)
    # d·q is exact in float32 (4-bit q, 11-bit d), so only the final add rounds.
    np.testing.assert_allclose(got, ref, rtol=2.0 ** -24, atol=0)


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_q8_0_matches_float64_reference_exactly(tmp_path, rows, cols):
    raw, ref = q8_0_case(np.random.default_rng(rows + cols), rows, cols)
    gf = write_tensors(tmp_path / "q.gguf", {"w": (raw, T.Q8_0)})
    got = dequantize_tensor(gf, "w")
    assert got.dtype == np.float32 and got.shape == (rows, cols)
    np.testing.assert_array_equal(got.astype(np.float64), ref)  # 8-bit q · 11-bit d is exact


def test_float_types_are_exact(tmp_path):
    rng = np.random.default_rng(1)
    f32 = rng.standard_normal((5, 33)).astype(np.float32)
    f16 = rng.standard_normal((3, 31)).astype(np.float16)
    bf16_bits = rng.integers(0, 1 << 16, (2, 17), dtype=np.uint16)
    bf16_bits[(bf16_bits & 0x7F80) == 0x7F80] = 0x3F80  # no Inf/NaN patterns: compare values
    gf = write_tensors(tmp_path / "f.gguf", {"a": (f32, None), "b": (f16, None),
                                             "c": (bf16_bits.view(np.uint8), T.BF16)})
    np.testing.assert_array_equal(dequantize_tensor(gf, "a"), f32)
    np.testing.assert_array_equal(dequantize_tensor(gf, "b"), f16.astype(np.float32))
    expected_bf16 = np.array([[struct_bf16(b) for b in row] for row in bf16_bits])
    np.testing.assert_array_equal(dequantize_tensor(gf, "c").astype(np.float64), expected_bf16)


def struct_bf16(bits):
    """bfloat16 from its definition: sign, 8-bit exponent (bias 127), 7-bit mantissa."""
    sign = -1.0 if bits >> 15 else 1.0
    exp, man = (int(bits) >> 7) & 0xFF, int(bits) & 0x7F
    if exp == 0:
        return sign * man * 2.0 ** -133
    return sign * (1 + man / 128) * 2.0 ** (exp - 127)


@pytest.mark.parametrize("heads,head_dim", [(9, 64), (3, 64), (1, 4), (2, 128)])
def test_unpermute_inverts_llama_cpp_row_order(heads, head_dim):
    w = np.random.default_rng(heads).standard_normal((heads * head_dim, 7)).astype(np.float32)
    permuted = llama_cpp_qk_rows(w, heads)
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(unpermute_qk(permuted, heads), w)


@pytest.mark.parametrize("tied", [True, False])
def test_llama_gguf_loads_as_hf_state_dict(tmp_path, tied):
    model = TinyLlama(tied=tied, heads=4, kv_heads=2, head_dim=16)
    written = write_llama_gguf(tmp_path / "m.gguf", model)
    files = load_model_files(tmp_path / "m.gguf")
    assert files.source == str(tmp_path / "m.gguf")
    assert set(files.weights) == set(written)
    assert ("lm_head.weight" in files.weights) == (not tied)
    for name, value in written.items():  # Q/K rows as the file stores them (no copy)
        if ".self_attn.q_proj." in name or ".self_attn.k_proj." in name:
            heads = model.heads if ".q_proj." in name else model.kv_heads
            value = llama_cpp_qk_rows(value, heads)
        np.testing.assert_array_equal(files.weights[name], value, err_msg=name)
    assert files.config["rope_interleaved"] is True
    expected = model.hf_config()
    for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                "rms_norm_eps", "rope_theta", "tie_word_embeddings", "bos_token_id",
                "eos_token_id", "hidden_act", "max_position_embeddings"):
        assert files.config[key] == expected[key], key
    assert files.tokenizer.eos_token_ids == (2,)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_gguf_loads_as_hf_state_dict(tmp_path, arch):
    # Qwen files keep the Hugging Face row order; Qwen2 adds Q/K/V biases, Qwen3 head norms.
    model = TinyLlama(arch=arch, heads=4, kv_heads=1, head_dim=32)
    written = write_llama_gguf(tmp_path / "q.gguf", model)
    files = load_model_files(tmp_path / "q.gguf")
    assert set(files.weights) == set(written)
    for name, value in written.items():
        np.testing.assert_array_equal(files.weights[name], value, err_msg=name)
    assert files.config["model_type"] == arch and files.config["head_dim"] == 32
    assert files.config["attention_bias"] == (arch == "qwen2")


def test_directory_with_one_gguf_loads_it(tmp_path):
    write_llama_gguf(tmp_path / "m.gguf", TinyLlama(layers=1))
    assert load_model_files(tmp_path).source == str(tmp_path / "m.gguf")


# --- bad files -------------------------------------------------------------------------


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.gguf"
    write_llama_gguf(path, TinyLlama(layers=1))
    return path


def rewrite(path, data):
    path.write_bytes(data)
    return path


def test_truncated_tensor_data(good_file, tmp_path):
    data = good_file.read_bytes()
    bad = rewrite(tmp_path / "cut.gguf", data[:-100])
    with pytest.raises(ValueError, match=r"\[gguf\] .*cut\.gguf: tensor '.+' data \[\d+, \d+\) "
                                         r"must be 32-byte aligned and inside the file"):
        load_model_files(bad)


def test_truncated_metadata(good_file, tmp_path):
    bad = rewrite(tmp_path / "cut.gguf", good_file.read_bytes()[:300])
    with pytest.raises(ValueError, match=r"\[gguf\] .*cut\.gguf: truncated or corrupt: "
                                         r".+ needs bytes \[\d+, \d+\) but the file has 300 bytes"):
        load_model_files(bad)


def test_every_truncation_raises_value_error(good_file, tmp_path):
    data = good_file.read_bytes()
    data_start = min(t.offset for t in GGUFFile(good_file).tensors.values())
    for cut in [*range(0, data_start, 97), data_start, len(data) - 1]:
        with pytest.raises(ValueError, match=r"^\[gguf\] .*c\.gguf: "):
            load_model_files(rewrite(tmp_path / "c.gguf", data[:cut]))


@pytest.mark.parametrize("content", [b"", b"GG", b"GGML" + b"\0" * 64])
def test_wrong_magic(tmp_path, content):
    bad = rewrite(tmp_path / "x.gguf", content)
    with pytest.raises(ValueError, match=r"\[gguf\] .*x\.gguf: not a GGUF file: expected magic"):
        load_model_files(bad)


def test_unsupported_version(good_file, tmp_path):
    data = bytearray(good_file.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    with pytest.raises(ValueError, match=r"v\.gguf: GGUF version 1 is not supported"):
        load_model_files(rewrite(tmp_path / "v.gguf", bytes(data)))


def test_unknown_architecture(tmp_path):
    write_llama_gguf(tmp_path / "a.gguf", TinyLlama(layers=1), arch="mamba9")
    with pytest.raises(ValueError, match=r"a\.gguf: general\.architecture is 'mamba9'; "
                                         r"supported architectures are llama, qwen2, qwen3"):
        load_model_files(tmp_path / "a.gguf")


def test_unsupported_quant_type(tmp_path):
    model = TinyLlama(layers=1)
    name = "blk.0.ffn_up.weight"
    iq4 = np.zeros((model.ffn, model.hidden // 32 * 18), np.uint8)  # IQ4_NL: 18-byte blocks
    write_llama_gguf(tmp_path / "q.gguf", model, raw={name: (iq4, T.IQ4_NL)})
    with pytest.raises(ValueError, match=r"q\.gguf: tensor 'blk\.0\.ffn_up\.weight' has type "
                                         r"IQ4_NL; supported types are F32, F16, BF16, Q4_0, Q4_1, "
                                         r"Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K"):
        load_model_files(tmp_path / "q.gguf")


def test_missing_tensor(tmp_path):
    write_llama_gguf(tmp_path / "m.gguf", TinyLlama(layers=2), drop=("blk.1.ffn_down.weight",))
    with pytest.raises(ValueError, match=r"m\.gguf: missing tensor 'blk\.1\.ffn_down\.weight' "
                                         r"\(expected for a llama model with 2 layers\)"):
        load_model_files(tmp_path / "m.gguf")


def test_wrong_q_rows(tmp_path):
    model = TinyLlama(layers=1)
    name = gguf_name("model.layers.0.self_attn.q_proj.weight")
    short = np.zeros((model.heads * model.head_dim - 16, model.hidden * 4), np.uint8)
    write_llama_gguf(tmp_path / "s.gguf", model, raw={name: (short, T.F32)})
    with pytest.raises(ValueError, match=r"s\.gguf: tensor 'blk\.0\.attn_q\.weight' must have "
                                         r"shape \[64, 64\], got \[48, 64\]"):
        load_model_files(tmp_path / "s.gguf")


def test_tensor_not_in_the_architecture(tmp_path):
    extra = {"blk.0.attn_q_norm.weight": np.ones(16, np.float32)}  # Qwen3's, not Llama's
    write_llama_gguf(tmp_path / "r.gguf", TinyLlama(layers=1), extra=extra)
    with pytest.raises(ValueError, match=r"r\.gguf: tensor 'blk\.0\.attn_q_norm\.weight' is not "
                                         r"part of a llama model with 1 layers"):
        load_model_files(tmp_path / "r.gguf")


def test_rope_freqs_of_the_wrong_length(tmp_path):
    # Llama 3.1 files: one RoPE factor per rotary pair (head_dim 16: 8).
    extra = {"rope_freqs.weight": np.ones(7, np.float32)}
    write_llama_gguf(tmp_path / "r.gguf", TinyLlama(layers=1), extra=extra)
    with pytest.raises(ValueError, match=r"r\.gguf: tensor 'rope_freqs\.weight' must have shape \[8\], got \[7\]"):
        load_model_files(tmp_path / "r.gguf")


def test_inconsistent_head_counts(tmp_path):
    write_llama_gguf(tmp_path / "h.gguf", TinyLlama(layers=1, heads=4, kv_heads=3))
    with pytest.raises(ValueError, match=r"h\.gguf: 4 attention heads, 3 KV heads and head_dim "
                                         r"16: expected heads divisible by KV heads"):
        load_model_files(tmp_path / "h.gguf")


def test_unknown_ggml_type(good_file, tmp_path):
    data = bytearray(good_file.read_bytes())
    name = b"output_norm.weight"
    type_at = data.index(name) + len(name) + 4 + 8  # after n_dims (u32) and one u64 dim
    data[type_at:type_at + 4] = (999).to_bytes(4, "little")
    with pytest.raises(ValueError, match=r"t\.gguf: tensor 'output_norm\.weight' has unknown "
                                         r"GGML type 999"):
        load_model_files(rewrite(tmp_path / "t.gguf", bytes(data)))


def test_missing_path_and_unknown_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\[load_model_files\] .*nope"):
        load_model_files(tmp_path / "nope")
    with pytest.raises(ValueError, match=r"\[load_model_files\] .*: expected a Hugging Face"):
        load_model_files(tmp_path)


def _metadata_only(kv: bytes, n_kv: int = 1) -> bytes:
    """A GGUF v3 file of no tensors and ``n_kv`` metadata pairs written as ``kv``."""
    return b"GGUF" + struct.pack("<IQQ", 3, 0, n_kv) + kv


def _key(name: bytes) -> bytes:
    return struct.pack("<Q", len(name)) + name


def test_deeply_nested_metadata_arrays_are_a_value_error(tmp_path):
    # ARRAY of ARRAY of ... 20,000 levels at 12 bytes each: recursion must stay bounded.
    array_of_array = struct.pack("<IQ", gguf.GGUFValueType.ARRAY, 1)
    kv = _key(b"a") + struct.pack("<I", gguf.GGUFValueType.ARRAY) + array_of_array * 20000
    bad = rewrite(tmp_path / "n.gguf", _metadata_only(kv))
    with pytest.raises(ValueError, match=r"\[gguf\] .*n\.gguf: truncated or corrupt: metadata key 'a' "
                                         r"nests arrays more than 8 deep"):
        GGUFFile(bad)


def test_a_non_integer_alignment_is_a_value_error(tmp_path):
    kv = _key(b"general.alignment") + struct.pack("<I", gguf.GGUFValueType.STRING) + _key(b"abc")
    bad = rewrite(tmp_path / "a.gguf", _metadata_only(kv))
    with pytest.raises(ValueError, match=r"\[gguf\] .*a\.gguf: general\.alignment must be an "
                                         r"integer, got 'abc'"):
        GGUFFile(bad)
