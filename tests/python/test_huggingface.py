"""Hugging Face layout gates: config.json + safetensors (single file, sharded, f16, bf16)
+ tokenizer.json, written by the test and read back through ``load_model_files``."""
import json

import numpy as np
import pytest

from metalrt.loaders import load_model_files
from metalrt.tokenizer import Tokenizer
from tiny_models import TinyLlama, tokenizer_metadata, write_hf_dir


@pytest.fixture
def backend():
    return Tokenizer.from_gguf_metadata(tokenizer_metadata()).backend


@pytest.mark.parametrize("shards", [1, 3])
def test_safetensors_model_round_trips(tmp_path, backend, shards):
    model = TinyLlama(tied=False, layers=2)
    bf16 = ["model.layers.0.self_attn.q_proj.weight", "model.norm.weight"]
    f16 = ["model.layers.1.mlp.up_proj.weight"]
    written = write_hf_dir(tmp_path, model, backend, shards=shards, bf16=bf16, f16=f16)
    files = load_model_files(tmp_path)
    assert files.source == str(tmp_path)
    assert files.config == model.hf_config()
    assert set(files.weights) == set(written)
    for name, value in written.items():
        got = files.weights[name]      # views in the stored dtype; bf16 widened to float32
        assert got.dtype == (np.float16 if name in f16 else np.float32), name
        np.testing.assert_array_equal(got, value, err_msg=name)


def test_tokenizer_from_directory(tmp_path, backend):
    write_hf_dir(tmp_path, TinyLlama(layers=1), backend)
    tok = load_model_files(tmp_path).tokenizer
    # bos/eos from tokenizer_config.json, eos also from config.json (id 2 both times).
    assert tok.bos_token_id == 1 and tok.eos_token_ids == (2,)
    assert tok.encode("the the") == Tokenizer(backend, bos_token_id=1, eos_token_ids=[2]).encode("the the")
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).endswith("assistant\n")


def test_missing_files(tmp_path, backend):
    write_hf_dir(tmp_path, TinyLlama(layers=1), backend, shards=2)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match=r"\[huggingface\] .*: model\.safetensors\.index\.json "
                                         r"lists model-00002-of-00002\.safetensors, which does not exist"):
        load_model_files(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"\[huggingface\] .*config\.json: not valid JSON"):
        load_model_files(tmp_path)


def test_corrupt_safetensors(tmp_path, backend):
    write_hf_dir(tmp_path, TinyLlama(layers=1), backend)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-64])
    with pytest.raises(ValueError, match=r"\[safetensors\] .*model\.safetensors: "):
        load_model_files(tmp_path)


def test_missing_tokenizer_json(tmp_path, backend):
    write_hf_dir(tmp_path, TinyLlama(layers=1), backend)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"\[tokenizer\] .*: missing tokenizer\.json"):
        load_model_files(tmp_path)


def test_eos_ids_from_generation_config(tmp_path, backend):
    write_hf_dir(tmp_path, TinyLlama(layers=1), backend)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert Tokenizer.from_directory(tmp_path).eos_token_ids == (2, 0)
