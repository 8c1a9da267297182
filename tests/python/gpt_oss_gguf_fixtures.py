"""A gpt-oss GGUF file written by llama.cpp's own converter (``moe_gguf_fixtures.converted``:
the pinned sdist's ``convert_hf_to_gguf.py``, its ``conversion/gpt_oss.py``) from a
small random ``GptOssForCausalLM`` whose experts are in the released MXFP4 layout
(``*_blocks`` uint8 [E, N, K / 32, 16], ``*_scales`` E8M0 [E, N, K / 32], the config's
``quantization_config`` saying ``mxfp4``), so the converter repacks them into ggml's
MXFP4 blocks as it does for the released checkpoints. The twin has gpt-oss's per-layer
structure (biased q/k/v/o and router, sinks, YaRN factor 32 / theta 150000 / original
context 4096, top-4 experts) with 8 query heads : 2 KV heads of 64, hidden and
intermediate 64 (MXFP4's K a multiple of 32), 6 experts, 2 layers (one sliding with a
window of 16 below the prompts, one full) and SmolLM2's vocabulary of 49152 (a tokenizer
the converter knows). Weights bite as in test_gpt_oss.py: sinks ~ N(0, 1), biases
~ N(0, 0.2), norms 1 + N(0, 0.2), expert values up to 6 x 2^-1 (E8M0 exponents
120..126), so that the SwiGLU clamps (limit 7) fire.
Built once per machine (build_fixtures.py) in about 14 s of CPU (34 s wall on a busy
2-core machine); 55 MB in the cache."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

import moe_gguf_fixtures
import quant_fixtures

VOCAB, LAYERS, EXPERTS, WINDOW, HIDDEN, INTERMEDIATE = 49152, 2, 6, 16, 64, 64
SPEC = ("GptOssConfig", dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
    num_attention_heads=8, num_key_value_heads=2, head_dim=64, num_local_experts=EXPERTS,
    num_experts_per_tok=4, sliding_window=WINDOW, initializer_range=0.08, tie_word_embeddings=False,
    bos_token_id=None, eos_token_id=None, pad_token_id=None), [],
    # The experts' random MXFP4: E8M0 exponents in [low, high], and the seeds.
    {"mxfp4_exponents": [120, 126], "seeds": [23, 24]})
# The experts' MXFP4 tensors: (transformers' parameter, rows N, columns K) per expert.
EXPERT_TENSORS = (("gate_up_proj", 2 * INTERMEDIATE, HIDDEN), ("down_proj", HIDDEN, INTERMEDIATE))


def reference_model(directory: Path):
    """transformers' fp32 ``GptOssForCausalLM`` of the fixture's directory: the float
    weights as saved, the experts dequantized by transformers' own
    ``convert_moe_packed_tensors`` from the directory's blocks and scales."""
    import torch
    import transformers as tf
    from safetensors.numpy import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    config = json.loads((directory / "config.json").read_text())
    config.pop("quantization_config")
    cfg = tf.GptOssConfig(**config)
    cfg._attn_implementation = "eager"   # gpt-oss's own sink attention (no sdpa in 5.25)
    model = tf.GptOssForCausalLM(cfg).eval()
    stored = load_file(str(directory / "model.safetensors"))
    state = {k: torch.from_numpy(v) for k, v in stored.items() if not k.endswith(("_blocks", "_scales"))}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}.mlp.experts."
        for name, _, _ in EXPERT_TENSORS:
            state[p + name] = convert_moe_packed_tensors(
                torch.from_numpy(stored[p + name + "_blocks"]),
                torch.from_numpy(stored[p + name + "_scales"]), dtype=torch.float32)
    model.load_state_dict(state)
    return model


def _write_hf(spec, directory: Path) -> None:
    """The random twin saved by transformers, its experts then replaced by random MXFP4
    codes and exponents, and SmolLM2's tokenizer files."""
    import torch
    import transformers as tf
    from safetensors.numpy import load_file, save_file

    import test_gpt_oss   # here: it imports conftest, which imports build_fixtures

    cfg = tf.GptOssConfig(**spec[1])
    (low, high), (torch_seed, numpy_seed) = spec[3]["mxfp4_exponents"], spec[3]["seeds"]
    torch.manual_seed(torch_seed)
    model = tf.GptOssForCausalLM(cfg).eval()
    test_gpt_oss.randomize(model, torch_seed)   # the float experts it sets are replaced below
    model.save_pretrained(directory, safe_serialization=True)
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    rng = np.random.default_rng(numpy_seed)
    for layer in range(LAYERS):
        p = f"model.layers.{layer}.mlp.experts."
        for name, rows, cols in EXPERT_TENSORS:
            del tensors[p + name]
            tensors[p + name + "_blocks"] = rng.integers(0, 256, (EXPERTS, rows, cols // 32, 16), dtype=np.uint8)
            tensors[p + name + "_scales"] = rng.integers(low, high + 1, (EXPERTS, rows, cols // 32),
                                                         dtype=np.uint8)
    save_file(tensors, str(path), metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    # The released files' entry (gpt-oss-20b's config.json).
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    for f in quant_fixtures.hf_export().iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, directory / f.name)


def fixture() -> dict[str, Path]:
    """{"hf": the Hugging Face directory (released MXFP4 layout), "f32": the converter's
    GGUF of it (MXFP4 expert stacks, the other tensors F32)}."""
    return moe_gguf_fixtures.converted("gpt_oss", SPEC, _write_hf, q8_0=False)
