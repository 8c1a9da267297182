"""Creating tensors: from numpy arrays, Python scalars and lists, or uninitialised."""
from __future__ import annotations

import functools
import numbers

import numpy as np

from . import _metalrt, buffer_windows
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


def is_int(value) -> bool:
    """Whether `value` is an integer (a Python int or a numpy integer) and not a bool,
    which Python counts as an int: the test every int argument of metalrt uses."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_int_range(lo: int, hi: int, dtype: str, what: str) -> None:
    """ValueError "<what>: <value> does not fit in <dtype> [min, max]" when the smallest
    (lo) or largest (hi) of some integers is outside the range of the integer dtype."""
    info = np.iinfo(dtype)
    for value in (lo, hi):
        if not info.min <= value <= info.max:
            raise ValueError(f"{what}: {value} does not fit in {dtype} [{info.min}, {info.max}]")


def _python_int_dtype(ints: np.ndarray, dtype, what: str) -> str:
    """The dtype Python ints (numpy's int64/uint64 inference of them) become: ``dtype``
    when given, else int32 as in mlx, or int64 when a value needs it. ValueError when a
    value does not fit the integer dtype chosen."""
    lo, hi = (int(ints.min()), int(ints.max())) if ints.size else (0, 0)
    if dtype is not None:
        target = dtype_name(dtype)
    else:
        int32 = np.iinfo(np.int32)
        target = "int32" if int32.min <= lo and hi <= int32.max else "int64"
    if target.startswith(("int", "uint")):
        check_int_range(lo, hi, target, what)
    return target


def _holds_only_ints(obj, array: np.ndarray) -> bool:
    """Whether a Python scalar or (nested) list, inferred by numpy as `array`, holds only
    integers (bools excluded). numpy infers int64 for them, uint64 above int64, and
    float64 or object when no one integer dtype holds them all."""
    if array.dtype.kind in "iu":
        return True
    if array.dtype.kind not in "fO" or array.size == 0:
        return False
    return all(is_int(v) for v in np.asarray(obj, dtype=object).flat)


def _check_whole_numbers_fit(array: np.ndarray, target: str, what: str) -> None:
    """Python floats given an integer dtype must be whole numbers inside it: numpy's
    astype would truncate 1.5 to 1 and wrap 1e10 or -1.0 silently."""
    info = np.iinfo(target)
    bad = ~np.isfinite(array) | (array != np.trunc(array)) | (array < info.min) | (array > info.max)
    if bad.any():
        value = array[bad].flat[0]
        raise ValueError(f"{what}: {value!r} is not a whole number in {target} "
                         f"[{info.min}, {info.max}]")


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


def asarray(obj, device: str = "cpu", dtype=None, copy: bool = True) -> Tensor:
    """Converts `obj` to a metalrt.Tensor on `device` ("cpu" or "metal").

    copy=False wraps a C-contiguous numpy array (an np.memmap view of a model file
    included) without copying it: the tensor keeps the array alive, and on Metal the
    buffer the array lives in is wrapped once (page-aligned, unified memory) and shared
    by every tensor inside it. The array's bytes are used as they are, so its element
    type must store `dtype` (default: its own; "bfloat16" takes uint16 bit patterns).
    It is still copied on a device whose memory the host cannot address. ValueError
    for a non-contiguous array or something that is not a numpy array, TypeError for an
    element type that does not store `dtype`.

    obj: a numpy array of any layout (it is copied into contiguous memory), a Python
    scalar or (nested) list, or a Tensor (returned unchanged when it already has the
    device and dtype, else cast with `metalrt.ops.cast` and/or copied with `.to`).
    dtype: a name from `metalrt.DTYPES`, a numpy dtype, or None to keep the source's
    element type, except float64 -> float32 and bool -> uint8. Python ints follow
    mlx's convention: they become int32, or int64 when a value needs it; with an
    integer dtype they are range-checked, and Python floats must be whole numbers in
    range (numpy arrays convert as numpy's astype).
    Converting to "bfloat16" rounds to nearest even (IEEE 754 roundTiesToEven), once.

    Raises TypeError naming the dtype for element types metalrt lacks (float64 given
    explicitly, int16, complex, strings, objects); ValueError for a Python int outside
    the integer dtype asked for (or outside int64), a Python float that is not a whole
    number in it, and for an unknown device name;
    RuntimeError when the device is not available in this build.
    """
    if not copy:
        return _wrap_without_copy(obj, _device_name(device), dtype)
    return to_tensor(obj, device, dtype)


def _wrap_without_copy(array, device: str, dtype) -> Tensor:
    if isinstance(array, Tensor):
        return array if array.device == device and (dtype is None or dtype_name(dtype) == array.dtype) \
            else to_tensor(array, device, dtype)
    if not isinstance(array, np.ndarray):
        raise ValueError(f"asarray(copy=False): expected a numpy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError("asarray(copy=False): the array must be C-contiguous to be wrapped "
                         f"(strides {array.strides} for shape {array.shape})")
    if not array.dtype.isnative:
        # nanobind takes native byte order only; say why instead of its argument listing
        raise TypeError(f"asarray(copy=False): the array's elements are in non-native byte "
                        f"order ({array.dtype.str}); without a copy no conversion is possible")
    target = dtype_name(dtype) if dtype is not None else array.dtype.name
    if device != "cpu" and not _metalrt.device_info(device)["unified_memory"]:
        return to_tensor(array, device, dtype)
    region = _wrapped_region(array, device)
    # A non-writeable array (np.memmap mode="r", bytes) gives a read-only tensor: ops
    # refuse it as out= and copy_from refuses it, instead of faulting on the mapping.
    return _metalrt._from_numpy_nocopy(array, target, device, region, array,
                                       not array.flags.writeable)


@functools.lru_cache(maxsize=None)
def _max_buffer_length(device: str):
    return _metalrt.device_info(device)["max_buffer_length"]


def _wrapped_region(array: np.ndarray, device: str) -> np.ndarray:
    """The bytes a GPU wraps for `array`: the whole buffer it lives in, or where that
    exceeds the device's maximum buffer length, the run of the file's tensors holding
    it (``buffer_windows``), else the array's own bytes."""
    region = _whole_buffer(array)
    limit = _max_buffer_length(device)
    if limit is None or region.nbytes <= limit:
        return region
    run = buffer_windows.window(region, array, limit)
    return run if run is not None else array.reshape(-1).view(np.uint8)


def _whole_buffer(array: np.ndarray) -> np.ndarray:
    """A uint8 view of the whole buffer `array` lives in (the mapping of an np.memmap,
    the allocation of the array that owns its data), so one GPU wrapping serves every
    tensor cut from it."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.base is not None:
        try:
            return np.frombuffer(root.base, dtype=np.uint8)
        except (TypeError, ValueError, BufferError):
            pass   # not a buffer-protocol object: the owning array's own range below
    return root.reshape(-1).view(np.uint8) if root.flags.c_contiguous else array.reshape(-1).view(np.uint8)


def to_tensor(obj, device: str, dtype=None, int_dtype=None, what: str = "asarray") -> Tensor:
    """`asarray`, where Python ints (scalars and lists, not numpy arrays) become
    `int_dtype` (an integer dtype name, range-checked) when it is given; errors start
    with `what`. The op wrappers use it for index arguments (ids, positions, slots)."""
    device = _device_name(device)
    if isinstance(obj, Tensor):
        name = obj.dtype if dtype is None else dtype_name(dtype)
        if name != obj.dtype:
            obj = _metalrt.ops.cast(obj, name, out=None)
        return obj if obj.device == device else obj.to(device)
    try:
        array = np.asarray(obj)
    except ValueError as e:   # ragged nested lists, for one
        raise ValueError(f"{what}: cannot make an array of the {type(obj).__name__} given: {e}") from None
    # An empty list given for an index argument holds no value to infer from: it is
    # int_dtype (numpy would infer float64, which the op then refuses as a dtype).
    python_ints = not isinstance(obj, (np.ndarray, np.generic)) and (
        _holds_only_ints(obj, array) or (int_dtype is not None and array.size == 0))
    if python_ints and array.dtype.kind not in "iu":
        array = np.asarray(obj, dtype=object)   # ints beyond int64: range-checked below
    elif array.dtype.kind not in "biuf":
        raise TypeError(f"{what}: unsupported element type {array.dtype} "
                        f"({type(obj).__name__}); expected numbers")
    source = array.dtype.name
    if python_ints:
        target = _python_int_dtype(array, dtype if dtype is not None else int_dtype, what)
    else:
        target = dtype_name(dtype) if dtype is not None else _DEFAULT_DTYPE.get(source, source)
    if target not in DTYPES:
        raise TypeError(f"{what}: unsupported dtype {source}; expected one of {', '.join(DTYPES)}"
                        " (pass dtype= to convert)")
    python_floats = not isinstance(obj, (np.ndarray, np.generic)) and array.dtype.kind == "f"
    if python_floats and target.startswith(("int", "uint")):
        _check_whole_numbers_fit(array, target, what)
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
