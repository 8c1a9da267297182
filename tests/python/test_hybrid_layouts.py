"""Checkpoint layouts other than what transformers' save_pretrained writes, each
checked against the per-expert / CausalLM load of the same weights (same logits on
the CPU): released Qwen3.5-MoE fused experts (``mlp.experts.gate_up_proj`` [E, 2I, H],
``mlp.experts.down_proj`` [E, H, I]); a Qwen3.5 ``ForConditionalGeneration`` checkpoint
(``text_config``, ``model.language_model.*``, with ``model.visual.*`` and ``mtp.*``
tensors that are not read); a released-style config with ``full_attention_interval``
and no ``layer_types``."""
import re

import numpy as np
import pytest

import tiny_hybrid
from metalrt.loaders import load_model_files
from metalrt.models import build_model

IDS = tiny_hybrid.prompt(23, 5)


def logits(config, weights):
    return build_model(config, weights, "cpu").logits(IDS)


@pytest.fixture(scope="module", params=["qwen3_5", "qwen3_5_moe"])
def files(request):
    return load_model_files(str(tiny_hybrid.path(request.param)))


def test_fused_experts_load_as_per_expert():
    files = load_model_files(str(tiny_hybrid.path("qwen3_5_moe")))
    config, weights = files.config, dict(files.weights)
    experts = config["num_experts"]
    fused = 0
    for name in list(weights):
        m = re.fullmatch(r"(model\.layers\.\d+\.mlp\.experts\.)0\.gate_proj\.weight", name)
        if not m:
            continue
        p = m.group(1)
        part = {proj: [weights.pop(f"{p}{e}.{proj}.weight") for e in range(experts)]
                for proj in ("gate_proj", "up_proj", "down_proj")}
        weights[p + "gate_up_proj"] = np.stack([np.concatenate([g, u]) for g, u in
                                                zip(part["gate_proj"], part["up_proj"])])
        weights[p + "down_proj"] = np.stack(part["down_proj"])
        fused += 1
    assert fused == config["num_hidden_layers"]
    np.testing.assert_array_equal(logits(config, weights), logits(files.config, files.weights))


def test_conditional_generation_checkpoint(files):
    text = dict(files.config)
    tied = text.pop("tie_word_embeddings")
    model_type = text["model_type"].removesuffix("_text")
    config = {"model_type": model_type, "architectures": ["ForConditionalGeneration"],
              "tie_word_embeddings": tied, "text_config": text,
              "vision_config": {"hidden_size": 8}}
    weights = {("lm_head.weight" if k == "lm_head.weight" else
                k.replace("model.", "model.language_model.", 1)): v
               for k, v in files.weights.items()}
    weights["model.visual.blocks.0.attn.qkv.weight"] = np.full((3, 3), np.nan, np.float32)
    weights["mtp.layers.0.input_layernorm.weight"] = np.full((64,), np.nan, np.float32)
    np.testing.assert_array_equal(logits(config, weights), logits(files.config, files.weights))


def test_full_attention_interval_without_layer_types():
    files = load_model_files(str(tiny_hybrid.path("qwen3_5")))
    # transformers 5 writes layer_types only; released configs carry the interval.
    config = {k: v for k, v in files.config.items() if k != "layer_types"}
    config["full_attention_interval"] = 3
    assert files.config["layer_types"] == ["linear_attention", "linear_attention",
                                           "full_attention"]
    assert build_model(config, files.weights, "cpu").layer_types == files.config["layer_types"]
    np.testing.assert_array_equal(logits(config, files.weights),
                                  logits(files.config, files.weights))
