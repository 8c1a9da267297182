"""The weight kinds a loader hands the model layer: a float matrix (a numpy array, or
anything ``np.asarray`` takes) or a ``QuantizedWeight``. This module is the one place
that tells them apart, so that a model builds its layers without asking which kind a
tensor is: shape, stacking the rows of several parts, expert rows, upload.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

import metalrt

from . import quantized_weights
from .quants import QuantizedWeight


def _quantized(tensor) -> bool:
    return isinstance(tensor, QuantizedWeight)


def as_host(tensor):
    """The tensor with a ``shape``: a QuantizedWeight as it is, else a numpy array."""
    return tensor if _quantized(tensor) else np.asarray(tensor)


def is_float(tensor) -> bool:
    return not _quantized(tensor)


def kind(tensor) -> str:
    """How a weight is stored, for comparing two: "float", or the quantized format with
    its bits and group size ("affine(bits=4, group_size=64)")."""
    if not _quantized(tensor):
        return "float"
    if tensor.format != "affine":
        return tensor.format
    return f"affine(bits={tensor.bits}, group_size={tensor.group_size})"


def upload(array: np.ndarray, device: str, dtype: str) -> "metalrt.Tensor":
    """A float array as a Tensor of ``dtype`` on ``device``."""
    return metalrt.asarray(np.ascontiguousarray(array, dtype=np.float32),
                           device=device, dtype=dtype)


def to_device(tensor, device: str, dtype: str):
    """A weight matrix on ``device``: a QuantizedTensor as stored
    (``quantized_weights.to_device``), else a Tensor in ``dtype``."""
    if _quantized(tensor):
        return quantized_weights.to_device(tensor, device)
    return upload(tensor, device, dtype)


def stack_rows(parts: Sequence, copy: bool) -> Optional[object]:
    """The rows of ``parts`` stacked as one matrix of their kind: float parts
    concatenated, quantized ones by ``quantized_weights.stack`` (views when adjacent in
    memory, else copied rows when ``copy``); None when float and quantized parts are
    mixed or the quantized ones cannot be stacked."""
    kinds = {_quantized(p) for p in parts}
    if kinds == {False}:
        return np.concatenate(parts)
    if kinds != {True}:
        return None
    return quantized_weights.stack(parts, copy)


def stacked_experts_shape(tensor, experts: int, rows: int, cols: int) -> tuple:
    """The shape a stacked expert tensor must have: [E, rows, cols] float, or quantized
    [E * rows, cols]."""
    return (experts * rows, cols) if _quantized(tensor) else (experts, rows, cols)


def matrix_rows(tensor):
    """A stacked expert tensor as a matrix [E * rows, cols] (a view)."""
    return tensor if _quantized(tensor) else np.asarray(tensor).reshape(-1, tensor.shape[-1])


def take_rows(tensor, rows: np.ndarray):
    """Rows ``rows`` of a weight matrix, copied, as the same kind."""
    if _quantized(tensor):
        return quantized_weights.take_rows(tensor, rows)
    return np.ascontiguousarray(np.asarray(tensor)[rows])
