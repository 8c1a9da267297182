"""Typed reads of a Hugging Face config's values, shared by every model builder.

A config is JSON written by hand as often as by transformers: a value of the wrong
type or range is a ValueError naming the architecture, the key and what was expected,
never silently read as something else (``bool("false")`` is True; a
``max_position_embeddings`` of 0 used to mean "no limit" to the token budget).
"""
from __future__ import annotations

import numbers
from typing import Mapping, Optional

REQUIRED = object()   # the default of a key the config must give


def _value(config: Mapping, key: str, arch: str, default):
    """(value, True) when the config gives ``key`` (not None), else (default, False);
    ValueError for a missing required key."""
    value = config.get(key)
    if value is not None:
        return value, True
    if default is REQUIRED:
        raise ValueError(f"[{arch}] config lacks '{key}'")
    return default, False


def _got(value) -> str:
    return f"{type(value).__name__} {value!r}"


def config_int(config: Mapping, key: str, arch: str, default=REQUIRED,
               minimum: int = 1) -> Optional[int]:
    """config[key] as an int >= ``minimum`` (sizes and counts: 1 by default), or
    ``default`` when it is absent or null. A bool, a string or a fractional number is a
    ValueError, and so is a value below ``minimum``."""
    value, given = _value(config, key, arch, default)
    if not given:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"[{arch}] config '{key}' must be an integer, got {_got(value)}")
    if value < minimum:
        raise ValueError(f"[{arch}] config '{key}' must be >= {minimum}, got {value}")
    return int(value)


def config_bool(config: Mapping, key: str, arch: str, default: bool) -> bool:
    """config[key] as a bool (JSON true/false), or ``default`` when absent or null. Any
    other type (the string "false", 0) is a ValueError."""
    value, given = _value(config, key, arch, default)
    if given and not isinstance(value, bool):
        raise ValueError(f"[{arch}] config '{key}' must be true or false, got {_got(value)}")
    return bool(value)


def config_float(config: Mapping, key: str, arch: str, default=REQUIRED) -> float:
    """config[key] as a float > 0 (norm epsilons, RoPE theta), or ``default`` when
    absent or null. A bool, a string, a non-finite or non-positive value is a
    ValueError."""
    value, given = _value(config, key, arch, default)
    if not given:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"[{arch}] config '{key}' must be a number, got {_got(value)}")
    if not 0 < float(value) < float("inf"):
        raise ValueError(f"[{arch}] config '{key}' must be a finite number > 0, got {value}")
    return float(value)
