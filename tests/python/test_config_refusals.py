"""Configs and weights that loaded before but ran wrong (or failed at the first forward
pass with a KeyError) are refused at load with a ValueError/TypeError naming them."""
import json

import numpy as np
import pytest

import metalrt
import tiny_hf
from tiny_models import TinyLlama, write_llama_gguf
from metalrt.models import build_model


def built(tmp_path_factory, name):
    """A directory of tiny_hf's model ``name``."""
    directory = tmp_path_factory.mktemp(name)
    tiny_hf.build(name, directory)
    return directory


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    return built(tmp_path_factory, "llama3")


def with_config(directory, tmp_path, **changes):
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    out = tmp_path / "model"
    out.mkdir()
    for f in directory.iterdir():
        (out / f.name).symlink_to(f)
    (out / "config.json").unlink()
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


@pytest.mark.parametrize("change, message", [
    ({"factor": None}, r"\[llama rope_scaling\] config lacks 'factor'"),
    ({"factor": 0.0}, r"'factor' must be a finite number > 0, got 0.0"),
    ({"factor": -8.0}, r"'factor' must be a finite number > 0"),
    ({"factor": "8"}, r"'factor' must be a number, got str"),
    ({"high_freq_factor": 1.0}, r"'high_freq_factor' \(1.0\) must be greater than 'low_freq_factor' \(1.0\)"),
])
def test_a_malformed_llama3_rope_scaling_is_refused_at_load(llama3_dir, tmp_path, change, message):
    params = {k: v for k, v in {**LLAMA3, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        metalrt.load(with_config(llama3_dir, tmp_path, rope_parameters=params), device="cpu")


def test_the_llama3_rope_scaling_still_loads(llama3_dir, tmp_path):
    model, _ = metalrt.load(with_config(llama3_dir, tmp_path, rope_parameters=LLAMA3), device="cpu")
    assert np.isfinite(model.logits([1, 2, 3])).all()


def test_an_unsupported_hidden_act_is_refused():
    with pytest.raises(ValueError, match=r"\[llama\] unsupported hidden_act 'gelu' \(supported: silu\)"):
        build_model({**tiny_hf.configs()["llama"].to_dict(), "hidden_act": "gelu"}, {}, "cpu")


def test_a_config_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json: expected a JSON object, got list"):
        metalrt.load(str(tmp_path), device="cpu")


@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.bool_])
def test_an_integer_weight_is_refused_not_cast(dtype):
    config = tiny_hf.configs()["llama"].to_dict()
    embed = np.zeros((tiny_hf.VOCAB, config["hidden_size"]), dtype)
    with pytest.raises(TypeError, match=r"tensor 'model.embed_tokens.weight' is .*expected a floating-point weight"):
        build_model(config, {"model.embed_tokens.weight": embed}, "cpu")


@pytest.mark.parametrize("metadata, message", [
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4},
     r"\[llama rope_scaling\] config lacks 'original_max_position_embeddings'"),
    ({"llama.rope.scaling.type": "linear"}, r"\[llama rope_scaling\] config lacks 'factor'"),
    ({"llama.rope.scaling.type": "su"}, r"unsupported RoPE scaling 'su' \(supported: default, linear, llama3, yarn, longrope\)"),
    ({"llama.rope.dimension_count": 8}, r"llama.rope.dimension_count is 8, expected head_dim"),
])
def test_gguf_rope_metadata_is_applied_or_refused_not_dropped(tmp_path, metadata, message):
    path = tmp_path / "m.gguf"
    write_llama_gguf(path, TinyLlama(), metadata=metadata)
    with pytest.raises(ValueError, match=message):
        metalrt.load(str(path), device="cpu")


def test_a_gguf_whose_rope_dimension_is_head_dim_loads(tmp_path):
    model = TinyLlama()
    path = tmp_path / "m.gguf"
    write_llama_gguf(path, model, metadata={"llama.rope.dimension_count": model.head_dim})
    assert np.isfinite(metalrt.load(str(path), device="cpu")[0].logits([1, 2, 3])).all()


def test_a_tokenizer_json_the_library_refuses_is_a_value_error(llama3_dir, tmp_path):
    directory = with_config(llama3_dir, tmp_path)
    target = tmp_path / "model" / "tokenizer.json"
    target.unlink()
    target.write_text("{}")
    with pytest.raises(ValueError, match=r"\[tokenizer\] .*tokenizer.json: "):
        metalrt.load(directory, device="cpu")


