"""Blocks shared by the decoder-only architectures: weight upload, norms, rotary
embedding, paged self-attention, the SwiGLU MLP, the pre-norm decoder layer and the
causal-LM wrapper (linear layers and embeddings: ``linear.py``).

Every forward computation is a ``metalrt.ops`` call on the model's device; numpy is
used only to prepare weights and position tables at load time.
"""
from __future__ import annotations

import math
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..loaders import host_weights
from ..runner.batch import ScheduledChunk, StepInputs, build_step
from ..runner.kv_cache import PagedKVCache, blocks_for
from ..runner.logits import as_float32
from ..tensor import check_int_range
from .config_values import config_bool, config_float, config_int
from .linear import Linear, linear


class Weights:
    """A Hugging Face state dict (name -> numpy array or ``QuantizedWeight``) put on
    ``device`` tensor by tensor: floats in ``dtype``, quantized matrices as they are
    (``host_weights.to_device``). Missing tensors, wrong shapes and a quantized tensor
    where a float one is needed raise ValueError naming the tensor."""

    def __init__(self, tensors: Mapping[str, object], device: str, dtype: str, arch: str):
        self.tensors, self.device, self.dtype, self.arch = tensors, device, dtype, arch

    def has(self, name: str) -> bool:
        return name in self.tensors

    def host(self, name: str, shape: Sequence[int]):
        """The tensor as the loader gave it (numpy array or QuantizedWeight), shape checked."""
        if name not in self.tensors:
            raise ValueError(f"[{self.arch}] missing tensor '{name}'")
        tensor = host_weights.as_host(self.tensors[name])
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"[{self.arch}] tensor '{name}' has shape {list(tensor.shape)}, "
                             f"expected {list(shape)}")
        return tensor

    def float_host(self, name: str, shape: Sequence[int]) -> np.ndarray:
        tensor = self.host(name, shape)
        if not host_weights.is_float(tensor):
            raise ValueError(f"[{self.arch}] tensor '{name}' is quantized ({tensor.format}); "
                             f"metalrt needs it in floating point")
        return tensor

    def upload(self, array: np.ndarray) -> "metalrt.Tensor":
        return host_weights.upload(array, self.device, self.dtype)

    def load(self, name: str, shape: Sequence[int]) -> "metalrt.Tensor":
        return self.upload(self.float_host(name, shape))

    def matrix(self, name: str, shape: Sequence[int]):
        """A weight matrix that may be quantized: a QuantizedTensor then, else a Tensor."""
        return host_weights.to_device(self.host(name, shape), self.device, self.dtype)

    def merged(self, names: Sequence[str], shapes: Sequence[Sequence[int]], copy: bool = True):
        """The named matrices stacked along their first axis as one tensor (one GEMM
        instead of several for Q/K/V and gate/up). Quantized parts of one kind are
        stacked in place when adjacent in the file, else their quantized rows are
        copied when ``copy``; returns None when they cannot be stacked (float and
        quantized parts, quantized parts of different kinds, or adjacent-only stacking
        that failed)."""
        stacked = host_weights.stack_rows([self.host(n, s) for n, s in zip(names, shapes)], copy)
        return None if stacked is None else host_weights.to_device(stacked, self.device, self.dtype)


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


def rope_parameters(config: Mapping, arch: str) -> Tuple[float, Mapping]:
    """(rope theta, scaling parameters) from either transformers' v5 ``rope_parameters``
    or the older ``rope_theta`` / ``rope_scaling`` keys; scaling is {} for plain RoPE."""
    params = dict(config.get("rope_scaling") or {})
    params.update(config.get("rope_parameters") or {})
    theta = config_float(params, "rope_theta", arch, config_float(config, "rope_theta", arch, 10000.0))
    params.pop("rope_theta", None)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, {}
    if rope_type != "llama3":
        raise ValueError(f"[{arch}] unsupported RoPE scaling '{rope_type}' "
                         "(supported: default, llama3)")
    return theta, params


