"""Qwen3.5 dense (Qwen team 2026; transformers 5.24 ``qwen3_5``): the hybrid decoder
(``hybrid``) with a dense SwiGLU MLP in every layer. Checkpoints are
``Qwen3_5ForCausalLM`` (``model_type`` ``qwen3_5_text``, weights ``model.*``) or
``Qwen3_5ForConditionalGeneration`` (``qwen3_5``, text model under ``text_config`` and
``model.language_model.*``; the vision tower ``model.visual.*`` is not read, the MTP head
``mtp.*`` only by MTP speculation: ``models/mtp.py``). Its MRoPE reduces to 1-D partial
RoPE for text positions."""
from __future__ import annotations

from .hybrid import HybridModel
from .registry import family


@family
class Qwen35Model(HybridModel):
    arch = "qwen3_5"
    aliases = ("qwen3_5_text",)

    def sparse_layers(self, config):
        return [False] * len(self.layer_types)