def test_gguf_merges_the_library_refuses_are_a_value_error(tmp_path):
    path = tmp_path / "m.gguf"
    write_llama_gguf(path, TinyLlama())
    data = bytearray(path.read_bytes())
    # A merge naming a token outside the vocabulary: "Ġ t" -> "Ġ \x01" keeps the length.
    at = data.find("Ġ t".encode())
    assert at > 0
    data[at + len("Ġ ".encode())] = 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"\[tokenizer\] .*m.gguf"):
        metalrt.load(str(path), device="cpu")


@pytest.mark.parametrize("index, message", [
    ("{}", r"model.safetensors.index.json: expected a 'weight_map' object of tensor name -> file name, got NoneType"),
    ('{"weight_map": {"a": 1}}', r"expected a 'weight_map' object"),
    ("{", r"model.safetensors.index.json: not valid JSON"),
])
def test_a_malformed_safetensors_index_is_refused(llama3_dir, tmp_path, index, message):
    directory = with_config(llama3_dir, tmp_path)
    (tmp_path / "model" / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match=message):
        metalrt.load(directory, device="cpu")



@pytest.fixture(scope="module")
def phi3_dir(tmp_path_factory):
    return built(tmp_path_factory, "phi3")


def test_phi3_window_is_every_layers_and_one_past_the_context_is_full_attention(phi3_dir,
                                                                                 tmp_path):
    (tmp_path / "a").mkdir()
    model, _ = metalrt.load(with_config(phi3_dir, tmp_path / "a", sliding_window=40), device="cpu")
    assert model.context_length == 256 and [l.attention.window for l in model.layers] == [40, 40]
    # Phi-4-mini's config: a window of 262,144 over a context of 131,072.
    (tmp_path / "b").mkdir()
    model, _ = metalrt.load(with_config(phi3_dir, tmp_path / "b", sliding_window=256),
                            device="cpu")
    assert [l.attention.window for l in model.layers] == [0, 0]


@pytest.mark.parametrize("factor, error", [(float("nan"), "must be a finite number > 0"),
                                           ("0.5", "must be a number, got str"),
                                           (0.01, "expected a positive even number <= head_dim")])
def test_a_bad_partial_rotary_factor_is_refused(phi3_dir, tmp_path, factor, error):
    rope = json.loads((phi3_dir / "config.json").read_text())["rope_parameters"]
    directory = with_config(phi3_dir, tmp_path, rope_parameters={**rope, "partial_rotary_factor": factor})
    with pytest.raises(ValueError, match=error):
        metalrt.load(directory, device="cpu")


def test_a_longrope_factor_list_of_the_wrong_length_is_refused(tmp_path):
    directory = tmp_path / "phi3"
    directory.mkdir()
    tiny_hf.build("phi3", directory)
    pairs = tiny_hf.configs()["phi3"].head_dim // 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * pairs,
            "long_factor": [2.0] * (pairs - 1), "original_max_position_embeddings": 64}
    with pytest.raises(ValueError, match=r"config 'long_factor' has 7 values, expected 8"):
        metalrt.load(with_config(directory, tmp_path, rope_parameters=rope), device="cpu")


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    return built(tmp_path_factory, "mistral_swa")


def test_mistral_window_is_every_layers_and_its_cache_keeps_only_it(mistral_dir, tmp_path):
    model, _ = metalrt.load(str(mistral_dir), device="cpu")
    assert [layer.attention.window for layer in model.layers] == [24, 24]
    assert model.new_cache(16).window == 24
    # Absent: MistralConfig's 4096; null: full attention.
    (tmp_path / "absent").mkdir()
    absent = with_config(mistral_dir, tmp_path / "absent", max_position_embeddings=8192)
    config = json.loads((mistral_dir / "config.json").read_text())
    del config["sliding_window"]
    (tmp_path / "absent" / "model" / "config.json").write_text(
        json.dumps(dict(config, max_position_embeddings=8192)))
    assert metalrt.load(absent, device="cpu")[0].layers[0].attention.window == 4096
    (tmp_path / "null").mkdir()
    full, _ = metalrt.load(with_config(mistral_dir, tmp_path / "null", sliding_window=None),
                           device="cpu")
    assert full.layers[0].attention.window == 0 and full.new_cache(16).window == 0


@pytest.mark.parametrize("window, error", [
    (0, r"\[mistral\] config 'sliding_window' must be >= 1, got 0"),
    (257, r"\[mistral\] config 'sliding_window' \(257\) is larger than 'max_position_embeddings' \(256\)"),
    ("24", r"\[mistral\] config 'sliding_window' must be an integer, got str")])
def test_a_bad_mistral_window_is_refused(mistral_dir, tmp_path, window, error):
    with pytest.raises(ValueError, match=error):
        metalrt.load(with_config(mistral_dir, tmp_path, sliding_window=window), device="cpu")
