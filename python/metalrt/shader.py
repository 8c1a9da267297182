"""User Metal kernels: compile Metal Shading Language source at run time and run
its kernels on Metal tensors.

    lib = metalrt.compile_shader(source)
    lib.my_kernel(x, y, np.uint32(n), threads=(n, 1, 1), group_size=(256, 1, 1))

On an Apple GPU the source is compiled by Metal; on the simulated Metal device it
is translated to C++ (``metalrt/_sim/msl_to_cpp.py``) and built by the system C++
compiler (``$CXX`` or ``c++``) once per source, cached by content hash under
``$METALRT_CACHE_DIR/kernels`` (default ``~/.cache/metalrt/kernels``). Dispatches
join the Metal command stream like any op; reading a tensor (``.numpy()``) or
``metalrt.synchronize("metal")`` waits for them. Semantics follow the Metal
Shading Language Specification and Metal's ``dispatchThreads`` /
``dispatchThreadgroups``.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from . import _metalrt

# numpy scalar types a function constant may take, with FunctionConstant::Type codes
# (cpp/gpu/gpu_device.h: kBool, kInt16, kUInt16, kInt32, kUInt32, kFloat, kHalf).
_CONSTANT_TYPES = {np.bool_: 0, np.int16: 1, np.uint16: 2, np.int32: 3, np.uint32: 4,
                   np.float32: 5, np.float16: 6}
_toolchain_set = False


def _use_installed_toolchain() -> None:
    """Points the simulated device's kernel compiler at this package's generator
    and shim headers (installed with the wheel) and at this interpreter."""
    global _toolchain_set
    if _toolchain_set:
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sim")
    shim = os.path.join(here, "shim")
    if os.path.exists(os.path.join(shim, "sim_module.h")):
        _metalrt._set_sim_toolchain(sys.executable, os.path.join(here, "msl_to_cpp.py"), shim)
    _toolchain_set = True


def compile_shader(source: str) -> "ShaderLibrary":
    """Compiles Metal Shading Language source; its kernels become attributes.

    Args:
        source: MSL source text (``#include <metal_stdlib>``, ``kernel void`` functions
            and explicit template instantiations named with ``[[host_name("...")]]``).

    Returns:
        A :class:`ShaderLibrary`.

    Raises:
        TypeError: ``source`` is not a str.
        RuntimeError: no Metal device is available, or compilation failed; the
            message carries the compiler's diagnostics with ``shader.metal:line``.
    """
    if not isinstance(source, str):
        raise TypeError(f"[compile_shader] source must be a str, got {type(source).__name__}")
    _use_installed_toolchain()
    return ShaderLibrary(_metalrt._compile_shader(source))


def _size3(value, what: str, kernel: str) -> list[int]:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3 or \
            not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        raise ValueError(f"[{kernel}] {what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = [int(v) for v in value] + [1] * (3 - len(value))
    if any(d < 0 or d >= 2**32 for d in dims):
        raise ValueError(f"[{kernel}] {what} must hold non-negative 32-bit sizes, got {value!r}")
    return dims


def _constant(kernel: str, index, value) -> tuple[int, int, bytes]:
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or index < 0:
        raise ValueError(f"[{kernel}] function constant indices are non-negative ints, got {index!r}")
    if isinstance(value, bool):
        value = np.bool_(value)
    for scalar_type, code in _CONSTANT_TYPES.items():
        if type(value) is scalar_type:
            return int(index), code, value.tobytes()
    raise TypeError(f"[{kernel}] function constant {index} must be a bool or a numpy bool_, int16, "
                    f"uint16, int32, uint32, float32 or float16 scalar, got {type(value).__name__}")


class ShaderKernel:
    """One kernel of a :class:`ShaderLibrary`; call it to dispatch it."""

    def __init__(self, library: "ShaderLibrary", name: str):
        self._library = library
        self.name = name

    def __call__(self, *args, threads=None, threadgroups=None, group_size=None, constants=None) -> None:
        """Encodes one dispatch of the kernel on the Metal device.

        Args:
            *args: bound in order to ``[[buffer(0)]]``, ``[[buffer(1)]]``, ...: a
                ``metalrt.Tensor`` on the metal device binds its buffer at the tensor's
                byte offset (element 0 of a view or slice is at index 0); a numpy scalar
                (``np.uint32(7)``, ``np.float32(0.5)``, ``np.float16``, ...) binds its
                bytes, as ``setBytes`` does.
            threads: grid size in threads (x[, y[, z]]); edge threadgroups are partial
                (Metal's ``dispatchThreads``).
            threadgroups: grid size in whole threadgroups (``dispatchThreadgroups``).
                Exactly one of ``threads`` and ``threadgroups`` is given.
            group_size: threads per threadgroup (x[, y[, z]]), at most 1024 in total.
            constants: ``{index: value}`` for ``[[function_constant(index)]]``; values
                are bool or numpy bool_/int16/uint16/int32/uint32/float32/float16.

        Raises:
            TypeError: an argument is neither a metalrt.Tensor nor a numpy scalar, or a
                constant has an unsupported type.
            ValueError: a tensor is not on the metal device (or not in a Metal
                allocation), the grid or group size is malformed, a buffer the kernel
                uses is not bound, a function constant does not match the kernel's, or
                the kernel uses a function constant without a value (only one it tests
                with ``is_function_constant_defined`` may be left out, as on Metal).
        """
        kernel = self.name
        if (threads is None) == (threadgroups is None):
            raise ValueError(f"[{kernel}] give exactly one of threads= and threadgroups=")
        if group_size is None:
            raise ValueError(f"[{kernel}] group_size= (threads per threadgroup) is required")
        grid = _size3(threads if threads is not None else threadgroups,
                      "threads" if threads is not None else "threadgroups", kernel)
        group = _size3(group_size, "group_size", kernel)
        bound = []
        for i, a in enumerate(args):
            if isinstance(a, _metalrt.Tensor):
                bound.append(a)
            elif isinstance(a, np.generic) and not isinstance(a, (np.object_, np.str_, np.bytes_)):
                bound.append(a.tobytes())
            else:
                raise TypeError(f"[{kernel}] argument {i} must be a metalrt.Tensor or a numpy scalar "
                                f"(e.g. np.uint32), got {type(a).__name__}")
        fcs = [_constant(kernel, k, v) for k, v in (constants or {}).items()]
        self._library._native.dispatch(kernel, bound, grid, group, threads is not None, fcs)

    def __repr__(self) -> str:
        return f"<metalrt kernel {self.name}>"


class ShaderLibrary:
    """The kernels of one compiled source, as attributes (``lib.<kernel>``); host
    names of template instantiations that are not identifiers are reached with
    ``lib["name"]``."""

    def __init__(self, native):
        self._native = native
        self._names = tuple(native.function_names())

    @property
    def function_names(self) -> tuple[str, ...]:
        """Names of the library's kernels."""
        return self._names

    def __getitem__(self, name: str) -> ShaderKernel:
        if name not in self._names:
            raise KeyError(f"[compile_shader] no kernel named {name!r}; the library has {list(self._names)}")
        return ShaderKernel(self, name)

    def __getattr__(self, name: str) -> ShaderKernel:
        if name.startswith("_") or name not in self._names:
            raise AttributeError(f"[compile_shader] no kernel named {name!r}; the library has "
                                 f"{list(self.__dict__.get('_names', ()))}")
        return ShaderKernel(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._names))
