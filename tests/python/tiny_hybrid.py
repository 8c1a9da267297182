"""Small randomly initialised Qwen3-MoE / Qwen3-Next / Qwen3.5 / Qwen3.5-MoE models
(transformers 5.24), the references of the hybrid and MoE parity gates. Saved once per
machine under ``<metalrt cache>/hybrid-fixtures/<name>-<config hash>`` (never
committed), each with the word-level tokenizer of ``tiny_hf``. Test-only: needs torch
and transformers.

Each config is legal but exercises something unusual: more value heads than key
heads, Dk != Dv, an irregular ``layer_types`` (a full-attention first layer), dense
layers among MoE layers (``mlp_only_layers``, ``decoder_sparse_step``), tied
embeddings, renormalised and raw top-k weights.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

import cache_lock
from metalrt.default_model import cache_dir
from tiny_hf import VOCAB, save_tokenizer

LIN, FULL = "linear_attention", "full_attention"
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-6,
               initializer_range=0.08, bos_token_id=None, eos_token_id=None, pad_token_id=None)
_GDN = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=24, linear_conv_kernel_dim=4)
_MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)

CONFIGS = {
    # Dense layer 1 among MoE layers; raw top-k weights (HF default); untied.
    "qwen3_moe": ("Qwen3MoeConfig", dict(_COMMON, **_MOE, num_hidden_layers=3, intermediate_size=96,
                                         mlp_only_layers=[1], norm_topk_prob=False,
                                         tie_word_embeddings=False)),
    # Tied embeddings, renormalised top-k, MoE in every layer (what llama.cpp converts).
    "qwen3_moe_tied": ("Qwen3MoeConfig", dict(_COMMON, **_MOE, num_hidden_layers=2,
                                              intermediate_size=96, norm_topk_prob=True,
                                              tie_word_embeddings=True)),
    # Hv = 2 Hk, Dk != Dv, irregular layer types, a dense layer among MoE layers.
    "qwen3_next": ("Qwen3NextConfig", dict(_COMMON, **_GDN, **_MOE, num_hidden_layers=4,
                                           intermediate_size=96, shared_expert_intermediate_size=48,
                                           layer_types=[FULL, LIN, LIN, FULL], mlp_only_layers=[2],
                                           tie_word_embeddings=False)),
    # Dense hybrid from full_attention_interval (layer 2 is full attention).
    "qwen3_5": ("Qwen3_5TextConfig", dict(_COMMON, **_GDN, num_hidden_layers=3,
                                          intermediate_size=96, full_attention_interval=3,
                                          tie_word_embeddings=False)),
    # MoE hybrid, tied embeddings, Hv = Hk, Dk = Dv.
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", dict(_COMMON, **_MOE, num_hidden_layers=2,
                                                 shared_expert_intermediate_size=48,
                                                 linear_num_key_heads=2, linear_num_value_heads=2,
                                                 linear_key_head_dim=16, linear_value_head_dim=16,
                                                 layer_types=[LIN, FULL], tie_word_embeddings=True)),
}


# Twins with a multi-token-prediction head (``mtp.*``, ``models/mtp.py``), written with
# seeded values beside transformers' weights (transformers reads none of them): name ->
# (base config, factor on every layer's output projections, head). "random": every
# tensor random. "bigram": the target's layers scaled down so that its next token is
# mostly a function of the last one, and a head that reads only the embedding of the
# token after its position (pre_fc_norm_hidden's 1 + w = 0, fc = [I | 0]) through a
# layer scaled alike and the target's final norm weights: it predicts what the target
# predicts after that token, so most drafts are accepted and some are not.
MTP_TWINS = {"qwen3_5_mtp": ("qwen3_5", 0.1, "bigram"),
             "qwen3_next_mtp": ("qwen3_next", 1.0, "random")}
_OUTPUT_PROJECTIONS = ("o_proj.weight", "out_proj.weight", "down_proj.weight")


def _spec(name: str):
    if name in MTP_TWINS:
        return CONFIGS[MTP_TWINS[name][0]], MTP_TWINS[name]
    return CONFIGS[name]


def _directory(name: str) -> Path:
    digest = hashlib.sha256(json.dumps(_spec(name), sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "hybrid-fixtures" / f"{name}-{digest}"


def randomize(model, seed: int) -> None:
    """Norm weights made non-trivial: around 0 for the zero-centred (1 + w) norms of the
    hybrids and Gemma 3, around 1 for plain ones (Qwen3-MoE, the GDN output norm); A_log spread
    over fast and slow decays."""
    import torch

    torch.manual_seed(seed)
    zero_centred = type(model).__name__.startswith(("Qwen3Next", "Qwen3_5", "Gemma3"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.01, 16)))
            elif name.endswith("dt_bias"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "norm" in name and name.endswith("weight"):
                plain = not zero_centred or "linear_attn.norm" in name
                p.copy_((1 if plain else 0) + 0.2 * torch.randn_like(p))


def path(name: str) -> Path:
    """The saved model ``name`` (built on first use; the write is atomic)."""
    directory = _directory(name)
    with cache_lock.held(f"{directory.parent.name}/{directory.name}"):
        if not directory.exists():
            _save(name, directory)
    return directory


def _save(name: str, directory: Path) -> None:
    import torch
    import transformers as tf

    base, scale, head = MTP_TWINS.get(name, (name, 1.0, None))
    cls, kwargs = CONFIGS[base]
    torch.manual_seed(sum(map(ord, name)))
    model = tf.AutoModelForCausalLM.from_config(getattr(tf, cls)(**kwargs)).eval()
    randomize(model, sum(map(ord, name)) + 1)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith(_OUTPUT_PROJECTIONS):
                p.mul_(scale)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=directory.parent)
    model.save_pretrained(tmp, safe_serialization=True)
    if head is not None:
        save_mtp(model, kwargs, scale, head, np.random.default_rng(sum(map(ord, name)) + 2), tmp)
    save_tokenizer(tmp)
    os.rename(tmp, directory)


def save_mtp(model, kwargs, scale: float, head: str, rng, directory: str) -> None:
    """``mtp.*`` (one layer shaped as the model's first full-attention layer, which
    also says whether its MLP is sparse) added to ``model.safetensors``, and
    ``mtp_num_hidden_layers`` in config.json."""
    from safetensors.numpy import load_file, save_file

    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    full = next(i for i, t in enumerate(model.config.layer_types) if t == FULL)
    layer = f"model.layers.{full}."
    hidden = kwargs["hidden_size"]

    def random(key, shape):
        if "norm" in key:                                   # zero-centred (1 + w) norms
            return 0.2 * rng.standard_normal(shape)
        values = 0.08 * rng.standard_normal(shape)
        return values * scale if key.endswith(_OUTPUT_PROJECTIONS) else values

    tensors = {"mtp.layers.0." + k[len(layer):]: random(k, v.shape)
               for k, v in state.items() if k.startswith(layer)}
    for key in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{key}.weight"] = random("norm", (hidden,))
    tensors["mtp.fc.weight"] = random("fc", (hidden, 2 * hidden))
    if head == "bigram":
        tensors["mtp.pre_fc_norm_embedding.weight"] = np.zeros(hidden)
        tensors["mtp.pre_fc_norm_hidden.weight"] = -np.ones(hidden)
        tensors["mtp.fc.weight"] = np.concatenate([np.eye(hidden), np.zeros((hidden, hidden))], 1)
        tensors["mtp.norm.weight"] = state["model.norm.weight"]
    # In model.safetensors beside the model's tensors, as checkpoints ship them (llama.cpp's
    # converter reads only the model's weight files).
    weights = os.path.join(directory, "model.safetensors")
    save_file({**load_file(weights), **{k: np.ascontiguousarray(v, np.float32)
                                        for k, v in tensors.items()}}, weights, {"format": "pt"})
    config_path = os.path.join(directory, "config.json")
    config = json.loads(Path(config_path).read_text())
    config["mtp_num_hidden_layers"] = 1
    Path(config_path).write_text(json.dumps(config, indent=2))


def reference(name: str):
    """The transformers model of ``name``, float32, eval mode."""
    import transformers as tf

    return tf.AutoModelForCausalLM.from_pretrained(path(name), dtype="float32").eval()


def prompt(length: int, seed: int):
    return np.random.default_rng(seed).integers(0, VOCAB, length).tolist()
