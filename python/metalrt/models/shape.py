"""The sizes every decoder-only family reads from its config, read in one place."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .config_values import config_int


@dataclass(frozen=True)
class DecoderShape:
    """Sizes of a decoder-only model (Hugging Face config names in parentheses)."""

    hidden: int       # hidden_size
    heads: int        # num_attention_heads
    kv_heads: int     # num_key_value_heads (default: heads, plain multi-head attention)
    head_dim: int     # head_dim (default: hidden / heads)
    vocab: int        # vocab_size
    num_layers: int   # num_hidden_layers

    @classmethod
    def from_config(cls, config: Mapping, arch: str) -> "DecoderShape":
        """Reads and checks the sizes; ValueError naming the key for a missing or
        non-positive size, and for query heads that are not a multiple of the KV heads
        (grouped-query attention shares each KV head among heads / kv_heads queries)."""
        hidden = config_int(config, "hidden_size", arch)
        heads = config_int(config, "num_attention_heads", arch)
        kv_heads = config_int(config, "num_key_value_heads", arch, heads)
        if heads % kv_heads:
            raise ValueError(f"[{arch}] config 'num_attention_heads' ({heads}) must be a multiple "
                             f"of 'num_key_value_heads' ({kv_heads})")
        return cls(hidden, heads, kv_heads, config_int(config, "head_dim", arch, hidden // heads),
                   config_int(config, "vocab_size", arch),
                   config_int(config, "num_hidden_layers", arch))
