"""The architectures metalrt builds, each registered by its own family module."""
from __future__ import annotations

from typing import Dict

ARCHITECTURES: Dict[str, type] = {}


def family(cls: type) -> type:
    """Class decorator: registers a ``CausalLM`` subclass under its ``arch`` and its
    ``aliases`` (Hugging Face ``model_type`` names), so a new family is one module of
    this package. ValueError for a name another class registered."""
    for name in (cls.arch, *getattr(cls, "aliases", ())):
        if ARCHITECTURES.get(name, cls) is not cls:
            raise ValueError(f"[models] architecture '{name}' is registered twice: "
                             f"{ARCHITECTURES[name].__name__} and {cls.__name__}")
        ARCHITECTURES[name] = cls
    return cls
