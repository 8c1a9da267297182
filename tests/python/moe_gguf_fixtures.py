"""GGUF fixtures of a tiny random Qwen3-MoE, Qwen3-Next, Qwen3.5 and Qwen3.5-MoE, written by llama.cpp's own converter
(``convert_hf_to_gguf.py`` and its ``conversion/`` and ``gguf-py/``, from the pinned
llama-cpp-python sdist of ``ggml_metal_source``) so that the tensor names, shapes and
metadata are llama.cpp's, and quantized to Q8_0 by llama.cpp's quantizer
(``quant_fixtures.quantize_gguf``). The converter checks the tokenizer against the
pre-tokenizers it knows, so the model uses SmolLM2's (from the default model's Hugging
Face export) and its vocabulary of 49152; for the Qwen3.5 types transformers forces
its own Qwen3.5 tokenizer class on that file, whose pre-tokenizer the converter does
not know, so the converter is told it is SmolLM2's (``_SMOLLM_PRE``: only the
``tokenizer.ggml.pre`` name is affected, never a tensor). Qwen3.5's fixtures have three
value heads per key head, so llama.cpp's value-head reorder moves every head but the
first and last. Made once per machine under
``<metalrt cache>/moe-gguf-fixtures/<name>-<config hash>/`` (never committed).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

import cache_lock
import ggml_metal_source
import quant_fixtures
import tiny_hybrid
from metalrt.default_model import cache_dir

_COMMON = dict(vocab_size=49152, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, intermediate_size=96, num_experts=8, num_experts_per_tok=2,
               moe_intermediate_size=32, norm_topk_prob=True, tie_word_embeddings=False,
               initializer_range=0.08, max_position_embeddings=512, rms_norm_eps=1e-6,
               bos_token_id=None, eos_token_id=None, pad_token_id=None)
_QWEN35_GDN = dict(linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16,
                  linear_value_head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"])
# (transformers config class, its arguments, converter flags). llama.cpp converts MoE
# blocks in every layer only; Qwen3-Next's irregular layer_types survive as
# attention.recurrent_layers.
CONFIGS = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(_COMMON, num_hidden_layers=2), []),
    "qwen3_next": ("Qwen3NextConfig", dict(
        _COMMON, num_hidden_layers=4, shared_expert_intermediate_size=48, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"]),
        ["--no-mtp"]),
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", dict(
        {k: v for k, v in _COMMON.items() if k not in ("intermediate_size", "norm_topk_prob")},
        num_hidden_layers=4, shared_expert_intermediate_size=48, **_QWEN35_GDN), ["--no-mtp"]),
    "qwen3_5": ("Qwen3_5TextConfig", dict(
        {k: v for k, v in _COMMON.items()
         if k not in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")},
        num_hidden_layers=4, **_QWEN35_GDN), ["--no-mtp"]),
}
# The Qwen3.5 model with a random MTP head (``tiny_hybrid.save_mtp``), converted with it
# (a nextn block after the 4 layers).
MTP_SPEC = ("Qwen3_5TextConfig", CONFIGS["qwen3_5"][1], [], "mtp")
# Qwen3.5's types: transformers' tokenizer class for them re-spells the pre-tokenizer.
_SMOLLM_PRE = ("qwen3_5_moe", "qwen3_5", "qwen3_5_mtp")
_CONVERTER = f"llama_cpp_python-{ggml_metal_source.VERSION}/vendor/llama.cpp/"
Q8_0 = 7   # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0


def converter_dir() -> Path:
    """llama.cpp's converter (the script, conversion/ and gguf-py/) from the sdist."""
    target = cache_dir() / "llama-cpp-convert" / ggml_metal_source.VERSION
    with cache_lock.held(f"llama-cpp-convert/{ggml_metal_source.VERSION}"):
        if not (target / "convert_hf_to_gguf.py").exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="metalrt-convert-") as tmp:
                with tarfile.open(ggml_metal_source.sdist()) as tar:
                    members = [m for m in tar.getmembers() if m.name.startswith(_CONVERTER) and any(
                        m.name[len(_CONVERTER):].startswith(p)
                        for p in ("convert_hf_to_gguf.py", "conversion/", "gguf-py/"))]
                    tar.extractall(tmp, members=members, filter="data")
                partial = Path(tempfile.mkdtemp(dir=target.parent))
                shutil.rmtree(partial)
                shutil.copytree(Path(tmp) / _CONVERTER, partial)
                os.replace(partial, target)
    return target


def _hf_model(spec, directory: Path) -> None:
    import torch
    import transformers as tf

    cls, kwargs = spec[:2]
    torch.manual_seed(15)
    model = tf.AutoModelForCausalLM.from_config(getattr(tf, cls)(**kwargs)).eval()
    tiny_hybrid.randomize(model, 16)
    model.save_pretrained(directory, safe_serialization=True)
    if spec[3:] == ("mtp",):
        tiny_hybrid.save_mtp(model, kwargs, 1.0, "random", np.random.default_rng(17), str(directory))
    for f in quant_fixtures.hf_export().iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, directory / f.name)


def fixture(name: str) -> dict[str, Path]:
    """{"hf": the Hugging Face directory, "f32": its GGUF, "q8_0": that quantized}."""
    return converted(name, CONFIGS[name])


def mtp_fixture() -> dict[str, Path]:
    """``fixture`` of ``MTP_SPEC``."""
    return converted("qwen3_5_mtp", MTP_SPEC)


def converted(name: str, spec, write_hf: Callable[[Any, Path], None] | None = None,
              q8_0: bool = True) -> dict[str, Path]:
    """The fixture of any (transformers config class, its arguments, converter flags):
    {"hf": the Hugging Face directory, "f32": its GGUF, "q8_0": that quantized (when
    ``q8_0``)}. ``write_hf(spec, directory)`` writes the directory (default: the random
    model of ``spec`` with SmolLM2's tokenizer); a new one needs a new ``name`` or spec,
    which key the cache."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    final = cache_dir() / "moe-gguf-fixtures" / f"{name}-{digest}"
    paths = {"hf": final / "hf", "f32": final / "f32.gguf"}
    if q8_0:
        paths["q8_0"] = final / "q8_0.gguf"
    with cache_lock.held(f"{final.parent.name}/{final.name}"):
        if not final.exists():
            _make(name, spec, final, write_hf or _hf_model, q8_0)
    return paths


def _make(name: str, spec, final: Path, write_hf, q8_0: bool) -> None:
    """Writes the fixture into a temporary sibling of ``final``, renamed into place
    when complete."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=final.parent))
    try:
        hf = partial / "hf"
        hf.mkdir()
        write_hf(spec, hf)
        converter = converter_dir()
        env = dict(os.environ, PYTHONPATH=str(converter / "gguf-py"))
        argv = ["convert_hf_to_gguf.py", str(hf), "--outfile", str(partial / "f32.gguf"),
                "--outtype", "f32", *spec[2]]
        script = argv
        if name in _SMOLLM_PRE:
            script = ["-c", "import runpy, sys; sys.path.insert(0, '.'); import conversion.base as b; "
                      "b.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'smollm'; "
                      f"sys.argv = {argv!r}; runpy.run_path('convert_hf_to_gguf.py', run_name='__main__')"]
        proc = subprocess.run(["nice", "-n", "10", sys.executable, *script],
                              cwd=converter, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"[moe_gguf_fixtures] convert_hf_to_gguf.py exited "
                               f"{proc.returncode}: {proc.stderr[-2000:]}")
        if q8_0:
            quant_fixtures.quantize_gguf(partial / "f32.gguf", partial / "q8_0.gguf", Q8_0)
        os.replace(partial, final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
