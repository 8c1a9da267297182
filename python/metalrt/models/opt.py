"""OPT (Zhang et al. 2022): learned absolute positions (row p + 2 of the table holds
position p, a quirk of fairseq's padding offset), pre-LayerNorm decoder layers,
ReLU MLP, biases everywhere, output head tied to the token embedding. Weight names
are Hugging Face's ``OPTForCausalLM`` state dict."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from metalrt import ops

from .attention import Attention
from .config_values import config_bool, config_int
from .decoder import CausalLM, PreNormLayer
from .layers import Embedding, LayerNorm, Linear
from .shape import DecoderShape
from .weights import Weights
from .registry import family

POSITION_OFFSET = 2


class ReluMLP:
    """fc2(relu(fc1(x)))."""

    def __init__(self, fc1: Linear, fc2: Linear):
        self.fc1, self.fc2 = fc1, fc2

    def __call__(self, x):
        return self.fc2(ops.relu(self.fc1(x)))


@family
class OPTModel(CausalLM):
    arch = "opt"

    def __init__(self, config: Mapping, weights: Mapping[str, np.ndarray], device: str,
                 dtype: str = "float32"):
        arch = self.arch
        shape = DecoderShape.from_config(config, arch)
        hidden, heads, head_dim, vocab = shape.hidden, shape.heads, shape.head_dim, shape.vocab
        ffn = config_int(config, "ffn_dim", arch)
        max_pos = config_int(config, "max_position_embeddings", arch)
        # opt-350m's variant (post-norm, projected embeddings) is not implemented.
        if not config_bool(config, "do_layer_norm_before", arch, True) or \
                config.get("word_embed_proj_dim", hidden) != hidden:
            raise ValueError("[opt] only pre-LayerNorm OPT with word_embed_proj_dim == "
                             "hidden_size is supported")
        if config.get("activation_function", "relu") != "relu":
            raise ValueError(f"[opt] unsupported activation '{config['activation_function']}' "
                             "(supported: relu)")
        super().__init__(config, device, dtype, shape)

        w = Weights(weights, device, dtype, arch)
        d = "model.decoder."
        self.embed_tokens = Embedding.load(w, d + "embed_tokens.weight", vocab, hidden)
        # Dropping the first two rows once makes position p index row p directly.
        positions = w.float_host(d + "embed_positions.weight", (max_pos + POSITION_OFFSET, hidden))
        self.embed_positions = w.upload(positions[POSITION_OFFSET:])
        self.layers = []
        for i in range(shape.num_layers):
            p = f"{d}layers.{i}."
            a = p + "self_attn."
            qkv = Linear.load_split(w, [a + "q_proj", a + "k_proj", a + "v_proj"], [hidden] * 3, hidden,
                                   True)
            attention = Attention(qkv, Linear.load(w, [a + "out_proj"], [hidden], hidden, True),
                                  heads, shape.kv_heads, head_dim, None)
            mlp = ReluMLP(Linear.load(w, [p + "fc1"], [ffn], hidden, True),
                          Linear.load(w, [p + "fc2"], [hidden], ffn, True))
            self.layers.append(PreNormLayer(LayerNorm(w, p + "self_attn_layer_norm", hidden, 1e-5),
                                            attention,
                                            LayerNorm(w, p + "final_layer_norm", hidden, 1e-5),
                                            mlp))
        self.final_norm = LayerNorm(w, d + "final_layer_norm", hidden, 1e-5)
        self.lm_head = self.embed_tokens.table

    def embed(self, step):
        return ops.add(self.embed_tokens(step.token_ids),
                       ops.embedding(self.embed_positions, step.positions))
