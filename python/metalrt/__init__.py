"""metalrt: run large language models on Apple-silicon GPUs through Metal.

Tensors live on a device ("cpu", or "metal": an Apple GPU, or the simulated Metal
device where there is none); `metalrt.ops` runs ops on the device of their inputs.
"""
from ._metalrt import Tensor, device_info, is_available, synchronize
from .tensor import DTYPES, asarray, empty, zeros
from . import ops, providers

__all__ = [
    "DTYPES", "Tensor", "asarray", "device_info", "empty", "is_available", "ops",
    "providers", "synchronize", "zeros",
]