def llama3_inv_freq(theta: float, rotary_dim: int, scaling: Mapping) -> np.ndarray:
    """Llama 3.1 frequency scaling (Meta's reference): wavelengths longer than
    original_context / low_freq_factor are divided by ``factor``, shorter than
    original_context / high_freq_factor kept, and the band between interpolated."""
    inv_freq = theta ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    context = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = np.clip((context / wavelen - low) / (high - low), 0.0, 1.0)
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq


class Rope:
    """Rotary embedding of q and k (Su et al. 2021): NeoX (half-split) pairs as the
    Hugging Face Llama family applies it, or interleaved (GPT-J) pairs when the config
    says ``rope_interleaved`` (Llama GGUF files, whose Q/K rows are stored permuted for
    it; see ``loaders/gguf.py``). Plain RoPE runs ``ops.rope_neox`` /
    ``ops.rope_interleaved`` in decode-sized steps; a larger step builds its tokens'
    cos|sin rows once (``ops.rope_cos_sin_cache``) and every layer rotates q and k from
    them (``ops.rope_from_cache``, the same bits), instead of each of the 2 x layers
    calls evaluating the same cos and sin again (at a 512-token prefill of the default
    model on the CPU that was 8% of the step). Llama 3 scaled frequencies go through a
    cos|sin table built on the host for positions up to the largest one seen (doubled
    as needed) and ``ops.rope_from_cache``."""

    def __init__(self, config: Mapping, rotary_dim: int, device: str, arch: str):
        self.base, scaling = rope_parameters(config, arch)
        self.rotary_dim, self.device = rotary_dim, device
        self.neox = not config_bool(config, "rope_interleaved", arch, False)
        self.inv_freq = llama3_inv_freq(self.base, rotary_dim, scaling) if scaling else None
        self.table, self.table_rows = None, 0

    def cos_sin_table(self, max_position: int) -> "metalrt.Tensor":
        if max_position >= self.table_rows:
            rows = max(1024, 1 << max_position.bit_length())
            angles = np.arange(rows, dtype=np.float64)[:, None] * self.inv_freq[None, :]
            table = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
            self.table = metalrt.asarray(table.astype(np.float32), device=self.device)
            self.table_rows = rows
        return self.table

    def rows_of_step(self, step: StepInputs):
        """(cos|sin rows of the step's tokens float32 [T, rotary_dim], int32 [T]
        0 .. T - 1: the row of each token), made once per step (``step.derived``)."""
        key = ("rope", self.rotary_dim, self.base)
        if key not in step.derived:
            tokens = step.positions.shape[0]
            step.derived[key] = (
                ops.rope_cos_sin_cache(step.positions, self.rotary_dim, self.base),
                metalrt.asarray(np.arange(tokens, dtype=np.int32), device=self.device))
        return step.derived[key]

    def __call__(self, q, k, step: StepInputs):
        # In place: q and k are fresh outputs of the projection (or of qkv_split).
        if self.inv_freq is not None:
            table, rows = self.cos_sin_table(step.max_position), step.positions
        elif q.shape[0] > ops.QUANTIZED_GEMV_MAX_M:
            table, rows = self.rows_of_step(step)
        else:
            rope = ops.rope_neox if self.neox else ops.rope_interleaved
            return (rope(q, step.positions, self.rotary_dim, self.base, out=q),
                    rope(k, step.positions, self.rotary_dim, self.base, out=k))
        return (ops.rope_from_cache(q, table, rows, self.neox, out=q),
                ops.rope_from_cache(k, table, rows, self.neox, out=k))


