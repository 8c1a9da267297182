"""Load a GGUF model file as a Hugging Face config + state dict (float32).

Names follow ``transformers`` (``model.layers.0.self_attn.q_proj.weight``); quantized
tensors are dequantized to float32 on load (``quants.py``). Llama GGUF
files store the Q/K projection rows permuted for interleaved (GPT-J) RoPE — llama.cpp's
``convert_hf_to_gguf.py`` moves row ``i`` of each head's second half next to row ``i``
of its first half — so those rows are put back in the Hugging Face (half-split, NeoX)
order here, and the models apply half-split RoPE to every format alike.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .gguf_file import GGUFFile
from .quants import SUPPORTED_TYPES, dequantize
SUPPORTED_ARCHITECTURES = ("llama",)

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str | None:
    """The ``transformers`` name of a GGUF tensor name, or None when it has none."""
    parts = gguf_name.split(".")
    if len(parts) == 2 and parts[0] in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[parts[0]]}.{parts[1]}"
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    return None


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: within each head of ``d`` rows, GGUF row
    ``2i + j`` is Hugging Face row ``j·d/2 + i`` (j ∈ {0, 1}, i < d/2).

    ``w``: ``[n_heads·d, ...]``; returns the same shape in Hugging Face row order.
    """
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def dequantize_tensor(gf: GGUFFile, name: str) -> np.ndarray:
    """A GGUF tensor as a float32 numpy array in numpy (row-major) shape."""
    info = gf.tensors[name]
    if info.ggml_type not in SUPPORTED_TYPES:
        raise ValueError(
            f"[gguf] {gf.path}: tensor '{name}' has type {info.ggml_type.name}; supported "
            f"types are {', '.join(t.name for t in SUPPORTED_TYPES)}")
    return dequantize(gf.raw(name), info.ggml_type, info.shape)


def _require(gf: GGUFFile, key: str) -> Any:
    if key not in gf.metadata:
        raise ValueError(f"[gguf] {gf.path}: missing metadata key '{key}'")
    return gf.metadata[key]


def _float32_value(x: float) -> float:
    """A float32 metadata value with its shortest float32 spelling (1e-05, not
    9.999999747378752e-06), as the Hugging Face config it was converted from had it."""
    return float(str(np.float32(x)))


def config_from_metadata(gf: GGUFFile) -> dict[str, Any]:
    """Hugging Face ``config.json`` keys from the GGUF metadata (``general.*``,
    ``<arch>.*``, ``tokenizer.ggml.*``). Raises ValueError for an unknown architecture
    or a missing required key."""
    arch = _require(gf, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"[gguf] {gf.path}: general.architecture is '{arch}'; supported "
                         f"architectures are {', '.join(SUPPORTED_ARCHITECTURES)}")
    meta = gf.metadata
    hidden = int(_require(gf, f"{arch}.embedding_length"))
    heads = int(_require(gf, f"{arch}.attention.head_count"))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // heads))
    vocab = meta.get(f"{arch}.vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))
    return {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "num_hidden_layers": int(_require(gf, f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "intermediate_size": int(_require(gf, f"{arch}.feed_forward_length")),
        "rms_norm_eps": _float32_value(_require(gf, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": _float32_value(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_require(gf, f"{arch}.context_length")),
        "tie_word_embeddings": "output.weight" not in gf.tensors,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
    }


def _expected_tensors(config: dict[str, Any]) -> list[str]:
    names = ["token_embd.weight", "output_norm.weight"]
    if not config["tie_word_embeddings"]:
        names.append("output.weight")
    for i in range(config["num_hidden_layers"]):
        names += [f"blk.{i}.{part}.weight" for part in _LAYER_NAMES]
    return names


def load_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray], GGUFFile]:
    """Read a GGUF model: returns ``(config, weights, gguf_file)`` where ``weights`` maps
    Hugging Face names to float32 arrays and ``gguf_file.metadata`` holds the tokenizer.

    Raises ValueError naming the file and the tensor or key for a corrupt or truncated
    file, a wrong magic, an unknown architecture, an unsupported tensor type, a missing
    tensor, a tensor with no Hugging Face name, or a tensor of the wrong shape.
    """
    gf = GGUFFile(path)
    config = config_from_metadata(gf)
    for name in _expected_tensors(config):
        if name not in gf.tensors:
            raise ValueError(f"[gguf] {gf.path}: missing tensor '{name}' (expected for a "
                             f"{config['model_type']} model with "
                             f"{config['num_hidden_layers']} layers)")
    q_rows = config["num_attention_heads"] * config["head_dim"]
    kv_rows = config["num_key_value_heads"] * config["head_dim"]
    expected_rows = {"attn_q": q_rows, "attn_k": kv_rows, "attn_v": kv_rows}
    weights: dict[str, np.ndarray] = {}
    for name, info in gf.tensors.items():
        target = hf_name(name)
        if target is None:
            raise ValueError(f"[gguf] {gf.path}: tensor '{name}' has no Hugging Face "
                             f"equivalent for a {config['model_type']} model")
        part = name.split(".")[2] if name.startswith("blk.") else None
        if part in expected_rows and info.shape[0] != expected_rows[part]:
            raise ValueError(f"[gguf] {gf.path}: tensor '{name}' must have "
                             f"{expected_rows[part]} rows, got shape {list(info.shape)}")
        w = dequantize_tensor(gf, name)
        if part == "attn_q":
            w = unpermute_qk(w, config["num_attention_heads"])
        elif part == "attn_k":
            w = unpermute_qk(w, config["num_key_value_heads"])
        weights[target] = w
    return config, weights, gf
