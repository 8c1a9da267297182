"""Weight bytes a step's kernels read, counted from the weight tensors bound to each op
call: a GEMV/GEMM (``matmul_bt``, ``quantized_matmul_bt``, each weight of
``quantized_matmul_bt_concat``) and a norm read their whole weight, a gather (``embedding``, ``quantized_embedding``) only the rows it is asked
for, and an expert GEMM (``moe_matmul_bt``) only the experts its tokens selected
(counted after the step, from the expert ids it was given). The weights are the model's own tensors (found by walking its layers), so
activations, the KV cache and step inputs are not counted. Compared with the file's
tensor bytes it shows whether the model reads its weights as the file holds them
(about 1x for a quantized file; 5.5x when the default Q4_1 model ran from float32).
"""
from __future__ import annotations

from typing import Dict, Iterable

import metalrt

_GATHERS = {"embedding": "weight", "quantized_embedding": "w"}
_WEIGHT_TYPES = (metalrt.Tensor, metalrt.QuantizedTensor)


def weight_tensors(model) -> Dict[int, object]:
    """{id: tensor} of every Tensor and QuantizedTensor held by the model's blocks
    (attributes of its layers, norms, projections, embedding and head)."""
    found: Dict[int, object] = {}
    seen = set()

    def walk(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, _WEIGHT_TYPES):
            found[id(obj)] = obj
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("metalrt.models"):
            for value in vars(obj).values():
                walk(value)

    for name, value in vars(model).items():
        if name not in ("config", "_cache"):
            walk(value)
    return found


def resident_bytes(weights: Dict[int, object]) -> int:
    """Bytes of all weight tensors (each counted once)."""
    return sum(t.nbytes for t in weights.values())


def _gathered_rows(op: str, args, kwargs) -> int:
    ids = kwargs.get("ids", args[1] if op == "embedding" else args[0])
    return ids.shape[0]


def bytes_read(op: str, args: Iterable, kwargs: Dict, weights: Dict[int, object]) -> int:
    """Weight bytes one op call reads: each weight argument's bytes, or for a gather
    its rows' share of the table."""
    args = list(args)
    total = 0
    values = [*args, *kwargs.values()]
    # quantized_matmul_bt_concat takes its weights as one list argument.
    values += [item for v in values if isinstance(v, (list, tuple)) for item in v]
    for value in values:
        if id(value) not in weights:
            continue
        if op in _GATHERS:
            total += value.nbytes // value.shape[0] * _gathered_rows(op, args, kwargs)
        else:
            total += value.nbytes
    return total


def selected_expert_bytes(args: Iterable, kwargs: Dict, weights: Dict[int, object]):
    """For a ``moe_matmul_bt`` call: a function giving the bytes of the distinct experts
    its ``expert_ids`` select (each expert owns num_experts-th of the weight's rows, and
    of the ``up`` stack's when given), to call once the step is done (reading the ids
    sooner would add a host wait)."""
    args = list(args)
    w = kwargs.get("w", args[1] if len(args) > 1 else None)
    ids = kwargs.get("expert_ids", args[2] if len(args) > 2 else None)
    if id(w) not in weights:
        return lambda: 0
    stacks = [t for t in (w, kwargs.get("up")) if t is not None and id(t) in weights]
    per_expert = sum(t.nbytes for t in stacks) // int(kwargs["num_experts"])
    return lambda: per_expert * len(set(ids.numpy().reshape(-1).tolist()))
