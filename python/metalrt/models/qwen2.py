"""Qwen2 (Qwen team 2024): the Llama layout with biases on the Q/K/V projections
(none on the output projection) and untied embeddings by default."""
from __future__ import annotations

from .llama import LlamaModel
from .registry import family


@family
class Qwen2Model(LlamaModel):
    arch = "qwen2"
    qkv_bias_default = True
    out_bias_follows_qkv = False
