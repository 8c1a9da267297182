"""compile_shader's kernel arguments that are copied as bytes (``setBytes``): numpy
scalars and small arrays, ``bytes`` (structs by their byte layout) and Python numbers,
sized against the kernel parameter's declared MSL type where its size is known
(scalars and vectors, MSL 3.1 §2.1-2.2: a 3-component vector is padded to 4)."""
from __future__ import annotations

import math
import re

import numpy as np

from .._sim.msl_structs import SCALAR_SIZES
from ..tensor import check_int_range

# The numpy type of each MSL scalar type (None: numpy has none, e.g. bfloat), with
# its byte size.
_NUMPY_TYPES = {"bool": np.bool_, "char": np.int8, "int8_t": np.int8, "uchar": np.uint8,
                "uint8_t": np.uint8, "short": np.int16, "int16_t": np.int16, "ushort": np.uint16,
                "uint16_t": np.uint16, "half": np.float16, "bfloat": None, "int": np.int32,
                "int32_t": np.int32, "uint": np.uint32, "uint32_t": np.uint32,
                "float": np.float32, "long": np.int64, "int64_t": np.int64, "ulong": np.uint64,
                "uint64_t": np.uint64, "size_t": np.uint64, "ptrdiff_t": np.int64}
_SCALARS = {name: (_NUMPY_TYPES[name], size) for name, size in SCALAR_SIZES.items()}
# Apple: setBytes is for data smaller than 4 KB (fewer than SET_BYTES_LIMIT bytes);
# larger data goes in a buffer. The C++ side keeps the same limit (gpu::kSetBytesLimit).
SET_BYTES_LIMIT = 4096


def _element(declared: str):
    """(scalar name, components, byte size, is_pointer) of a declared parameter type
    such as ``constant uint2&`` or ``constant packed_float3*``; None when the element
    type is not a scalar or vector (a struct: its size is not known here)."""
    words = [w for w in re.findall(r"\w+", declared) if w not in ("constant", "device", "const")]
    if len(words) != 1:
        return None
    m = re.fullmatch(r"(packed_)?([a-z]+?(?:8_t|16_t|32_t|64_t)?)([234])?", words[0])
    if not m or m.group(2) not in _SCALARS:
        return None
    components = int(m.group(3) or 1)
    size = _SCALARS[m.group(2)][1]
    padded = 4 if components == 3 and not m.group(1) else components
    return m.group(2), components, size * padded, "*" in declared


def from_python(value, target: type, what: str) -> np.generic:
    """A Python bool/int/float as the numpy scalar type ``target``: a bool only as bool,
    an int as an integer type in its range, an int or float as float32/float16 when it
    stays finite. TypeError for a kind that would change (float -> int, int -> bool),
    ValueError for a value out of range."""
    name = np.dtype(target).name
    if target is np.bool_ or isinstance(value, bool):
        if not (target is np.bool_ and isinstance(value, bool)):
            raise TypeError(f"{what} takes {name} values, got {type(value).__name__}")
        return np.bool_(value)
    if np.issubdtype(target, np.integer):
        if not isinstance(value, int):
            raise TypeError(f"{what} takes {name} values, got float {value!r}")
        check_int_range(value, value, name, what)
        return target(value)
    try:
        with np.errstate(over="ignore"):
            converted = target(float(value))
    except OverflowError:   # an int beyond float64
        converted = target(np.inf)
    if np.isinf(converted) and not (isinstance(value, float) and math.isinf(value)):
        raise ValueError(f"{what}: {value!r} does not fit in {name} "
                         f"(largest finite {float(np.finfo(target).max)!r})")
    return converted


def bind_argument(kernel: str, i: int, value, declared: str | None,
                  structs: dict[str, int] | None = None) -> bytes:
    """The bytes a non-tensor argument ``i`` binds, checked against the declared type
    (``structs``: the source's struct sizes from the generator's reflection).

    Raises:
        TypeError: the parameter is not in the constant address space (it takes a
            tensor), ``value`` is not a numpy scalar/array, bytes or Python number, a
            Python number for a parameter that is not a known scalar, or an array of
            another element type than the parameter's.
        ValueError: the byte size is not the parameter's (or not a multiple of its
            element, for a pointer), is less than a ``constant Struct&``'s sizeof
            (the kernel would read past the copied bytes; more is passed as given, as
            Metal does), or exceeds 4 KB.
    """
    what = f"[{kernel}] argument {i}" + (f" ({declared})" if declared else "")
    if declared and "constant" not in re.findall(r"\w+", declared):
        raise TypeError(f"{what} is a device/threadgroup buffer: it takes a metalrt.Tensor on the "
                        f"metal device, got {type(value).__name__}")
    element = _element(declared) if declared else None
    if isinstance(value, (bool, int, float)):
        if element is None or element[1] != 1 or _SCALARS[element[0]][0] is None:
            raise TypeError(f"{what}: a Python {type(value).__name__} binds only to a declared "
                            "scalar parameter; pass a numpy scalar, a numpy array or bytes")
        data = from_python(value, _SCALARS[element[0]][0], what).tobytes()
    elif isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "biufcV":
        scalar = _SCALARS[element[0]][0] if element else None
        if scalar is not None and value.dtype.kind != "V" and value.dtype != np.dtype(scalar):
            raise TypeError(f"{what} takes {np.dtype(scalar).name} elements, got {value.dtype.name}")
        data = np.ascontiguousarray(value).tobytes()
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        raise TypeError(f"{what} must be a metalrt.Tensor, a numpy scalar or array, bytes or a "
                        f"Python bool/int/float, got {type(value).__name__}")
    if len(data) >= SET_BYTES_LIMIT:
        raise ValueError(f"{what}: {len(data)} bytes; setBytes takes fewer than "
                         f"{SET_BYTES_LIMIT}: pass a metalrt.Tensor")
    if element is not None:
        size, pointer = element[2], element[3]
        if (len(data) != size) if not pointer else (len(data) == 0 or len(data) % size):
            expected = f"{size} bytes" if not pointer else f"a positive multiple of {size} bytes"
            raise ValueError(f"{what} takes {expected}, got {len(data)} bytes")
    struct = _struct_name(declared)
    if struct in (structs or {}) and len(data) < structs[struct]:
        raise ValueError(f"{what} takes a struct {struct} of {structs[struct]} bytes (MSL "
                         f"layout), got {len(data)} bytes")
    return data


def _struct_name(declared: str | None) -> str | None:
    """``S`` of a ``constant S&`` parameter (a reference or value, not a pointer)."""
    if not declared or "*" in declared:
        return None
    words = [w for w in re.findall(r"\w+", declared) if w not in ("constant", "const")]
    return words[0] if len(words) == 1 else None
