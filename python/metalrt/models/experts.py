"""Expert weights of a sparse MoE block in the layout ``ops.moe_matmul_bt`` reads:
matrices [E * N, K] whose rows e * N .. e * N + N - 1 are expert e's (GGUF's 3-D
expert tensors are stored exactly so).

Checkpoints hold them either per expert (what transformers 5 ``save_pretrained``
writes: ``mlp.experts.{e}.{gate,up,down}_proj.weight``) or fused (released Qwen3.5-MoE:
``mlp.experts.gate_up_proj`` [E, 2I, H], gate rows first, and ``mlp.experts.down_proj``
[E, H, I], no ``.weight`` suffix) or stacked per projection (GGUF, ``loaders/gguf_moe``:
``mlp.experts.{gate,up,down}_proj.weight``, [E, N, K] float or a ``QuantizedWeight`` of
[E * N, K]). Stacked ones (GGUF, mlx-lm's ``switch_mlp``) stay three stacks read in
place from the file mapping: ``gate`` and ``up`` [E * I, H], which ``moe_matmul_bt``
takes as two operands (``up=``), and ``down`` [E * H, I]; no copy of a quantized stack.
The others become ``gate`` = ``gate_up`` [E * 2I, H] (per expert its I gate rows, then
its I up rows, the input ``silu_and_mul`` expects) with ``up`` None, and ``down``.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..loaders import host_weights
from .weights import Weights


def _fused(w: Weights, name: str, experts: int, rows: int, cols: int):
    """A fused [E, rows, cols] tensor as [E * rows, cols] (a view for float tensors)."""
    tensor = w.float_host(name, (experts, rows, cols))
    return w.upload(tensor.reshape(experts * rows, cols))


def _per_expert(w: Weights, prefix: str, projections, experts: int, rows, cols: int):
    names, shapes = [], []
    for e in range(experts):
        for proj, n in zip(projections, rows):
            names.append(f"{prefix}experts.{e}.{proj}.weight")
            shapes.append((n, cols))
    stacked = w.merged(names, shapes)
    if stacked is None:
        raise ValueError(f"[{w.arch}] the expert weights under '{prefix}experts.' are stored "
                         f"differently (float and quantized, or two quantized formats) and "
                         f"cannot be stacked")
    return stacked


def _stacked(w: Weights, name: str, experts: int, rows: int, cols: int):
    """A stacked GGUF expert tensor, checked: [E, rows, cols] float, or quantized
    [E * rows, cols]."""
    if not w.has(name):
        raise ValueError(f"[{w.arch}] missing tensor '{name}'")
    tensor = w.tensors[name]
    expected = host_weights.stacked_experts_shape(tensor, experts, rows, cols)
    if tuple(tensor.shape) != expected:
        raise ValueError(f"[{w.arch}] tensor '{name}' has shape {list(tensor.shape)}, expected "
                         f"{list(expected)} ({experts} experts of [{rows}, {cols}])")
    return tensor


def _from_stacked(w: Weights, prefix: str, experts: int, hidden: int, intermediate: int):
    p = prefix + "experts."
    gate = _stacked(w, p + "gate_proj.weight", experts, intermediate, hidden)
    up = _stacked(w, p + "up_proj.weight", experts, intermediate, hidden)
    down = _stacked(w, p + "down_proj.weight", experts, hidden, intermediate)
    if host_weights.kind(gate) != host_weights.kind(up):
        raise ValueError(f"[{w.arch}] '{p}gate_proj.weight' ({host_weights.kind(gate)}) and "
                         f"'{p}up_proj.weight' ({host_weights.kind(up)}) are stored differently: "
                         f"expected one kind (the fused expert kernel reads both alike)")
    return tuple(host_weights.to_device(host_weights.matrix_rows(t), w.device, w.dtype)
                 for t in (gate, up, down))


def load_experts(w: Weights, prefix: str, experts: int, hidden: int,
                 intermediate: int) -> Tuple[object, Optional[object], object]:
    """(gate, up, down) of the MoE block at ``prefix`` (ending in ``mlp.``): from stacked
    tensors gate and up [E * I, H] and down [E * H, I], each the file's own stack (no
    copy of a quantized one); from fused or per-expert tensors gate = gate_up
    [E * 2I, H], up None. Raises ValueError naming a missing or mis-shaped tensor (e.g.
    ``model.layers.0.mlp.experts.3.up_proj.weight``)."""
    if w.has(prefix + "experts.gate_proj.weight"):
        return _from_stacked(w, prefix, experts, hidden, intermediate)
    if w.has(prefix + "experts.gate_up_proj"):
        return (_fused(w, prefix + "experts.gate_up_proj", experts, 2 * intermediate, hidden), None,
                _fused(w, prefix + "experts.down_proj", experts, hidden, intermediate))
    gate_up = _per_expert(w, prefix, ("gate_proj", "up_proj"), experts,
                          (intermediate, intermediate), hidden)
    down = _per_expert(w, prefix, ("down_proj",), experts, (hidden,), intermediate)
    return gate_up, None, down
