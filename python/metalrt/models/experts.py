"""Expert weights of a sparse MoE block in the layout ``ops.moe_matmul_bt`` reads:
one matrix [E * N, K] whose rows e * N .. e * N + N - 1 are expert e's (GGUF's 3-D
expert tensors are stored exactly so).

Checkpoints hold them either per expert (what transformers 5 ``save_pretrained``
writes: ``mlp.experts.{e}.{gate,up,down}_proj.weight``) or fused (released Qwen3.5-MoE:
``mlp.experts.gate_up_proj`` [E, 2I, H], gate rows first, and ``mlp.experts.down_proj``
[E, H, I], no ``.weight`` suffix). Both become ``gate_up`` [E * 2I, H] (per expert its
I gate rows, then its I up rows, the input ``silu_and_mul`` expects) and ``down``
[E * H, I].
"""
from __future__ import annotations

from typing import Tuple

from .base import Weights


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


def load_experts(w: Weights, prefix: str, experts: int, hidden: int,
                 intermediate: int) -> Tuple[object, object]:
    """(gate_up [E * 2I, H], down [E * H, I]) of the MoE block at ``prefix`` (ending
    in ``mlp.``), from the fused tensors when the checkpoint has them, else from the
    per-expert ones. Raises ValueError naming a missing or mis-shaped tensor (e.g.
    ``model.layers.0.mlp.experts.3.up_proj.weight``)."""
    if w.has(prefix + "experts.gate_up_proj"):
        return (_fused(w, prefix + "experts.gate_up_proj", experts, 2 * intermediate, hidden),
                _fused(w, prefix + "experts.down_proj", experts, hidden, intermediate))
    gate_up = _per_expert(w, prefix, ("gate_proj", "up_proj"), experts,
                          (intermediate, intermediate), hidden)
    down = _per_expert(w, prefix, ("down_proj",), experts, (hidden,), intermediate)
    return gate_up, down
