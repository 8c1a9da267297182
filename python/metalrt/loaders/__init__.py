"""Model files → Hugging Face config, weights by ``transformers`` names (quantized ones
stay quantized), and the tokenizer; from a GGUF file or a Hugging Face (or MLX)
model directory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..tokenizer import Tokenizer
from .gguf import load_gguf
from .huggingface import load_huggingface


@dataclass
class ModelFiles:
    """What a model's files hold.

    ``config``: Hugging Face ``config.json`` keys (model_type, vocab_size, hidden_size,
    num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
    intermediate_size, rms_norm_eps, rope_theta, tie_word_embeddings,
    max_position_embeddings, bos_token_id, eos_token_id, hidden_act, ...).
    ``weights``: ``transformers`` state-dict names → numpy arrays (float32, or float16
    for a GGUF F16 tensor; integer tensors keep their dtype) or ``QuantizedWeight``s
    (GGUF block types, MLX affine layers); ``lm_head.weight`` is absent when the
    embeddings are tied. Arrays and quantized data may be read-only views of the file.
    ``tokenizer``: the model's ``metalrt.tokenizer.Tokenizer``.
    ``source``: the file or directory read.
    """

    config: dict[str, Any]
    weights: Mapping[str, Any]
    tokenizer: Tokenizer
    source: str


def _single_gguf(directory: str) -> str | None:
    ggufs = [n for n in os.listdir(directory) if n.endswith(".gguf")]
    return os.path.join(directory, ggufs[0]) if len(ggufs) == 1 else None


def load_model_files(path: str | os.PathLike | None = None,
                     verbose: bool | None = None) -> ModelFiles:
    """Read a model: ``path`` is a ``.gguf`` file, a Hugging Face model directory
    (``config.json`` + ``*.safetensors`` + ``tokenizer.json``), a directory holding
    exactly one ``.gguf``, or None for the default model (SmolLM2-135M-Instruct Q4_1,
    downloaded on first use; see ``metalrt.default_model``).

    ``verbose``: a progress bar of the weight files' bytes read, with the rate, on
    standard error (``load_progress``): True always, None (the default) when standard
    error is a terminal, False never.

    Raises FileNotFoundError for a path that does not exist and ValueError (naming the
    file and the key or tensor) for anything unreadable, unsupported or incomplete.
    """
    if path is None:
        from ..default_model import default_model_path
        path = default_model_path()
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"[load_model_files] {path}: no such file or directory")
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "config.json")):
            config, weights = load_huggingface(path, verbose)
            return ModelFiles(config, weights, Tokenizer.from_directory(path), path)
        gguf_path = _single_gguf(path)
        if gguf_path is None:
            raise ValueError(f"[load_model_files] {path}: expected a Hugging Face model "
                             f"directory (config.json) or a directory with one .gguf file")
        path = gguf_path
    config, weights, gf = load_gguf(path, verbose)
    return ModelFiles(config, weights, Tokenizer.from_gguf_metadata(gf.metadata, path), path)
