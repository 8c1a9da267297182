"""Creating tensors: from numpy arrays, Python scalars and lists, or uninitialised."""
from __future__ import annotations

import numpy as np

from . import _metalrt
from ._metalrt import Tensor

DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "uint32")

# numpy dtypes that have no metalrt twin but a lossless-enough default.
_DEFAULT_DTYPE = {"float64": "float32", "bool": "uint8"}


def dtype_name(dtype) -> str:
    """The metalrt name of `dtype`, given as a name ("bfloat16") or a numpy dtype/type.

    Raises TypeError naming the dtype when metalrt has no such dtype (e.g. float64 or
    complex64 given explicitly).
    """
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name in DTYPES:
        return name
    raise TypeError(f"unsupported dtype {name or dtype!r}; expected one of {', '.join(DTYPES)}")


def _device_name(device) -> str:
    if not isinstance(device, str):
        raise TypeError(f"device must be 'cpu' or 'metal', got {type(device).__name__}")
    return device


def _round_to_bfloat16_grid(values: np.ndarray) -> np.ndarray:
    """float32 values on the bfloat16 grid, rounded once to nearest (ties to even).

    Going through float32 first would round twice and can land on the wrong side of
    a bfloat16 tie, so wider inputs are rounded here in float64.
    """
    x = values.astype(np.float64)
    _, exponent = np.frexp(x)   # |x| = m * 2**exponent with 0.5 <= m < 1
    # bfloat16 keeps 8 significant bits; below 2**-126 its spacing is fixed at 2**-133.
    quantum = np.ldexp(1.0, np.maximum(exponent - 8, -133))
    with np.errstate(invalid="ignore", over="ignore"):
        return (np.rint(x / quantum) * quantum).astype(np.float32)


def asarray(obj, device: str = "cpu", dtype=None) -> Tensor:
    """Converts `obj` to a metalrt.Tensor on `device` ("cpu" or "metal").

    obj: a numpy array of any layout (it is copied into contiguous memory), a Python
    scalar or (nested) list, or a Tensor (returned unchanged when it already has the
    device and dtype, else cast with `metalrt.ops.cast` and/or copied with `.to`).
    dtype: a name from `metalrt.DTYPES`, a numpy dtype, or None to keep the source's
    element type, except float64 -> float32 and bool -> uint8. Converting to
    "bfloat16" rounds to nearest even (IEEE 754 roundTiesToEven), once.

    Raises TypeError naming the dtype for element types metalrt lacks (float64 given
    explicitly, int16, complex, strings, objects); ValueError for an unknown device
    name; RuntimeError when the device is not available in this build.
    """
    device = _device_name(device)
    if isinstance(obj, Tensor):
        if dtype is not None and dtype_name(dtype) != obj.dtype:
            from .ops import cast   # ops import this module
            obj = cast(obj, dtype)
        return obj if obj.device == device else obj.to(device)
    array = np.asarray(obj)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"asarray: unsupported element type {array.dtype} "
                        f"({type(obj).__name__}); expected numbers")
    source = array.dtype.name
    target = dtype_name(dtype) if dtype is not None else _DEFAULT_DTYPE.get(source, source)
    if target not in DTYPES:
        raise TypeError(f"asarray: unsupported dtype {source}; expected one of {', '.join(DTYPES)}"
                        " (pass dtype= to convert)")
    if target == "bfloat16":
        host = array if source == "float32" else _round_to_bfloat16_grid(array)
    else:
        host = array.astype(target, copy=False)
    # order="C" (not ascontiguousarray, which turns 0-d into 1-d)
    return _metalrt._from_numpy(np.asarray(host, order="C"), target, device)


def _shape(shape) -> tuple:
    return (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)


def empty(shape, dtype="float32", device: str = "cpu") -> Tensor:
    """An uninitialised contiguous tensor. shape: int or sequence of int (>= 0).

    Raises TypeError for an unsupported dtype, ValueError for a negative dimension or
    an unknown device.
    """
    return _metalrt._empty(_shape(shape), dtype_name(dtype), _device_name(device))


def zeros(shape, dtype="float32", device: str = "cpu") -> Tensor:
    """A contiguous tensor of zeros (all bytes 0). Arguments and errors as `empty`."""
    return _metalrt._zeros(_shape(shape), dtype_name(dtype), _device_name(device))
