"""GGUF fixtures of the dense families whose files carry their RoPE variant (a tiny
random Llama 3.1 with ``rope_freqs.weight``, a Qwen3 with YaRN metadata), of Mistral
(a llama file of a ``MistralForCausalLM`` directory) and of Gemma 3
(``GEMMA3``: test_gemma3.py's twin with SmolLM2's vocabulary), written by
llama.cpp's own converter through ``moe_gguf_fixtures.converted`` (same cache, same
SmolLM2 vocabulary of 49152 the converter accepts). Each original context is cut below
the 150-token prompts so the scaling bites."""
from __future__ import annotations

from pathlib import Path

import json

import moe_gguf_fixtures

_COMMON = dict(vocab_size=49152, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, intermediate_size=96, num_hidden_layers=2, initializer_range=0.08,
               max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
               bos_token_id=None, eos_token_id=None, pad_token_id=None)
# (transformers config class, its arguments, converter flags), as moe_gguf_fixtures.
CONFIGS = {
    "llama3": ("LlamaConfig", dict(_COMMON, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}), []),
    "qwen3_yarn": ("Qwen3Config", dict(_COMMON, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 32}), []),
    # Mistral 7B v0.3 / NeMo: MistralForCausalLM without a window (llama.cpp's converter
    # writes it as a llama file and drops any window), theta 1e6.
    "mistral": ("MistralConfig", dict(_COMMON, sliding_window=None, rope_theta=1e6), []),
}


# test_gemma3.py's geometry: head_dim 256, 4 query heads : 1 KV head, 5 sliding : 1 global
# layers with the window (16) below the prompts, linear x8 RoPE on the global layers,
# tied embeddings. Not in CONFIGS: its sliding layers run on the reference tier on Metal.
# Built once per machine in about 15 s of CPU (36 s wall on a busy 2-core CI machine);
# 83 MB in the cache.
GEMMA3 = ("Gemma3TextConfig", dict(
    vocab_size=49152, hidden_size=128, intermediate_size=192, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=16,
    max_position_embeddings=512, query_pre_attn_scalar=256, initializer_range=0.08,
    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
    bos_token_id=None, eos_token_id=None, pad_token_id=None), [])


# Phi-4-mini's layout (tests/python/tiny_hf.py's phi4_mini): fused qkv and gate|up,
# LongRoPE over 3/4 of each head (12 factor pairs) with factor 32 and the original
# context cut to 64, tied embeddings. head_dim is hidden / heads: llama.cpp's phi3
# converter counts the rotary dims from those.
PHI4_MINI = ("Phi3Config", dict(
    _COMMON, hidden_size=128, max_position_embeddings=32 * 64, tie_word_embeddings=True,
    original_max_position_embeddings=64, rope_parameters={
        "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
        "short_factor": [1.0 + 0.05 * i for i in range(12)],
        "long_factor": [1.0 + 3.0 * i for i in range(12)]}), [])


def _phi3_hf(spec, directory: Path) -> None:
    """The random model with SmolLM2's tokenizer, its tokenizer_config naming
    GPT2Tokenizer as Phi-4-mini's does (the phi3 converter reads a SentencePiece file
    otherwise)."""
    moe_gguf_fixtures._hf_model(spec, directory)
    path = directory / "tokenizer_config.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), tokenizer_class="GPT2Tokenizer")))


def fixture(name: str) -> dict[str, Path]:
    """{"hf": the Hugging Face directory, "f32": its GGUF, "q8_0": that quantized} of a
    CONFIGS entry, "gemma3" or "phi4_mini"."""
    if name == "phi4_mini":
        return moe_gguf_fixtures.converted(name, PHI4_MINI, _phi3_hf)
    return moe_gguf_fixtures.converted(name, GEMMA3 if name == "gemma3" else CONFIGS[name])
