"""Checks that a layer cache is the one its layer reads: of its kind, with rows of the
layer's geometry, dtype and device. A cache made for another model (other kv heads, a
hybrid's state pools) would otherwise be read out of shape, or silently wrong where
the shapes happen to fit."""
from __future__ import annotations

from typing import Sequence


def expect_kind(layer_cache, kind: type, where: str) -> None:
    """TypeError unless ``layer_cache`` is a ``kind`` (``where``: the layer, for the
    message)."""
    if not isinstance(layer_cache, kind):
        raise TypeError(f"[cache] {where} reads a {kind.__name__}, got "
                        f"{type(layer_cache).__name__} (a cache made for another model?)")


def expect_rows(tensor, name: str, rows: Sequence[int], dtype: str, device: str,
                where: str) -> None:
    """ValueError unless ``tensor``'s trailing dimensions are ``rows`` and it is a
    ``dtype`` tensor on ``device`` (its leading dimension, blocks or slots, is the
    cache's size and free)."""
    rows = tuple(int(r) for r in rows)
    got = (tuple(tensor.shape[-len(rows):]) if tensor.ndim >= len(rows) else tuple(tensor.shape),
           tensor.dtype, tensor.device)
    if got != (rows, dtype, device) or tensor.ndim != len(rows) + 1:
        raise ValueError(f"[cache] {where}: its {name} cache {tuple(tensor.shape)} {tensor.dtype} "
                         f"on {tensor.device} does not hold the layer's rows {rows} {dtype} "
                         f"on {device} (a cache made for another model?)")
