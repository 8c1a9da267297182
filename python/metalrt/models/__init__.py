"""Model architectures, each a forward pass built from ``metalrt.ops``.

``build_model(config, weights, device)`` picks the class by ``config["model_type"]``
(Hugging Face's name for the architecture); a family module registers its class with
``registry.family`` (docs/architecture.md, "Add a model family").
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Mapping, Optional, Tuple

from .decoder import CausalLM
from .registry import ARCHITECTURES

# Every module of the package is imported, so each family module registers its class
# (``registry.family``) without a list here to edit.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def build_model(config: Mapping, weights: Mapping[str, object], device: str = "cpu",
                dtype: str = "float32", layers: Optional[Tuple[int, int]] = None) -> CausalLM:
    """Builds the model named by ``config["model_type"]`` from a Hugging Face state
    dict (numpy arrays, and ``QuantizedWeight``s that stay quantized), putting every
    weight once on ``device``. ``layers``: (start, stop), only those layers (a pipeline
    stage, ``CausalLM.stage_layers``; None: the whole model).

    Raises ValueError for an unknown architecture (naming it and the supported ones),
    a missing config key, a missing or mis-shaped tensor, or ``layers`` for a family
    that builds whole models only.
    """
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"[models] unknown architecture '{model_type}' "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    cls = ARCHITECTURES[model_type]
    if layers is None:
        return cls(config, weights, device, dtype)
    check_layer_ranges(model_type)
    return cls(config, weights, device, dtype, layers)


def check_layer_ranges(model_type: str) -> None:
    """ValueError unless the family ``model_type`` builds a range of its layers (a
    pipeline stage, ``CausalLM.stage_layers``); an unknown one passes (``build_model``
    names it)."""
    cls = ARCHITECTURES.get(model_type)
    if cls is not None and not cls.layer_ranges:
        ranged = sorted(n for n, c in ARCHITECTURES.items() if c.layer_ranges)
        raise ValueError(f"[models] '{model_type}' is built whole only: a range of layers "
                         f"(a pipeline stage) is built for {', '.join(ranged)}")


__all__ = ["ARCHITECTURES", "CausalLM", "build_model", "check_layer_ranges"]
