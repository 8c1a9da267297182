"""Config values of the wrong type or range are ValueErrors naming the architecture,
the key and what was expected (models/config_values.py), for every model builder: a
``max_position_embeddings`` of 0 used to mean "no context limit", the string "false"
for a boolean was read as true (``bool("false")``), a string size failed later in numpy."""
import pytest

import tiny_hf
import tiny_hybrid
from metalrt.loaders import load_model_files
from metalrt.models import build_model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    found = {arch: load_model_files(str(tiny_hybrid.path(arch)))
             for arch in ("qwen3_next", "qwen3_moe")}
    for arch in ("llama", "opt"):
        directory = tmp_path_factory.mktemp(arch)
        tiny_hf.build(arch, directory)
        found[arch] = load_model_files(str(directory))
    return found


CASES = [
    ("llama", "max_position_embeddings", 0, "must be >= 1, got 0"),
    ("llama", "max_position_embeddings", "4096", "must be an integer, got str '4096'"),
    ("llama", "hidden_size", 64.5, "must be an integer, got float 64.5"),
    ("llama", "num_hidden_layers", True, "must be an integer, got bool True"),
    ("llama", "num_key_value_heads", -2, "must be >= 1, got -2"),
    ("llama", "tie_word_embeddings", "false", "must be true or false, got str 'false'"),
    ("llama", "attention_bias", 1, "must be true or false, got int 1"),
    ("llama", "rms_norm_eps", 0.0, "must be a finite number > 0, got 0.0"),
    ("llama", "rope_theta", "1e4", "must be a number, got str '1e4'"),
    ("opt", "max_position_embeddings", 0, "must be >= 1, got 0"),
    ("opt", "do_layer_norm_before", "true", "must be true or false, got str 'true'"),
    ("qwen3_moe", "norm_topk_prob", "false", "must be true or false, got str 'false'"),
    ("qwen3_moe", "num_experts_per_tok", 0, "must be >= 1, got 0"),
    ("qwen3_moe", "decoder_sparse_step", 0, "must be >= 1, got 0"),
    ("qwen3_next", "norm_topk_prob", "false", "must be true or false, got str 'false'"),
    ("qwen3_next", "max_position_embeddings", 0, "must be >= 1, got 0"),
    ("qwen3_next", "linear_conv_kernel_dim", 1, "must be >= 2, got 1"),
    ("qwen3_next", "num_experts", -1, "must be >= 0, got -1"),
    ("qwen3_next", "moe_intermediate_size", "32", "must be an integer, got str '32'"),
]


@pytest.mark.parametrize("arch, key, value, message", CASES,
                         ids=[f"{a}-{k}-{v!r}" for a, k, v, _ in CASES])
def test_a_bad_config_value_names_the_key(files, arch, key, value, message):
    config = {**files[arch].config, key: value}
    with pytest.raises(ValueError) as error:
        build_model(config, files[arch].weights, "cpu")
    assert str(error.value) == f"[{arch}] config '{key}' {message}"


@pytest.mark.parametrize("arch", ["llama", "qwen3_next"])
def test_good_values_and_null_defaults_still_load(files, arch):
    config = {**files[arch].config, "attention_bias": None, "max_position_embeddings": 128}
    model = build_model(config, files[arch].weights, "cpu")
    assert model.context_length == 128
    del config["max_position_embeddings"]
    assert build_model(config, files[arch].weights, "cpu").context_length is None
