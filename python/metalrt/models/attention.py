"""Rotary position embedding and paged self-attention with grouped-query heads."""
from __future__ import annotations

import math
from typing import Callable, Mapping, Optional, Sequence, Tuple

import numpy as np

import metalrt
from metalrt import ops

from ..cache import BLOCK_SIZE, PagedKVLayer, StepInputs
from ..cache.layout import expect_kind, expect_rows
from .config_values import config_bool, config_float
from .layers import Linear


# The parameters of rope_type "llama3" (transformers' _compute_llama3_parameters).
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


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
    # Read here, at load: a missing or malformed value would otherwise be a KeyError or
    # NaN frequencies (factor 0) at the first forward pass.
    where = f"{arch} rope_scaling"
    scaling = {key: config_float(params, key, where) for key in _LLAMA3_KEYS}
    if scaling["high_freq_factor"] <= scaling["low_freq_factor"]:
        raise ValueError(f"[{where}] config 'high_freq_factor' ({scaling['high_freq_factor']}) "
                         f"must be greater than 'low_freq_factor' ({scaling['low_freq_factor']})")
    return theta, scaling


def partial_rotary_dim(config: Mapping, head_dim: int, arch: str, default: float) -> int:
    """``head_dim * partial_rotary_factor`` (from ``rope_parameters`` or the top level,
    ``default`` when neither gives it): the leading features RoPE rotates. ValueError
    unless the factor is a number > 0 giving an even count in [2, head_dim]."""
    params = {**config, **(config.get("rope_parameters") or {})}
    factor = config_float(params, "partial_rotary_factor", arch, default)
    rotary = int(head_dim * factor)
    if rotary < 2 or rotary % 2 or rotary > head_dim:
        raise ValueError(f"[{arch}] head_dim {head_dim} x partial_rotary_factor {factor} gives "
                         f"rotary dim {rotary}; expected a positive even number <= head_dim")
    return rotary


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
    it; see ``loaders/gguf.py``). Plain RoPE rotates a step of up to
    ``STEP_TABLE_MIN_TOKENS`` tokens with ``ops.rope_neox`` / ``ops.rope_interleaved``; a
    larger step builds its tokens' cos|sin rows once (``ops.rope_cos_sin_cache``) and
    every layer rotates q and k from them (``ops.rope_from_cache``, the same bits), so the
    layers do not evaluate the same cos and sin again (docs/cpu.md). Llama 3 scaled
    frequencies go through a cos|sin table built on the host for the positions of
    ``position_bucket`` and ``ops.rope_from_cache``."""

    # A step of more tokens builds its cos|sin rows once for every layer.
    STEP_TABLE_MIN_TOKENS = 8
    # log2 of the host-built table's first size (1024 rows); it doubles past the
    # largest position seen.
    TABLE_MIN_BUCKET = 10

    @classmethod
    def position_bucket(cls, max_position: int) -> int:
        """The bucket b of the host-built cos|sin table that holds positions
        0..max_position: it has 2**b rows, b >= TABLE_MIN_BUCKET. A recorded decode plan
        reads the table, so the plans are keyed by it (runner/decode_plans.py)."""
        return max(cls.TABLE_MIN_BUCKET, int(max_position).bit_length())

    def __init__(self, config: Mapping, rotary_dim: int, device: str, arch: str):
        self.base, scaling = rope_parameters(config, arch)
        self.rotary_dim, self.device = rotary_dim, device
        self.neox = not config_bool(config, "rope_interleaved", arch, False)
        self.inv_freq = llama3_inv_freq(self.base, rotary_dim, scaling) if scaling else None
        self.table, self.table_rows = None, 0

    def cos_sin_table(self, max_position: int) -> "metalrt.Tensor":
        if max_position >= self.table_rows:
            rows = 1 << self.position_bucket(max_position)
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
        elif q.shape[0] > self.STEP_TABLE_MIN_TOKENS:
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
        self.coarse_projections = all(ops.is_coarse_weight(p.weight) for p in self.qkv)

    def check_cache(self, cache, dtype: str, device: str, where: str) -> None:
        """TypeError unless ``cache`` is a ``PagedKVLayer``; ValueError unless its keys and
        values are rows [16, kv_heads, head_dim] of ``dtype`` on ``device``."""
        expect_kind(cache, PagedKVLayer, where)
        for name in ("keys", "values"):
            expect_rows(getattr(cache, name), name, (BLOCK_SIZE, self.kv_heads, self.head_dim),
                        dtype, device, where)

    def merged_qkv(self, x):
        """The q | k | v projection [tokens, (heads + 2 kv_heads) head_dim] in one
        dispatch, or None: the merged Linear, or three bias-free quantized projections of
        one format in one ``ops.quantized_matmul_bt_concat`` where the device runs it as
        one GEMV (``ops.concat_is_one_gemv``); larger batches project separately."""
        if len(self.qkv) == 1:
            return self.qkv[0](x)
        if self.concat_weights is not None and ops.concat_is_one_gemv(x):
            return ops.quantized_matmul_bt_concat(x, self.concat_weights)
        return None

    def project_qkv(self, x):
        if len(self.qkv) == 3:
            return tuple(proj(x) for proj in self.qkv)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return ops.qkv_split(self.qkv[0](x), q_width, kv_width, kv_width)

    def __call__(self, x, step: StepInputs, cache: PagedKVLayer):
        return self.out(self.attend(x, step, cache))

    def add_to(self, h, x, step: StepInputs, cache: PagedKVLayer):
        """h += attention(x), in place, the output projection fused with the add."""
        return self.out.add_to(self.attend(x, step, cache), h)

    def attend(self, x, step: StepInputs, cache: PagedKVLayer):
        """The attention output [tokens, heads * head_dim] before the output projection."""
        tokens = x.shape[0]
        key_cache, value_cache = cache.keys, cache.values
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
