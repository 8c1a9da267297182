"""Argument conversion shared by every op wrapper. Errors start with "[op] ", like the
C++ entry points' own messages."""
from __future__ import annotations

import numbers
import operator

import numpy as np

from .._metalrt import Tensor
from ..tensor import to_tensor

_ARRAY_LIKE = (np.ndarray, np.generic, list, tuple, numbers.Number)


def tensors(op: str, optional: tuple = (), index_dtypes: dict | None = None, **args) -> list:
    """The values of `args` as Tensors, in order. Tensors pass through; numpy arrays,
    lists and scalars are copied (metalrt.asarray) to the device of the first Tensor
    argument, or to the CPU when there is none. `index_dtypes` maps the names of index
    arguments (ids, positions, slots) to the integer dtype the op takes: Python ints
    given for them become that dtype, range-checked (ValueError when a value does not
    fit); numpy arrays keep their dtype, which the op checks. Names in `optional` may be
    None. Anything else (a str, None, a dict, a bool) raises TypeError."""
    device = next((v.device for v in args.values() if isinstance(v, Tensor)), "cpu")
    index_dtypes = index_dtypes or {}
    result = []
    for name, value in args.items():
        if isinstance(value, Tensor) or (value is None and name in optional):
            result.append(value)
        elif isinstance(value, _ARRAY_LIKE) and not isinstance(value, (bool, np.bool_)):
            result.append(to_tensor(value, device, int_dtype=index_dtypes.get(name),
                                    what=f"[{op}] {name}"))
        else:
            raise TypeError(f"[{op}] {name} must be a metalrt.Tensor or a numpy array, "
                            f"got {type(value).__name__}")
    return result


def out_tensor(op: str, out):
    """`out` must be None or a Tensor (the op writes into it)."""
    if out is None or isinstance(out, Tensor):
        return out
    raise TypeError(f"[{op}] out must be a metalrt.Tensor or None, got {type(out).__name__}")


def out_pair(op: str, out, names: tuple) -> tuple:
    """`out` of an op with two outputs: None, or a pair of Tensors (each may be None)."""
    if out is None:
        return None, None
    if isinstance(out, tuple) and len(out) == 2:
        return tuple(out_tensor(op, o) for o in out)
    raise TypeError(f"[{op}] out must be None or a tuple ({names[0]}, {names[1]}) of metalrt.Tensors, "
                    f"got {type(out).__name__}")


def real(op: str, name: str, value) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    raise TypeError(f"[{op}] {name} must be a real number, got {type(value).__name__}")


def integer(op: str, name: str, value) -> int:
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"[{op}] {name} must be an int, got {type(value).__name__}")


def flag(op: str, name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"[{op}] {name} must be a bool, got {type(value).__name__}")
