"""User Metal kernels: compile Metal Shading Language source at run time and run
its kernels on Metal tensors.

    lib = metalrt.compile_shader(source)
    lib.my_kernel(x, y, np.uint32(n), threads=(n, 1, 1), group_size=(256, 1, 1))

On an Apple GPU the source is compiled by Metal; on the simulated Metal device it
is translated to C++ (``metalrt/_sim/msl_to_cpp.py``, whose one parse also gives the
reflection this module binds Python values by) and built by the system C++
compiler (``$CXX`` or ``c++``; without one compile_shader raises RuntimeError saying
what to install) once per source, cached by content hash under
``$METALRT_CACHE_DIR/kernels`` (default ``~/.cache/metalrt/kernels``). Dispatches
join the Metal command stream like any op; reading a tensor (``.numpy()``) or
``metalrt.synchronize("metal")`` waits for them. Semantics follow the Metal
Shading Language Specification and Metal's ``dispatchThreads`` /
``dispatchThreadgroups``.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np

from .. import _metalrt
from .._sim import msl_preprocess
from .._sim.msl_to_cpp import MslError, describe
from ..tensor import is_int
from .arguments import bind_argument, from_python
from .source import build_source

# numpy scalar types a function constant may take, with FunctionConstant::Type codes
# (cpp/gpu/gpu_device.h: kBool, kInt16, kUInt16, kInt32, kUInt32, kFloat, kHalf).
_CONSTANT_TYPES = {np.bool_: 0, np.int16: 1, np.uint16: 2, np.int32: 3, np.uint32: 4,
                   np.float32: 5, np.float16: 6}
# The numpy type of each MSL type a function constant may be declared with.
_MSL_CONSTANT_TYPES = {"bool": np.bool_, "short": np.int16, "int16_t": np.int16,
                       "ushort": np.uint16, "uint16_t": np.uint16, "int": np.int32,
                       "int32_t": np.int32, "uint": np.uint32, "uint32_t": np.uint32,
                       "float": np.float32, "half": np.float16}
# Python scalars for a constant whose declaration is not known (see _constant).
_PYTHON_DEFAULT_TYPES = {bool: np.bool_, int: np.int32, float: np.float32}
_toolchain_set = False

NO_CXX_COMPILER = (
    "[compile_shader] the simulated Metal device builds kernels with a C++17 compiler and "
    "none was found ($CXX, else c++ on PATH): install one (Debian/Ubuntu: apt-get install "
    "g++; Fedora: dnf install gcc-c++; macOS: xcode-select --install) or set CXX to it")


def cxx_compiler() -> str | None:
    """Path of the C++ compiler the simulated Metal device builds ``compile_shader``
    kernels with, or None when there is none: cpp/sim/kernel_compiler.cpp runs ``$CXX``
    (a command line, e.g. ``ccache g++``), else ``c++``, so its first word is looked up
    on PATH."""
    words = msl_preprocess.compiler()
    return shutil.which(words[0]) if words else None


def _use_installed_toolchain() -> None:
    """Points the simulated device's kernel compiler at this package's generator
    and shim headers (installed with the wheel) and at this interpreter; on the
    simulated device, RuntimeError(NO_CXX_COMPILER) when there is no C++ compiler."""
    global _toolchain_set
    if _metalrt.device_info("metal")["simulated"] and cxx_compiler() is None:
        raise RuntimeError(NO_CXX_COMPILER)
    if _toolchain_set:
        return
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_sim")
    shim = os.path.join(here, "shim")
    if os.path.exists(os.path.join(shim, "sim_module.h")):
        _metalrt._set_sim_toolchain(sys.executable, os.path.join(here, "msl_to_cpp.py"), shim)
    _toolchain_set = True


def compile_shader(source: str, *, defines=None, headers=None) -> "ShaderLibrary":
    """Compiles Metal Shading Language source; its kernels become attributes.

    Args:
        source: MSL source text (``#include <metal_stdlib>``, ``kernel void`` functions
            and explicit template instantiations named with ``[[host_name("...")]]``).
        defines: preprocessor macros, ``{name: value}`` with a str, int or float value,
            or None for ``1`` (Metal's ``MTLCompileOptions.preprocessorMacros``).
        headers: the files quoted includes (``#include "name.h"``) resolve to: a dict
            ``{name: text}`` or a directory path. An include found in neither is a
            compile error.

    Returns:
        A :class:`ShaderLibrary`. The declared types of its function constants and of
        its kernels' ``constant`` parameters are read from the source, so that Python
        values given for them are converted to (and sized against) those types.

    Raises:
        TypeError: ``source`` is not a str, or defines/headers have the wrong type.
        ValueError: a macro name that is not an identifier or a multi-line value, a
            missing headers directory, headers that include each other without end.
        RuntimeError: no Metal device is available, or compilation failed; the
            message carries the compiler's diagnostics with ``shader.metal:line``
            (MSL that Metal rejects, e.g. ``double``, is rejected on the simulated
            device too, with the MSL specification section).
    """
    if not isinstance(source, str):
        raise TypeError(f"[compile_shader] source must be a str, got {type(source).__name__}")
    full = build_source(source, defines, headers)
    _use_installed_toolchain()
    native = _metalrt._compile_shader(full)
    return ShaderLibrary(native, _reflection(native, full))


def _reflection(native, source: str) -> dict:
    """The generator's reflection of ``source`` (msl_emit.reflection): on the simulated
    device, the one its build of the library wrote; on Apple's Metal, which compiles
    the source itself, the generator's parse run here, or nothing for source only
    Metal understands (Python values then use the defaults and go unchecked)."""
    text = native.reflection()
    if text:
        return json.loads(text)
    try:
        return describe(source)
    except MslError:
        return {"function_constants": {}, "kernels": {}, "structs": {}}


def _threadgroup_memory(kernel: str, lengths) -> list[tuple[int, int]]:
    if lengths is None:
        return []
    if not isinstance(lengths, dict) or not all(
            isinstance(k, (int, np.integer)) and not isinstance(k, bool) and
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for k, v in lengths.items()):
        raise TypeError(f"[{kernel}] threadgroup_memory must be a dict {{index: bytes}} of ints, "
                        f"got {lengths!r}")
    if any(k < 0 or k > 30 or v < 0 for k, v in lengths.items()):
        raise ValueError(f"[{kernel}] threadgroup_memory: indices are 0..30 and lengths "
                         f"non-negative, got {lengths!r}")
    return [(int(k), int(v)) for k, v in lengths.items()]


def _size3(value, what: str, kernel: str) -> list[int]:
    if isinstance(value, (int, np.integer)):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3 or \
            not all(is_int(v) for v in value):
        raise ValueError(f"[{kernel}] {what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = [int(v) for v in value] + [1] * (3 - len(value))
    if any(d < 0 or d >= 2**32 for d in dims):
        raise ValueError(f"[{kernel}] {what} must hold non-negative 32-bit sizes, got {value!r}")
    return dims


def _constant(kernel: str, index, value, declared: dict) -> tuple[int, int, bytes]:
    """(index, FunctionConstant::Type code, value bytes) of one ``constants`` entry.

    A Python bool, int or float is converted to the type the source declares for
    ``index`` (``declared``: index -> MSL type), range-checked; where the declaration is
    not known (not found in the source), bool -> bool, int -> int32, float -> float32. A
    numpy scalar is passed as it is and must have the declared type.
    """
    if not is_int(index) or index < 0:
        raise ValueError(f"[{kernel}] function constant indices are non-negative ints, got {index!r}")
    msl_type = declared.get(int(index))
    if msl_type is not None and msl_type not in _MSL_CONSTANT_TYPES:
        raise TypeError(f"[{kernel}] function constant {index} is declared {msl_type}, which "
                        f"cannot be set (supported: {', '.join(_MSL_CONSTANT_TYPES)})")
    target = _MSL_CONSTANT_TYPES.get(msl_type)
    what = f"[{kernel}] function constant {index}" + (f" ({msl_type})" if msl_type else "")
    if type(value) in _PYTHON_DEFAULT_TYPES:
        value = from_python(value, target or _PYTHON_DEFAULT_TYPES[type(value)], what)
    elif type(value) in _CONSTANT_TYPES and target is not None and type(value) is not target:
        raise TypeError(f"{what} takes {np.dtype(target).name} values, got a numpy "
                        f"{type(value).__name__} (pass a Python number or "
                        f"np.{np.dtype(target).name})")
    if type(value) not in _CONSTANT_TYPES:
        raise TypeError(f"{what} must be a Python bool, int or float or a numpy bool_, int16, "
                        f"uint16, int32, uint32, float32 or float16 scalar, got "
                        f"{type(value).__name__}")
    return int(index), _CONSTANT_TYPES[type(value)], value.tobytes()


class ShaderKernel:
    """One kernel of a :class:`ShaderLibrary`; call it to dispatch it."""

    def __init__(self, library: "ShaderLibrary", name: str):
        self._library = library
        self.name = name

    def __call__(self, *args, threads=None, threadgroups=None, group_size=None, constants=None,
                 threadgroup_memory=None) -> None:
        """Encodes one dispatch of the kernel on the Metal device.

        Args:
            *args: bound in order to ``[[buffer(0)]]``, ``[[buffer(1)]]``, ...
                (explicit or Metal's implicit indices): a ``metalrt.Tensor`` on the
                metal device binds its buffer at the tensor's byte offset (element 0
                of a view or slice is at index 0). Anything else is copied as bytes, as
                ``setBytes`` does: a numpy scalar (``np.uint32(7)``) or small array (a
                ``constant uint2&`` takes a 2-element uint32 array), ``bytes`` (a
                struct by its byte layout), or a Python bool/int/float converted to
                the parameter's declared scalar type with a range check. Where the
                declared type's size is known (scalars and vectors), the bytes must
                have exactly that size; for a ``constant S&`` of a plain struct S
                declared in the source, at least sizeof(S).
            threads: grid size in threads (x[, y[, z]]); edge threadgroups are partial
                (Metal's ``dispatchThreads``).
            threadgroups: grid size in whole threadgroups (``dispatchThreadgroups``).
                Exactly one of ``threads`` and ``threadgroups`` is given.
            group_size: threads per threadgroup (x[, y[, z]]), at most 1024 in total.
            constants: ``{index: value}`` for ``[[function_constant(index)]]``. A Python
                bool, int or float is converted to the constant's declared type (read
                from the source) with a range check: bool for ``bool``; an int for
                ``short``/``ushort``/``int``/``uint`` (and their ``intN_t`` names); an
                int or float for ``float``/``half``. Where the declaration is not known,
                bool -> bool, int -> int32, float -> float32. A numpy scalar
                (bool_/int16/uint16/int32/uint32/float32/float16) is passed as it is
                and must have the declared type.
            threadgroup_memory: ``{index: bytes}``, the length of each
                ``[[threadgroup(index)]]`` parameter (Metal's
                ``setThreadgroupMemoryLength:atIndex:``), rounded up to a multiple
                of 16 bytes as that call requires; at most 32 KiB in all.

        Raises:
            TypeError: an argument is none of the above, or a
                constant has an unsupported type or one that does not match its
                declaration (a float for an int constant, an int for a bool one).
            ValueError: a tensor is not on the metal device (or not in a Metal
                allocation), the grid or group size is malformed, a buffer the kernel
                uses is not bound, a function constant does not match the kernel's, or
                the kernel uses a function constant without a value (only one it tests
                with ``is_function_constant_defined`` may be left out, as on Metal), or
                a Python value does not fit the constant's declared type, or an
                argument's byte size is not its parameter's or is short of its struct's
                (the message names the parameter type, expected and given bytes), or the threadgroup memory
                exceeds 32 KiB.
        """
        kernel = self.name
        if (threads is None) == (threadgroups is None):
            raise ValueError(f"[{kernel}] give exactly one of threads= and threadgroups=")
        if group_size is None:
            raise ValueError(f"[{kernel}] group_size= (threads per threadgroup) is required")
        grid = _size3(threads if threads is not None else threadgroups,
                      "threads" if threads is not None else "threadgroups", kernel)
        group = _size3(group_size, "group_size", kernel)
        params = self._library._kernel_params.get(kernel, {})
        bound = []
        for i, a in enumerate(args):
            if isinstance(a, _metalrt.Tensor):
                # A kernel indexes its buffers densely: a strided view would read and
                # write the wrong elements.
                if not a.is_contiguous():
                    raise ValueError(f"[{kernel}] argument {i} must be contiguous, got a strided "
                                     f"view of shape {tuple(a.shape)} (t.to(t.device) copies it)")
                # A kernel may write a buffer it does not declare const: one over
                # read-only memory (np.memmap mode="r") would fault the process.
                declared = params.get(i)
                if a.read_only and declared is not None and "const" not in declared.split("*")[0]:
                    raise ValueError(f"[{kernel}] argument {i} is a view of read-only memory (e.g. an "
                                     f"np.memmap opened with mode='r'); its parameter ({declared}) "
                                     "is writable: declare it const or pass a writable copy")
                bound.append(a)
            else:
                bound.append(bind_argument(kernel, i, a, params.get(i), self._library._struct_sizes))
        if constants is not None and not isinstance(constants, dict):
            raise TypeError(f"[{kernel}] constants must be a dict {{index: value}}, "
                            f"got {type(constants).__name__}")
        fcs = [_constant(kernel, k, v, self._library._constant_types)
               for k, v in (constants or {}).items()]
        memory = _threadgroup_memory(kernel, threadgroup_memory)
        self._library._native.dispatch(kernel, bound, grid, group, threads is not None, fcs, memory)

    def __repr__(self) -> str:
        return f"<metalrt kernel {self.name}>"


class ShaderLibrary:
    """The kernels of one compiled source, as attributes (``lib.<kernel>``); host
    names of template instantiations that are not identifiers are reached with
    ``lib["name"]``."""

    def __init__(self, native, reflection: dict):
        self._native = native
        self._names = tuple(native.function_names())
        # struct name -> sizeof (MSL layout)
        self._struct_sizes: dict[str, int] = reflection["structs"]
        # function-constant index -> declared MSL type
        self._constant_types = {int(i): t for i, t in reflection["function_constants"].items()}
        # kernel -> buffer index -> declared parameter type
        self._kernel_params = {kernel: {int(i): t for i, t in params.items()}
                               for kernel, params in reflection["kernels"].items()}

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
