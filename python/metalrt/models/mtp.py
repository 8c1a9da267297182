"""The multi-token-prediction (MTP) head of Qwen3-Next, Qwen3.5 and Qwen3.5-MoE
checkpoints (``mtp.*`` in Hugging Face files; GGUF ``nextn`` blocks, read back under
those names by ``loaders/gguf_hybrid.py``), as vLLM runs it for speculative decoding
(``qwen3_next_mtp.py``, ``qwen3_5_mtp.py``; transformers has no MTP forward).

At position p the head reads the target's hidden state h_p (after the target's final
norm: what its LM head reads) and the embedding e of the token at p + 1, and predicts
the token at p + 2:

    x = fc([rmsnorm(e) * (1 + w_emb) | rmsnorm(h_p) * (1 + w_hid)])   fc: [H, 2H]
    y = decoder_layer(x)     one full-attention layer (+ dense MLP or sparse MoE) with
                             its own paged KV cache, at position p
    out = rmsnorm(y) * (1 + w_norm)                 (``mtp.norm``, the head's own)
    logits = lm_head(out)                           (the target's embedding and LM head,
                                                     unless the file has its own:
                                                     ``mtp.embed_tokens``,
                                                     ``mtp.shared_head.head``)

Drafting k tokens runs the head k times: first on the target's hidden states, then on
its own ``out`` with the token it drafted (vLLM's MTP proposer). The MLP of the layer is
sparse iff layer 0 of the target would be (vLLM builds it as layer index 0).
"""
from __future__ import annotations

from typing import Mapping, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import PagedKVLayer, StepInputs, paged_kv_layers
from .config_values import config_int
from .layers import Embedding, Linear, linear
from .norms import UnitOffsetRMSNorm
from .weights import Weights

PREFIX = "mtp."


def has_mtp(weights: Mapping) -> bool:
    """Whether a checkpoint's tensors hold an MTP head (its ``mtp.fc``)."""
    return PREFIX + "fc.weight" in weights


class MtpHead:
    """The MTP head of ``model`` (a ``HybridModel``) from ``w``; ``layer`` builds one
    decoder layer as ``layer(weights, prefix)``. ValueError naming the tensor for a
    missing or misshapen one, and for ``mtp_num_hidden_layers`` other than 1 (every
    Qwen3-Next / Qwen3.5 checkpoint ships one layer)."""

    def __init__(self, model, w: Weights, text: Mapping, eps: float, layer):
        arch, hidden = model.arch, model.shape.hidden
        count = config_int(text, "mtp_num_hidden_layers", arch, 1)
        if count != 1:
            raise ValueError(f"[{arch}] config 'mtp_num_hidden_layers' is {count}; metalrt runs "
                             f"an MTP head of 1 layer")
        self.hidden, self.device, self.dtype = hidden, model.device, model.dtype
        self.num_kv_heads, self.head_dim = model.num_kv_heads, model.head_dim
        self.pre_fc_norm_embedding = UnitOffsetRMSNorm(
            w, PREFIX + "pre_fc_norm_embedding.weight", hidden, eps)
        self.pre_fc_norm_hidden = UnitOffsetRMSNorm(w, PREFIX + "pre_fc_norm_hidden.weight",
                                                    hidden, eps)
        self.fc = Linear.load(w, [PREFIX + "fc"], [hidden], 2 * hidden, False)
        self.layer = layer(w, PREFIX + "layers.0.")
        self.norm = UnitOffsetRMSNorm(w, PREFIX + "norm.weight", hidden, eps)
        vocab = model.vocab_size
        self.embed_tokens = (Embedding.load(w, PREFIX + "embed_tokens.weight", vocab, hidden)
                             if w.has(PREFIX + "embed_tokens.weight") else model.embed_tokens)
        head = PREFIX + "shared_head.head.weight"
        self.lm_head = w.matrix(head, (vocab, hidden)) if w.has(head) else model.lm_head

    def new_cache(self, num_blocks: int) -> PagedKVLayer:
        """The head's own KV cache, addressed by the target's block tables (the head's
        position p sits in the slot of the target's position p). Memory: ``2 * 16 *
        kv_heads * head_dim`` elements a block, ``num_blocks`` blocks."""
        return paged_kv_layers(1, num_blocks, self.num_kv_heads, self.head_dim, self.device,
                               self.dtype)[0]

    def forward(self, step: StepInputs, hidden, cache: PagedKVLayer) -> Tuple[object, object]:
        """One step of the head. ``step``: its positions p (the target's positions) and
        token_ids, the token at p + 1 of each; ``hidden`` [T, H] in the model's dtype:
        the state at each p (the target's final-normed hidden, or this head's ``out`` of
        the previous drafted position); writes the layer's K/V of the T positions into
        ``cache``. Returns (``out`` [R, H], logits [R, vocab], both in the model's dtype)
        for the step's R logit rows; (None, None) when R is 0. A step with ``decode_rows``
        runs inside ``ops.decode_rows()``."""
        with ops.decode_rows(step.decode_rows):   # a step's rows as one-row steps compute them
            tokens = hidden.shape[0]
            # [norm_e(e) | norm_h(h)] along the last axis: the two norms write the rows of
            # one [2T, H] tensor, a row gather interleaves them (exact), and [2T, H] is
            # viewed as [T, 2H].
            stacked = metalrt.empty((2 * tokens, self.hidden), hidden.dtype, self.device)
            for norm, x, rows in ((self.pre_fc_norm_embedding, self.embed_tokens(step.token_ids),
                                   stacked[:tokens]),
                                  (self.pre_fc_norm_hidden, hidden, stacked[tokens:])):
                ops.rms_norm(x, norm.weight, norm.eps, out=rows)
            order = np.stack([np.arange(tokens), np.arange(tokens) + tokens], axis=1).reshape(-1)
            both = ops.embedding(stacked, metalrt.asarray(order.astype(np.int32),
                                                          device=self.device))
            h = self.layer(self.fc(both.reshape(tokens, 2 * self.hidden)), step, cache)
            if step.num_logit_rows == 0:
                return None, None
            if step.logit_rows is not None:
                h = ops.embedding(h, step.logit_rows)
            out = self.norm(h)
            return out, linear(self.lm_head)(out)
