"""Model architectures, each a forward pass built from ``metalrt.ops``.

``build_model(config, weights, device)`` picks the class by ``config["model_type"]``
(Hugging Face's name for the architecture).
"""
from __future__ import annotations

from typing import Mapping

from .decoder import CausalLM
from .llama import LlamaModel
from .opt import OPTModel
from .qwen2 import Qwen2Model
from .qwen3 import Qwen3Model
from .qwen3_5 import Qwen35Model
from .qwen3_5_moe import Qwen35MoeModel
from .qwen3_moe import Qwen3MoeModel
from .qwen3_next import Qwen3NextModel

ARCHITECTURES = {name: cls
                 for cls in (LlamaModel, Qwen2Model, Qwen3Model, OPTModel, Qwen3MoeModel,
                             Qwen3NextModel, Qwen35Model, Qwen35MoeModel)
                 for name in (cls.arch, *getattr(cls, "aliases", ()))}


def build_model(config: Mapping, weights: Mapping[str, object], device: str = "cpu",
                dtype: str = "float32") -> CausalLM:
    """Builds the model named by ``config["model_type"]`` from a Hugging Face state
    dict (numpy arrays, and ``QuantizedWeight``s that stay quantized), putting every
    weight once on ``device``.

    Raises ValueError for an unknown architecture (naming it and the supported ones),
    a missing config key, or a missing or mis-shaped tensor.
    """
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"[models] unknown architecture '{model_type}' "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    return ARCHITECTURES[model_type](config, weights, device, dtype)


__all__ = ["ARCHITECTURES", "CausalLM", "build_model"]