class Attention:
    """Multi-head self-attention with grouped-query heads over the paged KV cache:
    the Q/K/V projection (one merged projection split by ``ops.qkv_split``, or three),
    position encoding (a callable ``(q, k, step) -> (q, k)`` or None), cache write,
    variable-length paged attention, output projection. A merged projection (or three
    quantized ones concatenated in one GEMV) with plain ``Rope`` runs the split, RoPE
    and cache write as one ``ops.qkv_rope_cache``."""

    def __init__(self, qkv: Sequence[Linear], out: Linear, heads: int, kv_heads: int,
                 head_dim: int, positional: Optional[Callable]):
        if heads % kv_heads:
            raise ValueError(f"[attention] {heads} heads are not a multiple of {kv_heads} kv heads")
        if len(qkv) not in (1, 3):
            raise ValueError(f"[attention] expected 1 merged or 3 Q/K/V projections, got {len(qkv)}")
        self.qkv, self.out, self.positional = list(qkv), out, positional
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.concat_weights = _concatenable(self.qkv)
        # Projections whose GEMMs the CPU runs on bf16 (coarse weights): the attention's
        # products then follow them (their q, k and v already carry bf16's error).
        self.coarse_projections = all(p.coarse for p in self.qkv)

    def merged_qkv(self, x):
        """The q | k | v projection [tokens, (heads + 2 kv_heads) head_dim] in one
        dispatch, or None: the merged Linear, or (decode-sized batches) three bias-free
        quantized projections of one format in one ``ops.quantized_matmul_bt_concat``
        GEMV. A prefill's three GEMMs are cheaper than the concat's host composition."""
        if len(self.qkv) == 1:
            return self.qkv[0](x)
        if self.concat_weights is not None and x.shape[0] <= ops.QUANTIZED_GEMV_MAX_M:
            return ops.quantized_matmul_bt_concat(x, self.concat_weights)
        return None

    def project_qkv(self, x):
        if len(self.qkv) == 3:
            return tuple(proj(x) for proj in self.qkv)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return ops.qkv_split(self.qkv[0](x), q_width, kv_width, kv_width)

    def __call__(self, x, step: StepInputs, key_cache, value_cache):
        return self.out(self.attend(x, step, key_cache, value_cache))

    def add_to(self, h, x, step: StepInputs, key_cache, value_cache):
        """h += attention(x), in place, the output projection fused with the add."""
        return self.out.add_to(self.attend(x, step, key_cache, value_cache), h)

    def attend(self, x, step: StepInputs, key_cache, value_cache):
        """The attention output [tokens, heads * head_dim] before the output projection."""
        tokens = x.shape[0]
        rope = self.positional
        qkv = self.merged_qkv(x) if isinstance(rope, Rope) and rope.inv_freq is None else None
        if qkv is not None:
            # Split, RoPE of q and k and the cache write in one op (byte for byte the same).
            q = ops.qkv_rope_cache(qkv, step.positions, key_cache, value_cache,
                                   step.slot_mapping, self.heads, rope.rotary_dim, rope.base,
                                   rope.neox)
            return self.paged_attention(q, step, key_cache, value_cache)
        q, k, v = self.project_qkv(x)
        q = q.reshape(tokens, self.heads, self.head_dim)
        k = k.reshape(tokens, self.kv_heads, self.head_dim)
        v = v.reshape(tokens, self.kv_heads, self.head_dim)
        if self.positional is not None:
            q, k = self.positional(q, k, step)
        ops.reshape_and_cache(k, v, key_cache, value_cache, step.slot_mapping)
        return self.paged_attention(q, step, key_cache, value_cache)

    def paged_attention(self, q, step: StepInputs, key_cache, value_cache):
        attn = ops.paged_attention(q, key_cache, value_cache, step.block_tables, step.seq_lens,
                                   step.query_start_loc, self.scale,
                                   coarse_projections=self.coarse_projections)
        return attn.reshape(q.shape[0], self.heads * self.head_dim)


def _concatenable(projections: Sequence[Linear]):
    """The weights of three bias-free quantized projections that one
    ``ops.quantized_matmul_bt_concat`` decodes (one format, code width, group size and
    scales dtype), else None."""
    if len(projections) != 3 or any(p.bias is not None for p in projections):
        return None
    kinds = {p.concat_kind for p in projections}
    return [p.weight for p in projections] if len(kinds) == 1 and None not in kinds else None


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


