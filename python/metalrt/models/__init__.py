"""Model architectures, each a forward pass built from ``metalrt.ops``.

``build_model(config, weights, device)`` picks the class by ``config["model_type"]``
(Hugging Face's name for the architecture); a family module registers its class with
``registry.family`` (docs/architecture.md, "Add a model family").
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Mapping

from .decoder import CausalLM
from .registry import ARCHITECTURES

# Every module of the package is imported, so each family module registers its class
# (``registry.family``) without a list here to edit.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


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
