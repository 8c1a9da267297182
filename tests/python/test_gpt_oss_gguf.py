"""gpt-oss from a GGUF file written by llama.cpp's converter (``gpt_oss_gguf_fixtures``: a
small twin in the released MXFP4 layout, its experts repacked by the converter into
ggml's MXFP4 gate, up and down stacks), on the CPU and the (simulated) Metal device.
Bars: the same logits, bit for bit, as metalrt's load of the twin's Hugging Face
directory (the same weights; the GGUF's separate gate and up stacks run as one fused
expert GEMM and swiglu_oai on halves, the directory's interleaved gate|up as one
stack); transformers' fp32 logits on the weights it dequantizes within
test_gpt_oss.py's bar (max |Δlogit| <= 1e-3 x range) on prompts of 40 and 150 tokens
(the window, 16, below both), its 12 greedy tokens, no op on the reference tier and on
Metal the mxfp4_gguf MoE kernel dispatched. The file rewritten with float expert stacks
(the converter's layout for a float checkpoint) gives the same logits. A file without a
tensor or key the model needs is a ValueError naming it."""
import functools

import gguf
import numpy as np
import pytest
import torch  # test dependency (the "test" extra)

import gpt_oss_gguf_fixtures as fixtures
import metalrt
from conftest import DEVICES, profiled
from metalrt.loaders import load_model_files
from metalrt.loaders.gguf import dequantize_tensor, load_gguf
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.loaders.quants import QuantizedWeight, dequantize_weight
from test_gpt_oss import assert_close, clamped_shares, reference_tier_ops

GREEDY_TOKENS = 12
PROVIDED = ("moe_matmul_bt", "silu_and_mul", "moe_bias_add")


@functools.lru_cache(maxsize=None)
def reference():
    return fixtures.reference_model(fixtures.fixture()["hf"])


@functools.lru_cache(maxsize=None)
def loaded(device, kind="f32", kv_type=None):
    return metalrt.load(str(fixtures.fixture()[kind]), device=device, kv_type=kv_type)


def prompt(length, seed):
    return np.random.default_rng(seed).integers(0, fixtures.VOCAB, length).tolist()


def reference_logits(ids):
    with torch.no_grad():
        return reference()(torch.tensor([ids])).logits[0].double().numpy()


def test_the_clamp_bites():
    """The twin's gate|up values pass the SwiGLU limit (7), so the clamps are tested."""
    gate, up = clamped_shares(reference(), prompt(40, 40))
    assert gate > 0.03 and up > 0.03


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [40, 150])
def test_gguf_matches_the_directory_and_transformers(length, device):
    model, _ = loaded(device)
    ids = prompt(length, length)
    metalrt.providers.reset_stats()
    got = []
    kernels = profiled(lambda: got.append(model.logits(ids))) if device == "metal" else got.append(
        model.logits(ids))
    got = got[0]
    assert reference_tier_ops(device) == []
    # The CPU's experts on the quantized GEMV (MXFP4 in GGUF's layout).
    providers = ({op: f"metal_{op}" for op in PROVIDED} if device == "metal" else
                 {"moe_matmul_bt": "cpu_fast_moe_matmul_bt", "silu_and_mul": "cpu_fast_silu_and_mul",
                  "moe_bias_add": "cpu_fast_moe_bias_add"})
    for op, provider in providers.items():
        assert metalrt.providers.stats(op, device)["last_selected"] == provider
    # One fused gate|up and one down expert GEMM per layer.
    assert metalrt.providers.stats("moe_matmul_bt", device)["calls"] == 2 * fixtures.LAYERS
    if device == "metal":
        assert kernels["moe_matmul_bt_gemm_mxfp4_gguf_f32"] == 2 * fixtures.LAYERS
    assert got.dtype == np.float32 and got.shape == (length, fixtures.VOCAB)
    directory = loaded(device, "hf")[0].logits(ids)
    if device == "cpu":
        # The CPU GEMV's kernels for the two MXFP4 layouts (GGUF's blocks, the directory's
        # split codes and scales) round in their own orders, and prompt chunks of <= 16
        # tokens run as decode rows (one-row GEMVs): measured max 2.2e-5 of the range at
        # 150 tokens, a tenth of the 1e-3 x range bar against transformers.
        np.testing.assert_allclose(got, directory, rtol=0, atol=1e-4 * (directory.max() - directory.min()))
    else:
        np.testing.assert_array_equal(got, directory)
    assert_close(got, reference_logits(ids))


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_tokens_match_transformers(device):
    # A float32 cache, as transformers computes: this random twin's 11th token is a near
    # tie (top-2 logits 8.5e-5 apart, 1.5e-5 of their range), which the Metal default's
    # float16 cache (logits within 1e-4 of the range, test_gguf_matches_...) flips.
    model, tokenizer = loaded(device, kv_type="float32")
    ids = prompt(40, 1)
    with torch.no_grad():
        expected = reference().generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS,
                                        do_sample=False, pad_token_id=0)[0, len(ids):].tolist()
    # Prefill in chunks of 8 tokens (chunks cross the window), then paged decode steps.
    metalrt.providers.reset_stats()
    got = [r.token for r in metalrt.stream_generate(model, tokenizer, ids, max_tokens=GREEDY_TOKENS,
                                                    max_batched_tokens=8)]
    assert reference_tier_ops(device) == []
    assert got == expected