class PreNormLayer:
    """h += attn(norm1(h)); h += mlp(norm2(h)) (the GPT-2 / Llama residual order). The
    residual stream h is updated in place: it is the forward pass's own tensor."""

    def __init__(self, attn_norm, attention: Attention, mlp_norm, mlp):
        self.attn_norm, self.attention, self.mlp_norm, self.mlp = attn_norm, attention, mlp_norm, mlp

    def __call__(self, h, step: StepInputs, key_cache, value_cache):
        h = residual_add(self.attention, h, self.attn_norm(h), step, key_cache, value_cache)
        return residual_add(self.mlp, h, self.mlp_norm(h))


class CausalLM:
    """A decoder-only language model on one device.

    Subclasses set ``arch`` and build ``embed_tokens`` (an ``Embedding``), ``layers``,
    ``final_norm`` and ``lm_head`` (a float Tensor or QuantizedTensor [vocab, hidden])
    in ``__init__(config, weights, device, dtype)``; ``embed`` may be overridden (OPT
    adds learned positions). ``context_length``: the config's
    ``max_position_embeddings`` (None when it has none; ValueError when it is not a
    positive integer).
    """

    arch = "model"
    layers: List[PreNormLayer]

    def __init__(self, config: Mapping, device: str, dtype: str, num_kv_heads: int,
                 head_dim: int, vocab_size: int):
        self.config, self.device, self.dtype = dict(config), device, dtype
        self.num_kv_heads, self.head_dim, self.vocab_size = num_kv_heads, head_dim, vocab_size
        self.context_length = config_int(config, "max_position_embeddings", self.arch, None)
        self._cache: Optional[PagedKVCache] = None

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def embed(self, step: StepInputs):
        return self.embed_tokens(step.token_ids)

    def forward(self, step: StepInputs, cache: PagedKVCache, float32_logits: bool = True):
        """Runs one step, writing its K/V into ``cache``. Returns the logits
        [step.num_logit_rows, vocab] on the device, float32 (cast from the model's dtype
        when it is float16/bfloat16), or in the model's dtype with ``float32_logits``
        False (the decode step's greedy_argmax reads those directly, one dispatch less);
        None when no row wants logits."""
        h = self.embed(step)
        # A prefill (more tokens than sequences) commits each layer's work: its GEMMs and
        # attention are large, and the dispatch cap alone could keep one command buffer
        # on the GPU long enough for macOS to abort it ("Impacting Interactivity").
        # Decode steps stay batched at the cap.
        prefill = step.token_ids.shape[0] > step.seq_lens.shape[0]
        for layer, keys, values in zip(self.layers, cache.keys, cache.values):
            h = layer(h, step, keys, values)
            if prefill:
                metalrt.flush(self.device)
        if step.num_logit_rows == 0:
            return None
        if step.logit_rows is not None:
            h = ops.embedding(h, step.logit_rows)  # gather: only sampled rows reach the head
        logits = linear(self.lm_head)(self.final_norm(h))
        return as_float32(logits) if float32_logits else logits

    def new_cache(self, num_blocks: int) -> PagedKVCache:
        return PagedKVCache(self.num_layers, num_blocks, self.num_kv_heads, self.head_dim,
                            self.device, self.dtype)

    def kv_cache(self, num_blocks: int) -> PagedKVCache:
        """A cache of at least ``num_blocks`` blocks that no engine holds: the last one
        made is reused (stale rows are never read: attention stops at seq_len)."""
        if self._cache is None or self._cache.in_use or self._cache.num_blocks < num_blocks:
            self._cache = self.new_cache(num_blocks)
        return self._cache

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """float32 [n_tokens, vocab]: the logits after every token of ``token_ids``,
        from one prefill into a fresh cache (for parity checks and scoring).
        Raises ValueError for an empty list or ids outside the vocabulary (or int32)."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise ValueError("[logits] token_ids must not be empty")
        check_int_range(min(ids), max(ids), "int32", "[logits] token id")
        cache = self.new_cache(blocks_for(len(ids)))
        step = build_step([ScheduledChunk(ids, 0, list(range(cache.num_blocks)), "all")],
                          self.device)
        return self.forward(step, cache).numpy()
