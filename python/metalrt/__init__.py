"""metalrt: run large language models on Apple-silicon GPUs through Metal.

Tensors live on a device ("cpu", or "metal": an Apple GPU, or the simulated Metal
device where there is none); `metalrt.ops` runs ops on the device of their inputs.
`load`, `generate`, `stream_generate` and `batch_generate` run language models;
`compile_shader` runs your own Metal kernels; `doctor()` reports what metalrt finds
on this machine.
"""
from ._blas import preload as _preload_blas

_preload_blas()  # before the extension dlopens it (python/metalrt/_blas.py)

from ._metalrt import QuantizedTensor, Tensor, device_info, flush, is_available, synchronize
from ._metalrt import embedded_kernel_sources, metal_library_info
from .tensor import DTYPES, asarray, empty, zeros
from . import ops, profiler, providers
from .ops.quantized import quantized_tensor
from .shader import ShaderLibrary, compile_shader
from .generation import GenerationResponse, batch_generate, generate, load, stream_generate
from .prompt_cache import PromptCache, load_prompt_cache, make_prompt_cache, save_prompt_cache
from .doctor import doctor

__all__ = [
    "DTYPES", "GenerationResponse", "QuantizedTensor", "ShaderLibrary", "Tensor", "asarray",
    "batch_generate", "compile_shader", "device_info", "doctor", "embedded_kernel_sources",
    "empty", "flush", "generate", "is_available", "load", "load_prompt_cache",
    "make_prompt_cache", "metal_library_info", "ops", "PromptCache", "profiler", "providers",
    "quantized_tensor", "save_prompt_cache", "stream_generate", "synchronize", "zeros",
]
