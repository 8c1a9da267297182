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


_GOOD_ENTRY = {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}


@pytest.mark.parametrize("header, header_len, expected", [
    (json.dumps({"w": _GOOD_ENTRY}).encode(), 1 << 62, r"the header claims 4611686018427387904 bytes"),
    (json.dumps({"w": _GOOD_ENTRY}).encode(), (1 << 64) - 1, r"the header claims \d+ bytes"),
    (b"[1, 2]", None, r"the header is a JSON list, expected an object"),
    (json.dumps({"w": {"dtype": "F32", "shape": [6]}}).encode(), None, r"tensor 'w' has a corrupt header entry"),
    (json.dumps({"w": dict(_GOOD_ENTRY, data_offsets="ab")}).encode(), None, r"tensor 'w' has a corrupt header entry"),
    (json.dumps({"w": dict(_GOOD_ENTRY, data_offsets=[24, 0])}).encode(), None, r"tensor 'w' has a corrupt header entry"),
    (json.dumps({"w": dict(_GOOD_ENTRY, shape=[-6])}).encode(), None, r"tensor 'w' has a corrupt header entry"),
    (json.dumps({"w": 3}).encode(), None, r"tensor 'w' has a corrupt header entry"),
])
def test_corrupt_safetensors_headers_are_value_errors(tmp_path, header, header_len, expected):
    """The header is checked before anything is read by it: no MemoryError, OverflowError,
    KeyError or TypeError escapes for a corrupt length, shape or entry."""
    import struct

    from metalrt.loaders.huggingface import read_safetensors

    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header) if header_len is None else header_len) + header
                     + b"\0" * 24)
    with pytest.raises(ValueError, match=r"^\[safetensors\] .*bad\.safetensors: .*" + expected):
        read_safetensors(str(path))