def test_file_is_read_back_into_transformers_semantics():
    """llama.cpp's metadata and names give the twin's config and tensors; the MXFP4
    stacks are the file's bytes, and gate / up are the even / odd rows of the released
    interleaved gate_up_proj."""
    path = fixtures.fixture()["f32"]
    files = load_model_files(path)
    config = files.config
    assert config["model_type"] == "gpt_oss" and config["architectures"] == ["GptOssForCausalLM"]
    assert config["layer_types"] == ["sliding_attention", "full_attention"]
    assert (config["sliding_window"], config["num_local_experts"], config["num_experts_per_tok"],
            config["intermediate_size"], config["head_dim"]) == (16, 6, 4, 64, 64)
    assert config["rope_parameters"] == {
        "rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "rope_theta": 150000.0, "truncate": False}
    assert "rope_scaling" not in config
    raw = GGUFFile(path)
    hf = load_model_files(fixtures.fixture()["hf"]).weights
    p = "model.layers.1.mlp.experts."
    for proj in ("gate", "up", "down"):
        w = files.weights[f"{p}{proj}_proj.weight"]
        assert isinstance(w, QuantizedWeight) and w.format == "mxfp4_gguf"
        assert w.shape == ((6 * 64, 64))
        stored = raw.raw(f"blk.1.ffn_{proj}_exps.weight")
        assert whole_buffer_bytes(w.data) == path.stat().st_size   # a view of the file
        assert w.data.tobytes() == stored.tobytes()
    # transformers' dequantized gate_up_proj [E, H, 2I]: gate at even, up at odd columns.
    gate_up = reference().model.layers[1].mlp.experts.gate_up_proj.detach().numpy()
    for proj, columns in (("gate", gate_up[..., ::2]), ("up", gate_up[..., 1::2])):
        got = dequantize_weight(files.weights[f"{p}{proj}_proj.weight"]).reshape(6, 64, 64)
        np.testing.assert_array_equal(got, columns.transpose(0, 2, 1))
    bias = hf[p + "gate_up_proj_bias"]
    np.testing.assert_array_equal(files.weights[p + "gate_proj.bias"], bias[:, ::2])
    np.testing.assert_array_equal(files.weights[p + "up_proj.bias"], bias[:, 1::2])
    np.testing.assert_array_equal(files.weights[p + "down_proj.bias"], hf[p + "down_proj_bias"])
    for name in ("model.layers.0.self_attn.sinks", "model.layers.0.mlp.router.weight",
                 "model.layers.0.mlp.router.bias", "model.layers.1.post_attention_layernorm.weight",
                 "model.layers.1.self_attn.o_proj.bias"):
        assert np.abs(hf[name]).max() > 0.1   # randomised, not an init's zeros or ones
        np.testing.assert_array_equal(files.weights[name], hf[name])


def whole_buffer_bytes(array):
    """The size of the buffer (``loaders.file_map.map_file``'s memoryview of a file) an
    array is a view of; None for an array that owns its data."""
    while isinstance(array, np.ndarray):
        array = array.base
    return array.nbytes if isinstance(array, memoryview) else None


def rewritten(tmp_path, drop_key=None, drop_tensor=None, dequantized=False):
    """The fixture's file written again (gguf-py's writer, the architecture's metadata
    and every tensor's raw bytes) without one metadata key or tensor; ``dequantized``:
    the MXFP4 expert stacks as F32 [E, N, K], what the converter writes from a float
    checkpoint."""
    source = GGUFFile(fixtures.fixture()["f32"])
    path = tmp_path / "bad.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt-oss")
    writer.add_vocab_size(fixtures.VOCAB)
    for key, value in source.metadata.items():
        if not key.startswith("gpt-oss.") or key == drop_key:
            continue
        if isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value) if isinstance(value, int) else writer.add_string(key, value)
    for name, info in source.tensors.items():
        if name == drop_tensor:
            continue
        raw = source.raw(name)
        if dequantized and info.ggml_type == gguf.GGMLQuantizationType.MXFP4:
            writer.add_tensor(name, dequantize_tensor(source, name))
        elif info.ggml_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, raw.view(np.float32).reshape(info.shape))
        else:   # block bytes, rows of the last dimension
            writer.add_tensor(name, raw.reshape(*info.shape[:-1], -1), raw_dtype=info.ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_rewritten_file_loads(tmp_path):
    """The rewriting of the bad-input cases keeps a good file good (its model part: the
    rewritten file has no tokenizer)."""
    config, weights, _ = load_gguf(rewritten(tmp_path))
    assert config["sliding_window"] == 16
    assert sorted(weights) == sorted(load_model_files(fixtures.fixture()["f32"]).weights)


def test_float_expert_stacks(tmp_path):
    """A file with float expert stacks (the converter's output from a float checkpoint)
    loads them as float and gives the MXFP4 file's logits on the same values."""
    config, weights, _ = load_gguf(rewritten(tmp_path, dequantized=True))
    gate = weights["model.layers.0.mlp.experts.gate_proj.weight"]
    assert isinstance(gate, np.ndarray) and gate.shape == (6, 64, 64)
    ids = prompt(40, 3)
    # Both on the oracle's f32 expert dot (the float stacks' only CPU provider).
    metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", False)
    try:
        expected = loaded("cpu")[0].logits(ids)
    finally:
        metalrt.providers.set_enabled("cpu_fast_moe_matmul_bt", True)
    got = metalrt.models.build_model(config, weights, "cpu").logits(ids)
    assert np.abs(got - expected).max() <= 1e-5 * (expected.max() - expected.min())


@pytest.mark.parametrize("tensor", ["blk.1.attn_sinks.weight", "blk.0.ffn_up_exps.bias",
                                    "blk.0.ffn_gate_inp.bias", "blk.1.ffn_down_exps.weight"])
def test_missing_tensor_is_named(tmp_path, tensor):
    path = rewritten(tmp_path, drop_tensor=tensor)
    with pytest.raises(ValueError, match=rf"bad\.gguf: missing tensor '{tensor}' \(expected for a "
                                         r"gpt_oss model with 2 layers\)"):
        load_model_files(path)


@pytest.mark.parametrize("key", ["gpt-oss.attention.sliding_window", "gpt-oss.expert_count",
                                 "gpt-oss.expert_used_count", "gpt-oss.expert_feed_forward_length"])
def test_missing_key_is_named(tmp_path, key):
    path = rewritten(tmp_path, drop_key=key)
    with pytest.raises(ValueError, match=rf"bad\.gguf: missing metadata key '{key}'"):
        load_model_files(path)


def metadata_config(**meta):
    """The gpt-oss config keys of a 4-layer file with metadata ``meta`` (``__`` for ``.``)."""
    from metalrt.loaders.gguf import _count
    from metalrt.loaders.gguf_gpt_oss import gpt_oss_config

    meta = {"gpt-oss.expert_count": 32, "gpt-oss.expert_used_count": 4,
            "gpt-oss.expert_feed_forward_length": 2880, "gpt-oss.attention.sliding_window": 128,
            **{f"gpt-oss.{k.replace('__', '.')}": v for k, v in meta.items()}}

    class File:
        path, metadata = "x.gguf", meta

    return gpt_oss_config("gpt-oss", lambda key, default=None: _count(File, key, default), meta,
                          {"num_hidden_layers": 4, "rope_theta": 150000.0}, "x.gguf")


def test_metadata_rules_of_llama_cpp():
    """llama.cpp's openai-moe loader: pattern 2 by default (even layers sliding), a
    pattern key or a per-layer list otherwise; no scaling is plain RoPE."""
    assert metadata_config()["layer_types"] == ["sliding_attention", "full_attention"] * 2
    assert metadata_config(attention__sliding_window_pattern=4)["layer_types"] == \
        ["sliding_attention"] * 3 + ["full_attention"]
    listed = metadata_config(attention__sliding_window_pattern=[False, True, True, False])
    assert listed["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention",
                                     "full_attention"]
    assert metadata_config()["rope_parameters"] == {"rope_type": "default", "rope_theta": 150000.0}


@pytest.mark.parametrize("meta, message", [
    (dict(attention__sliding_window_pattern=[True]), r"'gpt-oss\.attention\.sliding_window_pattern' "
                                                     r"must be a non-negative integer or 4 booleans"),
    (dict(rope__freq_base_swa=10000.0), r"'gpt-oss\.rope\.freq_base_swa' \(10000\.0\) differs"),
    (dict(attention__sliding_window=0), r"'gpt-oss\.attention\.sliding_window' must be a positive "
                                        r"integer, got 0"),
])
def test_bad_metadata(meta, message):
    with pytest.raises(ValueError, match=r"^\[gguf\] x\.gguf: metadata key " + message):
        metadata_config(**meta)


def test_harmony_vocabulary_from_gguf_metadata():
    """A gpt-oss GGUF's tokenizer as the converter writes it (byte-level BPE, pre-tokenizer
    ``gpt-4o``: o200k's split, the harmony tokens as control tokens) serves the server's
    harmony path: openai-harmony accepts its vocabulary (o200k's hash) and its ids decode
    to the text harmony renders. No merges (o200k's are not in the test's cache): the
    rendered ids come from openai-harmony."""
    from metalrt.server import harmony
    from metalrt.tokenizer import Tokenizer
    from test_server_gpt_oss import SPECIALS, VOCAB, o200k_tokens

    named = {i: t for t, i in SPECIALS.items()}
    ordinary = o200k_tokens()
    tokens = ordinary + [named.get(i, f"<|reserved_{i}|>") for i in range(len(ordinary), VOCAB)]
    types = [1] * len(ordinary) + [3] * (VOCAB - len(ordinary))   # normal, control
    tokenizer = Tokenizer.from_gguf_metadata({
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": []}, "x.gguf")
    split = tokenizer.backend.pre_tokenizer.pre_tokenize_str("HelloWorld's 1234")
    assert [piece for piece, _ in split] == ["Hello", "World's", "Ġ", "123", "4"]
    directory = harmony.served_vocab("gpt_oss", tokenizer)
    ids = harmony.render([{"role": "user", "content": "Weather in Paris?"}], None, directory)
    assert tokenizer.decode(ids) == harmony.encoding(directory).decode(ids)
    assert "<|start|>user<|message|>Weather in Paris?<|end|>" in tokenizer.decode(ids)
