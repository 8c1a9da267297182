"""Rotary position embedding and paged self-attention with grouped-query heads."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

import metalrt
from metalrt import ops

from ..cache import BLOCK_SIZE, PagedKVLayer, StepInputs
from ..cache.kv_types import parse_kv_type, storage
from ..cache.layout import expect_kind, expect_rows
from .layers import Linear
from .rope import RopeFrequencies


class Rope:
    """Rotary embedding of q and k (Su et al. 2021) with the frequencies of a
    ``RopeFrequencies`` (``rope.py``: every variant): NeoX (half-split) pairs as the
    Hugging Face Llama family applies it, or interleaved (GPT-J) pairs with ``neox``
    False (Llama GGUF files, whose Q/K rows are stored permuted for it; see
    ``loaders/gguf.py``). Plain RoPE rotates a step of up to ``STEP_TABLE_MIN_TOKENS``
    tokens with ``ops.rope_neox`` / ``ops.rope_interleaved``; a larger step builds its
    tokens' cos|sin rows once (``ops.rope_cos_sin_cache``) and every layer rotates q and
    k from them (``ops.rope_from_cache``, the same bits), so the layers do not evaluate
    the same cos and sin again (docs/cpu.md). Scaled frequencies (``scaled``: any other
    variant) go through a cos|sin table built on the host for the positions of
    ``position_bucket``, cos and sin multiplied by the attention factor, and
    ``ops.rope_from_cache``. LongRoPE: a step with ``rope_rows`` (the engine's) rotates
    each token from its row of a table holding both factor sets (``long_rope_table``);
    one without uses the set its largest position picks (``cos_sin_table``)."""

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

    def __init__(self, freqs: RopeFrequencies, neox: bool, device: str):
        self.freqs, self.neox, self.device = freqs, neox, device
        self.base, self.rotary_dim = freqs.base, freqs.rotary_dim
        self.scaled = not freqs.plain
        self.tables = {}

    def cos_sin_table(self, max_position: int) -> "metalrt.Tensor":
        """float32 [2**position_bucket(max_position), rotary_dim]: cos | sin of every
        position of the bucket, times the attention factor (LongRoPE: of the factor set
        that ``max_position`` selects)."""
        inv_freq = self.freqs.inv_freq_for(max_position)
        rows = 1 << self.position_bucket(max_position)
        key = id(inv_freq)
        if key not in self.tables or self.tables[key].shape[0] < rows:
            self.tables[key] = self._upload(self._cos_sin(inv_freq, rows))
        return self.tables[key]

    def long_rope_table(self, max_position: int) -> "metalrt.Tensor":
        """LongRoPE's two sets in one table, float32 [original + 2**position_bucket
        (max_position), rotary_dim]: rows 0 .. original - 1 the short factors' cos | sin
        of positions 0 .. original - 1, then the long factors' of every position of the
        bucket; a token's row is its position, plus original on the long factors
        (``StepInputs.rope_rows``)."""
        rows = 1 << self.position_bucket(max_position)
        key = "long_rope"
        if key not in self.tables or self.tables[key].shape[0] < self.freqs.original_context + rows:
            self.tables[key] = self._upload(np.concatenate([
                self._cos_sin(self.freqs.inv_freq, self.freqs.original_context),
                self._cos_sin(self.freqs.long_inv_freq, rows)]))
        return self.tables[key]

    def _cos_sin(self, inv_freq: np.ndarray, rows: int) -> np.ndarray:
        angles = np.arange(rows, dtype=np.float64)[:, None] * inv_freq[None, :]
        return self.freqs.attention_factor * np.concatenate([np.cos(angles), np.sin(angles)],
                                                            axis=1)

    def _upload(self, table: np.ndarray) -> "metalrt.Tensor":
        return metalrt.asarray(table.astype(np.float32), device=self.device)

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
        if self.scaled and step.rope_rows is not None and self.freqs.long_inv_freq is not None:
            table, rows = self.long_rope_table(step.max_position), step.rope_rows
        elif self.scaled:
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
    and cache write as one ``ops.qkv_rope_cache``. ``scale``: the score scale (default
    head_dim ** -0.5); ``window``: a sliding window of that many positions (0: full
    causal attention); ``sinks``: optional float32 [heads] learned logits, one per head,
    that join each softmax's denominator (gpt-oss's attention sinks); both passed to
    ``ops.paged_attention``."""

    def __init__(self, qkv: Sequence[Linear], out: Linear, heads: int, kv_heads: int,
                 head_dim: int, positional: Optional[Callable], scale: Optional[float] = None,
                 window: int = 0, sinks: Optional["metalrt.Tensor"] = None):
        if heads % kv_heads:
            raise ValueError(f"[attention] {heads} heads are not a multiple of {kv_heads} kv heads")
        if len(qkv) not in (1, 3):
            raise ValueError(f"[attention] expected 1 merged or 3 Q/K/V projections, got {len(qkv)}")
        self.qkv, self.out, self.positional = list(qkv), out, positional
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scale = head_dim ** -0.5 if scale is None else float(scale)
        self.window, self.sinks = int(window), sinks
        self.concat_weights = _concatenable(self.qkv)
        # Projections whose GEMMs the CPU runs on bf16 (coarse weights): the attention's
        # products then follow them (their q, k and v already carry bf16's error).
        self.coarse_projections = all(ops.is_coarse_weight(p.weight) for p in self.qkv)

    def check_cache(self, cache, dtype, device: str, where: str) -> None:
        """TypeError unless ``cache`` is a ``PagedKVLayer``; ValueError unless its keys and
        values are rows [16, kv_heads, head_dim] of ``dtype`` on ``device`` (``dtype``: a
        cache type for both sides or a (key, value) pair, ``cache.kv_types``; a quantized
        side's rows are [16, kv_heads, row bytes] of uint8)."""
        kv_type = parse_kv_type(dtype, self.head_dim, "float32")
        expect_kind(cache, PagedKVLayer, where)
        if cache.window and cache.window != self.window:
            raise ValueError(f"[cache] {where}: its cache keeps a window of {cache.window} "
                             f"positions, the layer attends {self.window or 'all'} (a cache "
                             "made for another model?)")
        for name, side in zip(("keys", "values"), kv_type):
            width, side_dtype = storage(side, self.head_dim)
            expect_rows(getattr(cache, name), name, (BLOCK_SIZE, self.kv_heads, width),
                        side_dtype, device, where)

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

    @staticmethod
    def tables(step: StepInputs, cache: PagedKVLayer):
        """(block tables, slot mapping) that address ``cache``: the step's window tables
        for a sliding-window layer's own pool (``cache.window``), else the shared ones.
        ValueError for a step built without window tables over such a pool."""
        if not cache.window:
            return step.block_tables, step.slot_mapping
        if step.window_tables is None:
            raise ValueError("[attention] this sliding-window layer's cache has its own blocks "
                             "(new_cache(window_blocks=...)); the step has no window tables")
        return step.window_tables, step.window_slots

    def attend(self, x, step: StepInputs, cache: PagedKVLayer):
        """The attention output [tokens, heads * head_dim] before the output projection."""
        tokens = x.shape[0]
        key_cache, value_cache = cache.keys, cache.values
        block_tables, slot_mapping = self.tables(step, cache)
        rope = self.positional
        qkv = self.merged_qkv(x) if isinstance(rope, Rope) and not rope.scaled else None
        if qkv is not None:
            # Split, RoPE of q and k and the cache write in one op (byte for byte the same).
            q = ops.qkv_rope_cache(qkv, step.positions, key_cache, value_cache,
                                   slot_mapping, self.heads, rope.rotary_dim, rope.base,
                                   rope.neox)
            return self.paged_attention(q, step, key_cache, value_cache, block_tables)
        q, k, v = self.project_qkv(x)
        q = q.reshape(tokens, self.heads, self.head_dim)
        k = k.reshape(tokens, self.kv_heads, self.head_dim)
        v = v.reshape(tokens, self.kv_heads, self.head_dim)
        if self.positional is not None:
            q, k = self.positional(q, k, step)
        ops.reshape_and_cache(k, v, key_cache, value_cache, slot_mapping)
        return self.paged_attention(q, step, key_cache, value_cache, block_tables)

    def paged_attention(self, q, step: StepInputs, key_cache, value_cache, block_tables=None):
        block_tables = step.block_tables if block_tables is None else block_tables
        attn = ops.paged_attention(q, key_cache, value_cache, block_tables, step.seq_lens,
                                   step.query_start_loc, self.scale,
                                   coarse_projections=self.coarse_projections, window=self.window,
                                   sinks=self.sinks)
        return attn.reshape(q.shape[0], self.heads * self.head_dim)


def _concatenable(projections: Sequence[Linear]):
    """The weights of three bias-free quantized projections that one
    ``ops.quantized_matmul_bt_concat`` decodes (one format, code width, group size and
    scales dtype), else None."""
    if len(projections) != 3 or any(p.bias is not None for p in projections):
        return None
    kinds = {p.concat_kind for p in projections}
    return [p.weight for p in projections] if len(kinds) == 1 and None not in kinds else None
