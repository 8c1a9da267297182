"""Layers shared by the decoder-only architectures: linear layers and token embeddings
(one class per device weight kind, chosen once when the layer is built: ``linear``,
``Embedding.load``; a new weight format is one class and one entry in ``_LINEARS`` /
``_EMBEDDINGS``), norms, the SwiGLU MLP and the residual add.

Every forward computation is a ``metalrt.ops`` call on the model's device.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import metalrt
from metalrt import ops

from .weights import Weights


class Linear:
    """y = x W^T (+ b) with a float W in nn.Linear layout [out, in]; several
    projections of the same input may be merged into one W (their outputs side by side)."""

    def __init__(self, weight, bias: Optional["metalrt.Tensor"]):
        self.weight, self.bias = weight, bias

    @classmethod
    def load(cls, w: Weights, prefixes: Sequence[str], out_features: Sequence[int],
             in_features: int, bias: bool) -> "Linear":
        """One merged projection (quantized rows copied if they
        must be), of the class its weight's kind takes."""
        weight = w.merged([p + ".weight" for p in prefixes],
                          [(n, in_features) for n in out_features])
        if weight is None:
            raise ValueError(f"[{w.arch}] {', '.join(prefixes)} are stored differently (float "
                             f"and quantized, or two quantized formats) and cannot be merged "
                             f"into one projection")
        return linear(weight, cls._bias(w, prefixes, out_features, bias))

    @classmethod
    def load_split(cls, w: Weights, prefixes: Sequence[str], out_features: Sequence[int],
                   in_features: int, bias: bool) -> List["Linear"]:
        """[one merged projection] when the parts merge without copying quantized rows,
        else one projection per prefix (e.g. Q/K/V of a GGUF file, not adjacent there,
        or of different types in a K-quant mix)."""
        weight = w.merged([p + ".weight" for p in prefixes],
                          [(n, in_features) for n in out_features], copy=False)
        if weight is not None:
            return [linear(weight, cls._bias(w, prefixes, out_features, bias))]
        return [cls.load(w, [p], [n], in_features, bias) for p, n in zip(prefixes, out_features)]

    @staticmethod
    def _bias(w: Weights, prefixes, out_features, bias: bool):
        return w.merged([p + ".bias" for p in prefixes], [(n,) for n in out_features]) if bias else None

    def project(self, x):
        """x W^T, without the bias."""
        return ops.matmul_bt(x, self.weight)

    def __call__(self, x):
        y = self.project(x)
        return ops.add(y, self.bias, out=y) if self.bias is not None else y

    def add_to(self, x, residual):
        """residual += x W^T (+ b), in place."""
        return ops.add(residual, self(x), out=residual)

    def swiglu(self, x):
        """silu(gate(x)) * up(x) of a merged gate|up projection."""
        return ops.silu_and_mul(self(x))

    @property
    def concat_kind(self):
        """What ``ops.quantized_matmul_bt_concat`` needs equal across its weights, or
        None when this weight cannot take part (float)."""
        return None


class QuantizedLinear(Linear):
    """``Linear`` with a QuantizedTensor W: without bias, ``add_to`` and ``swiglu``
    are one fused GEMV each (``ops.quantized_matmul_bt_add`` /
    ``ops.quantized_matmul_bt_swiglu``, byte for byte the projection then the add or
    ``ops.silu_and_mul``)."""

    def project(self, x):
        return ops.quantized_matmul_bt(x, self.weight)

    def add_to(self, x, residual):
        if self.bias is None:
            return ops.quantized_matmul_bt_add(x, self.weight, residual, out=residual)
        return super().add_to(x, residual)

    def swiglu(self, x):
        if self.bias is None:
            return ops.quantized_matmul_bt_swiglu(x, self.weight)
        return super().swiglu(x)

    @property
    def concat_kind(self):
        """(format, code width, group size, scales dtype)."""
        w = self.weight
        return w.format, w.bits, w.group_size, None if w.scales is None else w.scales.dtype


_LINEARS = {metalrt.Tensor: Linear, metalrt.QuantizedTensor: QuantizedLinear}


def linear(weight, bias: Optional["metalrt.Tensor"] = None) -> Linear:
    """The linear layer of a device weight [out, in]: the class registered for its type."""
    return _LINEARS[type(weight)](weight, bias)


class Embedding:
    """Token embedding table [vocab, hidden] (a float Tensor); with tied embeddings it is
    also the LM head."""

    def __init__(self, table, dtype: str):
        self.table, self.dtype = table, dtype

    @staticmethod
    def load(w: Weights, name: str, vocab: int, hidden: int) -> "Embedding":
        """The table ``name``, of the class its kind takes."""
        table = w.matrix(name, (vocab, hidden))
        return _EMBEDDINGS[type(table)](table, w.dtype)

    def __call__(self, ids):
        return ops.embedding(self.table, ids)


class QuantizedEmbedding(Embedding):
    """A QuantizedTensor table, gathered and dequantized row by row in the model's dtype."""

    def __call__(self, ids):
        return ops.quantized_embedding(ids, self.table, dtype=self.dtype)


_EMBEDDINGS = {metalrt.Tensor: Embedding, metalrt.QuantizedTensor: QuantizedEmbedding}


class RMSNorm:
    """Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, w: Weights, name: str, size: int, eps: float):
        self.weight, self.eps = w.load(name, (size,)), float(eps)

    def __call__(self, x):
        return ops.rms_norm(x, self.weight, self.eps)


class LayerNorm:
    """Ba et al. 2016: (x - mean) / sqrt(var + eps) * weight + bias."""

    def __init__(self, w: Weights, prefix: str, size: int, eps: float):
        self.weight = w.load(prefix + ".weight", (size,))
        self.bias = w.load(prefix + ".bias", (size,))
        self.eps = float(eps)

    def __call__(self, x):
        return ops.layer_norm(x, self.weight, self.bias, self.eps)


class GatedMLP:
    """SwiGLU feed-forward (Shazeer 2020): down(silu(gate(x)) * up(x)), with gate and
    up merged into one projection."""

    def __init__(self, gate_up: Linear, down: Linear):
        self.gate_up, self.down = gate_up, down

    def __call__(self, x):
        return self.down(self.swiglu(x))

    def add_to(self, h, x):
        """h += mlp(x), in place, the down projection fused with the add."""
        return self.down.add_to(self.swiglu(x), h)

    def swiglu(self, x):
        """silu(gate(x)) * up(x), as the gate|up layer computes it."""
        return self.gate_up.swiglu(x)


def residual_add(block, h, *args):
    """h += block(*args), in place: through the block's ``add_to`` (the residual add
    fused into its last projection) when it has one, else the block and an add."""
    add_to = getattr(block, "add_to", None)
    if add_to is not None:
        return add_to(h, *args)
    return ops.add(h, block(*args), out=h)


def dense_mlp(w: Weights, prefix: str, hidden: int, intermediate: int,
              bias: bool = False) -> GatedMLP:
    """The SwiGLU MLP whose projections are ``prefix`` + gate_proj / up_proj / down_proj."""
    return GatedMLP(Linear.load(w, [prefix + "gate_proj", prefix + "up_proj"],
                                [intermediate, intermediate], hidden, bias),
                    Linear.load(w, [prefix + "down_proj"], [hidden], intermediate, bias))
