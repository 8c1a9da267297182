"""Mistral (``MistralForCausalLM``: Mistral 7B v0.1 to v0.3, Mistral NeMo, Mistral
Small): the Llama layer (no biases, untied embeddings by default) in which every layer
attends to the last ``sliding_window`` positions when the config sets one (7B v0.1:
4096; ``MistralConfig``'s default when the key is absent) and fully when it is null
(v0.2 and later), as transformers' ``MistralModel`` picks its mask (transformers 5.25).
The window runs in the paged-attention kernels and the cache keeps only its blocks
(``Attention(window=)``, ``cache.window``). A GGUF file of it is a ``llama`` file:
llama.cpp's converter writes ``MistralForCausalLM`` as that architecture, without the
window (``loaders/gguf.py``)."""
from __future__ import annotations

from .config_values import config_int
from .llama import LlamaModel
from .registry import family

# MistralConfig's sliding_window when config.json has no such key (null: no window).
DEFAULT_WINDOW = 4096


@family
class MistralModel(LlamaModel):
    arch = "mistral"

    def attention_window(self, config) -> int:
        """``sliding_window`` (absent: 4096; null: 0, full attention). ValueError for
        one below 1 or above ``max_position_embeddings``, naming the key."""
        if "sliding_window" not in config:
            window = DEFAULT_WINDOW
        else:
            window = config_int(config, "sliding_window", self.arch, 0)
        if window and self.context_length is not None and window > self.context_length:
            raise ValueError(f"[{self.arch}] config 'sliding_window' ({window}) is larger than "
                             f"'max_position_embeddings' ({self.context_length})")
        return window
