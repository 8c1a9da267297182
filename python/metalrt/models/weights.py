"""A model's state dict as the loader gave it, put on the model's device tensor by
tensor (float matrices in the model's dtype, quantized ones as stored)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

import metalrt

from ..loaders import host_weights


class Weights:
    """A Hugging Face state dict (name -> numpy array or ``QuantizedWeight``) put on
    ``device`` tensor by tensor: floats in ``dtype``, quantized matrices as they are
    (``host_weights.to_device``). Missing tensors, wrong shapes and a quantized tensor
    where a float one is needed raise ValueError naming the tensor."""

    def __init__(self, tensors: Mapping[str, object], device: str, dtype: str, arch: str):
        self.tensors, self.device, self.dtype, self.arch = tensors, device, dtype, arch

    def has(self, name: str) -> bool:
        return name in self.tensors

    def host(self, name: str, shape: Sequence[int]):
        """The tensor as the loader gave it (numpy array or QuantizedWeight), shape checked."""
        if name not in self.tensors:
            raise ValueError(f"[{self.arch}] missing tensor '{name}'")
        tensor = host_weights.as_host(self.tensors[name])
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"[{self.arch}] tensor '{name}' has shape {list(tensor.shape)}, "
                             f"expected {list(shape)}")
        # An integer or bool tensor would be cast to float silently (a uint16 one is not
        # bf16's bits: BF16 tensors are widened by the loader).
        if host_weights.is_float(tensor) and np.asarray(tensor).dtype.kind != "f":
            raise TypeError(f"[{self.arch}] tensor '{name}' is {np.asarray(tensor).dtype}; "
                            f"expected a floating-point weight (F32, F16 or BF16)")
        return tensor

    def float_host(self, name: str, shape: Sequence[int]) -> np.ndarray:
        tensor = self.host(name, shape)
        if not host_weights.is_float(tensor):
            raise ValueError(f"[{self.arch}] tensor '{name}' is quantized ({tensor.format}); "
                             f"metalrt needs it in floating point")
        return tensor

    def upload(self, array: np.ndarray) -> "metalrt.Tensor":
        return host_weights.upload(array, self.device, self.dtype)

    def load(self, name: str, shape: Sequence[int]) -> "metalrt.Tensor":
        return self.upload(self.float_host(name, shape))

    def matrix(self, name: str, shape: Sequence[int]):
        """A weight matrix that may be quantized: a QuantizedTensor then, else a Tensor."""
        return host_weights.to_device(self.host(name, shape), self.device, self.dtype)

    def merged(self, names: Sequence[str], shapes: Sequence[Sequence[int]], copy: bool = True):
        """The named matrices stacked along their first axis as one tensor (one GEMM
        instead of several for Q/K/V and gate/up). Quantized parts of one kind are
        stacked in place when adjacent in the file, else their quantized rows are
        copied when ``copy``; returns None when they cannot be stacked (float and
        quantized parts, quantized parts of different kinds, or adjacent-only stacking
        that failed)."""
        stacked = host_weights.stack_rows([self.host(n, s) for n, s in zip(names, shapes)], copy)
        return None if stacked is None else host_weights.to_device(stacked, self.device, self.dtype)
